"""``pymemdb bench fork``: copy-on-write forks cost O(1) storage until writes, O(N) for N writes (seed 03 10.3).

1. Two source sessions, ``rows / 10`` and ``rows`` pages (default 10,000),
   generated set-based (~400 bytes of content, a level-3 reference each) with
   a working set of ``MAPPED`` pages. Each is forked (``memori.session_fork``)
   and the growth of every VM table (``memori.vm_storage``:
   pg_total_relation_size, indexes and TOAST included) is recorded. The
   baseline is the naive fork: copying every page row and representation
   into a new session. O(1): the fork's growth is the same for both sizes.
2. Writes: ``page_update`` in the fork of the large session on N distinct
   shared pages, N = rows/100 then rows/10 (each write copies one page row,
   its representations and a version row): bytes per write stay flat, O(N).
   The baseline is the same number of writes on pages a session owns and
   shares with nobody (the full copy's).
3. Reads: ``page_lookup`` and ``vm_manifest`` in the fork (resolved through
   its ancestor) against the same calls in the source.

Bench sessions (``bench_fork_*``) are deleted at the end.
"""

from __future__ import annotations

import random
import time
from typing import Any, LiteralString

import psycopg
from rich.table import Table

from pymemdb.bench import Progress, derive_pages, fmt, one, percentile, ratio, require_rows, stopwatch, vm_sessions

USER = "bench"
MAPPED = 20
PREFIX = "bench_fork_"

GENERATE_PAGES: LiteralString = """
insert into memori.pages (session_id, user_id, page_id, page_type, modality, role, tier, content, tokens, size_bytes,
                          importance, turn, created_at, updated_at, last_accessed)
select %(s)s, %(u)s, 'msg_' || lpad(g::text, 7, '0'), 'transcript', 'text',
       case when g %% 2 = 0 then 'user' else 'assistant' end, 'L2',
       repeat('page ' || g || ' talks about topic' || (g %% 200) || ' and forks. ', 12),
       0, 0, ((g * 31) %% 100) / 100.0, 0, %(now)s, %(now)s, %(now)s
  from generate_series(1, %(n)s) g
"""
MANIFEST: LiteralString = "select memori.vm_manifest(%(s)s, 200) where %(p)s::text is not null"
# the naive fork: every row copied
FULL_COPY_PAGES: LiteralString = """
insert into memori.pages (session_id, user_id, page_id, page_type, modality, role, tier, content, tokens, size_bytes,
                          importance, turn, created_at, updated_at, last_accessed, search_tsv)
select %(t)s, user_id, page_id, page_type, modality, role, tier, content, tokens, size_bytes, importance, turn,
       created_at, updated_at, last_accessed, search_tsv
  from memori.pages where session_id = %(s)s
"""
FULL_COPY_REPS: LiteralString = """
insert into memori.page_representations (session_id, page_id, user_id, level, content, data, tokens, version,
                                         created_at)
select %(t)s, page_id, user_id, level, content, data, tokens, version, created_at
  from memori.page_representations where session_id = %(s)s
"""


def storage(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Bytes of every VM table (pg_total_relation_size)."""
    return {str(r[0]): int(r[1]) for r in conn.execute("select table_name, bytes from memori.vm_storage()")}


ROW_BYTES: LiteralString = """
select (select coalesce(sum(pg_column_size(t.*)), 0) from memori.pages t where t.session_id = %(s)s)
     + (select coalesce(sum(pg_column_size(t.*)), 0) from memori.page_representations t where t.session_id = %(s)s)
     + (select coalesce(sum(pg_column_size(t.*)), 0) from memori.page_versions t where t.session_id = %(s)s)
     + (select coalesce(sum(pg_column_size(t.*)), 0) from memori.working_set t where t.session_id = %(s)s)
     + (select coalesce(sum(pg_column_size(t.*)), 0) from memori.page_mutations t where t.session_id = %(s)s)
     + (select coalesce(sum(pg_column_size(t.*)), 0) from memori.vm_forks t where t.session_id = %(s)s)
     + (select coalesce(sum(pg_column_size(t.*)), 0) from memori.vm_sessions t where t.session_id = %(s)s)
"""


def row_bytes(conn: psycopg.Connection[Any], session: str) -> int:
    """Bytes of the rows a session owns in every VM table (pg_column_size: exact, free space does not hide it)."""
    return int(one(conn, ROW_BYTES, {"s": session}))


def growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {t: after[t] - before.get(t, 0) for t in after if after[t] != before.get(t, 0)}


def make_source(conn: psycopg.Connection[Any], session: str, pages: int, now: Any) -> None:
    """A session of ``pages`` pages (level-3 references) with MAPPED of them in the working set."""
    conn.execute("select memori.turn_begin(%s, %s, %s)", (session, USER, now))
    args = {"s": session, "u": USER, "n": pages, "now": now}
    conn.execute(GENERATE_PAGES, args)
    derive_pages(conn, args, references=True)
    for g in range(1, min(MAPPED, pages) + 1):
        conn.execute("select memori.vm_add_page(%s, %s, 0, p_now => %s)", (session, f"msg_{g:07d}", now))


def _fork(conn: psycopg.Connection[Any], source: str, target: str, now: Any) -> dict[str, Any]:
    before = storage(conn)
    with stopwatch() as elapsed:
        conn.execute("select memori.session_fork(%s, %s, %s)", (source, target, now))
    grown = growth(before, storage(conn))
    return {"ms": round(elapsed() * 1000, 2), "bytes": sum(grown.values()), "by_table": grown,
            "row_bytes": row_bytes(conn, target),
            "own_rows": one(conn, "select count(*) from memori.pages where session_id = %s", (target,))}


def _full_copy(conn: psycopg.Connection[Any], source: str, target: str, now: Any) -> dict[str, Any]:
    before = storage(conn)
    with stopwatch() as elapsed:
        conn.execute("select memori.turn_begin(%s, %s, %s)", (target, USER, now))
        conn.execute(FULL_COPY_PAGES, {"s": source, "t": target})
        conn.execute(FULL_COPY_REPS, {"s": source, "t": target})
    grown = growth(before, storage(conn))
    return {"ms": round(elapsed() * 1000, 2), "bytes": sum(grown.values()), "by_table": grown,
            "row_bytes": row_bytes(conn, target)}


def _writes(conn: psycopg.Connection[Any], fork: str, ids: list[int], now: Any) -> dict[str, Any]:
    before, rows_before = storage(conn), row_bytes(conn, fork)
    with stopwatch() as elapsed:
        for g in ids:
            conn.execute("select memori.page_update(%s, %s, %s, p_now => %s)",
                         (fork, f"msg_{g:07d}", f"rewritten in the fork: {g}", now))
    grown = growth(before, storage(conn))
    total = sum(grown.values())
    added = row_bytes(conn, fork) - rows_before
    return {"writes": len(ids), "bytes": total, "bytes_per_write": round(total / len(ids)), "by_table": grown,
            "row_bytes": added, "row_bytes_per_write": round(added / len(ids)),
            "ms_per_write": round(elapsed() * 1000 / len(ids), 3)}


def _latency(conn: psycopg.Connection[Any], query: LiteralString, session: str, rng: random.Random, pages: int,
             n: int = 200) -> float:
    samples = []
    for _ in range(n):
        page = f"msg_{rng.randint(MAPPED + 1, pages):07d}"
        start = time.perf_counter_ns()
        conn.execute(query, {"s": session, "p": page}, prepare=True).fetchall()
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return round(percentile(samples, 50) / 1e6, 3)


def run(dsn: str, rows: int = 10_000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    require_rows(rows, 1000, "The issue's scale is 10000.")
    rng = random.Random(seed)
    small, large = rows // 10, rows
    with vm_sessions(dsn, USER, "bench\\_fork\\_%") as (conn, now):
        with stopwatch() as elapsed:
            make_source(conn, PREFIX + "small", small, now)
            make_source(conn, PREFIX + "large", large, now)
            conn.execute("vacuum analyze memori.pages, memori.page_representations, memori.working_set")
        source_bytes = one(conn, "select sum(bytes)::bigint from memori.vm_storage()")
        if progress:
            progress(f"generated sessions of {small:,} and {large:,} pages in {elapsed():.1f} s")
        fork_small = _fork(conn, PREFIX + "small", PREFIX + "small_f", now)
        fork_large = _fork(conn, PREFIX + "large", PREFIX + "large_f", now)
        copy_large = _full_copy(conn, PREFIX + "large", PREFIX + "large_copy", now)
        if progress:
            progress(f"forked: {fork_small['bytes']:,} and {fork_large['bytes']:,} bytes; "
                     f"full copy {copy_large['bytes']:,} bytes")
        shared = list(range(MAPPED + 1, large + 1))
        rng.shuffle(shared)
        few, many = max(large // 100, 10), max(large // 10, 100)
        writes_few = _writes(conn, PREFIX + "large_f", shared[:few], now)
        writes_many = _writes(conn, PREFIX + "large_f", shared[few:few + many], now)
        # baseline: the same writes on pages a session owns and shares with nobody (the full copy)
        writes_own = _writes(conn, PREFIX + "large_copy", shared[few:few + many], now)
        # reads: the fork resolves the rest through its ancestor
        untouched = PREFIX + "small_f"
        reads = {
            "lookup_source_ms": _latency(conn, "select memori.page_lookup(%(s)s, %(p)s)", PREFIX + "small",
                                         rng, small),
            "lookup_fork_ms": _latency(conn, "select memori.page_lookup(%(s)s, %(p)s)", untouched, rng, small),
            "manifest_source_ms": _latency(conn, MANIFEST, PREFIX + "large", rng, large, 20),
            "manifest_fork_ms": _latency(conn, MANIFEST, PREFIX + "large_f", rng, large, 20),
        }
    return {"suite": "fork", "rows": rows, "seed": seed, "small_pages": small, "large_pages": large,
            "mapped": MAPPED, "vm_bytes_after_generation": source_bytes,
            "fork_small": fork_small, "fork_large": fork_large, "full_copy_large": copy_large,
            "fork_vs_copy_bytes": ratio(fork_large["bytes"], copy_large["bytes"]),
            "fork_vs_copy_row_bytes": ratio(fork_large["row_bytes"], copy_large["row_bytes"]),
            "fork_large_vs_small_row_bytes": ratio(fork_large["row_bytes"], fork_small["row_bytes"]),
            "writes_few": writes_few, "writes_many": writes_many, "writes_own_baseline": writes_own,
            "row_bytes_per_write_many_vs_few": ratio(writes_many["row_bytes_per_write"],
                                                     writes_few["row_bytes_per_write"]),
            "reads": reads,
            "reads_ratio": {"lookup": ratio(reads["lookup_fork_ms"], reads["lookup_source_ms"]),
                            "manifest": ratio(reads["manifest_fork_ms"], reads["manifest_source_ms"])}}


def render(result: dict[str, Any]) -> list[Table]:
    t = Table(title=f"session_fork: storage added, {result['mapped']} mapped pages (relation growth: "
                    "pg_total_relation_size of every VM table; row bytes: pg_column_size of the new rows)")
    for col in ("what", "pages in source", "relation growth", "row bytes", "ms", "own page rows"):
        t.add_column(col, justify="left" if col == "what" else "right")
    for key, name, pages in (("fork_small", "fork (copy-on-write)", result["small_pages"]),
                             ("fork_large", "fork (copy-on-write)", result["large_pages"]),
                             ("full_copy_large", "baseline: full copy", result["large_pages"])):
        r = result[key]
        t.add_row(name, fmt(pages), fmt(r["bytes"]), fmt(r["row_bytes"]), fmt(r["ms"]),
                  fmt(r.get("own_rows", pages)))
    t.add_row("ratio fork / full copy", "", fmt(result["fork_vs_copy_bytes"], "x"),
              fmt(result["fork_vs_copy_row_bytes"], "x"), "", "")
    t.add_row("ratio fork large / small", "", "", fmt(result["fork_large_vs_small_row_bytes"], "x"), "", "")
    w = Table(title="writes (page_update of distinct pages): O(N)")
    for col in ("what", "writes", "relation growth", "row bytes", "row bytes per write", "ms per write"):
        w.add_column(col, justify="left" if col == "what" else "right")
    for key, name in (("writes_few", "in the fork (copy first)"), ("writes_many", "in the fork (copy first)"),
                      ("writes_own_baseline", "baseline: own unshared pages")):
        r = result[key]
        w.add_row(name, fmt(r["writes"]), fmt(r["bytes"]), fmt(r["row_bytes"]), fmt(r["row_bytes_per_write"]),
                  fmt(r["ms_per_write"]))
    w.add_row("ratio per write, fork many / few", "", "", "", fmt(result["row_bytes_per_write_many_vs_few"], "x"),
              "")
    r = Table(title="reads in a fork (resolved through its ancestor) vs. the source, p50")
    for col in ("call", "source ms", "fork ms", "ratio"):
        r.add_column(col, justify="left" if col == "call" else "right")
    reads = result["reads"]
    r.add_row("page_lookup", fmt(reads["lookup_source_ms"]), fmt(reads["lookup_fork_ms"]),
              fmt(result["reads_ratio"]["lookup"], "x"))
    r.add_row("vm_manifest (200 available)", fmt(reads["manifest_source_ms"]), fmt(reads["manifest_fork_ms"]),
              fmt(result["reads_ratio"]["manifest"], "x"))
    return [t, w, r]
