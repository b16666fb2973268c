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
   saver puts faster at the same durability. A fifth, ``_RetentionFloor``,
   does only the writes retention needs (the checkpoint and blobs inserted,
   the superseded checkpoint and its writes set to expire) in upstream's own
   form: the ceiling of a put that keeps retention. Single-put throughput is
   1 / mean put latency on one connection (LangGraph saves a run's
   checkpoints one after another).
2. The headline read: ``get_tuple`` of the latest checkpoint (what every
   ``invoke`` does first) from a second process, as a web server's other
   worker: a fresh upstream saver and a fresh ``MemoriSaver`` that wrote
   nothing, each reading every thread once (a random order, interleaved), so
   no read can come from the saver's copy; a third reader, ``_ChainFloor``,
   reads only the rows (delta chains joined, nothing else): the ceiling of a
   cold read at the storage goal. Beside it, reads of random threads, latest
   and by id, from the savers that wrote them (ours answers from its copy
   after a stamp check). Two more readers in that loop bound the copy's
   ratio: ``_CopyFloor`` (latest only) checks a copy of its own for change
   and expiry with nothing else around it, and ``_RoundTrip`` sends one
   prepared ``select $1`` on libpq as the saver's stamp check does: no read
   that asks the server whether its copy is current can be faster. Last, the
   second process does as its sync savers did with the async ones
   (``async_reads``), then reads every thread again (ours from its copy), for
   information.
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
from psycopg.types.json import Jsonb
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
RETENTION_FLOOR = "retention_floor"  # the fastest put that keeps retention (_RetentionFloor), for information
CHAIN_FLOOR = "chain_floor"  # the fastest cold read of delta-stored values (_ChainFloor), for information
COPY_FLOOR = "copy_floor"  # the fastest read from a copy checked for expiry and change (_CopyFloor), for information
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


def _inline_values(values: dict[str, Any]) -> dict[str, Any]:
    """The channel values a saver keeps in the checkpoint's JSON (primitives); the others are blobs, as upstream's."""
    return {k: v for k, v in values.items() if v is None or isinstance(v, (str, int, float, bool))}


class _RetentionFloor:
    """The ceiling of a put that keeps retention: only the writes retention needs, in upstream's own form.

    Each put is one pipeline (one transaction, one WAL flush), as ``PostgresSaver.put``:
    its blobs (``executemany``, ON CONFLICT DO NOTHING) and its checkpoint
    inserted, then the checkpoints it supersedes and their pending writes set to
    expire, each one UPDATE by key; ``put_writes`` inserts the writes as upstream
    does. The tables are the bench's own, keyed as upstream's with an expiry
    column and nothing else: no user column or thread table, no foreign key, no
    index for the cleaner, no policy lookup, no validation, whole values (no
    delta). A saver that starts superseded checkpoints expiring when it puts
    (retention kept) does at least this, so ``floor puts/s ÷ upstream puts/s``
    bounds the put ratio such a saver can reach at the same durability.
    """

    TABLES = ("pymemdb_bench_retention_checkpoints", "pymemdb_bench_retention_blobs",
              "pymemdb_bench_retention_writes")

    def __init__(self, dsn: str, serde: Any) -> None:
        self.conn = psycopg.Connection.connect(dsn, autocommit=True, prepare_threshold=0)
        self.serde = serde
        checkpoints, blobs, writes = self.TABLES
        self.conn.execute(f"create table if not exists public.{checkpoints} (thread_id text, checkpoint_ns text,"
                          " checkpoint_id text, parent_checkpoint_id text, checkpoint jsonb not null,"
                          " metadata jsonb not null, expires_at timestamptz,"
                          " primary key (thread_id, checkpoint_ns, checkpoint_id))")
        self.conn.execute(f"create table if not exists public.{blobs} (thread_id text, checkpoint_ns text,"
                          " channel text, version text, type text not null, blob bytea, expires_at timestamptz,"
                          " primary key (thread_id, checkpoint_ns, channel, version))")
        self.conn.execute(f"create table if not exists public.{writes} (thread_id text, checkpoint_ns text,"
                          " checkpoint_id text, task_id text, idx integer, channel text not null, type text,"
                          " blob bytea not null, expires_at timestamptz,"
                          " primary key (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))")

    def get_next_version(self, current: Any, channel: None) -> int:
        return (current or 0) + 1

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        checkpoints, blobs, writes = self.TABLES
        conf = config["configurable"]
        thread, ns, parent = conf["thread_id"], conf.get("checkpoint_ns", ""), conf.get("checkpoint_id")
        values = checkpoint["channel_values"]
        inline = _inline_values(values)
        dumped = [(thread, ns, k, str(v), *self.serde.dumps_typed(values[k]))
                  for k, v in new_versions.items() if k in values and k not in inline]
        with self.conn.pipeline(), self.conn.cursor(binary=True) as cur:
            if dumped:
                cur.executemany(f"insert into public.{blobs} (thread_id, checkpoint_ns, channel, version, type, blob)"
                                " values (%s, %s, %s, %s, %s, %s) on conflict do nothing", dumped)
            cur.execute(f"insert into public.{checkpoints} (thread_id, checkpoint_ns, checkpoint_id,"
                        " parent_checkpoint_id, checkpoint, metadata) values (%s, %s, %s, %s, %s, %s)",
                        (thread, ns, checkpoint["id"], parent, Jsonb({**checkpoint, "channel_values": inline}),
                         Jsonb(metadata)))
            cur.execute(f"update public.{checkpoints} set expires_at = now() + interval '30 days'"
                        " where thread_id = %s and checkpoint_ns = %s and checkpoint_id < %s"
                        " and expires_at is null", (thread, ns, checkpoint["id"]))
            if parent is not None:
                cur.execute(f"update public.{writes} set expires_at = now() + interval '30 days'"
                            " where thread_id = %s and checkpoint_ns = %s and checkpoint_id = %s",
                            (thread, ns, parent))
        return {"configurable": {**conf, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: Any, writes: Any, task_id: str) -> None:
        conf = config["configurable"]
        rows = [(conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"], task_id, i, channel,
                 *self.serde.dumps_typed(value)) for i, (channel, value) in enumerate(writes)]
        with self.conn.pipeline(), self.conn.cursor(binary=True) as cur:
            cur.executemany(f"insert into public.{self.TABLES[2]} (thread_id, checkpoint_ns, checkpoint_id, task_id,"
                            " idx, channel, type, blob) values (%s, %s, %s, %s, %s, %s, %s, %s)"
                            " on conflict do nothing", rows)

    def drop(self) -> None:
        for table in self.TABLES:
            self.conn.execute(psycopg.sql.SQL("drop table if exists public.{}").format(psycopg.sql.Identifier(table)))
        self.conn.close()


class _ChainFloor:
    """The ceiling of a cold read of delta-stored values: the rows such a read needs, by key, and nothing else.

    One prepared statement on libpq (as the saver's read) finds the thread, its
    latest checkpoint, each channel's blob and, for a delta, its chain (one index
    scan), and the pending writes; the client joins each chain under one msgpack
    array header and deserialises as upstream does. Left out, which the saver
    must do: expiry, the acting user's rule, stamps, the write order, the
    by-id branch. Storage at ``GOAL_STORAGE`` needs deltas, and a read of a delta
    reads its chain: ``upstream ÷ this`` bounds the cold-read ratio of a saver
    that stores deltas.
    """

    QUERY = """
select c.checkpoint, c.metadata, c.checkpoint_id, c.parent_id, b.channels, b.types, b.blobs, b.chains, b.chain_items,
       b.items, w.task_ids, w.channels, w.types, w.blobs
  from memori.lg_threads t
 cross join lateral (select c.* from memori.lg_checkpoints c
                      where c.user_id = $1 and c.thread = t.id and c.checkpoint_ns = $3
                      order by c.checkpoint_id desc limit 1) c
 cross join lateral (
   select array_agg(x.channel) as channels, array_agg(x.type) as types, array_agg(x.blob) as blobs,
          array_agg(ch.body) as chains, array_agg(ch.items) as chain_items, array_agg(x.items) as items
     from jsonb_each_text(c.checkpoint -> 'channel_versions') v
     join memori.lg_blobs x on x.user_id = $1 and x.thread = c.thread and x.checkpoint_ns = c.checkpoint_ns
                           and x.channel = v.key and x.version = v.value
     left join lateral (select string_agg(y.blob, ''::bytea order by array_position(x.base, y.version)) as body,
                               sum(y.items)::integer as items
                          from memori.lg_blobs y
                         where y.user_id = $1 and y.thread = x.thread and y.checkpoint_ns = x.checkpoint_ns
                           and y.channel = x.channel and y.version = any (x.base)) ch on x.base is not null) b
 cross join lateral (
   select array_agg(w.task_id) as task_ids, array_agg(w.channel) as channels, array_agg(w.type) as types,
          array_agg(w.blob) as blobs
     from memori.lg_writes w
    where w.user_id = $1 and w.thread = c.thread and w.checkpoint_ns = c.checkpoint_ns
      and w.checkpoint_id = c.checkpoint_id) w
 where t.user_id = $1 and t.thread_id = $2
"""

    def __init__(self, dsn: str, serde: Any) -> None:
        from langgraph.checkpoint.base import CheckpointTuple

        from pymemdb.integrations._langgraph_cache import msgpack_array
        from pymemdb.integrations._libpq import Prepared

        self.tuple, self.msgpack_array = CheckpointTuple, msgpack_array  # imported once: the reads are timed
        # generic plans, as the saver's connections: a custom plan of this statement costs more than it runs
        self.conn = psycopg.Connection.connect(dsn, autocommit=True, options="-c plan_cache_mode=force_generic_plan")
        self.statement = Prepared("pymemdb_bench_chain_floor", self.QUERY)
        self.serde = serde

    def get_tuple(self, config: Any) -> Any:
        conf = config["configurable"]
        thread, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        found = self.statement.rows(self.conn, [USER, thread, ns])
        if not found:
            return None
        (checkpoint, metadata, checkpoint_id, parent_id, channels, types, blobs, chains, chain_items, items,
         task_ids, write_channels, write_types, write_blobs) = found[0]
        loads = self.serde.loads_typed
        values = checkpoint["channel_values"]
        for channel, type_, blob, chain, counted, own in zip(channels or (), types or (), blobs or (), chains or (),
                                                             chain_items or (), items or (), strict=True):
            if chain is not None:  # the chain's root is a whole array: its items, the deltas', then this one's
                root_items, header = cast(tuple[int, int], self.msgpack_array(chain))
                n = root_items + (counted or 0) + own
                head = (bytes([0x90 + n]) if n < 16 else b"\xdc" + n.to_bytes(2, "big") if n < 65536
                        else b"\xdd" + n.to_bytes(4, "big"))
                blob = head + chain[header:] + blob
            values[channel] = loads((type_, blob))
        checkpoint["id"] = str(checkpoint_id)
        ids = {"thread_id": thread, "checkpoint_ns": ns}
        return self.tuple(
            {"configurable": {**ids, "checkpoint_id": str(checkpoint_id)}}, checkpoint, metadata,
            {"configurable": {**ids, "checkpoint_id": str(parent_id)}} if parent_id is not None else None,
            [(task_id, channel, loads((type_, blob)))
             for task_id, channel, type_, blob in zip(task_ids or (), write_channels or (), write_types or (),
                                                      write_blobs or (), strict=True)])

    def close(self) -> None:
        self.conn.close()


class _CopyFloor:
    """The ceiling of a read from a checked copy: the check alone, the tuple rebuilt while the server answers.

    It holds each thread's latest checkpoint as the saver's copy does (JSON,
    serialised values, the row versions of the checkpoint and of its writes),
    filled before the loop, untimed. A read sends one prepared statement on
    libpq that finds the thread, its latest checkpoint and that checkpoint's
    writes by key, each unexpired (what a correct check reads; no acting-user
    rule, no by-id branch, no pool), and rebuilds the tuple from the copy beside
    it (``Prepared.rows_beside``, as the saver). ``upstream ÷ this`` bounds the
    ratio of a read that asks the server whether its copy is current and
    unexpired; ``_RoundTrip`` is the same statement doing nothing.
    """

    QUERY = """
select c.xmin::text, c.checkpoint_id,
       (select coalesce(string_agg(w.xmin::text, '.' order by w.task_id, w.idx), '')
          from memori.lg_writes w
         where w.user_id = $1 and w.thread = t.id and w.checkpoint_ns = c.checkpoint_ns
           and w.checkpoint_id = c.checkpoint_id and (w.expires_at is null or w.expires_at > now()))
  from memori.lg_threads t
 cross join lateral (select c.xmin, c.checkpoint_ns, c.checkpoint_id from memori.lg_checkpoints c
                      where c.user_id = $1 and c.thread = t.id and c.checkpoint_ns = $3
                        and (c.expires_at is null or c.expires_at > now())
                      order by c.checkpoint_id desc limit 1) c
 where t.user_id = $1 and t.thread_id = $2 and (t.expires_at is null or t.expires_at > now())
"""

    def __init__(self, dsn: str, serde: Any) -> None:
        from langgraph.checkpoint.base import CheckpointTuple

        from pymemdb.integrations._libpq import Prepared
        from pymemdb.integrations.langgraph import _loads  # the saver's JSON parser (orjson when installed)

        self.tuple, self.loads = CheckpointTuple, _loads  # imported once: the reads are timed
        self.conn = psycopg.Connection.connect(dsn, autocommit=True, options="-c plan_cache_mode=force_generic_plan")
        self.statement = Prepared("pymemdb_bench_copy_floor", self.QUERY)
        self.serde = serde
        self.copies: dict[str, tuple[Any, ...]] = {}

    def fill(self, saver: Any, threads: int) -> None:
        """A copy of every thread's latest checkpoint, from ``saver`` (the bench's threads change no more)."""
        from pymemdb.integrations.langgraph import _copy_json

        for t in range(threads):
            thread = f"bench-{t}"
            found = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            ((stamp, checkpoint_id, writes_stamp),) = self.statement.rows(self.conn, [USER, thread, ""])
            checkpoint = dict(found.checkpoint)
            values = checkpoint.pop("channel_values")
            inline = _inline_values(values)
            self.copies[thread] = (
                (stamp, checkpoint_id, writes_stamp), _copy_json({**checkpoint, "channel_values": inline}),
                _copy_json(found.metadata), [(k, *self.serde.dumps_typed(v)) for k, v in values.items()
                                              if k not in inline],
                [(task, channel, *self.serde.dumps_typed(v)) for task, channel, v in found.pending_writes],
                found.config, found.parent_config)

    def get_tuple(self, config: Any) -> Any:
        thread = config["configurable"]["thread_id"]
        stamps, checkpoint_json, metadata_json, blobs, writes, own, parent = self.copies[thread]
        loads, json_loads = self.serde.loads_typed, self.loads

        def build() -> Any:
            checkpoint = json_loads(checkpoint_json)
            values = checkpoint["channel_values"]
            for channel, type_, blob in blobs:
                values[channel] = loads((type_, blob))
            return self.tuple(
                {"configurable": dict(own["configurable"])}, checkpoint, json_loads(metadata_json),
                {"configurable": dict(parent["configurable"])} if parent is not None else None,
                [(task, channel, loads((type_, blob))) for task, channel, type_, blob in writes])

        found, built = self.statement.rows_beside(self.conn, [USER, thread, ""], build)
        assert found and tuple(found[0]) == stamps, "a bench thread changed after its copy was taken"
        return built

    def close(self) -> None:
        self.conn.close()


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
    if RETENTION_FLOOR in out:
        out["put_ratio_retention_ceiling"] = ratio(out[RETENTION_FLOOR]["puts_per_s"], out["upstream"]["puts_per_s"])
    out["ids"] = {name: [[st["config"]["configurable"]["checkpoint_id"]] for st in state[name]] for name in savers}
    return out


def _reads(upstream: Any, ours: Any, threads: int, ids: dict[str, Any], rng: random.Random,
           iterations: int, kinds: tuple[str, ...] = ("latest", "by_id"),
           round_trip: _RoundTrip | None = None, copy_floor: _CopyFloor | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in kinds:
        savers = {"upstream": upstream, "pymemdb": ours}
        if round_trip is not None:
            savers[ROUND_TRIP] = round_trip
        if copy_floor is not None and kind == "latest":  # its check is of the latest checkpoint only
            savers[COPY_FLOOR] = copy_floor
        lat: dict[str, list[int]] = {name: [] for name in savers}
        for i in range(iterations + 50):
            t = rng.randrange(threads)
            order = list(savers)
            rng.shuffle(order)  # which reads first changes every iteration
            for name in order:
                conf: dict[str, Any] = {"thread_id": f"bench-{t}", "checkpoint_ns": ""}
                if kind == "by_id" and name in ids:
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
        if round_trip is not None:  # no read that asks the server is faster (_RoundTrip)
            s["ratio_ceiling_p50"] = ratio(s["upstream"]["p50_us"], s[ROUND_TRIP]["p50_us"])
            s["ratio_ceiling_p95"] = ratio(s["upstream"]["p95_us"], s[ROUND_TRIP]["p95_us"])
        if COPY_FLOOR in savers:  # nor a read that checks its copy for change and expiry (_CopyFloor)
            s["ratio_copy_floor_p50"] = ratio(s["upstream"]["p50_us"], s[COPY_FLOOR]["p50_us"])
            s["ratio_copy_floor_p95"] = ratio(s["upstream"]["p95_us"], s[COPY_FLOOR]["p95_us"])
        s["goal_met"] = min(s["ratio_p50"] or 0, s["ratio_p95"] or 0) >= GOAL_GET_TUPLE
        out[kind] = s
    return out


def cold_reads(dsn: str, threads: int, seed: int) -> dict[str, Any]:
    """Run in a second process: fresh savers that wrote nothing read every thread's latest checkpoint once.

    The first ``COLD_WARMUP`` threads prepare the plans and are not timed.
    Which reads first changes at random; every read is the first read of that
    thread by that saver, so nothing comes from a saver's copy. A third reader,
    ``_ChainFloor``, reads the same rows with nothing else: the ceiling.
    """
    postgres_saver = _require_upstream()
    from psycopg.rows import dict_row

    from pymemdb.integrations.langgraph import MemoriSaver

    rng = random.Random(seed)
    order = list(range(threads))
    rng.shuffle(order)
    lat: dict[str, list[int]] = {"upstream": [], "pymemdb": [], CHAIN_FLOOR: []}
    with psycopg.Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as up_conn, \
            MemoriSaver(dsn, user_id=USER, max_size=2) as ours:
        floor = _ChainFloor(dsn, ours.serde)
        savers = {"upstream": postgres_saver(up_conn), "pymemdb": ours, CHAIN_FLOOR: floor}
        try:
            for i, t in enumerate(order):
                names = list(savers)
                rng.shuffle(names)
                for name in names:
                    start = time.perf_counter_ns()
                    found = savers[name].get_tuple({"configurable": {"thread_id": f"bench-{t}", "checkpoint_ns": ""}})
                    elapsed = time.perf_counter_ns() - start
                    assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == STEPS
                    if i >= COLD_WARMUP:
                        lat[name].append(elapsed)
        finally:
            floor.close()
    s: dict[str, Any] = {name: _summary(lat[name]) for name in lat}
    s["ratio_p50"] = ratio(s["upstream"]["p50_us"], s["pymemdb"]["p50_us"])
    s["ratio_p95"] = ratio(s["upstream"]["p95_us"], s["pymemdb"]["p95_us"])
    s["ratio_ceiling_p50"] = ratio(s["upstream"]["p50_us"], s[CHAIN_FLOOR]["p50_us"])
    s["ratio_ceiling_p95"] = ratio(s["upstream"]["p95_us"], s[CHAIN_FLOOR]["p95_us"])
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
        retention_floor = _RetentionFloor(dsn, ours.serde)
        try:
            writes = _write({"upstream": upstream, "pymemdb": ours, NOT_DURABLE: not_durable, FLOOR: floor,
                             RETENTION_FLOOR: retention_floor}, threads, rng, progress)
        finally:
            floor.drop()
            retention_floor.drop()
        ids = writes.pop("ids")
        # the not-durable saver only shows what synchronous_commit costs: its rows leave the comparison
        admin.execute("delete from memori.lg_threads where user_id = %s", (USER + "_not_durable",))
        result["writes"] = writes
        settle(admin, ("public", UPSTREAM_TABLES), ("memori", OUR_TABLES))
        if progress:
            progress("get_tuple, interleaved")
        iterations = min(2000, threads * 4)
        round_trip = _RoundTrip(dsn)
        copy_floor = _CopyFloor(dsn, ours.serde)
        try:
            copy_floor.fill(ours, threads)
            result["reads"] = _reads(upstream, ours, threads, ids, rng, iterations=iterations, round_trip=round_trip,
                                     copy_floor=copy_floor)
        finally:
            round_trip.close()
            copy_floor.close()
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
    if RETENTION_FLOOR in w:
        info.add_row("… only the writes retention needs /s", "", fmt(w[RETENTION_FLOOR]["puts_per_s"]),
                     fmt(w["put_ratio_retention_ceiling"], "x"), "(the ceiling, retention kept)")
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
        if CHAIN_FLOOR in r:
            info.add_row("… only the rows, delta chains joined p50 / p95 µs", "",
                         f"{fmt(r[CHAIN_FLOOR]['p50_us'])} / {fmt(r[CHAIN_FLOOR]['p95_us'])}",
                         f"{fmt(r['ratio_ceiling_p50'], 'x')} / {fmt(r['ratio_ceiling_p95'], 'x')}",
                         "(the ceiling with deltas)")
        if COPY_FLOOR in r:
            info.add_row("… only the copy's check, the tuple built beside p50 / p95 µs", "",
                         f"{fmt(r[COPY_FLOOR]['p50_us'])} / {fmt(r[COPY_FLOOR]['p95_us'])}",
                         f"{fmt(r['ratio_copy_floor_p50'], 'x')} / {fmt(r['ratio_copy_floor_p95'], 'x')}",
                         "(the ceiling of a checked copy)")
        if ROUND_TRIP in r:
            info.add_row("… one prepared select $1 on libpq p50 / p95 µs", "",
                         f"{fmt(r[ROUND_TRIP]['p50_us'])} / {fmt(r[ROUND_TRIP]['p95_us'])}",
                         f"{fmt(r['ratio_ceiling_p50'], 'x')} / {fmt(r['ratio_ceiling_p95'], 'x')}",
                         "(a round trip, no work)")
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
