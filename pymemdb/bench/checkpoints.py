"""``pymemdb bench checkpoints``: checkpoint writes and the latest-checkpoint read (seed 01).

1. Create throughput on the table already holding the ``rows`` generated
   checkpoints (step 2 runs first): ``db.checkpoints.create``, one
   transaction per call, against ``db.checkpoints.create_many`` in batches,
   interleaved (a run of single creates, then one batch); then, to explain the ratio, the parts of one call (round trip,
   statement, commit, client CPU) and three set-based alternatives that do
   not go through the client: psycopg ``executemany`` in a pipeline, one
   ``SELECT ... FROM unnest(...), LATERAL checkpoint_create(...)`` per
   batch (the function's own server time) and a plain INSERT (the table's).
2. Generates (before step 1) ``rows`` checkpoints in one INSERT ... SELECT (``rows // 20``
   sessions of ``rows // 200`` users, mixed types, created over the 60 days
   before a fixed ``now``), then times memori.checkpoint_query(session,
   limit 1) against a primary-key lookup, interleaved, with the
   checkpoint.queried event on (the default) and off.
3. Counts the buffers one read touches per relation and EXPLAINs the
   statement checkpoint_query runs (auto_explain, nested statements).

Bench rows (sessions ``bench_*``) and their events are removed at the end.
The target's memori.checkpoints must be empty unless ``allow_existing``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from rich.table import Table

import pymemdb
from pymemdb.bench import (
    Probe,
    Progress,
    connect,
    explain_nested,
    fmt,
    interleaved,
    latency_summary,
    one,
    plans_table,
    ratio,
    require_empty,
    require_rows,
    stopwatch,
)
from pymemdb.checkpoints import CHECKPOINT_CREATE, NewCheckpoint
from pymemdb.errors import PymemdbError
from pymemdb.types import Checkpoint

NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)  # the benchmark's clock, passed as p_now
GOAL_CREATE_RATIO = 10.0  # create_many checkpoints/s over create()'s
# Checkpoint types and their share of the data (seed 01: automatic ones are the common case).
TYPES = ("automatic", "manual", "milestone")
WEIGHTS = (6, 3, 1)
PREFIX = "bench_"  # every session and user id the benchmark writes starts with it

# The client's statement with every parameter bound, so each call has the same text.
CREATE_ALL = CHECKPOINT_CREATE.query(dict.fromkeys(("p_session_id", "p_user_id", "p_type", "p_title", "p_data",
                                                    "p_now")))
# One statement creating a whole batch: the function's server time, one round trip.
CREATE_UNNEST: LiteralString = """
select c.id
  from unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::timestamptz[])
         as t(session_id, user_id, type, title, data, now)
 cross join lateral memori.checkpoint_create(p_session_id => t.session_id, p_user_id => t.user_id, p_type => t.type,
                                             p_title => t.title, p_data => t.data, p_now => t.now) c
"""
# The same rows without the function (no validation, policy lookup or event): the table's own cost.
INSERT_UNNEST: LiteralString = """
insert into memori.checkpoints (session_id, user_id, checkpoint_type, title, data, priority, retention_days,
                                created_at, updated_at, expires_at, pxyz)
select t.session_id, t.user_id, t.type, t.title, t.data, p.priority, extract(day from p.retention)::integer,
       t.now, t.now, t.now + p.retention, memori._checkpoint_pxyz('created', t.type, t.now)
  from unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::timestamptz[])
         as t(session_id, user_id, type, title, data, now)
  join memori.retention_policies p on p.table_name = 'checkpoints' and p.kind = t.type
returning id
"""

# Row i of rows: created at now - 60 days + i/rows of 60 days (inserted in time
# order, as an application writes them, so no sort is needed); session, type
# and data size from hashes of i; a session always belongs to the same user.
GENERATE: LiteralString = """
with p as (
  select %(now)s::timestamptz as now, %(rows)s::bigint as rows, %(sessions)s::integer as sessions,
         %(users)s::integer as users, %(seed)s::bigint as seed,
         %(types)s::text[] as types, %(priorities)s::integer[] as priorities, %(days)s::integer[] as days
)
insert into memori.checkpoints (session_id, user_id, checkpoint_type, title, data, tags, priority, retention_days,
                                created_at, updated_at, expires_at, pxyz)
select 'bench_s' || lpad(h.s::text, 6, '0'), 'bench_u' || lpad(mod(h.s, p.users)::text, 5, '0'),
       p.types[h.k], p.types[h.k] || ' checkpoint ' || i,
       jsonb_build_object('step', i, 'task', 'task ' || left(md5(i::text), 12),
                          'status', (array['running', 'blocked', 'done'])[1 + mod(h.h3, 3)],
                          'progress', mod(h.h3, 101) / 100.0,
                          'files', jsonb_build_array('src/' || left(md5((i + 1)::text), 10) || '.py',
                                                     'tests/test_' || left(md5((i + 2)::text), 8) || '.py'),
                          'notes', repeat(md5((i + 3)::text), 2 + mod(h.h3, 4)::integer)),
       case when mod(h.h3, 4) = 0 then '{bench}'::text[] else '{}' end,
       p.priorities[h.k], p.days[h.k], t.created_at, t.created_at, t.created_at + make_interval(days => p.days[h.k]),
       memori._checkpoint_pxyz('created', p.types[h.k], t.created_at)
  from p
 cross join generate_series(1, p.rows) i
 cross join lateral (
   select mod(hashint8extended(i, p.seed) & 2147483647, p.sessions)::integer as s,
          case when mod(hashint8extended(i, p.seed + 1) & 2147483647, 10) < 6 then 1
               when mod(hashint8extended(i, p.seed + 1) & 2147483647, 10) < 9 then 2 else 3 end as k,
          hashint8extended(i, p.seed + 2) & 2147483647 as h3) h
 cross join lateral (
   select p.now - interval '60 days' + (interval '60 days' - interval '1 second') * (i::float8 / p.rows)
          as created_at) t
"""

LATEST: LiteralString = (
    "select * from memori.checkpoint_query(p_session_id => %s::text, p_limit => 1, p_now => %s::timestamptz)"
)
# the primary key is (user_id, id) since revision 0024: a lookup by id alone has no index to use
PK_LOOKUP: LiteralString = "select * from memori.checkpoints where user_id = %s and id = %s::uuid"
# checkpoint_query's statement for this call, written out as a plain prepared statement:
# what the function adds (validation, plan per call, event) over its own query.
DIRECT: LiteralString = """
select * from memori.checkpoints c
 where c.session_id = %s::text and (c.expires_at is null or c.expires_at > %s::timestamptz)
 order by c.created_at desc, c.id desc limit 1
"""
# What an index-only scan of idx_checkpoints_session_time can answer: its own columns, no expiry filter.
INDEX_ONLY: LiteralString = """
select session_id, created_at, id from memori.checkpoints
 where session_id = %s::text order by created_at desc limit 1
"""
QUERY_EVENTS: LiteralString = "update memori.settings set value = %s::jsonb where key = 'checkpoint.query_events'"


def _explain(conn: psycopg.Connection[Any], query: LiteralString, params: Any) -> str:
    stmt = sql.SQL("explain (analyze, buffers) ") + sql.SQL(query)
    return "\n".join(r[0] for r in conn.execute(stmt, params).fetchall())


@contextmanager
def _query_events(conn: psycopg.Connection[Any], on: bool) -> Iterator[None]:
    """memori.settings checkpoint.query_events set to ``on`` for the block, then restored."""
    before = one(conn, "select value from memori.settings where key = 'checkpoint.query_events'")
    conn.execute(QUERY_EVENTS, (json.dumps(on),))
    try:
        yield
    finally:
        conn.execute(QUERY_EVENTS, (json.dumps(before),))


# -- 1. create throughput ------------------------------------------------------------------------------
def _new_checkpoints(rng: random.Random, n: int, start: int) -> list[NewCheckpoint]:
    """n realistic checkpoints (~300 bytes of JSON data) over 500 sessions, 2 s apart up to NOW."""
    out = []
    for i in range(start, start + n):
        s = rng.randrange(500)
        kind = rng.choices(TYPES, WEIGHTS)[0]
        data = {
            "step": i, "task": f"implement feature {rng.randrange(10**6)}",
            "status": rng.choice(("running", "blocked", "done")), "progress": round(rng.random(), 2),
            "files": [f"src/pkg/module_{rng.randrange(1000)}.py" for _ in range(3)],
            "tasks": [{"name": f"task {j}", "completed": rng.random() < 0.5} for j in range(3)],
            "notes": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=60)),
        }
        out.append(NewCheckpoint(f"bench_c{s:04d}", f"bench_u{s % 50:05d}", kind, f"{kind} checkpoint {i}", data,
                                 now=NOW - timedelta(seconds=2 * (10**6 - i))))
    return out


def _args(c: NewCheckpoint) -> dict[str, Any]:
    return {"p_session_id": c.session_id, "p_user_id": c.user_id, "p_type": c.type, "p_title": c.title,
            "p_data": Jsonb(c.data), "p_now": c.now}


def _columns(batch: Sequence[NewCheckpoint]) -> list[list[Any]]:
    """A batch as the arrays CREATE_UNNEST and INSERT_UNNEST take."""
    return [[c.session_id for c in batch], [c.user_id for c in batch], [c.type for c in batch],
            [c.title for c in batch], [Jsonb(c.data) for c in batch], [c.now for c in batch]]


def _throughput(n: int, seconds: float, cpu: float, batch_ns: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"checkpoints": n, "seconds": round(seconds, 3), "per_s": round(n / seconds),
                           "us_per_checkpoint": round(seconds / n * 1e6, 1),
                           "client_cpu_us_per_checkpoint": round(cpu / n * 1e6, 1)}
    if batch_ns:
        out["batch"] = latency_summary(batch_ns)
    return out


def _batched(
    items: list[NewCheckpoint], batch_size: int, write: Callable[[list[NewCheckpoint]], int]
) -> dict[str, Any]:
    """Time ``write`` over ``items`` in batches; it returns how many checkpoints it created."""
    batches = [items[i:i + batch_size] for i in range(0, len(items), batch_size)]
    samples: list[int] = []
    created = 0
    cpu = time.process_time()
    with stopwatch() as elapsed:
        for batch in batches:
            start = time.perf_counter_ns()
            created += write(batch)
            samples.append(time.perf_counter_ns() - start)
    assert created == len(items), f"{created} of {len(items)} created"
    return _throughput(len(items), elapsed(), time.process_time() - cpu, samples)


def _creates(dsn: str, rng: random.Random, single: int, batched: int, batch_size: int) -> dict[str, Any]:
    warm, first = _new_checkpoints(rng, 50, 0), _new_checkpoints(rng, single, 50)
    data_bytes = sum(len(json.dumps(c.data)) for c in first) / len(first)
    out: dict[str, Any] = {"batch_size": batch_size, "data_bytes_avg": round(data_bytes)}
    many = _new_checkpoints(rng, batched, 10**5)
    batches = [many[i:i + batch_size] for i in range(0, len(many), batch_size)]
    per_batch = -(-single // len(batches))  # single creates between two batches
    with pymemdb.connect(dsn, min_size=1, max_size=1) as db:
        for c in warm:  # connection, plans and caches warm
            db.checkpoints.create(c.session_id, c.user_id, c.type, c.title, c.data, now=c.now)
        db.checkpoints.create_many(warm)
        # interleaved: a run of single creates, then one batch, so both see the same table and the same machine
        samples: list[int] = []
        batch_ns: list[int] = []
        cpu_single = cpu_many = 0.0
        created = 0
        for k, batch in enumerate(batches):
            cpu = time.process_time()
            for c in first[k * per_batch:(k + 1) * per_batch]:
                start = time.perf_counter_ns()
                db.checkpoints.create(c.session_id, c.user_id, c.type, c.title, c.data, now=c.now)
                samples.append(time.perf_counter_ns() - start)
            cpu_single += time.process_time() - cpu
            cpu = time.process_time()
            start = time.perf_counter_ns()
            created += len(db.checkpoints.create_many(batch))
            batch_ns.append(time.perf_counter_ns() - start)
            cpu_many += time.process_time() - cpu
        assert created == len(many) and len(samples) == single, (created, len(samples))
        out["single"] = _throughput(single, sum(samples) / 1e9, cpu_single)
        out["single"]["call"] = latency_summary(samples)
        out["create_many"] = _throughput(len(many), sum(batch_ns) / 1e9, cpu_many, batch_ns)
        out["interleaved"] = {"single_per_batch": per_batch, "batches": len(batches)}
    out["ratio"] = ratio(out["create_many"]["per_s"], out["single"]["per_s"])
    out["goal_ratio"] = GOAL_CREATE_RATIO
    out["goal_met"] = (out["ratio"] or 0) >= GOAL_CREATE_RATIO

    with connect(dsn) as conn:
        out["breakdown"] = _single_breakdown(conn, _new_checkpoints(rng, 500, 2 * 10**5))

        def executemany(batch: list[NewCheckpoint]) -> int:
            # what create_many returns (the rows as Checkpoint), through psycopg's own pipelined executemany
            created: list[Checkpoint] = []
            with conn.transaction(), conn.cursor(row_factory=class_row(Checkpoint)) as cur:
                cur.executemany(CREATE_ALL, [_args(c) for c in batch], returning=True)
                while True:
                    created.extend(cur.fetchall())
                    if not cur.nextset():
                        return len(created)

        def one_statement(batch: list[NewCheckpoint]) -> int:
            with conn.transaction():
                return len(conn.execute(CREATE_UNNEST, _columns(batch), prepare=True).fetchall())

        def plain_insert(batch: list[NewCheckpoint]) -> int:
            with conn.transaction():
                return len(conn.execute(INSERT_UNNEST, _columns(batch), prepare=True).fetchall())

        out["alternatives"] = {
            name: _batched(_new_checkpoints(rng, batched, base), batch_size, write)
            for name, base, write in (("executemany", 3 * 10**5, executemany),
                                      ("one_statement", 4 * 10**5, one_statement),
                                      ("plain_insert", 5 * 10**5, plain_insert))
        }
        for alt in out["alternatives"].values():
            alt["ratio_to_single"] = ratio(alt["per_s"], out["single"]["per_s"])
        out["server_functions"] = _function_times(conn, _new_checkpoints(rng, batch_size, 6 * 10**5))
        out["breakdown"]["compose_us"] = _compose_cost(conn, _new_checkpoints(rng, batch_size, 7 * 10**5))
    return out


def _function_times(conn: psycopg.Connection[Any], batch: list[NewCheckpoint]) -> dict[str, Any] | None:
    """Server time of checkpoint_create per call, by function (self time), over one batch (rolled back).

    track_functions counts this transaction's calls in pg_stat_xact_user_functions;
    setting it needs superuser (None otherwise). SQL functions (memori._setting)
    are inlined or counted in their caller.
    """
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("set local track_functions = 'all'")
            with stopwatch() as elapsed:
                conn.execute(CREATE_UNNEST, _columns(batch)).fetchall()
            rows = conn.execute(
                "select funcname, calls, self_time, total_time from pg_stat_xact_user_functions"
                " where schemaname = 'memori' order by self_time desc").fetchall()
    except psycopg.errors.InsufficientPrivilege:
        return None
    n = len(batch)
    return {
        "statement_us_per_checkpoint": round(elapsed() / n * 1e6, 1),
        "functions": {name: {"calls": round(calls / n, 2), "self_us": round(self_ms * 1000 / n, 1),
                             "total_us": round(total_ms * 1000 / n, 1)}
                      for name, calls, self_ms, total_ms in rows},
    }


def _compose_cost(conn: psycopg.Connection[Any], items: list[NewCheckpoint]) -> float:
    """Client CPU (µs) to build one call's query as create()/create_many() do: SqlFunction.query, then bytes."""
    cpu = time.process_time()
    for c in items:
        CHECKPOINT_CREATE.query(_args(c)).as_bytes(conn)
    return round((time.process_time() - cpu) / len(items) * 1e6, 1)


def _single_breakdown(conn: psycopg.Connection[Any], items: list[NewCheckpoint]) -> dict[str, Any]:
    """Where one create() goes: the client's statement between its own BEGIN and COMMIT, each timed.

    Also the round trip of a trivial prepared statement: BEGIN costs about one,
    the statement one plus the function's server time, COMMIT one plus the WAL flush.
    """
    parts: dict[str, list[int]] = {"rtt": [], "begin": [], "statement": [], "commit": []}
    with conn.cursor() as cur:
        for c in items:
            marks = [time.perf_counter_ns()]
            cur.execute("select 1", prepare=True)
            cur.fetchall()
            marks.append(time.perf_counter_ns())
            cur.execute("begin")
            marks.append(time.perf_counter_ns())
            cur.execute(CREATE_ALL, _args(c), prepare=True)
            cur.fetchall()
            marks.append(time.perf_counter_ns())
            cur.execute("commit")
            marks.append(time.perf_counter_ns())
            for key, a, b in zip(parts, marks, marks[1:], strict=False):
                parts[key].append(b - a)
    return {f"{key}_us": latency_summary(xs[len(xs) // 10:]) for key, xs in parts.items()}  # first tenth: warm-up


# -- 2. generated data and the latest-checkpoint read ------------------------------------------------------
def _generate(conn: psycopg.Connection[Any], rows: int, seed: int) -> dict[str, Any]:
    policies = {r[0]: (r[1], r[2]) for r in conn.execute(
        "select kind, priority, extract(day from retention)::integer from memori.retention_policies"
        " where table_name = 'checkpoints'").fetchall()}
    missing = [t for t in TYPES if t not in policies]
    if missing:
        raise PymemdbError(f"no retention policy for checkpoint type(s) {', '.join(missing)}",
                           hint="Re-run `pymemdb init` to restore seed 01's checkpoint policies.")
    sessions, users = max(100, rows // 20), max(10, rows // 200)
    with stopwatch() as elapsed:
        conn.execute(GENERATE, {
            "now": NOW, "rows": rows, "sessions": sessions, "users": users, "seed": seed, "types": list(TYPES),
            "priorities": [policies[t][0] for t in TYPES], "days": [policies[t][1] for t in TYPES],
        })
        insert_s = elapsed()
        # VACUUM sets hint bits and the visibility map (index-only scans need it), ANALYZE the statistics
        conn.execute("vacuum (analyze) memori.checkpoints")
    by_type = dict(conn.execute(
        "select checkpoint_type, count(*) from memori.checkpoints where session_id like 'bench\\_s%'"
        " group by 1 order by 1").fetchall())
    return {
        "rows": sum(by_type.values()), "by_type": by_type, "sessions": sessions, "users": users,
        "insert_s": round(insert_s, 1), "insert_vacuum_analyze_s": round(elapsed(), 1),
        "data_bytes_avg": round(one(conn, "select avg(octet_length(data::text)) from memori.checkpoints"
                                           " tablesample system (1)") or 0),
        "table_mb": round(one(conn, "select pg_table_size('memori.checkpoints')") / 2**20),
        "indexes_mb": round(one(conn, "select pg_indexes_size('memori.checkpoints')") / 2**20),
    }


def _targets(conn: psycopg.Connection[Any], sessions: int, seed: int,
             k: int) -> list[tuple[str, tuple[str, str]]]:
    """k random sessions, each with the key (user, id) of its newest checkpoint (expired or not: the PK
    baseline reads it)."""
    chosen = [f"bench_s{s:06d}" for s in random.Random(seed).sample(range(sessions), min(k, sessions))]
    rows = conn.execute(
        "select t.s, c.user_id, c.id::text from unnest(%s::text[]) t(s)"
        "  left join lateral (select c.user_id, c.id from memori.checkpoints c where c.session_id = t.s"
        "                      order by c.created_at desc, c.id desc limit 1) c on true", (chosen,)).fetchall()
    return [(s, (u, i)) for s, u, i in rows if i is not None]


def _buffers(conn: psycopg.Connection[Any], query: LiteralString, params: list[tuple[Any, ...]]) -> dict[str, float]:
    """Buffers (shared hit + read) per call, by relation of schema memori, over ``params`` (rolled back).

    pg_stat_get_xact_blocks_fetched counts this transaction's buffer requests
    per table or index, so heap and index pages are told apart. Each statement
    is planned first outside the count (the planner reads index metapages once).
    """
    with conn.transaction(force_rollback=True):
        conn.execute(query, params[0], prepare=True).fetchall()
        before = dict(conn.execute(
            "select relname, pg_stat_get_xact_blocks_fetched(oid) from pg_class"
            " where relnamespace = 'memori'::regnamespace").fetchall())
        for p in params:
            conn.execute(query, p, prepare=True).fetchall()
        after = conn.execute(
            "select relname, pg_stat_get_xact_blocks_fetched(oid) from pg_class"
            " where relnamespace = 'memori'::regnamespace").fetchall()
    return {name: round((n - before.get(name, 0)) / len(params), 2)
            for name, n in sorted(after) if n - before.get(name, 0) > 0}


def _reads(conn: psycopg.Connection[Any], data: dict[str, Any], iterations: int, seed: int) -> dict[str, Any]:
    targets = _targets(conn, data["sessions"], seed, 1000)
    sessions = [t[0] for t in targets]
    # the latest checkpoint is expired for some sessions: checkpoint_query then reads all of the session's rows
    found = one(conn, "select count(*) from unnest(%s::text[]) t(s) where exists (select from memori.checkpoints c"
                       " where c.session_id = t.s and (c.expires_at is null or c.expires_at > %s))",
                 (sessions, NOW))
    latest = Probe("checkpoint_query", LATEST, lambda r: (r.choice(targets)[0], NOW))
    pk = Probe("pk_lookup", PK_LOOKUP, lambda r: r.choice(targets)[1])
    direct = Probe("direct_sql", DIRECT, lambda r: (r.choice(targets)[0], NOW))
    out: dict[str, Any] = {"iterations": iterations, "sessions": len(targets),
                           "sessions_with_live_checkpoint": found}
    for on in (True, False):
        with _query_events(conn, on):
            probes = (latest, pk) if on else (latest, direct, pk)
            r: dict[str, Any] = interleaved(conn, probes, iterations, seed)
            r["ratio_p50"] = ratio(r[latest.name]["p50_us"], r[pk.name]["p50_us"])
            r["ratio_p99"] = ratio(r[latest.name]["p99_us"], r[pk.name]["p99_us"])
            some = [(s, NOW) for s in sessions[:200]]
            r["buffers_per_call"] = {
                latest.name: _buffers(conn, LATEST, some),
                pk.name: _buffers(conn, PK_LOOKUP, [t[1] for t in targets[:200]]),
            }
            if not on:
                r["buffers_per_call"][direct.name] = _buffers(conn, DIRECT, some)
            r["explain"] = explain_nested(conn, LATEST, (sessions[0], NOW))
            out["events_on" if on else "events_off"] = r
    off = out["events_off"]
    out["uses_session_index"] = "idx_checkpoints_session_time" in off["explain"]
    out["index_only_scan"] = "Index Only Scan" in off["explain"]
    # the same index can serve an index-only scan, but only for its own columns and without the expiry filter
    out["explain_index_only_variant"] = _explain(conn, INDEX_ONLY, (sessions[0],))
    return out


# -- run --------------------------------------------------------------------------------------------
def _remove(conn: psycopg.Connection[Any], fresh: bool) -> None:
    """Remove the bench's checkpoints and the events they caused (their payload names a bench session)."""
    if fresh:
        conn.execute("truncate memori.checkpoints, memori.checkpoint_versions")
    else:
        conn.execute("delete from memori.checkpoints where session_id like 'bench\\_%'")
    conn.execute("delete from memori.events where event_type like 'checkpoint.%'"
                 " and payload->>'session_id' like 'bench\\_%'")


def run(
    dsn: str,
    rows: int = 1_000_000,
    *,
    seed: int = 1,
    progress: Progress | None = None,
    allow_existing: bool = False,
    single: int = 2000,
    batched: int = 20_000,
    batch_size: int = 500,
    iterations: int = 3000,
) -> dict[str, Any]:
    """Run the checkpoint benchmark against ``dsn`` (schema memori installed) and return its figures."""
    say = progress or (lambda _msg: None)
    require_rows(rows, 1000, "Use --rows 100000 for a quick run.")
    rng = random.Random(seed)
    with connect(dsn) as conn:
        existing = require_empty(
            conn, "checkpoints", allow_existing=allow_existing,
            hint="Run it against a scratch database (pymemdb bench checkpoints does), "
            "or pass allow_existing=True (bench rows are those of sessions bench_*).",
        )
        fresh = existing == 0
        settings = {s: one(conn, sql.SQL("show {}").format(sql.Identifier(s)))
                    for s in ("fsync", "synchronous_commit", "shared_buffers", "plan_cache_mode")}
        result: dict[str, Any] = {
            "suite": "checkpoints", "rows": rows, "seed": seed, "now": NOW.isoformat(),
            "server_version": one(conn, "show server_version"), "settings": settings,
            "goals": {"create_ratio": GOAL_CREATE_RATIO},
        }
        try:
            say(f"generating {rows:,} checkpoints ...")
            result["data"] = _generate(conn, rows, seed)
            say(f"creating {single:,} checkpoints one by one and {batched:,} with create_many, interleaved, "
                f"over the {rows:,} rows; then the alternatives ...")
            result["create"] = _creates(dsn, rng, single, batched, batch_size)
            conn.execute("delete from memori.checkpoints where session_id like 'bench\\_c%'")
            conn.execute("vacuum (analyze) memori.checkpoints")
            say(f"timing {iterations:,} checkpoint_query and PK lookups, events on then off ...")
            result["reads"] = _reads(conn, result["data"], iterations, seed)
        finally:
            say("removing bench data ...")
            _remove(conn, fresh)
    return result


# -- render ------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> list[Table]:
    """The result as rich tables: creates, their breakdown, data, reads, plans."""
    cr = result["create"]
    ct = Table(title=f"Create throughput over {result['data']['rows']:,} rows (batches of {cr['batch_size']}, "
                     f"~{cr['data_bytes_avg']} B of JSON data; create() and create_many() interleaved)")
    for col in ("way", "checkpoints", "per s", "µs each", "client CPU µs each", "vs create()"):
        ct.add_column(col, justify="left" if col == "way" else "right")
    ways = [("create(): 1 per transaction", cr["single"], 1.0),
            ("create_many(): pipeline", cr["create_many"], cr["ratio"]),
            *((f"{name} (no client)", alt, alt["ratio_to_single"]) for name, alt in cr["alternatives"].items())]
    for name, w, r in ways:
        ct.add_row(name, fmt(w["checkpoints"]), fmt(w["per_s"]), fmt(w["us_per_checkpoint"]),
                   fmt(w["client_cpu_us_per_checkpoint"]), fmt(r, "x"),
                   style=None if w is not cr["create_many"] else "bold" if cr["goal_met"] else "bold red")
    ct.caption = (f"goal create_many ≥ {cr['goal_ratio']}x create(): {'met' if cr['goal_met'] else 'MISSED'}; "
                  "one_statement = unnest + LATERAL checkpoint_create; plain_insert = no function, no event")

    bd = cr["breakdown"]
    bt = Table(title="One create() call, taken apart (raw connection, same statement)")
    for col in ("part", "p50 µs", "p99 µs"):
        bt.add_column(col, justify="left" if col == "part" else "right")
    for key in ("rtt_us", "begin_us", "statement_us", "commit_us"):
        bt.add_row(key.removesuffix("_us"), fmt(bd[key]["p50_us"]), fmt(bd[key]["p99_us"]))
    bt.add_row("create() through the client", fmt(cr["single"]["call"]["p50_us"]), fmt(cr["single"]["call"]["p99_us"]))
    bt.caption = (f"rtt = prepared select 1; commit includes the WAL flush; building the query: "
                  f"{fmt(bd['compose_us'])} µs client CPU per call")

    tables = [ct, bt]
    sf = cr["server_functions"]
    if sf:
        ft = Table(title=f"Server time of one checkpoint_create ({fmt(sf['statement_us_per_checkpoint'])} µs "
                         "per checkpoint in one statement), by function")
        for col in ("function", "calls", "self µs", "total µs"):
            ft.add_column(col, justify="left" if col == "function" else "right")
        for name, f in sf["functions"].items():
            ft.add_row(name, fmt(f["calls"]), fmt(f["self_us"]), fmt(f["total_us"]))
        ft.caption = "track_functions = all; per checkpoint created"
        tables.append(ft)

    data = result["data"]
    info = Table(title=f"bench checkpoints: {data['rows']:,} rows, now = {result['now']}")
    for col in ("sessions", "users", "types", "data B", "table", "indexes", "generate + vacuum"):
        info.add_column(col, justify="right")
    info.add_row(fmt(data["sessions"]), fmt(data["users"]), ", ".join(f"{k} {v:,}" for k, v in data["by_type"].items()),
                 fmt(data["data_bytes_avg"]), f"{data['table_mb']:,} MB", f"{data['indexes_mb']:,} MB",
                 f"{data['insert_vacuum_analyze_s']} s")

    reads = result["reads"]
    rt = Table(title=f"Latest checkpoint of a session ({reads['iterations']:,} each, prepared, interleaved)")
    for col in ("events", "query", "p50 µs", "p99 µs", "mean µs", "vs PK p50", "buffers/call"):
        rt.add_column(col, justify="left" if col in ("events", "query", "buffers/call") else "right")
    for mode in ("events_on", "events_off"):
        r = reads[mode]
        for name in ("checkpoint_query", "direct_sql", "pk_lookup"):
            if name not in r:
                continue
            s = r[name]
            bufs = ", ".join(f"{k} {v:g}" for k, v in r["buffers_per_call"][name].items())
            rt.add_row(mode.removeprefix("events_"), name, fmt(s["p50_us"]), fmt(s["p99_us"]), fmt(s["mean_us"]),
                       fmt(ratio(s["p50_us"], r["pk_lookup"]["p50_us"]), "x"), bufs)
    rt.caption = (f"{reads['sessions_with_live_checkpoint']} of {reads['sessions']} sessions have a live checkpoint; "
                  f"idx_checkpoints_session_time used: {reads['uses_session_index']}, "
                  f"index-only: {reads['index_only_scan']}")

    plans = plans_table(
        ("checkpoint_query, events on (nested statements)", reads["events_on"]["explain"]),
        ("checkpoint_query, events off (nested statements)", reads["events_off"]["explain"]),
        ("index-only variant (index columns, no expiry filter)", reads["explain_index_only_variant"]),
    )
    return [*tables, info, rt, plans]
