"""``pymemdb bench store``: MemoriStore against LangGraph's PostgresStore, same database, same run, same data.

Needs the ``bench`` extra (``langgraph-checkpoint-postgres``). Both stores get
the same index configuration (64 dimensions, cosine, HNSW, ``fields=["text"]``)
and the same embedder (a deterministic hash embedding, precomputed, so the
embedder costs neither side anything).

1. Load: ``rows`` items (50 namespaces ``("users", "uN", "memories")``, a short
   text, ``grp`` = i % 100 so one group is a 1 % filter, an integer ``score``)
   through each store's ``batch`` of 500 puts.
2. Single operations on one connection each, interleaved (alternating which
   store goes first): ``put`` of a new key, ``get`` of a random existing key,
   ``search`` with a 1 % filter and no query (newest first), ``list_namespaces``.
3. Vector search with a 1 % filter, ``limit=10``: how many items each returns
   (10 match far more than 10 items) and recall@10 against the exact ranking
   of the matching items, computed here.
4. Filter correctness: ``{"score": {"$gte": 100}}`` counted against the truth
   (PostgresStore compares JSON as text: "99" >= "100").
5. Storage of the same items: each store's tables with their indexes after VACUUM FULL.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from rich.table import Table

from pymemdb.bench import (
    Progress,
    connect,
    fmt,
    latency_summary,
    one,
    percentile,
    ratio,
    require_baseline,
    require_rows,
    settle,
    table_sizes,
)

USER = "bench_store"
DIMS = 64
USERS = 50
GROUPS = 100
GOAL_GET = 1.0      # upstream latency / ours (mean)
GOAL_PUT = 1.0      # our puts/s over upstream's
GOAL_STORAGE = 1.0  # our bytes / upstream's
UPSTREAM_TABLES = ("store", "store_vectors")
OUR_TABLES = ("store_items", "store_namespaces", "store_vectors")
WORDS = ("memory agent user prefers tea coffee lyon paris meeting project deadline budget travel music "
         "book movie friend family dog cat garden code python database vector search note idea plan "
         "health sport running cooking recipe weather morning evening call email report").split()


def _require_upstream() -> Any:
    return require_baseline("langgraph.store.postgres", "PostgresStore",
                            "pymemdb bench store needs LangGraph's PostgresStore as its baseline")


def _hash_embed(text: str) -> list[float]:
    """A deterministic bag-of-words embedding: each word adds its own pseudo-random unit direction."""
    out = [0.0] * DIMS
    for word in text.split():
        seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        rng = random.Random(seed)
        for i in range(DIMS):
            out[i] += rng.gauss(0, 1)
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


def _embedder() -> Any:
    """LangChain ``Embeddings`` over a precomputed table: neither store pays for embedding in the timings."""
    from langchain_core.embeddings import Embeddings

    class Precomputed(Embeddings):
        def __init__(self) -> None:
            self.cache: dict[str, list[float]] = {}

        def embed(self, text: str) -> list[float]:
            found = self.cache.get(text)
            if found is None:
                found = self.cache[text] = _hash_embed(text)
            return found

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [self.embed(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return self.embed(text)

    return Precomputed()


def _item(i: int, rng: random.Random) -> tuple[tuple[str, ...], str, dict[str, Any]]:
    return (("users", f"u{i % USERS}", "memories"), f"m{i}",
            {"text": " ".join(rng.choices(WORDS, k=8)), "grp": i % GROUPS, "score": rng.randrange(1000)})


def _summary(ns: list[int]) -> dict[str, float]:
    xs = sorted(ns)
    out = latency_summary(xs)
    out["p95_us"] = round(percentile(xs, 95) / 1000, 1)
    return out


def _interleaved(stores: dict[str, Any], n: int, op: Callable[[Any, int], Any]) -> dict[str, Any]:
    lat: dict[str, list[int]] = {name: [] for name in stores}
    counts: dict[str, list[int]] = {name: [] for name in stores}
    names = list(stores)
    for i in range(n):
        for name in names if i % 2 else reversed(names):
            store = stores[name]
            start = time.perf_counter_ns()
            out = op(store, i)
            took = time.perf_counter_ns() - start
            lat[name].append(took)
            if isinstance(out, list):
                counts[name].append(len(out))
    res: dict[str, Any] = {name: _summary(lat[name]) for name in stores}
    for name in stores:
        res[name]["per_s"] = round(1e9 / (sum(lat[name]) / len(lat[name])), 1)
        if counts[name]:
            res[name]["mean_returned"] = round(sum(counts[name]) / len(counts[name]), 2)
    res["ratio_mean"] = ratio(res["upstream"]["mean_us"], res["pymemdb"]["mean_us"])
    res["ratio_p50"] = ratio(res["upstream"]["p50_us"], res["pymemdb"]["p50_us"])
    return res


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # unit vectors


def run(dsn: str, rows: int = 20_000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    require_rows(rows, 1000, "Pass --rows 20000 (a 1 % filter then matches 200 items).")
    postgres_store = _require_upstream()
    from langgraph.store.base import PutOp
    from psycopg.rows import dict_row

    from pymemdb.integrations.langgraph import MemoriStore
    from pymemdb.integrations.langgraph_store import MemoriIndexConfig

    rng = random.Random(seed)
    emb = _embedder()
    index: MemoriIndexConfig = {"dims": DIMS, "embed": emb, "fields": ["text"], "distance_type": "cosine",
                                "ann_index_config": {"kind": "hnsw", "vector_type": "vector"}}
    items = [_item(i, rng) for i in range(rows)]
    for _, _, value in items:
        emb.embed(value["text"])
    result: dict[str, Any] = {"rows": rows, "seed": seed, "dims": DIMS, "namespaces": USERS, "groups": GROUPS}
    with connect(dsn) as admin, psycopg.Connection.connect(
        dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row  # as PostgresStore.from_conn_string
    ) as up_conn, MemoriStore(dsn, user_id=USER, index=index, max_size=2) as ours:
        upstream = postgres_store(up_conn, index=index)
        upstream.setup()
        ours.setup()
        stores = {"upstream": upstream, "pymemdb": ours}
        result["server"] = {k: str(one(admin, sql.SQL("show {}").format(sql.Identifier(k))))
                            for k in ("server_version", "synchronous_commit")}

        if progress:
            progress(f"loading {rows:,} items with embeddings into each store (batches of 500)")
        load: dict[str, float] = {}
        for name, store in stores.items():
            start = time.perf_counter()
            for lo in range(0, rows, 500):
                store.batch([PutOp(ns, key, value) for ns, key, value in items[lo:lo + 500]])
            load[name] = round(rows / (time.perf_counter() - start), 1)
        result["load_items_per_s"] = load
        settle(admin, ("public", UPSTREAM_TABLES), ("memori", OUR_TABLES))

        n = min(2000, rows // 5)
        if progress:
            progress(f"{n:,} single puts and gets per store, interleaved")
        new = [_item(rows + i, rng) for i in range(n)]
        for _, _, value in new:
            emb.embed(value["text"])
        result["put"] = _interleaved(stores, n, lambda s, i: s.put(*new[i]))
        result["put"]["ratio_per_s"] = ratio(result["put"]["pymemdb"]["per_s"], result["put"]["upstream"]["per_s"])
        result["put"]["goal_met"] = (result["put"]["ratio_per_s"] or 0) >= GOAL_PUT
        keys = [items[rng.randrange(rows)] for _ in range(n)]
        result["get"] = _interleaved(stores, n, lambda s, i: s.get(keys[i][0], keys[i][1]))
        result["get"]["goal_met"] = (result["get"]["ratio_mean"] or 0) >= GOAL_GET

        searches = min(300, rows // 50)
        if progress:
            progress(f"{searches} filtered searches, vector searches with a 1 % filter, namespace listings")
        groups = [rng.randrange(GROUPS) for _ in range(searches)]
        result["search_filtered"] = _interleaved(
            stores, searches, lambda s, i: s.search(("users",), filter={"grp": groups[i]}, limit=10))
        queries = [" ".join(rng.choices(WORDS, k=3)) for _ in range(searches)]
        vec = _interleaved(stores, searches,
                           lambda s, i: s.search(("users",), query=queries[i], filter={"grp": groups[i]}, limit=10))
        # recall@10 against the exact ranking of the matching items (ours and upstream's answers again)
        all_items = items + new
        recalls: dict[str, list[float]] = {"upstream": [], "pymemdb": []}
        short: dict[str, int] = {"upstream": 0, "pymemdb": 0}
        for i in range(min(50, searches)):
            q = emb.embed(queries[i])
            matching = [(key, _cos(q, emb.embed(v["text"]))) for _, key, v in all_items if v["grp"] == groups[i]]
            truth = {k for k, _ in sorted(matching, key=lambda kv: -kv[1])[:10]}
            for name, store in stores.items():
                got = store.search(("users",), query=queries[i], filter={"grp": groups[i]}, limit=10)
                short[name] += len(got) < 10
                # ties at the 10th place: an item scored like the 10th true one counts as found
                tenth = sorted((s for _, s in matching), reverse=True)[min(9, len(matching) - 1)]
                hits = sum(1 for it in got if it.key in truth or (it.score is not None and it.score >= tenth - 1e-6))
                recalls[name].append(min(hits, 10) / 10)
        for name in stores:
            vec[name]["recall_at_10"] = round(sum(recalls[name]) / len(recalls[name]), 3)
            vec[name]["short_pages"] = short[name]
        vec["checked"] = len(recalls["pymemdb"])
        vec["goal_met"] = vec["pymemdb"].get("mean_returned") == 10
        result["search_vector_1pct"] = vec
        result["list_namespaces"] = _interleaved(stores, searches, lambda s, i: s.list_namespaces(limit=100))

        truth_count = sum(1 for _, _, v in all_items if v["score"] >= 100)
        counted = {name: len(store.search(("users",), filter={"score": {"$gte": 100}}, limit=rows + n))
                   for name, store in stores.items()}
        result["filter_correctness"] = {"filter": '{"score": {"$gte": 100}}', "truth": truth_count, **counted}

        if progress:
            progress("storage after VACUUM FULL")
        up_sizes = table_sizes(admin, "public", UPSTREAM_TABLES, compact=True)
        our_sizes = table_sizes(admin, "memori", OUR_TABLES, compact=True)
        storage: dict[str, Any] = {"upstream": up_sizes, "pymemdb": our_sizes,
                                   "upstream_bytes": sum(up_sizes.values()),
                                   "pymemdb_bytes": sum(our_sizes.values())}
        storage["ratio"] = ratio(storage["pymemdb_bytes"], storage["upstream_bytes"])
        storage["goal_met"] = (storage["ratio"] or 9) <= GOAL_STORAGE
        result["storage"] = storage
        # the same items in a store without full text (the reference has none): the storage at parity
        if progress:
            progress("the same items again, MemoriStore(full_text=False)")
        admin.execute("delete from memori.store_namespaces where user_id = %s", (USER,))
        with MemoriStore(dsn, user_id=USER, index=index, max_size=2, full_text=False) as lean:
            for lo in range(0, len(all_items), 500):
                lean.batch([PutOp(ns, key, value) for ns, key, value in all_items[lo:lo + 500]])
        lean_sizes = table_sizes(admin, "memori", OUR_TABLES, compact=True)
        storage["pymemdb_vector_only"] = lean_sizes
        storage["pymemdb_vector_only_bytes"] = sum(lean_sizes.values())
        storage["ratio_vector_only"] = ratio(storage["pymemdb_vector_only_bytes"], storage["upstream_bytes"])
        for t in ("store_vectors", "store", "store_migrations", "vector_migrations"):
            admin.execute(psycopg.sql.SQL("drop table if exists public.{} cascade").format(psycopg.sql.Identifier(t)))
        admin.execute("delete from memori.store_namespaces where user_id = %s", (USER,))
    return result


def render(result: dict[str, Any]) -> list[Table]:
    info = Table(title=f"bench store: {result['rows']:,} items, {result['dims']} dimensions, HNSW cosine, "
                       f"PostgreSQL {result['server']['server_version']} "
                       f"(synchronous_commit {result['server']['synchronous_commit']})")
    for col in ("", "upstream PostgresStore", "pymemdb MemoriStore", "ratio", "goal"):
        info.add_column(col, justify="left" if not col else "right")
    load = result["load_items_per_s"]
    info.add_row("load, batches of 500 (items/s)", fmt(load["upstream"]), fmt(load["pymemdb"]),
                 fmt(ratio(load["pymemdb"], load["upstream"]), "x"), "")
    p = result["put"]
    info.add_row("put p50 / p95 µs", f"{fmt(p['upstream']['p50_us'])} / {fmt(p['upstream']['p95_us'])}",
                 f"{fmt(p['pymemdb']['p50_us'])} / {fmt(p['pymemdb']['p95_us'])}", "", "")
    info.add_row("single put throughput /s", fmt(p["upstream"]["per_s"]), fmt(p["pymemdb"]["per_s"]),
                 fmt(p["ratio_per_s"], "x"), f"≥ {GOAL_PUT}x {'met' if p['goal_met'] else 'MISSED'}")
    for key, label, goal in (("get", "get", f"≥ {GOAL_GET}x"), ("search_filtered", "search, 1 % filter, no query", ""),
                             ("search_vector_1pct", "vector search, 1 % filter", ""),
                             ("list_namespaces", "list_namespaces", "")):
        r = result[key]
        met = "" if not goal else f"{goal} {'met' if r['goal_met'] else 'MISSED'}"
        info.add_row(f"{label} p50 / p95 µs",
                     f"{fmt(r['upstream']['p50_us'])} / {fmt(r['upstream']['p95_us'])}",
                     f"{fmt(r['pymemdb']['p50_us'])} / {fmt(r['pymemdb']['p95_us'])}",
                     f"{fmt(r['ratio_p50'], 'x')} (mean {fmt(r['ratio_mean'], 'x')})", met)
    v = result["search_vector_1pct"]
    info.add_row("… items returned (limit 10)", fmt(v["upstream"]["mean_returned"]), fmt(v["pymemdb"]["mean_returned"]),
                 "", f"full limit {'met' if v['goal_met'] else 'MISSED'}")
    info.add_row(f"… recall@10 ({v['checked']} queries)", fmt(v["upstream"]["recall_at_10"]),
                 fmt(v["pymemdb"]["recall_at_10"]), "", "")
    info.add_row("… short pages", fmt(v["upstream"]["short_pages"]), fmt(v["pymemdb"]["short_pages"]), "", "")
    f = result["filter_correctness"]
    info.add_row(f"items matching {f['filter']} (truth {fmt(f['truth'])})", fmt(f["upstream"]), fmt(f["pymemdb"]),
                 "", "")
    s = result["storage"]
    info.add_row("storage, same items (MB)", fmt(s["upstream_bytes"] / 2**20), fmt(s["pymemdb_bytes"] / 2**20),
                 fmt(s["ratio"], "x"), f"≤ {GOAL_STORAGE}x {'met' if s['goal_met'] else 'MISSED'}")
    if "ratio_vector_only" in s:
        info.add_row("… MemoriStore(full_text=False) (MB)", fmt(s["upstream_bytes"] / 2**20),
                     fmt(s["pymemdb_vector_only_bytes"] / 2**20), fmt(s["ratio_vector_only"], "x"), "")
    info.caption = "upstream latency / ours for reads; ours / upstream for throughput and storage"
    tables = Table(title="Table sizes with indexes after VACUUM FULL (bytes)")
    tables.add_column("table")
    tables.add_column("bytes", justify="right")
    for t, b in s["upstream"].items():
        tables.add_row(f"public.{t}", fmt(b))
    for t, b in s["pymemdb"].items():
        tables.add_row(f"memori.{t}", fmt(b))
    return [info, tables]
