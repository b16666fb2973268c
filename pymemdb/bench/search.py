"""``pymemdb bench search``: hybrid page search at scale (issue 7).

``rows`` pages (default 100,000) over 100 sessions of one user, each with a
384-d embedding from deterministic synthetic clusters (50 centres plus
per-page noise, generated set-based in SQL) and text naming its cluster; 1 %
of the pages are images (the selective filter). Then, for random queries
(a cluster centre plus fresh noise):

1. session scope: ``search_pages`` (vector only, limit 10) p95 against the
   baseline of a primary-key read, and recall@10 against exact ranking
   (goal: recall 1.0, p95 <= 10 ms);
2. user scope (all 100 sessions): the HNSW path with iterative scans,
   recall@10 against exact ranking (goal >= 0.95);
3. user scope with the 1 % filter (modality image): rows returned (must be
   10 every time) and recall@10.

Bench sessions (``bench_search_*``) are deleted at the end.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from rich.table import Table

from pymemdb.bench import Progress, connect, fmt, one, percentile, ratio, stopwatch

USER = "bench_search"
SESSIONS = 100
CLUSTERS = 50
DIM = 384
GOAL_P95_MS = 10.0
GOAL_USER_RECALL = 0.95

GENERATE: LiteralString = """
insert into memori.pages (session_id, user_id, page_id, modality, content, data, artifact_ref, tokens, size_bytes,
                          created_at, updated_at, last_accessed, embedding)
select 'bench_search_' || lpad((g %% %(sessions)s)::text, 3, '0'), %(u)s, 'p_' || g,
       case when (g / %(sessions)s) %% 100 = 7 then 'image' else 'text' end,
       'page ' || g || ' about topic' || (g %% %(clusters)s) || ' and its details',
       null, case when (g / %(sessions)s) %% 100 = 7 then 'blob:' || g end, 10, 40, %(now)s, %(now)s, %(now)s,
       (select array_agg(sin((g %% %(clusters)s) * 1.37 + i * 0.71) + 0.45 * sin(g * 12.9898 + i * 78.233))
          from generate_series(1, %(dim)s) i)::public.vector
  from generate_series(1, %(n)s) g
"""
SEARCH: LiteralString = """
select page_id from memori.search_pages(%s, null, %s::public.vector, p_modality => %s, p_limit => 10,
                                        p_scope => %s)"""
EXACT_SESSION: LiteralString = """
with c as materialized (select page_id, embedding operator(public.<=>) %s::public.vector as d from memori.pages
                         where session_id = %s and embedding is not null and (%s::text is null or modality = %s))
select page_id from c order by d, page_id limit 10"""
EXACT_USER: LiteralString = """
with c as materialized (select page_id, embedding operator(public.<=>) %s::public.vector as d from memori.pages
                         where user_id = %s and embedding is not null and (%s::text is null or modality = %s))
select page_id from c order by d, page_id limit 10"""
PK_READ: LiteralString = "select * from memori.pages where session_id = %s and page_id = %s"


def _query_vector(rng: random.Random) -> str:
    c = rng.randrange(CLUSTERS)
    v = [math.sin(c * 1.37 + i * 0.71) + rng.gauss(0, 0.3) for i in range(1, DIM + 1)]
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


def _summary(samples_ns: Sequence[int]) -> dict[str, float]:
    xs = sorted(samples_ns)
    return {"n": len(xs), "p50_ms": round(percentile(xs, 50) / 1e6, 3), "p95_ms": round(percentile(xs, 95) / 1e6, 3),
            "max_ms": round(xs[-1] / 1e6, 3)}


def _ids(conn: psycopg.Connection[Any], query: LiteralString, params: Sequence[Any]) -> tuple[list[str], int]:
    start = time.perf_counter_ns()
    found = [r[0] for r in conn.execute(query, params).fetchall()]
    return found, time.perf_counter_ns() - start


def _scenario(conn: psycopg.Connection[Any], rng: random.Random, rows: int, n: int, scope: str,
              modality: str | None) -> dict[str, Any]:
    times: list[int] = []
    base: list[int] = []
    recall: list[float] = []
    short = 0
    for i in range(n + 5):
        session = f"bench_search_{rng.randrange(SESSIONS):03d}"
        q = _query_vector(rng)
        got, t = _ids(conn, SEARCH, (session, q, modality, scope))
        if scope == "session":
            exact, _ = _ids(conn, EXACT_SESSION, (q, session, modality, modality))
        else:
            exact, _ = _ids(conn, EXACT_USER, (q, USER, modality, modality))
        _, tb = _ids(conn, PK_READ, (session, f"p_{rng.randint(1, rows)}"))
        if i < 5:
            continue  # warm-up
        times.append(t)
        base.append(tb)
        short += len(got) < min(10, len(exact))
        recall.append(len(set(got) & set(exact)) / max(1, len(exact)))
    s, b = _summary(times), _summary(base)
    return {"scope": scope, "filter": modality, "subject": s, "baseline": b,
            "ratio_p95": ratio(s["p95_ms"], b["p95_ms"]), "recall_at_10": round(sum(recall) / len(recall), 4),
            "min_recall_at_10": round(min(recall), 4), "fewer_than_k": short}


def run(dsn: str, rows: int = 100_000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    if rows < 1000:
        from pymemdb.errors import InvalidArgument

        raise InvalidArgument(f"--rows must be at least 1000, got {rows}", hint="The issue's scale is 100000.")
    rng = random.Random(seed)
    queries = 50
    with connect(dsn) as conn:
        conn.execute("select set_config('memori.user_id', %s, false)", (USER,))
        conn.execute("delete from memori.vm_sessions where session_id like 'bench_search_%%'")
        now = one(conn, "select now()")
        try:
            with stopwatch() as elapsed:
                for s in range(SESSIONS):
                    conn.execute("select memori.turn_begin(%s, %s)", (f"bench_search_{s:03d}", USER))
                conn.execute(GENERATE, {"u": USER, "n": rows, "now": now, "sessions": SESSIONS,
                                        "clusters": CLUSTERS, "dim": DIM})
                conn.execute("vacuum analyze memori.pages")
                generate_s = round(elapsed(), 1)
            if progress:
                progress(f"generated {rows:,} pages with embeddings and indexes in {generate_s} s")
            session = _scenario(conn, rng, rows, queries, "session", None)
            user = _scenario(conn, rng, rows, queries, "user", None)
            filtered = _scenario(conn, rng, rows, queries, "user", "image")
        finally:
            conn.execute("delete from memori.vm_sessions where session_id like 'bench_search_%%'")
            conn.execute("delete from memori.page_mutations where session_id like 'bench_search_%%'")
    return {"suite": "search", "rows": rows, "seed": seed, "generate_s": generate_s,
            "session": session, "user": user, "user_filtered_1pct": filtered,
            "goals": {"session_p95_ms": GOAL_P95_MS, "session_recall": 1.0, "user_recall": GOAL_USER_RECALL}}


def render(result: dict[str, Any]) -> list[Table]:
    t = Table(title=f"search_pages among {result['rows']:,} pages, {SESSIONS} sessions, 384-d "
                    f"(generated in {result['generate_s']} s)")
    for col in ("scenario", "p50 ms", "p95 ms", "baseline p95 ms", "ratio p95", "recall@10", "min recall",
                "fewer than k"):
        t.add_column(col, justify="left" if col == "scenario" else "right")
    for key, name in (("session", "session scope (exact)"), ("user", "user scope (HNSW, iterative)"),
                      ("user_filtered_1pct", "user scope, 1 % filter")):
        r = result[key]
        t.add_row(name, fmt(r["subject"]["p50_ms"]), fmt(r["subject"]["p95_ms"]), fmt(r["baseline"]["p95_ms"]),
                  fmt(r["ratio_p95"], "x"), f"{r['recall_at_10']:.3f}", f"{r['min_recall_at_10']:.3f}",
                  str(r["fewer_than_k"]))
    return [t]
