"""Benchmarks behind ``pymemdb bench <suite>``: shared measuring helpers.

A suite module (``pymemdb.bench.ttl``) exposes ``run(dsn, ...) -> dict`` (a
JSON-serialisable result with its baseline measured in the same run) and
``render(result)`` (rich tables); one row of ``BENCH_SUITES`` in cli/main.py
makes it ``pymemdb bench <name>``. Benchmarks are never unit tests.
"""

from __future__ import annotations

import importlib
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from rich.table import Table

from pymemdb.errors import InvalidArgument, PymemdbError

Progress = Callable[[str], None]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linearly interpolated (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_summary(samples_ns: Sequence[int]) -> dict[str, float]:
    """n, p50, p95, p99, mean and max of latencies given in nanoseconds, in microseconds."""
    xs = sorted(samples_ns)
    return {
        "n": len(xs),
        "p50_us": round(percentile(xs, 50) / 1000, 1),
        "p95_us": round(percentile(xs, 95) / 1000, 1),
        "p99_us": round(percentile(xs, 99) / 1000, 1),
        "mean_us": round(sum(xs) / len(xs) / 1000, 1),
        "max_us": round(xs[-1] / 1000, 1),
    }


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def wal_lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("select pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def wal_bytes_since(conn: psycopg.Connection[Any], start_lsn: str) -> int:
    """WAL written by the whole cluster since ``start_lsn`` (other sessions' writes included)."""
    row = conn.execute(
        "select pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint", (start_lsn,)
    ).fetchone()
    assert row is not None
    return int(row[0])


@dataclass(frozen=True)
class Probe:
    """A read the benchmark times: a query run as a prepared statement with sampled parameters."""

    name: str
    query: LiteralString
    params: Callable[[random.Random], Sequence[Any]]


def timed_call(cur: psycopg.Cursor[Any], probe: Probe, rng: random.Random) -> int:
    """Run one probe (prepared, result fetched) and return its latency in nanoseconds."""
    params = probe.params(rng)
    start = time.perf_counter_ns()
    cur.execute(probe.query, params, prepare=True)
    cur.fetchall()
    return time.perf_counter_ns() - start


def interleaved(
    conn: psycopg.Connection[Any], probes: Sequence[Probe], iterations: int, seed: int
) -> dict[str, dict[str, float]]:
    """Latencies of the probes, prepared, interleaved in rotating order so drift and caching hit all alike."""
    rng = random.Random(seed)
    samples: dict[str, list[int]] = {p.name: [] for p in probes}
    warmup = iterations // 5  # plans cached, pages in cache
    with conn.cursor() as cur:
        for i in range(warmup + iterations):
            for j in range(len(probes)):
                probe = probes[(i + j) % len(probes)]
                ns = timed_call(cur, probe, rng)
                if i >= warmup:
                    samples[probe.name].append(ns)
    return {name: latency_summary(xs) for name, xs in samples.items()}


@dataclass
class Reader:
    """A concurrent reader: one probe on its own connection, at a steady rate, until stopped.

    A steady rate (not a tight loop) models an application and keeps the
    reader from starving the workload of CPU on a small machine, so it
    measures interference from the workload (locks, I/O, WAL, CPU), not its
    own. When a read takes longer than the interval the next starts at once.
    Use it as a context manager around the workload.
    """

    dsn: str
    probe: Probe
    rate: float = 200.0  # reads per second
    seed: int = 1
    warmup: int = 20
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None
    _thread: threading.Thread | None = None

    def _loop(self) -> None:
        rng = random.Random(self.seed)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn, conn.cursor() as cur:
                for _ in range(self.warmup):  # plans cached, pages in cache
                    timed_call(cur, self.probe, rng)
                self._ready.set()
                interval = 1 / self.rate
                due = time.perf_counter()
                while not self._stop.is_set():
                    self.samples.append(timed_call(cur, self.probe, rng))
                    due = max(due + interval, time.perf_counter())
                    self._stop.wait(due - time.perf_counter())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def __enter__(self) -> Reader:
        self.samples = []
        self._thread = threading.Thread(target=self._loop, name="pymemdb-bench-reader", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error

    def summary(self) -> dict[str, float] | None:
        return latency_summary(self.samples) if self.samples else None


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed: ...``; ``elapsed()`` gives seconds, frozen at exit."""
    start = time.perf_counter()
    end: float | None = None

    def elapsed() -> float:
        return (end if end is not None else time.perf_counter()) - start

    try:
        yield elapsed
    finally:
        end = time.perf_counter()

def explain_nested(conn: psycopg.Connection[Any], query: LiteralString, params: Any,
                   role: str | None = None) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the statements a function runs, as it runs them.

    auto_explain reports the plans of nested statements at NOTICE level, so the
    plans come back on this connection instead of the server log. ``role``
    runs the query as that role (row-level security applies) after the
    superuser has set auto_explain up.
    """
    plans: list[str] = []
    handler = lambda diag: plans.append(diag.message_primary or "")  # noqa: E731
    conn.add_notice_handler(handler)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("load 'auto_explain'")
            for setting in ("log_min_duration = 0", "log_analyze = on", "log_buffers = on",
                            "log_nested_statements = on", "log_level = notice"):
                conn.execute(f"set local auto_explain.{setting}")
            if role is not None:
                conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
            conn.execute(query, params).fetchall()
    finally:
        conn.remove_notice_handler(handler)
    # the last plan is the outer call itself; the ones before are its statements
    return "\n\n".join(plans[:-1] or plans)

def connect(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("set timezone = 'UTC'")
    return conn

@contextmanager
def vm_sessions(dsn: str, user: str, like: str) -> Iterator[tuple[psycopg.Connection[Any], Any]]:
    """A connection acting for ``user`` and the server's ``now()``, with the VM sessions whose id is ``like``
    (and their mutation log) deleted before and after the suite."""
    with connect(dsn) as conn:
        conn.execute("select set_config('memori.user_id', %s, false)", (user,))
        conn.execute("delete from memori.vm_sessions where session_id like %s", (like,))
        now = one(conn, "select now()")
        try:
            yield conn, now
        finally:
            conn.execute("delete from memori.vm_sessions where session_id like %s", (like,))
            conn.execute("delete from memori.page_mutations where session_id like %s", (like,))


# The columns of memori.pages a VM suite's set-based insert leaves at 0 or NULL, by the SQL's own rules
PAGE_COLUMNS: LiteralString = """
update memori.pages set tokens = memori.token_estimate(content, 'page'), size_bytes = octet_length(content),
                        search_tsv = memori.page_search_vector(hint, content)
 where session_id = %(s)s
"""
PAGE_REFERENCES: LiteralString = """
insert into memori.page_representations (session_id, page_id, user_id, level, content, tokens, version,
                                         created_at)
select p.session_id, p.page_id, p.user_id, 3, r.ref, memori.token_estimate(r.ref, 'page'), 1, %(now)s
  from memori.pages p
 cross join lateral (select memori._page_reference(p.page_id, p.modality, p.hint, p.content, null, null) as ref) r
 where p.session_id = %(s)s
"""


def derive_pages(conn: psycopg.Connection[Any], args: dict[str, Any], *, references: bool) -> None:
    """After a suite inserted the pages of session ``args["s"]`` set-based: their tokens, size and full-text
    vector, and with ``references`` every page's level-3 reference (created at ``args["now"]``)."""
    conn.execute(PAGE_COLUMNS, args)
    if references:
        conn.execute(PAGE_REFERENCES, args)


def one(conn: psycopg.Connection[Any], query: LiteralString | sql.Composed, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]

def vacuum(conn: psycopg.Connection[Any], schema: str, tables: Sequence[str], *, full: bool = False) -> None:
    """``vacuum (analyze)`` each of ``schema.tables``; ``full``: ``vacuum (full, analyze)``, compacted for sizes."""
    options = sql.SQL("full, analyze" if full else "analyze")
    for t in tables:
        conn.execute(sql.SQL("vacuum ({}) {}.{}").format(options, sql.Identifier(schema), sql.Identifier(t)))


def settle(conn: psycopg.Connection[Any], *schemas: tuple[str, Sequence[str]]) -> None:
    """After a write phase: ``vacuum (analyze)`` the tables of each (schema, tables), then ``checkpoint``, so
    the autovacuum and dirty buffers it leaves behind do not land in whichever reads run next."""
    for schema, tables in schemas:
        vacuum(conn, schema, tables)
    conn.execute("checkpoint")


def table_sizes(conn: psycopg.Connection[Any], schema: str, tables: Sequence[str], *,
                compact: bool = False) -> dict[str, int]:
    """``pg_total_relation_size`` (table, indexes, TOAST) of each of ``schema.tables``, by table name;
    ``compact``: after ``vacuum (full, analyze)``, so two stores compare without their dead rows."""
    if compact:
        vacuum(conn, schema, tables, full=True)
    return {t: int(one(conn, "select pg_total_relation_size(format('%%I.%%I', %s::text, %s::text)::regclass)",
                       (schema, t))) for t in tables}


def fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}{unit}" if value < 10 else f"{value:,.0f}{unit}"
    return f"{value:,}{unit}"


def require_rows(rows: int, minimum: int, hint: str) -> None:
    """Refuse a --rows below what the suite can measure (PM001, exit 2 in the CLI)."""
    if rows < minimum:
        raise InvalidArgument(f"--rows must be at least {minimum}, got {rows}", hint=hint)


def require_empty(conn: psycopg.Connection[Any], table: LiteralString, *, allow_existing: bool, hint: str) -> int:
    """Rows already in ``memori.<table>``; refused unless ``allow_existing`` (the suite needs it empty)."""
    existing = int(one(conn, sql.SQL("select count(*) from memori.{}").format(sql.Identifier(table))))
    if existing and not allow_existing:
        raise PymemdbError(f"memori.{table} already holds {existing} rows; the benchmark needs it empty", hint=hint)
    return existing


def require_baseline(module: str, name: str, why: str) -> Any:
    """LangGraph's Postgres class ``module.name``, the baseline of a suite; the bench extra installs it."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise InvalidArgument(why, hint="pip install 'pymemdb[bench]' (langgraph-checkpoint-postgres).") from exc


def plans_table(*plans: tuple[str, str]) -> Table:
    """The EXPLAIN (ANALYZE, BUFFERS) outputs a suite printed, one row per query."""
    table = Table(title="Plans", show_lines=True)
    table.add_column("query")
    table.add_column("EXPLAIN (ANALYZE, BUFFERS)", overflow="fold")
    for query, plan in plans:
        table.add_row(query, plan)
    return table
