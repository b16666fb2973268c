"""LangGraph checkpointers backed by pymemdb: ``MemoriSaver`` and ``AsyncMemoriSaver``.

``pip install pymemdb[langgraph]``. The savers serialise with LangGraph's serde
and call one ``memori.lg_*`` function per operation (sql/800-langgraph.sql);
which rows exist, expire and go is decided there. Retention is a policy per
saver (a kind in ``memori.retention_policies``, see ``memori.lg_policy_set``):
the latest checkpoint of each namespace is kept, superseded ones expire after
the policy's retention, idle threads after its idle retention, and the
retention engine deletes them (``memori-cleanup preview|execute``). A read the
saver can answer from its copy of the checkpoint is the stamp check
``memori.lg_checkpoint_stamp`` alone (see _langgraph_cache and _libpq).

Each saver owns a connection pool whose connections run in autocommit (every
operation is one SQL function call, atomic by itself) and carry the saver's
user in ``memori.user_id``. There is no saver-wide lock: concurrent calls use
different connections, and PostgreSQL orders writes to the same thread.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, cast
from uuid import UUID

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import sql
from psycopg.adapt import PyFormat
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pymemdb._sql import SqlFunction, fn
from pymemdb.db import Database, resolve_dsn
from pymemdb.errors import DeltaBaseMissing, InvalidArgument, wrap_exceptions
from pymemdb.integrations._langgraph_cache import (
    CACHE_BYTES,
    DELTA_MAX_CHAIN,
    ByteaArray,
    DeltaBase,
    IntArray,
    SaverMemory,
    Stamped,
    TextArray,
    msgpack_array,
    register_array_dumpers,
)
from pymemdb.integrations._libpq import Prepared
from pymemdb.types import LangGraphPruneResult, LangGraphStamp, LangGraphTuple, LangGraphWritesPut

__all__ = ["AsyncMemoriSaver", "AsyncMemoriStore", "MemoriSaver", "MemoriStore", "blob_value", "set_policy"]

register_array_dumpers(psycopg.adapters)  # connections made from now on write our arrays fast

_loads: Callable[[str], Any]
try:  # a cached copy is parsed on every read: orjson (LangChain installs it) parses JSON ~3x faster
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

LG_CHECKPOINT_PUT = fn(
    "lg_checkpoint_put",
    ("p_thread_id", "text"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"), ("p_parent_id", "uuid"),
    ("p_checkpoint", "jsonb"), ("p_metadata", "jsonb"), ("p_blob_channels", "text[]"), ("p_blob_versions", "text[]"),
    ("p_blob_types", "text[]"), ("p_blob_values", "bytea[]"), ("p_policy", "text"), ("p_user_id", "text"),
    ("p_now", "timestamptz"), ("p_blob_bases", "text[]"), ("p_blob_items", "integer[]"),
    returns="scalar",
)
LG_WRITES_PUT = fn(
    "lg_writes_put",
    ("p_thread_id", "text"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"), ("p_task_id", "text"),
    ("p_task_path", "text"), ("p_idx", "integer[]"), ("p_channels", "text[]"), ("p_types", "text[]"),
    ("p_values", "bytea[]"), ("p_policy", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"),
    ("p_known_writes", "text"),
    result=LangGraphWritesPut,
)
LG_CHECKPOINT_GET = fn(
    "lg_checkpoint_get",
    ("p_thread_id", "text"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"), ("p_user_id", "text"),
    ("p_now", "timestamptz"), ("p_known_stamp", "text"), ("p_known_writes", "text"),
    result=LangGraphTuple,
)
LG_CHECKPOINT_STAMP = fn(
    "lg_checkpoint_stamp",
    ("p_thread_id", "text"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"), ("p_user_id", "text"),
    ("p_now", "timestamptz"),
    result=LangGraphStamp,
)
# the same call on libpq directly (MemoriSaver's read from its copy: see _libpq)
_STAMP_FAST = Prepared(
    "memori_lg_checkpoint_stamp",
    "select checkpoint_id, stamp, writes_stamp from memori.lg_checkpoint_stamp("
    "p_thread_id => $1, p_checkpoint_ns => $2, p_checkpoint_id => $3::uuid, p_user_id => $4)",
)
LG_BLOB_VALUE = fn(
    "lg_blob_value",
    ("p_thread_id", "text"), ("p_channel", "text"), ("p_version", "text"), ("p_checkpoint_ns", "text"),
    ("p_user_id", "text"), ("p_now", "timestamptz"),
    returns="scalar",
)
LG_CHECKPOINT_LIST = fn(
    "lg_checkpoint_list",
    ("p_thread_id", "text"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"), ("p_filter", "jsonb"),
    ("p_before", "uuid"), ("p_limit", "integer"), ("p_user_id", "text"), ("p_now", "timestamptz"),
    result=LangGraphTuple, returns="many",
)
LG_THREAD_DELETE = fn("lg_thread_delete", ("p_thread_id", "text"), ("p_user_id", "text"), returns="scalar")
LG_THREAD_COPY = fn(
    "lg_thread_copy",
    ("p_source_thread_id", "text"), ("p_target_thread_id", "text"), ("p_policy", "text"), ("p_user_id", "text"),
    ("p_now", "timestamptz"),
    returns="scalar",
)
LG_THREADS_PRUNE = fn(
    "lg_threads_prune",
    ("p_thread_ids", "text[]"), ("p_strategy", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"),
    result=LangGraphPruneResult,
)
LG_RUNS_DELETE = fn(
    "lg_runs_delete", ("p_run_ids", "text[]"), ("p_user_id", "text"), ("p_now", "timestamptz"), returns="scalar"
)
LG_POLICY_SET = fn(
    "lg_policy_set",
    ("p_policy", "text"), ("p_superseded_after", "interval"), ("p_idle_after", "interval"), ("p_priority", "integer"),
    returns="scalar",
)

Call = tuple[SqlFunction[Any], dict[str, Any]]


def set_policy(
    db: Database,
    policy: str,
    superseded_after: timedelta | None,
    idle_after: timedelta | None = None,
    *,
    priority: int = 3,
) -> None:
    """``memori.lg_policy_set``: create or change a saver retention policy (a DBA's call).

    Superseded checkpoints (and the blobs only they use) are kept
    ``superseded_after``; threads without a put for ``idle_after`` expire
    whole; None keeps them.
    """
    db.call(LG_POLICY_SET, p_policy=policy, p_superseded_after=superseded_after, p_idle_after=idle_after,
            p_priority=priority)


def blob_value(db: Database, user_id: str, thread_id: str, channel: str, version: str,
               checkpoint_ns: str = "") -> bytes | None:
    """``memori.lg_blob_value``: a channel version's full serialised value (delta blobs joined), None when gone.

    ``saver.serde.loads_typed((type, value))`` turns it back into the channel's value.
    """
    value = db.call(LG_BLOB_VALUE, p_thread_id=thread_id, p_channel=channel, p_version=version,
                    p_checkpoint_ns=checkpoint_ns, p_user_id=user_id)
    return None if value is None else bytes(value)


class _MemoriSaverBase(BaseCheckpointSaver[str]):
    """What both savers share: turning LangGraph's arguments into SQL calls and rows back into tuples."""

    user_id: str
    policy: str

    def __init__(self, *, user_id: str, policy: str = "default", serde: SerializerProtocol | None = None,
                 cache_bytes: int = CACHE_BYTES) -> None:
        super().__init__(serde=serde)
        self._queries: dict[tuple[str, frozenset[str]], str] = {}
        self._memory = SaverMemory(cache_bytes)
        if not user_id:
            raise InvalidArgument("MemoriSaver needs a user_id", sqlstate="PM001",
                                  hint="LangGraph state belongs to a user: MemoriSaver(db, user_id='alice').")
        self.user_id = user_id
        self.policy = policy

    # -- versions ------------------------------------------------------------
    def get_next_version(self, current: str | None, channel: None) -> str:
        """``<step>.<random>``, zero-padded so versions compare as strings.

        The random part keeps two forks of one checkpoint from writing the same
        version of a channel with different values (blobs are shared by
        version). Shorter than LangGraph's Postgres saver's 49 characters:
        versions are stored in every checkpoint, once per channel and node.
        """
        if current is None:
            step = 0
        elif isinstance(current, int):
            step = current
        else:
            step = int(current.split(".")[0])
        return f"{step + 1:010d}.{random.getrandbits(32):08x}"

    def _query(self, function: SqlFunction[Any], args: dict[str, Any]) -> Any:
        """The SQL text of a call, composed once per set of arguments (composing costs more than the read).

        ``function.query`` with binary placeholders (``%(p)b``): blobs and
        their arrays then travel as bytes, where the text format escapes every
        byte of every blob on the client.
        """
        key = (function.name, frozenset(args))
        text = self._queries.get(key)
        if text is None:
            named = sql.SQL(", ").join(
                sql.SQL("{} => {}::{}").format(sql.Identifier(p), sql.Placeholder(p, PyFormat.BINARY), sql.SQL(cast))
                for p, cast in function.params
                if p in args
            )
            target = sql.SQL("{}.{}({})").format(sql.Identifier("memori"), sql.Identifier(function.name), named)
            select = "select {} as value" if function.returns == "scalar" else "select * from {}"
            text = self._queries[key] = sql.SQL(select).format(target).as_string(None)
        return text

    # -- arguments -----------------------------------------------------------
    def _put_call(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        deltas: bool = True,
    ) -> tuple[Call, RunnableConfig, _PutPlan]:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        # primitives stay in the checkpoint's JSON; other values become blobs by version
        inline: dict[str, Any] = {}
        blobs: dict[str, Any] = {}
        for key, value in checkpoint["channel_values"].items():
            if isinstance(value, _DeltaSnapshot):
                blobs[key] = value
                inline[key] = True  # LangGraph's marker: the snapshot is in the blob
            elif value is None or isinstance(value, (str, int, float, bool)):
                inline[key] = value
            else:
                blobs[key] = value
        stored: dict[str, Any] = {**checkpoint, "channel_values": inline}
        if _canonical_uuid(checkpoint["id"]):
            del stored["id"]  # the checkpoint_id column holds it
        checkpoint_json = json.dumps(stored)
        metadata_json = json.dumps(get_serializable_checkpoint_metadata(config, metadata))
        channels, versions, types, values, bases, items = [], [], [], [], [], []
        plan = _PutPlan(thread_id, ns, str(checkpoint["id"]), conf.get("checkpoint_id"), checkpoint_json,
                        metadata_json, {})
        for key, version in new_versions.items():
            if key in blobs:
                type_, data = self.serde.dumps_typed(blobs[key])
                plan.full[key] = (str(version), type_, data)
                base, tail, appended = self._delta(thread_id, ns, key, type_, data) if deltas else (None, data, None)
                channels.append(key)
                versions.append(str(version))
                types.append(type_)
                values.append(tail)
                bases.append(base)
                items.append(appended)
        plan.blob_versions = {key: str(checkpoint["channel_versions"][key]) for key in blobs
                              if key in checkpoint.get("channel_versions", {})}
        args = {
            "p_thread_id": thread_id,
            "p_checkpoint_ns": ns,
            "p_checkpoint_id": checkpoint["id"],
            "p_parent_id": conf.get("checkpoint_id"),
            "p_checkpoint": Jsonb(stored, dumps=lambda _: checkpoint_json),
            "p_metadata": Jsonb(None, dumps=lambda _: metadata_json),
            "p_blob_channels": TextArray(channels),
            "p_blob_versions": TextArray(versions),
            "p_blob_types": TextArray(types),
            "p_blob_values": ByteaArray(values),
            "p_policy": self.policy,
            "p_user_id": self.user_id,
        }
        if any(b is not None for b in bases):
            args["p_blob_bases"] = TextArray(bases)
            args["p_blob_items"] = IntArray(items)
        next_config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }
        return (LG_CHECKPOINT_PUT, args), next_config, plan

    def _delta(self, thread_id: str, ns: str, channel: str, type_: str, data: bytes
               ) -> tuple[str | None, bytes, int | None]:
        """(base version, appended items' bytes, their count) when ``data`` extends the channel's last value.

        Only msgpack arrays (LangGraph's serialisation of a list) whose items
        start with the items of the version this saver stored last; else the
        full value, (None, data, None). A chain is cut by a full value every
        ``DELTA_MAX_CHAIN`` versions, which bounds what a cold read joins.
        """
        base = self._memory.get(("base", thread_id, ns, channel)) if type_ == "msgpack" else None
        if not isinstance(base, DeltaBase) or base.depth >= DELTA_MAX_CHAIN:
            return None, data, None
        parsed = msgpack_array(data)
        if parsed is None or parsed[0] < base.items or not data.startswith(base.body, parsed[1]):
            return None, data, None
        return base.version, data[parsed[1] + len(base.body):], parsed[0] - base.items

    def _after_put(self, plan: _PutPlan, stamp: str | None, args: dict[str, Any]) -> None:
        """Remember what the server now holds: delta bases, and the checkpoint under its stamp."""
        if not self._memory.max_bytes:
            return
        key = (plan.thread_id, plan.ns)
        if stamp is None:  # a blob version existed already, or an older checkpoint: our bytes may not be theirs
            self._memory.drop(("tuple", *key))
            for channel in plan.full:
                self._memory.drop(("base", *key, channel))
            return
        bases = args.get("p_blob_bases") or [None] * len(plan.full)
        for (channel, (version, type_, data)), base in zip(plan.full.items(), bases, strict=True):
            parsed = msgpack_array(data) if type_ == "msgpack" else None
            if parsed is None:
                self._memory.drop(("base", *key, channel))
                continue
            previous = self._memory.get(("base", *key, channel)) if base is not None else None
            depth = previous.depth + 1 if isinstance(previous, DeltaBase) else 0
            self._memory.put(("base", *key, channel), DeltaBase(version, parsed[0], data[parsed[1]:], depth))
        # the stamped copy: the blobs of every blob channel at its current version
        previous_copy = self._memory.get(("tuple", *key))
        carried = {b[0]: b for b in previous_copy.blobs} if isinstance(previous_copy, Stamped) else {}
        blobs = []
        for channel, version in plan.blob_versions.items():
            if channel in plan.full and plan.full[channel][0] == version:
                blobs.append((channel, version, plan.full[channel][1], plan.full[channel][2]))
            elif channel in carried and carried[channel][1] == version:
                blobs.append(carried[channel])
            else:  # a value this saver never held as bytes: read it from the server next time
                self._memory.drop(("tuple", *key))
                return
        parent = plan.parent_id
        self._memory.put(("tuple", *key), Stamped(
            stamp, str(UUID(plan.checkpoint_id)), str(UUID(str(parent))) if parent is not None else None,
            plan.checkpoint_json, plan.metadata_json, tuple(blobs), "", ()))  # a new checkpoint: no writes yet

    def _writes_call(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple[Call, _WritesPlan]:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "") or ""
        dumped = [self.serde.dumps_typed(value) for _, value in writes]
        # LangGraph's published index of special writes (error, interrupt, ...) is negative
        idx = [WRITES_IDX_MAP.get(channel, i) for i, (channel, _) in enumerate(writes)]
        args = {
            "p_thread_id": thread_id,
            "p_checkpoint_ns": ns,
            "p_checkpoint_id": conf["checkpoint_id"],
            "p_task_id": task_id,
            "p_task_path": task_path,
            "p_idx": IntArray(idx),
            "p_channels": TextArray(channel for channel, _ in writes),
            "p_types": TextArray(type_ for type_, _ in dumped),
            "p_values": ByteaArray(data for _, data in dumped),
            "p_policy": self.policy,
            "p_user_id": self.user_id,
        }
        # the copy of that checkpoint, if this saver holds it with its writes: the server
        # says whether the copy plus these writes is all of them (see _after_writes)
        copy = self._memory.get(("tuple", thread_id, ns))
        if not (isinstance(copy, Stamped) and copy.writes_stamp is not None
                and copy.checkpoint_id == _uuid_text(str(conf["checkpoint_id"]))):
            copy = None
        else:
            args["p_known_writes"] = copy.writes_stamp
        held = tuple((task_id, channel, type_, data, task_path, i)
                     for (channel, _), (type_, data), i in zip(writes, dumped, idx, strict=True))
        return (LG_WRITES_PUT, args), _WritesPlan(thread_id, ns, copy, held)

    def _after_writes(self, plan: _WritesPlan, result: LangGraphWritesPut | None) -> None:
        """Keep the copy's writes current when the server says the copy plus these writes is all of them."""
        if plan.copy is None:
            return
        key = ("tuple", plan.thread_id, plan.ns)
        if result is None or result.writes_stamp is None:  # someone else's writes, or one replaced: read them
            self._memory.put(key, replace(plan.copy, writes_stamp=None, writes=()))
            return
        known = {(w[0], w[5]) for w in plan.copy.writes}  # (task, idx): a retried regular write was kept as it was
        writes = plan.copy.writes + tuple(w for w in plan.writes if (w[0], w[5]) not in known)
        self._memory.put(key, replace(plan.copy, writes_stamp=result.writes_stamp, writes=writes))

    def _stamp_call(self, config: RunnableConfig) -> tuple[Call, Stamped] | None:
        """The stamp read that answers from this saver's copy (the checkpoint and its writes held); else None."""
        call, copy = self._get_call(config)
        if copy is None or copy.writes_stamp is None:
            return None
        args = {k: call[1][k] for k in ("p_thread_id", "p_checkpoint_ns", "p_checkpoint_id", "p_user_id")}
        return (LG_CHECKPOINT_STAMP, args), copy

    def _from_copy(self, config: RunnableConfig, copy: Stamped, stamp: str | None, writes_stamp: str | None
                   ) -> CheckpointTuple | None:
        """The tuple from the copy when the server's stamps are the copy's; None: read it whole."""
        if stamp != copy.stamp or writes_stamp != copy.writes_stamp:
            return None
        conf = config["configurable"]
        return self._copy_tuple(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "", copy, copy.writes)

    def _get_call(self, config: RunnableConfig) -> tuple[Call, Stamped | None]:
        """The read, with the stamp of the copy this saver holds of that checkpoint (if any)."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "") or ""
        wanted = get_checkpoint_id(config)
        copy = self._memory.get(("tuple", thread_id, ns))
        if not isinstance(copy, Stamped) or (wanted is not None and _uuid_text(wanted) != copy.checkpoint_id):
            copy = None
        args = {
            "p_thread_id": thread_id,
            "p_checkpoint_ns": ns,
            "p_checkpoint_id": wanted,
            "p_user_id": self.user_id,
        }
        if copy is not None:
            args["p_known_stamp"] = copy.stamp
            if copy.writes_stamp is not None:
                args["p_known_writes"] = copy.writes_stamp
        return (LG_CHECKPOINT_GET, args), copy

    def _got(self, row: LangGraphTuple | None, copy: Stamped | None, latest: bool) -> CheckpointTuple | bool | None:
        """The tuple of a read; False when the server vouched for a copy this saver no longer has (read again)."""
        if row is None:
            return None
        key = ("tuple", row.thread_id, row.checkpoint_ns)
        if row.checkpoint is None:  # our copy of the checkpoint is current
            if copy is None or row.stamp != copy.stamp:
                return False
            if row.writes_stamp != copy.writes_stamp:  # the writes changed: they came, keep them with the copy
                copy = replace(copy, writes_stamp=row.writes_stamp, writes=_writes(row))
                self._memory.put(key, copy)
            return self._tuple(row, copy)
        if latest and row.stamp is not None and self._memory.max_bytes:  # (building a copy costs ~20 µs)
            self._memory.put(key, Stamped(
                row.stamp, str(row.checkpoint_id), str(row.parent_id) if row.parent_id is not None else None,
                json.dumps(row.checkpoint), json.dumps(row.metadata),
                tuple((c, str(row.checkpoint["channel_versions"].get(c)), t, bytes(v))
                      for c, t, v in zip(row.blob_channels or [], row.blob_types or [], row.blob_values or [],
                                         strict=True) if v is not None),
                row.writes_stamp, _writes(row)))
        return self._tuple(row)

    def _list_call(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Call:
        conf: dict[str, Any] = dict(config["configurable"]) if config else {}
        return LG_CHECKPOINT_LIST, {
            "p_thread_id": str(conf["thread_id"]) if conf.get("thread_id") is not None else None,
            "p_checkpoint_ns": conf.get("checkpoint_ns"),
            "p_checkpoint_id": conf.get("checkpoint_id"),
            "p_filter": Jsonb(filter) if filter else None,
            "p_before": get_checkpoint_id(before) if before else None,
            "p_limit": int(limit) if limit is not None else None,
            "p_user_id": self.user_id,
        }

    def _prune_call(self, thread_ids: Sequence[str], strategy: str) -> Call:
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread IDs, not a str")
        return LG_THREADS_PRUNE, {
            "p_thread_ids": [str(t) for t in thread_ids], "p_strategy": strategy, "p_user_id": self.user_id,
        }

    # -- rows back into LangGraph's tuple ---------------------------------------
    def _tuple(self, row: LangGraphTuple, copy: Stamped | None = None) -> CheckpointTuple:
        """LangGraph's tuple from a row, or from a stamped copy and the row's fresh writes (new objects each time)."""
        if copy is not None:
            return self._copy_tuple(row.thread_id, row.checkpoint_ns, copy,
                                    copy.writes if copy.writes_stamp is not None else _writes(row))
        return self._assemble(
            row.thread_id, row.checkpoint_ns, str(row.checkpoint_id),
            str(row.parent_id) if row.parent_id is not None else None, dict(row.checkpoint or {}), row.metadata,
            zip(row.blob_channels or [], row.blob_types or [], row.blob_values or [], strict=True), _writes(row))

    def _copy_tuple(self, thread_id: str, ns: str, copy: Stamped,
                    writes: tuple[tuple[str, str, str, bytes, str, int], ...]) -> CheckpointTuple:
        return self._assemble(thread_id, ns, copy.checkpoint_id, copy.parent_id, _loads(copy.checkpoint_json),
                              _loads(copy.metadata_json), ((c, t, v) for c, _, t, v in copy.blobs), writes)

    def _assemble(self, thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None,
                  checkpoint: dict[str, Any], metadata: Any, blobs: Iterable[tuple[str, str, bytes | None]],
                  writes: tuple[tuple[str, str, str, bytes, str, int], ...]) -> CheckpointTuple:
        checkpoint.setdefault("id", checkpoint_id)
        values = dict(checkpoint.get("channel_values") or {})
        for channel, type_, data in blobs:
            if type_ != "empty":
                values[channel] = self.serde.loads_typed((type_, cast(bytes, data)))
        checkpoint["channel_values"] = values
        if len(writes) > 1:
            writes = tuple(sorted(writes, key=lambda w: writes_sort_key(w[4], w[0], w[5])))
        ids = {"thread_id": thread_id, "checkpoint_ns": ns}
        return CheckpointTuple(
            config={"configurable": {**ids, "checkpoint_id": checkpoint["id"]}},
            checkpoint=cast(Checkpoint, checkpoint),
            metadata=cast(CheckpointMetadata, metadata),
            parent_config=({"configurable": {**ids, "checkpoint_id": parent_id}} if parent_id is not None else None),
            pending_writes=[(task_id, channel, self.serde.loads_typed((type_, data)))
                            for task_id, channel, type_, data, _, _ in writes],
        )


def _writes(row: LangGraphTuple) -> tuple[tuple[str, str, str, bytes, str, int], ...]:
    return tuple(zip(row.write_task_ids or [], row.write_channels or [], row.write_types or [],
                     [bytes(v) for v in row.write_values or []], row.write_task_paths or [], row.write_idx or [],
                     strict=True))


def _uuid_text(value: str) -> str:
    try:
        return str(UUID(value))
    except ValueError:
        return value


@dataclass(frozen=True)
class _WritesPlan:
    """What a put_writes sent, with the copy it extends (None: no copy of that checkpoint with its writes)."""

    thread_id: str
    ns: str
    copy: Stamped | None
    writes: tuple[tuple[str, str, str, bytes, str, int], ...]  # as Stamped.writes


@dataclass
class _PutPlan:
    """What a put sent, to remember once the server has stored it."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint_json: str
    metadata_json: str
    full: dict[str, tuple[str, str, bytes]]  # channel -> (version, type, full serialised value)
    blob_versions: dict[str, str] = field(default_factory=dict)  # every blob channel's current version


def _canonical_uuid(value: str) -> bool:
    try:
        return str(UUID(value)) == value
    except ValueError:
        return False


def _pool_kwargs(user_id: str, durable: bool) -> dict[str, Any]:
    # every operation is one function call: autocommit saves the COMMIT round trip.
    # Generic plans: the stamp read (lg_checkpoint_stamp, inlined into the saver's
    # prepared statement) would otherwise be planned again on every call whenever
    # PostgreSQL's cost estimate prefers custom plans; planning costs more than the read.
    options = f"-c memori.user_id={_guc(user_id)} -c plan_cache_mode=force_generic_plan"
    if not durable:
        # a put returns before its WAL is on disk: a server crash may lose the
        # last few hundred ms of checkpoints (it never corrupts them)
        options += " -c synchronous_commit=off"
    return {"autocommit": True, "options": options}


def _guc(value: str) -> str:
    # libpq options: backslash-escape spaces and backslashes
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


def _dsn_of(db: Database | str | None) -> str:
    if isinstance(db, Database):
        return db.dsn
    resolved = resolve_dsn(db)
    if resolved is None:
        raise InvalidArgument("no database to store LangGraph state in", sqlstate="PM001",
                              hint="Pass pymemdb.connect() or a DSN (or set PYMEMDB_DSN).")
    return resolved


class MemoriSaver(_MemoriSaverBase):
    """LangGraph checkpointer storing threads in pymemdb (synchronous; its async methods run it in a thread).

    >>> saver = MemoriSaver(pymemdb.connect(), user_id="alice")
    >>> graph = builder.compile(checkpointer=saver)
    """

    def __init__(
        self,
        db: Database | str | None = None,
        *,
        user_id: str,
        policy: str = "default",
        serde: SerializerProtocol | None = None,
        max_size: int = 8,
        durable: bool = True,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        super().__init__(user_id=user_id, policy=policy, serde=serde, cache_bytes=cache_bytes)
        dsn = _dsn_of(db)
        self.pool = ConnectionPool(dsn, min_size=1, max_size=max_size, kwargs=_pool_kwargs(user_id, durable),
                                   open=False, name="pymemdb-langgraph")
        with wrap_exceptions():
            # one direct attempt first: it fails fast with libpq's message, the pool would retry 30 s
            psycopg.connect(dsn, connect_timeout=10).close()
            self.pool.open(wait=True, timeout=30)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> MemoriSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, call: Call) -> Any:
        function, args = call
        query = self._query(function, args)
        with wrap_exceptions(), self.pool.connection() as conn:
            if function.returns == "scalar":
                with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    row = cur.execute(query, args).fetchone()
                    return None if row is None else row["value"]
            assert function.result is not None
            typed: psycopg.Cursor[Any]
            with conn.cursor(binary=True, row_factory=class_row(function.result)) as typed:
                typed.execute(query, args)
                return typed.fetchone() if function.returns == "one" else typed.fetchall()

    # -- BaseCheckpointSaver -----------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        checked = self._stamp_call(config)
        if checked is not None:
            (_, args), held = checked
            with wrap_exceptions(), self.pool.connection() as conn:
                rows = _STAMP_FAST.rows(conn, [args["p_thread_id"], args["p_checkpoint_ns"],
                                               args["p_checkpoint_id"], args["p_user_id"]])
            hit = self._from_copy(config, held, *(rows[0][1:] if rows else (None, None)))
            if hit is not None:
                return hit
        call, copy = self._get_call(config)
        found = self._got(self._call(call), copy, get_checkpoint_id(config) is None)
        if found is False:  # our copy went meanwhile: read it whole
            call[1].pop("p_known_stamp", None)
            found = self._got(self._call(call), None, get_checkpoint_id(config) is None)
        return cast("CheckpointTuple | None", found)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for row in self._call(self._list_call(config, filter, before, limit)):
            yield self._tuple(row)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        call, next_config, plan = self._put_call(config, checkpoint, metadata, new_versions)
        try:
            stamp = self._call(call)
        except DeltaBaseMissing:  # a base this saver remembered is gone: send full values
            self._memory.drop_thread(plan.thread_id)
            call, next_config, plan = self._put_call(config, checkpoint, metadata, new_versions, deltas=False)
            stamp = self._call(call)
        self._after_put(plan, stamp, call[1])
        return next_config

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        call, plan = self._writes_call(config, writes, task_id, task_path)
        self._after_writes(plan, self._call(call))

    def delete_thread(self, thread_id: str) -> None:
        self._memory.drop_thread(str(thread_id))
        self._call((LG_THREAD_DELETE, {"p_thread_id": str(thread_id), "p_user_id": self.user_id}))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._call((LG_RUNS_DELETE, {"p_run_ids": [str(r) for r in run_ids], "p_user_id": self.user_id}))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._call((LG_THREAD_COPY, {"p_source_thread_id": str(source_thread_id),
                                     "p_target_thread_id": str(target_thread_id),
                                     "p_policy": self.policy, "p_user_id": self.user_id}))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._call(self._prune_call(thread_ids, strategy))

    # -- async: the same calls in a worker thread ---------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        rows = await asyncio.to_thread(self._call, self._list_call(config, filter, before, limit))
        for row in rows:
            yield self._tuple(row)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


class AsyncMemoriSaver(_MemoriSaverBase):
    """LangGraph checkpointer storing threads in pymemdb (asyncio, an AsyncConnectionPool).

    >>> async with AsyncMemoriSaver.from_dsn(dsn, user_id="alice") as saver:
    ...     graph = builder.compile(checkpointer=saver)
    """

    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        user_id: str,
        policy: str = "default",
        serde: SerializerProtocol | None = None,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        super().__init__(user_id=user_id, policy=policy, serde=serde, cache_bytes=cache_bytes)
        self.pool = pool
        self.loop = asyncio.get_running_loop()

    @classmethod
    @asynccontextmanager
    async def from_dsn(
        cls,
        db: Database | str | None = None,
        *,
        user_id: str,
        policy: str = "default",
        serde: SerializerProtocol | None = None,
        max_size: int = 8,
        durable: bool = True,
        cache_bytes: int = CACHE_BYTES,
    ) -> AsyncIterator[AsyncMemoriSaver]:
        """A saver with its own pool, closed on exit."""
        dsn = _dsn_of(db)
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=max_size, kwargs=_pool_kwargs(user_id, durable),
                                   open=False, name="pymemdb-langgraph-async")
        with wrap_exceptions():
            await (await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)).close()
            await pool.open(wait=True, timeout=30)
        try:
            yield cls(pool, user_id=user_id, policy=policy, serde=serde, cache_bytes=cache_bytes)
        finally:
            await pool.close()

    async def _call(self, call: Call) -> Any:
        function, args = call
        query = self._query(function, args)
        with wrap_exceptions():
            async with self.pool.connection() as conn:
                if function.returns == "scalar":
                    async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                        await cur.execute(query, args)
                        row = await cur.fetchone()
                        return None if row is None else row["value"]
                assert function.result is not None
                typed: psycopg.AsyncCursor[Any]
                async with conn.cursor(binary=True, row_factory=class_row(function.result)) as typed:
                    await typed.execute(query, args)
                    return await typed.fetchone() if function.returns == "one" else await typed.fetchall()

    # -- BaseCheckpointSaver, async ------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        checked = self._stamp_call(config)
        if checked is not None:
            stamp_call, held = checked
            found_stamp: LangGraphStamp | None = await self._call(stamp_call)
            hit = self._from_copy(config, held, *((found_stamp.stamp, found_stamp.writes_stamp)
                                                  if found_stamp is not None else (None, None)))
            if hit is not None:
                return hit
        call, copy = self._get_call(config)
        found = self._got(await self._call(call), copy, get_checkpoint_id(config) is None)
        if found is False:  # our copy went meanwhile: read it whole
            call[1].pop("p_known_stamp", None)
            found = self._got(await self._call(call), None, get_checkpoint_id(config) is None)
        return cast("CheckpointTuple | None", found)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for row in await self._call(self._list_call(config, filter, before, limit)):
            yield self._tuple(row)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        call, next_config, plan = self._put_call(config, checkpoint, metadata, new_versions)
        try:
            stamp = await self._call(call)
        except DeltaBaseMissing:  # a base this saver remembered is gone: send full values
            self._memory.drop_thread(plan.thread_id)
            call, next_config, plan = self._put_call(config, checkpoint, metadata, new_versions, deltas=False)
            stamp = await self._call(call)
        self._after_put(plan, stamp, call[1])
        return next_config

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        call, plan = self._writes_call(config, writes, task_id, task_path)
        self._after_writes(plan, await self._call(call))

    async def adelete_thread(self, thread_id: str) -> None:
        self._memory.drop_thread(str(thread_id))
        await self._call((LG_THREAD_DELETE, {"p_thread_id": str(thread_id), "p_user_id": self.user_id}))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._call((LG_RUNS_DELETE, {"p_run_ids": [str(r) for r in run_ids], "p_user_id": self.user_id}))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._call((LG_THREAD_COPY, {"p_source_thread_id": str(source_thread_id),
                                           "p_target_thread_id": str(target_thread_id),
                                           "p_policy": self.policy, "p_user_id": self.user_id}))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._call(self._prune_call(thread_ids, strategy))

    # -- sync entry points, for a graph's sync API called off the event loop -------
    def _sync(self, coro: Any) -> Any:
        try:
            if asyncio.get_running_loop() is self.loop:
                coro.close()
                raise asyncio.InvalidStateError(
                    "AsyncMemoriSaver's sync methods must be called from another thread; "
                    "use the async ones (ainvoke, astream) in the event loop, or MemoriSaver"
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return cast("CheckpointTuple | None", self._sync(self.aget_tuple(config)))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        rows = self._sync(self._call(self._list_call(config, filter, before, limit)))
        for row in rows:
            yield self._tuple(row)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return cast(RunnableConfig, self._sync(self.aput(config, checkpoint, metadata, new_versions)))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self.aprune(thread_ids, strategy=strategy))


# the long-term memory store (issue 17) lives in its own module; exported here beside the savers
from pymemdb.integrations.langgraph_store import AsyncMemoriStore, MemoriStore  # noqa: E402
