"""``pymemdb bench langgraph``: MemoriSaver against LangGraph's own Postgres saver, same database, same run.

Needs the ``bench`` extra (``langgraph-checkpoint-postgres``). ``rows`` is the
number of checkpoints each saver stores: ``rows // STEPS`` threads of
``STEPS`` super-steps of a chat graph (a growing message list, a counter, a
small dict updated every fifth step, one pending write per step).

1. Writes, interleaved: for every step of every thread, the upstream saver's
   ``put`` and ours (alternating which goes first), each timed; then the
   step's ``put_writes``. A third saver, ``MemoriSaver(durable=False)``
   (``synchronous_commit = off``), shows what the commit's flush costs; its
   rows are deleted before the storage comparison. A fourth writer, one
   single-row INSERT per step (``_OneRowInsert``), measures the ceiling: no
   saver puts faster at the same durability. Single-put throughput is 1 / mean
   put latency on one connection (LangGraph saves a run's checkpoints one
   after another).
2. The headline read: ``get_tuple`` of the latest checkpoint (what every
   ``invoke`` does first) from a second process, as a web server's other
   worker: a fresh upstream saver and a fresh ``MemoriSaver`` that wrote
   nothing, each reading every thread once (a random order, interleaved), so
   no read can come from the saver's copy. Beside it, reads of random
   threads, latest and by id, from the savers that wrote them (ours answers
   from its copy after a stamp check). A third reader in that loop,
   ``_RoundTrip``, sends one prepared ``select $1`` on libpq as the saver's
   stamp check does: a read that must ask the server whether its copy is
   current can be no faster, so ``upstream ÷ round trip`` bounds the copy's
   ratio. Last, the second process does as its sync savers did with the
   async ones (``async_reads``), then reads every thread again (ours from its
   copy), for information.
3. Storage of the same history: each saver's tables after VACUUM FULL.
4. A retention cycle: ``memori.cleanup_execute`` a day after the default
   policy's retention of superseded checkpoints (30 days), then the sizes
   again. The upstream tables have no retention: they stay as they are.
5. ``get_delta_channel_history`` (LangGraph's beta DeltaChannel: a channel
   stored as a snapshot every ``DELTA_DEPTH`` updates, rebuilt from the writes
   between): ``DELTA_THREADS`` threads per saver whose snapshot is
   ``DELTA_DEPTH`` checkpoints up the chain; ours in one call
   (``memori.lg_delta_history``, a saver that holds no copy), LangGraph's
   default walk on our saver (one ``get_tuple`` per ancestor: what a saver
   without the override does), and the upstream saver's override (two
   statements), interleaved; after the others, so that its threads stay out of
   their figures.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from datetime import UTC, datetime
from typing import Any, LiteralString, cast
from uuid import uuid4

import psycopg
from rich.table import Table

from pymemdb.bench import (
    Progress,
    connect,
    explain_nested,
    fmt,
    latency_summary,
    one,
    plans_table,
    ratio,
    require_baseline,
    require_rows,
    settle,
    table_sizes,
)

STEPS = 20
USER = "bench_langgraph"
GOAL_GET_TUPLE = 2.0  # upstream latency / ours, p50 and p95, reads from the saver's copy
GOAL_GET_TUPLE_COLD = 1.2  # upstream latency / ours, p50 and p95, a second process's saver that wrote nothing
COLD_WARMUP = 50  # threads the second process reads first (plans prepared), not timed
GOAL_PUT = 1.0  # our puts/s over upstream's (issue 21: same durability, retention kept)
GOAL_STORAGE = 0.8  # our bytes / upstream's, same history
UPSTREAM_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
OUR_TABLES = ("lg_threads", "lg_checkpoints", "lg_blobs", "lg_writes")
NOT_DURABLE = "pymemdb_not_durable"  # MemoriSaver(durable=False): synchronous_commit off, for information
FLOOR = "one_row_insert"  # the fastest durable put there can be (_OneRowInsert), for information
ROUND_TRIP = "round_trip"  # the fastest read that asks the server (_RoundTrip), for information
DELTA_THREADS = 20  # threads per saver in the DeltaChannel history phase
DELTA_DEPTH = 100  # checkpoints between the snapshot and the read (LangGraph's default snapshot frequency)
DELTA_USER = USER + "_delta"


def _require_upstream() -> Any:
    return require_baseline("langgraph.checkpoint.postgres", "PostgresSaver",
                            "pymemdb bench langgraph needs LangGraph's Postgres saver as its baseline")


def _summary(ns: list[int]) -> dict[str, float]:
    xs = sorted(ns)
    out = latency_summary(xs)
    out["p95_us"] = round(xs[min(len(xs) - 1, int(len(xs) * 0.95))] / 1000, 1)
    return out


def _checkpoint(saver: Any, thread_state: dict[str, Any], step: int, rng: random.Random) -> tuple[Any, Any, Any]:
    """The next checkpoint of a thread, its metadata and new versions, versioned by ``saver``."""
    from langgraph.checkpoint.base.id import uuid6

    values = thread_state["values"]
    versions = thread_state["versions"]
    values["messages"] = [*values["messages"], {"role": "user" if step % 2 else "assistant",
                                                "content": "".join(rng.choices("abcdefgh ", k=200))}]
    values["turns"] = step
    changed = ["messages", "turns"]
    if step % 5 == 0:
        values["scratch"] = {"summary": f"after step {step}", "tools": ["search", "calc"], "score": rng.random()}
        changed.append("scratch")
    new_versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in changed}
    versions.update(new_versions)
    checkpoint = {
        "v": 4, "id": str(uuid6(clock_seq=step)), "ts": datetime.now(UTC).isoformat(),
        "channel_values": dict(values), "channel_versions": dict(versions),
        "versions_seen": {"agent": {"messages": versions["messages"], "turns": versions["turns"]},
                          "__input__": {}},
        "updated_channels": changed,
    }
    metadata = {"source": "loop", "step": step, "parents": {}, "run_id": thread_state["run_id"]}
    return checkpoint, metadata, new_versions


class _OneRowInsert:
    """The floor of a durable put: one single-row INSERT of the checkpoint's JSON, autocommit, prepared.

    Timed like the savers' puts, in the same loop: no saver can put faster
    than this at the same durability (one round trip, one WAL flush), so
    ``floor puts/s ÷ upstream puts/s`` bounds the put ratio any saver can reach.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        conn.execute("create table if not exists public.pymemdb_bench_floor (id bigint generated always as identity"
                     " primary key, thread text not null, body text not null)")

    def get_next_version(self, current: Any, channel: None) -> int:
        return (current or 0) + 1

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        conf = config["configurable"]
        self.conn.execute("insert into public.pymemdb_bench_floor (thread, body) values (%s, %s)",
                          (conf["thread_id"], json.dumps(checkpoint)), prepare=True)
        return {"configurable": {**conf, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: Any, writes: Any, task_id: str) -> None:
        pass

    def drop(self) -> None:
        self.conn.execute("drop table if exists public.pymemdb_bench_floor")


class _RoundTrip:
    """The floor of a read from a copy that is checked: one prepared ``select $1`` on libpq, nothing else.

    The saver's read from its copy is one such round trip (the prepared stamp
    check, ``_libpq.Prepared``) plus the work on each side. Timed in the same
    loop as the savers' reads, ``upstream ÷ this`` is the largest ratio a read
    that checks its copy with the server can reach; only a read that trusts
    its copy without asking (stale after another process's put) could go
    further.
    """

    def __init__(self, dsn: str) -> None:
        from pymemdb.integrations._libpq import Prepared

        self.conn = psycopg.Connection.connect(dsn, autocommit=True)
        self.statement = Prepared("pymemdb_bench_round_trip", "select $1::text")

    def get_tuple(self, config: Any) -> Any:
        return self.statement.rows(self.conn, [config["configurable"]["thread_id"]])

    def close(self) -> None:
        self.conn.close()


def _write(savers: dict[str, Any], threads: int, rng: random.Random, progress: Progress | None) -> dict[str, Any]:
    lat: dict[str, list[int]] = {name: [] for name in savers}
    wlat: dict[str, list[int]] = {name: [] for name in savers}
    state: dict[str, list[dict[str, Any]]] = {
        name: [{"values": {"messages": []}, "versions": {}, "config": None, "run_id": str(uuid4())}
                    for _ in range(threads)] for name in savers}
    for step in range(1, STEPS + 1):
        for t in range(threads):
            names = list(savers)
            for name in names if (step + t) % 2 else reversed(names):
                saver, st = savers[name], state[name][t]
                checkpoint, metadata, new_versions = _checkpoint(saver, st, step, rng)
                config = st["config"] or {"configurable": {"thread_id": f"bench-{t}", "checkpoint_ns": ""}}
                start = time.perf_counter_ns()
                st["config"] = saver.put(config, checkpoint, metadata, new_versions)
                lat[name].append(time.perf_counter_ns() - start)
                start = time.perf_counter_ns()
                saver.put_writes(st["config"], [("messages", [checkpoint["channel_values"]["messages"][-1]])],
                                 str(uuid4()))
                wlat[name].append(time.perf_counter_ns() - start)
        if progress and step % 5 == 0:
            progress(f"step {step}/{STEPS} of {threads:,} threads written by both savers")
    out: dict[str, Any] = {name: {"put": _summary(lat[name]), "put_writes": _summary(wlat[name])} for name in savers}
    for name in savers:
        out[name]["puts_per_s"] = round(1e9 / (sum(lat[name]) / len(lat[name])), 1)
    out["put_ratio"] = ratio(out["pymemdb"]["puts_per_s"], out["upstream"]["puts_per_s"])
    out["goal_met"] = (out["put_ratio"] or 0) >= GOAL_PUT
    out["put_ratio_not_durable"] = ratio(out[NOT_DURABLE]["puts_per_s"], out["upstream"]["puts_per_s"])
    out["put_ratio_ceiling"] = ratio(out[FLOOR]["puts_per_s"], out["upstream"]["puts_per_s"])
    out["ids"] = {name: [[st["config"]["configurable"]["checkpoint_id"]] for st in state[name]] for name in savers}
    return out


def _reads(upstream: Any, ours: Any, threads: int, ids: dict[str, Any], rng: random.Random,
           iterations: int, kinds: tuple[str, ...] = ("latest", "by_id"),
           round_trip: _RoundTrip | None = None) -> dict[str, Any]:
    savers = {"upstream": upstream, "pymemdb": ours}
    if round_trip is not None:
        savers[ROUND_TRIP] = round_trip
    out: dict[str, Any] = {}
    for kind in kinds:
        lat: dict[str, list[int]] = {name: [] for name in savers}
        for i in range(iterations + 50):
            t = rng.randrange(threads)
            order = list(savers)
            rng.shuffle(order)  # which reads first changes every iteration
            for name in order:
                conf: dict[str, Any] = {"thread_id": f"bench-{t}", "checkpoint_ns": ""}
                if kind == "by_id" and name != ROUND_TRIP:
                    conf["checkpoint_id"] = ids[name][t][0]
                start = time.perf_counter_ns()
                found = savers[name].get_tuple({"configurable": conf})
                elapsed = time.perf_counter_ns() - start
                if name != ROUND_TRIP:
                    assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == STEPS
                if i >= 50:  # warm-up: plans prepared, pages cached
                    lat[name].append(elapsed)
        s: dict[str, Any] = {name: _summary(lat[name]) for name in savers}
        s["ratio_p50"] = ratio(s["upstream"]["p50_us"], s["pymemdb"]["p50_us"])
        s["ratio_p95"] = ratio(s["upstream"]["p95_us"], s["pymemdb"]["p95_us"])
        if round_trip is not None:  # the ceiling of a read that checks its copy (_RoundTrip)
            s["ratio_ceiling_p50"] = ratio(s["upstream"]["p50_us"], s[ROUND_TRIP]["p50_us"])
            s["ratio_ceiling_p95"] = ratio(s["upstream"]["p95_us"], s[ROUND_TRIP]["p95_us"])
        s["goal_met"] = min(s["ratio_p50"] or 0, s["ratio_p95"] or 0) >= GOAL_GET_TUPLE
        out[kind] = s
    return out


def cold_reads(dsn: str, threads: int, seed: int) -> dict[str, Any]:
    """Run in a second process: fresh savers that wrote nothing read every thread's latest checkpoint once.

    The first ``COLD_WARMUP`` threads prepare the plans and are not timed.
    Order alternates which saver reads first; every read is the first read
    of that thread by that saver, so nothing comes from a saver's copy.
    """
    postgres_saver = _require_upstream()
    from psycopg.rows import dict_row

    from pymemdb.integrations.langgraph import MemoriSaver

    order = list(range(threads))
    random.Random(seed).shuffle(order)
    lat: dict[str, list[int]] = {"upstream": [], "pymemdb": []}
    with psycopg.Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as up_conn, \
            MemoriSaver(dsn, user_id=USER, max_size=2) as ours:
        savers = {"upstream": postgres_saver(up_conn), "pymemdb": ours}
        for i, t in enumerate(order):
            for name in (("upstream", "pymemdb") if i % 2 else ("pymemdb", "upstream")):
                start = time.perf_counter_ns()
                found = savers[name].get_tuple({"configurable": {"thread_id": f"bench-{t}", "checkpoint_ns": ""}})
                elapsed = time.perf_counter_ns() - start
                assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == STEPS
                if i >= COLD_WARMUP:
                    lat[name].append(elapsed)
    s: dict[str, Any] = {name: _summary(lat[name]) for name in lat}
    s["ratio_p50"] = ratio(s["upstream"]["p50_us"], s["pymemdb"]["p50_us"])
    s["ratio_p95"] = ratio(s["upstream"]["p95_us"], s["pymemdb"]["p95_us"])
    s["goal_met"] = min(s["ratio_p50"] or 0, s["ratio_p95"] or 0) >= GOAL_GET_TUPLE_COLD
    s["process"] = "second"
    return s


def async_reads(dsn: str, threads: int, seed: int) -> dict[str, Any]:
    """Run in a second process: LangGraph's async savers, upstream's and ours, that wrote nothing.

    Each reads every thread once (cold, interleaved as in ``cold_reads``),
    then every thread again in another order: ours from the copy its cold
    read kept, upstream's as before. For information (the issue's goals are
    the sync saver's): a LangGraph server runs graphs with ``ainvoke``.
    """
    import asyncio

    from psycopg.rows import dict_row

    _require_upstream()
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from pymemdb.integrations.langgraph import AsyncMemoriSaver

    async def run() -> dict[str, Any]:
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as up_conn, AsyncMemoriSaver.from_dsn(dsn, user_id=USER, max_size=2) as ours:
            savers = {"upstream": AsyncPostgresSaver(up_conn), "pymemdb": ours}
            out: dict[str, Any] = {}
            for kind, order_seed in (("cold", seed), ("copy", seed + 1)):
                order = list(range(threads))
                random.Random(order_seed).shuffle(order)
                lat: dict[str, list[int]] = {"upstream": [], "pymemdb": []}
                for i, t in enumerate(order):
                    for name in (("upstream", "pymemdb") if i % 2 else ("pymemdb", "upstream")):
                        start = time.perf_counter_ns()
                        found = await savers[name].aget_tuple(
                            {"configurable": {"thread_id": f"bench-{t}", "checkpoint_ns": ""}})
                        elapsed = time.perf_counter_ns() - start
                        assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == STEPS
                        if kind == "copy" or i >= COLD_WARMUP:
                            lat[name].append(elapsed)
                s: dict[str, Any] = {name: _summary(lat[name]) for name in lat}
                s["ratio_p50"] = ratio(s["upstream"]["p50_us"], s["pymemdb"]["p50_us"])
                s["ratio_p95"] = ratio(s["upstream"]["p95_us"], s["pymemdb"]["p95_us"])
                out[kind] = s
            return out

    return asyncio.run(run())


def _explain_cached_and_put(admin: psycopg.Connection[Any], ours: Any, rng: random.Random) -> tuple[str, str]:
    """Plans of a read from the saver's copy (the stamps only) and of the next put (rolled back)."""
    config: Any = {"configurable": {"thread_id": "bench-0", "checkpoint_ns": ""}}
    cached = explain_nested(admin, "select * from memori.lg_checkpoint_stamp('bench-0', '', null, %s)", (USER,))
    found = ours.get_tuple(config)
    assert found is not None
    state = {"values": dict(found.checkpoint["channel_values"]), "versions": dict(found.checkpoint["channel_versions"]),
             "run_id": found.metadata.get("run_id")}
    checkpoint, metadata, new_versions = _checkpoint(ours, state, STEPS + 1, rng)
    (function, args), _, _ = ours._put_call(found.config, checkpoint, metadata, new_versions)
    return cached, explain_nested(admin, cast(LiteralString, ours._statement(function, args).text), args)


def _delta_history(dsn: str, upstream: Any, rng: random.Random) -> dict[str, Any]:
    """DeltaChannel history: ours in one call, LangGraph's default walk on our saver, the upstream override."""
    from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    from pymemdb.integrations.langgraph import MemoriSaver

    channels = ["items"]
    with MemoriSaver(dsn, user_id=DELTA_USER, max_size=2, cache_bytes=0) as ours:
        for saver in (ours, upstream):
            for t in range(DELTA_THREADS):
                config: Any = {"configurable": {"thread_id": f"delta-{t}", "checkpoint_ns": ""}}
                version = None
                for step in range(DELTA_DEPTH + 1):
                    checkpoint = empty_checkpoint()
                    version = saver.get_next_version(version, None)
                    checkpoint["channel_versions"] = {"items": version}
                    if step == 0:  # the snapshot; the steps after store the channel's version only
                        checkpoint["channel_values"] = {"items": _DeltaSnapshot([f"x{i}" for i in range(50)])}
                    config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"items": version})
                    saver.put_writes(config, [("items", [f"m{step}"])], f"task-{step}")
        readers: dict[str, Any] = {
            "pymemdb": lambda c: ours.get_delta_channel_history(config=c, channels=channels),
            "default_walk": lambda c: BaseCheckpointSaver.get_delta_channel_history(ours, config=c, channels=channels),
            "upstream": lambda c: upstream.get_delta_channel_history(config=c, channels=channels),
        }
        lat: dict[str, list[int]] = {name: [] for name in readers}
        for i in range(DELTA_THREADS * 6):
            config = {"configurable": {"thread_id": f"delta-{i % DELTA_THREADS}", "checkpoint_ns": ""}}
            order = list(readers)
            rng.shuffle(order)
            for name in order:
                start = time.perf_counter_ns()
                history = readers[name](config)
                elapsed = time.perf_counter_ns() - start
                assert len(history["items"]["writes"]) == DELTA_DEPTH and "seed" in history["items"]
                if i >= DELTA_THREADS:  # the first round prepares plans
                    lat[name].append(elapsed)
    out: dict[str, Any] = {"threads": DELTA_THREADS, "depth": DELTA_DEPTH}
    out.update({name: _summary(v) for name, v in lat.items()})
    out["ratio_p50"] = ratio(out["upstream"]["p50_us"], out["pymemdb"]["p50_us"])
    out["ratio_default_p50"] = ratio(out["default_walk"]["p50_us"], out["pymemdb"]["p50_us"])
    return out


def run(dsn: str, rows: int = 20_000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    require_rows(rows, STEPS, f"Pass --rows {STEPS * 1000} (threads of {STEPS} checkpoints each).")
    postgres_saver = _require_upstream()
    from psycopg.rows import dict_row

    from pymemdb.integrations.langgraph import MemoriSaver

    rng = random.Random(seed)
    threads = rows // STEPS
    result: dict[str, Any] = {"rows": threads * STEPS, "threads": threads, "steps": STEPS, "seed": seed}
    with connect(dsn) as admin, psycopg.Connection.connect(
        dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row  # as PostgresSaver.from_conn_string
    ) as up_conn, MemoriSaver(dsn, user_id=USER, max_size=2) as ours, MemoriSaver(
        dsn, user_id=USER + "_not_durable", max_size=2, durable=False
    ) as not_durable:
        upstream = postgres_saver(up_conn)
        upstream.setup()
        result["server"] = {k: one(admin, f"show {k}") for k in ("server_version", "synchronous_commit", "fsync")}
        if progress:
            progress(f"writing {threads:,} threads x {STEPS} steps with both savers, interleaved")
        floor = _OneRowInsert(admin)
        writes = _write({"upstream": upstream, "pymemdb": ours, NOT_DURABLE: not_durable, FLOOR: floor},
                        threads, rng, progress)
        floor.drop()
        ids = writes.pop("ids")
        # the not-durable saver only shows what synchronous_commit costs: its rows leave the comparison
        admin.execute("delete from memori.lg_threads where user_id = %s", (USER + "_not_durable",))
        result["writes"] = writes
        settle(admin, ("public", UPSTREAM_TABLES), ("memori", OUR_TABLES))
        if progress:
            progress("get_tuple, interleaved")
        iterations = min(2000, threads * 4)
        round_trip = _RoundTrip(dsn)
        try:
            result["reads"] = _reads(upstream, ours, threads, ids, rng, iterations=iterations, round_trip=round_trip)
        finally:
            round_trip.close()
        if progress:
            progress("get_tuple from a second process (savers that wrote nothing)")
        if threads > COLD_WARMUP:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                result["reads"]["cold"] = pool.apply(cold_reads, (dsn, threads, seed))
                if progress:
                    progress("aget_tuple from a second process (async savers that wrote nothing, then their copies)")
                result["reads"]["async"] = pool.apply(async_reads, (dsn, threads, seed))
        else:  # too few threads for a second process's warm-up: a saver without a copy, here
            with MemoriSaver(dsn, user_id=USER, max_size=2, cache_bytes=0) as cold:
                result["reads"]["cold"] = _reads(upstream, cold, threads, ids, rng, iterations=threads,
                                                 kinds=("latest",))["latest"]
                result["reads"]["cold"]["process"] = "same, cache off"
                result["reads"]["cold"]["goal_met"] = min(result["reads"]["cold"]["ratio_p50"] or 0,
                                                          result["reads"]["cold"]["ratio_p95"] or 0) \
                    >= GOAL_GET_TUPLE_COLD
        result["explain_get"] = explain_nested(
            admin, "select * from memori.lg_checkpoint_get('bench-0', '', null, %s)", (USER,))
        result["explain_get_cached"], result["explain_put"] = _explain_cached_and_put(admin, ours, rng)

        up_sizes = table_sizes(admin, "public", UPSTREAM_TABLES, compact=True)
        our_sizes = table_sizes(admin, "memori", OUR_TABLES, compact=True)
        storage: dict[str, Any] = {"upstream": up_sizes, "pymemdb": our_sizes,
                                   "upstream_bytes": sum(up_sizes.values()), "pymemdb_bytes": sum(our_sizes.values())}
        storage["ratio"] = ratio(storage["pymemdb_bytes"], storage["upstream_bytes"])
        storage["goal_met"] = (storage["ratio"] or 9) <= GOAL_STORAGE
        result["storage"] = storage

        if progress:
            progress("retention cycle: memori.cleanup_execute 31 days on")
        counts: LiteralString = ("select (select count(*) from memori.lg_checkpoints),"
                                 " (select count(*) from memori.lg_blobs)")
        before = admin.execute(counts).fetchone()
        started = time.perf_counter()
        summary = admin.execute(
            "select deleted, deleted_by_table from memori.cleanup_execute(now() + interval '31 days', 5000)"
        ).fetchone()
        seconds = time.perf_counter() - started
        after = admin.execute(counts).fetchone()
        kept = table_sizes(admin, "memori", OUR_TABLES, compact=True)
        assert summary is not None and before is not None and after is not None
        # every thread still reads whole after the cycle
        for t in rng.sample(range(threads), min(50, threads)):
            found = ours.get_tuple({"configurable": {"thread_id": f"bench-{t}"}})
            assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == STEPS
        result["retention"] = {
            "deleted": summary[0], "deleted_by_table": summary[1], "seconds": round(seconds, 2),
            "checkpoints_before": before[0], "checkpoints_after": after[0],
            "blobs_before": before[1], "blobs_after": after[1],
            "pymemdb_after": kept, "pymemdb_bytes_after": sum(kept.values()),
            "upstream_bytes": storage["upstream_bytes"],
            "ratio_after": ratio(sum(kept.values()), storage["upstream_bytes"]),
        }
        if progress:  # last: its threads stay out of the storage and retention figures
            progress(f"get_delta_channel_history, {DELTA_DEPTH} checkpoints back to the snapshot")
        result["delta_history"] = _delta_history(dsn, upstream, rng)
        for table in UPSTREAM_TABLES:  # the baseline's tables are the bench's own: drop them
            admin.execute(psycopg.sql.SQL("drop table if exists public.{}").format(psycopg.sql.Identifier(table)))
        admin.execute("drop table if exists public.checkpoint_migrations")
        admin.execute("delete from memori.lg_threads where user_id in (%s, %s, %s)",
                      (USER, USER + "_not_durable", DELTA_USER))
    return result


def render(result: dict[str, Any]) -> list[Table]:
    w = result["writes"]
    info = Table(title=f"bench langgraph: {result['threads']:,} threads x {result['steps']} checkpoints per saver, "
                       f"PostgreSQL {result['server']['server_version']} (synchronous_commit "
                       f"{result['server']['synchronous_commit']}, fsync {result['server']['fsync']})")
    for col in ("", "upstream PostgresSaver", "pymemdb MemoriSaver", "ratio", "goal"):
        info.add_column(col, justify="left" if not col else "right")
    info.add_row("put p50 / p95 µs", f"{fmt(w['upstream']['put']['p50_us'])} / {fmt(w['upstream']['put']['p95_us'])}",
                 f"{fmt(w['pymemdb']['put']['p50_us'])} / {fmt(w['pymemdb']['put']['p95_us'])}", "", "")
    info.add_row("single put throughput /s", fmt(w["upstream"]["puts_per_s"]), fmt(w["pymemdb"]["puts_per_s"]),
                 fmt(w["put_ratio"], "x"), f"≥ {GOAL_PUT}x {'met' if w['goal_met'] else 'MISSED'}")
    nd = w[NOT_DURABLE]
    info.add_row("… with durable=False /s", "", fmt(nd["puts_per_s"]), fmt(w["put_ratio_not_durable"], "x"),
                 "(no fsync wait)")
    fl = w[FLOOR]
    info.add_row("… one durable single-row INSERT /s", "", fmt(fl["puts_per_s"]), fmt(w["put_ratio_ceiling"], "x"),
                 "(the ceiling)")
    info.add_row("put_writes p50 µs", fmt(w["upstream"]["put_writes"]["p50_us"]),
                 fmt(w["pymemdb"]["put_writes"]["p50_us"]), "", "")
    for kind, label in (("cold", "get_tuple latest, a second process"),
                        ("latest", "… latest, the saver that wrote it"), ("by_id", "… by id, the saver that wrote it")):
        r = result["reads"][kind]
        goal = GOAL_GET_TUPLE_COLD if kind == "cold" else GOAL_GET_TUPLE
        info.add_row(f"{label} p50 / p95 µs",
                     f"{fmt(r['upstream']['p50_us'])} / {fmt(r['upstream']['p95_us'])}",
                     f"{fmt(r['pymemdb']['p50_us'])} / {fmt(r['pymemdb']['p95_us'])}",
                     f"{fmt(r['ratio_p50'], 'x')} / {fmt(r['ratio_p95'], 'x')}",
                     f"≥ {goal}x {'met' if r['goal_met'] else 'MISSED'}")
        if ROUND_TRIP in r:
            info.add_row("… one prepared select $1 on libpq p50 / p95 µs", "",
                         f"{fmt(r[ROUND_TRIP]['p50_us'])} / {fmt(r[ROUND_TRIP]['p95_us'])}",
                         f"{fmt(r['ratio_ceiling_p50'], 'x')} / {fmt(r['ratio_ceiling_p95'], 'x')}",
                         "(the ceiling of a checked copy)")
    for kind, label in (("cold", "aget_tuple latest, async savers, a second process"),
                        ("copy", "… again: ours from its copy")):
        if kind in result["reads"].get("async", {}):
            r = result["reads"]["async"][kind]
            info.add_row(f"{label} p50 / p95 µs",
                         f"{fmt(r['upstream']['p50_us'])} / {fmt(r['upstream']['p95_us'])}",
                         f"{fmt(r['pymemdb']['p50_us'])} / {fmt(r['pymemdb']['p95_us'])}",
                         f"{fmt(r['ratio_p50'], 'x')} / {fmt(r['ratio_p95'], 'x')}", "(AsyncPostgresSaver)")
    if "delta_history" in result:
        d = result["delta_history"]
        info.add_row(f"get_delta_channel_history, {d['depth']} back, p50 / p95 µs",
                     f"{fmt(d['upstream']['p50_us'])} / {fmt(d['upstream']['p95_us'])}",
                     f"{fmt(d['pymemdb']['p50_us'])} / {fmt(d['pymemdb']['p95_us'])}", fmt(d["ratio_p50"], "x"),
                     "(DeltaChannel)")
        info.add_row("… LangGraph's default walk on MemoriSaver p50 / p95 µs", "",
                     f"{fmt(d['default_walk']['p50_us'])} / {fmt(d['default_walk']['p95_us'])}",
                     fmt(d["ratio_default_p50"], "x"), "(one get_tuple per ancestor)")
    s = result["storage"]
    info.add_row("storage, same history (MB)", fmt(s["upstream_bytes"] / 2**20), fmt(s["pymemdb_bytes"] / 2**20),
                 fmt(s["ratio"], "x"), f"≤ {GOAL_STORAGE}x {'met' if s['goal_met'] else 'MISSED'}")
    r = result["retention"]
    info.add_row("after a retention cycle (MB)", fmt(r["upstream_bytes"] / 2**20) + " (no retention)",
                 fmt(r["pymemdb_bytes_after"] / 2**20), fmt(r["ratio_after"], "x"), "")
    info.caption = "upstream latency / ours for reads; ours / upstream for throughput and storage"

    tables = Table(title="Table sizes after VACUUM FULL (bytes)")
    for col in ("table", "same history", "after retention cycle"):
        tables.add_column(col, justify="right" if col != "table" else "left")
    for t, b in s["upstream"].items():
        tables.add_row(f"public.{t}", fmt(b), fmt(b))
    for t, b in s["pymemdb"].items():
        tables.add_row(f"memori.{t}", fmt(b), fmt(r["pymemdb_after"][t]))
    tables.caption = (f"cleanup_execute deleted {fmt(r['deleted'])} rows in {r['seconds']} s "
                      f"({r['deleted_by_table']}); checkpoints {fmt(r['checkpoints_before'])} → "
                      f"{fmt(r['checkpoints_after'])}, blobs {fmt(r['blobs_before'])} → {fmt(r['blobs_after'])}")

    plans = plans_table(
        ("memori.lg_checkpoint_get (latest, cold: no cached copy)", result["explain_get"]),
        ("memori.lg_checkpoint_stamp (latest: a read from the saver's copy)", result["explain_get_cached"]),
        ("memori.lg_checkpoint_put (the next step, rolled back)", result["explain_put"]),
    )
    return [info, tables, plans]
