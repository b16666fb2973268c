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
user in ``memori.user_id``; ``MemoriSaver`` reads on one more such connection
when no other thread holds it (see ``MemoriSaver._call``). There is no saver-wide lock: concurrent calls use
different connections, and PostgreSQL orders writes to the same thread.

Both savers run the same plans (``_MemoriSaverBase._plan_*``: the calls an
operation makes, built with the client's declarations and composer, and what
their rows become); ``MemoriSaver`` executes them on its pool and
``AsyncMemoriSaver`` on its event loop. Errors are the client's
(``pymemdb.errors``): a PM code raised in SQL is the same class here as from
``db.call``.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar, cast
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
    DeltaChannelHistory,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg.rows import RowFactory, class_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pymemdb._sql import NOW, USER_ID, SqlFunction, maybe, one, rows, scalar
from pymemdb.db import Database, resolve_dsn
from pymemdb.errors import DeltaBaseMissing, InvalidArgument, PymemdbError, wrap_exceptions
from pymemdb.integrations._acting_user import ActingUser
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
from pymemdb.types import (
    LangGraphDeltaHistory,
    LangGraphPruneResult,
    LangGraphStamp,
    LangGraphTuple,
    LangGraphWritesPut,
)

__all__ = ["AsyncMemoriSaver", "AsyncMemoriStore", "MemoriSaver", "MemoriStore", "blob_value", "set_policy"]

T = TypeVar("T")

register_array_dumpers(psycopg.adapters)  # connections made from now on write our arrays fast

_loads: Callable[[str], Any]
_orjson_dumps: Callable[..., bytes] | None
try:  # a cached copy is parsed on every read: orjson (LangChain installs it) parses JSON ~3x faster
    from orjson import OPT_NON_STR_KEYS
    from orjson import dumps as _orjson_dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads, _orjson_dumps = json.loads, None


# A run of 19 ASCII digits may be a number beyond a 64-bit integer, which orjson would make a float. Found by
# mapping every digit to "1" and every other byte to a space, then one substring search: ~0.6 µs for a
# checkpoint's JSON, where a regular expression took ~7 (its version strings are mostly digits).
_DIGITS_AS_ONES = bytes(0x31 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"1" * 19


def _copy_loads(text: str) -> Any:
    """A stamped copy's JSON back: orjson, unless a number is long enough for orjson to make an integer a float."""
    return json.loads(text) if _LONG_NUMBER in text.encode().translate(_DIGITS_AS_ONES) else _loads(text)


def _copy_json(value: Any) -> str:
    """JSON text of a value read from jsonb, for a stamped copy: orjson writes it ~10x faster than json.dumps."""
    if _orjson_dumps is not None:
        try:
            return _orjson_dumps(value, option=OPT_NON_STR_KEYS).decode()
        except TypeError:  # pragma: no cover - jsonb holds nothing orjson cannot write
            pass
    return json.dumps(value)

# a checkpoint's key: the first parameters of lg_checkpoint_put|get|stamp|list and lg_writes_put
_CHECKPOINT = (("p_thread_id", "text"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"))
LG_CHECKPOINT_PUT = scalar(
    "lg_checkpoint_put",
    *_CHECKPOINT, ("p_parent_id", "uuid"), ("p_checkpoint", "jsonb"), ("p_metadata", "jsonb"),
    ("p_blob_channels", "text[]"), ("p_blob_versions", "text[]"), ("p_blob_types", "text[]"),
    ("p_blob_values", "bytea[]"), ("p_policy", "text"), USER_ID, NOW, ("p_blob_bases", "text[]"),
    ("p_blob_items", "integer[]"),
    result=str,
)
LG_WRITES_PUT = one(
    "lg_writes_put",
    *_CHECKPOINT, ("p_task_id", "text"), ("p_task_path", "text"), ("p_idx", "integer[]"), ("p_channels", "text[]"),
    ("p_types", "text[]"), ("p_values", "bytea[]"), ("p_policy", "text"), USER_ID, NOW, ("p_known_writes", "text"),
    result=LangGraphWritesPut,
)
LG_CHECKPOINT_GET = maybe(
    "lg_checkpoint_get", *_CHECKPOINT, USER_ID, NOW, ("p_known_stamp", "text"), ("p_known_writes", "text"),
    result=LangGraphTuple,
)
LG_CHECKPOINT_STAMP = maybe("lg_checkpoint_stamp", *_CHECKPOINT, USER_ID, NOW, result=LangGraphStamp)
_STAMP_ARGS = ("p_thread_id", "p_checkpoint_ns", "p_checkpoint_id", "p_user_id")
# not an argument: in a stamp call's arguments, the work to run while the server answers it (Prepared.rows_beside);
# the call's result is then (the stamp row, that work's result)
_BESIDE = "beside"
# the same call on libpq directly, prepared once per connection (MemoriSaver's read from its copy: see _libpq)
_STAMP_PREPARED = Prepared("memori_lg_checkpoint_stamp", LG_CHECKPOINT_STAMP.positional(_STAMP_ARGS))
# and the cold read, every argument given (an absent known stamp is NULL, its default): its row as psycopg loads
# it, into a LangGraphTuple (_first_tuple)
_GET_ARGS = ("p_thread_id", "p_checkpoint_ns", "p_checkpoint_id", "p_user_id", "p_known_stamp", "p_known_writes")
_GET_PREPARED = Prepared("memori_lg_checkpoint_get", LG_CHECKPOINT_GET.positional(_GET_ARGS))
LG_BLOB_VALUE = scalar(
    "lg_blob_value",
    ("p_thread_id", "text"), ("p_channel", "text"), ("p_version", "text"), ("p_checkpoint_ns", "text"), USER_ID, NOW,
    result=bytes,
)
LG_CHECKPOINT_LIST = rows(
    "lg_checkpoint_list",
    *_CHECKPOINT, ("p_filter", "jsonb"), ("p_before", "uuid"), ("p_limit", "integer"), USER_ID, NOW,
    result=LangGraphTuple,
)
LG_DELTA_HISTORY = rows(
    "lg_delta_history",
    ("p_thread_id", "text"), ("p_channels", "text[]"), ("p_checkpoint_ns", "text"), ("p_checkpoint_id", "uuid"),
    USER_ID, NOW,
    result=LangGraphDeltaHistory,
)
LG_THREAD_DELETE = scalar("lg_thread_delete", ("p_thread_id", "text"), USER_ID, result=int)
LG_THREAD_COPY = scalar(
    "lg_thread_copy",
    ("p_source_thread_id", "text"), ("p_target_thread_id", "text"), ("p_policy", "text"), USER_ID, NOW,
    result=int,
)
LG_THREADS_PRUNE = one(
    "lg_threads_prune", ("p_thread_ids", "text[]"), ("p_strategy", "text"), USER_ID, NOW, result=LangGraphPruneResult,
)
LG_RUNS_DELETE = scalar("lg_runs_delete", ("p_run_ids", "text[]"), USER_ID, NOW, result=int)
LG_POLICY_SET = scalar(
    "lg_policy_set",
    ("p_policy", "text"), ("p_superseded_after", "interval"), ("p_idle_after", "interval"), ("p_priority", "integer"),
    result=type(None),
)

Call = tuple[SqlFunction[Any], dict[str, Any]]  # a declaration and its arguments
Plan = Generator[Call, Any, T]
"""A saver operation: yields each call it makes, gets back its result (or its PymemdbError), returns its value.

Plans hold everything a sync and an async saver share (statements, arguments,
the saver's copies, rows back into LangGraph's tuples); ``_run`` (sync) and
``_arun`` (async) only execute the calls.
"""


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
        self._statements: dict[tuple[str, frozenset[str]], _Statement] = {}
        self._memory = SaverMemory(cache_bytes)
        if not user_id:
            raise InvalidArgument("MemoriSaver needs a user_id", sqlstate="PM001",
                                  hint="LangGraph state belongs to a user: MemoriSaver(db, user_id='alice').")
        self.user_id = user_id
        self.policy = policy
        self._acting = ActingUser(user_id)  # SET LOCAL per call on Citus (see _acting_user)

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

    def _statement(self, function: SqlFunction[Any], args: dict[str, Any]) -> _Statement:
        """A call's statement, built once per set of arguments (composing costs more than the read).

        ``function.query`` with binary parameters: blobs and their arrays then
        travel as bytes, where the text format escapes every byte of every blob.
        """
        key = (function.name, frozenset(args))
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = _Statement.of(function, args)
        return statement

    # -- arguments -----------------------------------------------------------
    def _put_call(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        deltas: bool = True,
    ) -> tuple[Call, RunnableConfig, _PutSent]:
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
        sent = _PutSent(thread_id, ns, str(checkpoint["id"]), conf.get("checkpoint_id"), checkpoint_json,
                        metadata_json, {})
        for key, version in new_versions.items():
            if key in blobs:
                type_, data = self.serde.dumps_typed(blobs[key])
                sent.full[key] = (str(version), type_, data)
                base, tail, appended = self._delta(thread_id, ns, key, type_, data) if deltas else (None, data, None)
                channels.append(key)
                versions.append(str(version))
                types.append(type_)
                values.append(tail)
                bases.append(base)
                items.append(appended)
        sent.blob_versions = {key: str(checkpoint["channel_versions"][key]) for key in blobs
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
        return (LG_CHECKPOINT_PUT, args), next_config, sent

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

    def _after_put(self, sent: _PutSent, stamp: str | None, args: dict[str, Any]) -> None:
        """Remember what the server now holds: delta bases, and the checkpoint under its stamp."""
        if not self._memory.max_bytes:
            return
        key = (sent.thread_id, sent.ns)
        if stamp is None:  # a blob version existed already, or an older checkpoint: our bytes may not be theirs
            self._memory.drop(("tuple", *key))
            for channel in sent.full:
                self._memory.drop(("base", *key, channel))
            return
        bases = args.get("p_blob_bases") or [None] * len(sent.full)
        for (channel, (version, type_, data)), base in zip(sent.full.items(), bases, strict=True):
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
        for channel, version in sent.blob_versions.items():
            if channel in sent.full and sent.full[channel][0] == version:
                blobs.append((channel, version, sent.full[channel][1], sent.full[channel][2]))
            elif channel in carried and carried[channel][1] == version:
                blobs.append(carried[channel])
            else:  # a value this saver never held as bytes: read it from the server next time
                self._memory.drop(("tuple", *key))
                return
        parent = sent.parent_id
        self._memory.put(("tuple", *key), Stamped(
            stamp, str(UUID(sent.checkpoint_id)), str(UUID(str(parent))) if parent is not None else None,
            sent.checkpoint_json, sent.metadata_json, tuple(blobs), "", ()))  # a new checkpoint: no writes yet

    def _writes_call(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple[Call, _WritesSent]:
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
        return (LG_WRITES_PUT, args), _WritesSent(thread_id, ns, copy, held)

    def _after_writes(self, sent: _WritesSent, result: LangGraphWritesPut | None) -> None:
        """Keep the copy's writes current when the server says the copy plus these writes is all of them."""
        if sent.copy is None:
            return
        key = ("tuple", sent.thread_id, sent.ns)
        if result is None or result.writes_stamp is None:  # someone else's writes, or one replaced: read them
            self._memory.put(key, replace(sent.copy, writes_stamp=None, writes=()))
            return
        known = {(w[0], w[5]) for w in sent.copy.writes}  # (task, idx): a retried regular write was kept as it was
        writes = sent.copy.writes + tuple(w for w in sent.writes if (w[0], w[5]) not in known)
        self._memory.put(key, replace(sent.copy, writes_stamp=result.writes_stamp, writes=writes))

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
        checkpoint_id, parent_id = ids = _ids(row)
        writes = _writes(row)
        if latest and row.stamp is not None and self._memory.max_bytes:  # (building a copy costs ~10 µs)
            self._memory.put(key, Stamped(
                row.stamp, checkpoint_id, parent_id, _copy_json(row.checkpoint), _copy_json(row.metadata),
                tuple((c, str(row.checkpoint["channel_versions"].get(c)), t, bytes(v))
                      for c, t, v in zip(row.blob_channels or [], row.blob_types or [], row.blob_values or [],
                                         strict=True) if v is not None),
                row.writes_stamp, writes))
        return self._tuple(row, ids=ids, writes=writes)

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

    # -- plans: each operation once, for both savers ---------------------------
    def _plan_get(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        """The stamps alone when this saver holds the checkpoint with its writes and they are current; else the read."""
        call, copy = self._get_call(config)
        if copy is not None and copy.writes_stamp is not None:
            held = copy  # a name of its own for the lambda: mypy does not carry copy's narrowing into it
            thread_id, ns = call[1]["p_thread_id"], call[1]["p_checkpoint_ns"]
            check = {k: call[1][k] for k in _STAMP_ARGS}
            # the tuple is built from the copy while the server checks its stamps (kept only if they match)
            check[_BESIDE] = lambda: self._copy_tuple(thread_id, ns, held, held.writes)
            found: _StampRow | None
            found, built = yield LG_CHECKPOINT_STAMP, check
            if found is not None and found.stamp == copy.stamp and found.writes_stamp == copy.writes_stamp:
                return cast(CheckpointTuple, built)
        latest = get_checkpoint_id(config) is None
        got = self._got((yield call), copy, latest)
        if got is False:  # our copy went meanwhile: read it whole
            call[1].pop("p_known_stamp", None)
            got = self._got((yield call), None, latest)
        return cast("CheckpointTuple | None", got)

    def _plan_list(
        self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None,
        limit: int | None,
    ) -> Plan[Iterator[CheckpointTuple]]:
        found: list[LangGraphTuple] = yield self._list_call(config, filter, before, limit)
        return map(self._tuple, found)  # deserialised as the caller iterates, in the caller's thread

    def _plan_put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Plan[RunnableConfig]:
        call, next_config, sent = self._put_call(config, checkpoint, metadata, new_versions)
        try:
            stamp = yield call
        except DeltaBaseMissing:  # a base this saver remembered is gone: send full values
            self._memory.drop_thread(sent.thread_id)
            call, next_config, sent = self._put_call(config, checkpoint, metadata, new_versions, deltas=False)
            stamp = yield call
        self._after_put(sent, stamp, call[1])
        return next_config

    def _plan_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Plan[None]:
        call, sent = self._writes_call(config, writes, task_id, task_path)
        self._after_writes(sent, (yield call))

    def _plan_delta_history(self, config: RunnableConfig, channels: Sequence[str]
                            ) -> Plan[Mapping[str, DeltaChannelHistory]]:
        """LangGraph's DeltaChannel history in one call (memori.lg_delta_history walks the parent chain)."""
        if not channels:
            return {}
        conf = config["configurable"]
        found: list[LangGraphDeltaHistory] = yield LG_DELTA_HISTORY, {
            "p_thread_id": str(conf["thread_id"]),
            "p_channels": list(channels),
            "p_checkpoint_ns": conf.get("checkpoint_ns", "") or "",
            "p_checkpoint_id": get_checkpoint_id(config),
            "p_user_id": self.user_id,
        }
        history: dict[str, DeltaChannelHistory] = {}
        for row in found:
            entry: DeltaChannelHistory = {"writes": [
                (task_id, row.channel, self.serde.loads_typed((type_, value)))
                for task_id, type_, value in zip(row.write_task_ids, row.write_types, row.write_values, strict=True)]}
            if row.seeded:
                entry["seed"] = (self.serde.loads_typed((row.seed_type, row.seed_value))
                                 if row.seed_type is not None and row.seed_value is not None else row.seed_inline)
            history[row.channel] = entry
        return history

    def _plan_delete_thread(self, thread_id: str) -> Plan[None]:
        self._memory.drop_thread(str(thread_id))
        yield LG_THREAD_DELETE, {"p_thread_id": str(thread_id), "p_user_id": self.user_id}

    def _plan_delete_for_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        yield LG_RUNS_DELETE, {"p_run_ids": [str(r) for r in run_ids], "p_user_id": self.user_id}

    def _plan_copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[None]:
        yield LG_THREAD_COPY, {"p_source_thread_id": str(source_thread_id), "p_target_thread_id": str(target_thread_id),
                               "p_policy": self.policy, "p_user_id": self.user_id}

    def _plan_prune(self, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
        yield self._prune_call(thread_ids, strategy)

    # -- the shells: MemoriSaver runs plans on its pool, AsyncMemoriSaver on its event loop
    def _run(self, plan: Plan[T]) -> T:
        raise NotImplementedError

    async def _arun(self, plan: Plan[T]) -> T:
        raise NotImplementedError

    # -- BaseCheckpointSaver -----------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._plan_get(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._plan_get(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        yield from self._run(self._plan_list(config, filter, before, limit))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for found in await self._arun(self._plan_list(config, filter, before, limit)):
            yield found

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self._run(self._plan_put(config, checkpoint, metadata, new_versions))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self._arun(self._plan_put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._run(self._plan_writes(config, writes, task_id, task_path))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._arun(self._plan_writes(config, writes, task_id, task_path))

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]
                                  ) -> Mapping[str, DeltaChannelHistory]:
        return self._run(self._plan_delta_history(config, channels))

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]
                                         ) -> Mapping[str, DeltaChannelHistory]:
        return await self._arun(self._plan_delta_history(config, channels))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._plan_delete_thread(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._plan_delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._plan_delete_for_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._plan_delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._plan_copy_thread(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._plan_copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._plan_prune(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._plan_prune(thread_ids, strategy))

    # -- rows back into LangGraph's tuple ---------------------------------------
    def _tuple(self, row: LangGraphTuple, copy: Stamped | None = None, *, ids: tuple[str, str | None] | None = None,
               writes: tuple[tuple[str, str, str, bytes, str, int], ...] | None = None) -> CheckpointTuple:
        """LangGraph's tuple from a row, or from a stamped copy and the row's fresh writes (new objects each time).

        ``ids`` (checkpoint and parent id as text) and ``writes``: the row's, when the caller has them already.
        """
        if copy is not None:
            return self._copy_tuple(row.thread_id, row.checkpoint_ns, copy,
                                    copy.writes if copy.writes_stamp is not None else _writes(row))
        if ids is None:
            ids = _ids(row)
        return self._assemble(
            row.thread_id, row.checkpoint_ns, ids[0], ids[1], dict(row.checkpoint or {}), row.metadata,
            zip(row.blob_channels or [], row.blob_types or [], row.blob_values or [], strict=True),
            _writes(row) if writes is None else writes)

    def _copy_tuple(self, thread_id: str, ns: str, copy: Stamped,
                    writes: tuple[tuple[str, str, str, bytes, str, int], ...]) -> CheckpointTuple:
        return self._assemble(thread_id, ns, copy.checkpoint_id, copy.parent_id, _copy_loads(copy.checkpoint_json),
                              _copy_loads(copy.metadata_json), ((c, t, v) for c, _, t, v in copy.blobs), writes)

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


def _ids(row: LangGraphTuple) -> tuple[str, str | None]:
    """A row's checkpoint id and parent id as text (UUIDs read from the database)."""
    return str(row.checkpoint_id), str(row.parent_id) if row.parent_id is not None else None


def _writes(row: LangGraphTuple) -> tuple[tuple[str, str, str, bytes, str, int], ...]:
    return tuple(zip(row.write_task_ids or [], row.write_channels or [], row.write_types or [],
                     [bytes(v) for v in row.write_values or []], row.write_task_paths or [], row.write_idx or [],
                     strict=True))


@dataclass(frozen=True)
class _Statement:
    """A declaration's statement for one set of arguments: its text, how rows are made, what the caller gets."""

    text: str
    row_factory: RowFactory[Any]
    shape: Callable[[list[Any]], Any]

    @staticmethod
    def of(function: SqlFunction[Any], args: dict[str, Any]) -> _Statement:
        text = function.query(args, binary=True).as_string(None)
        if function.returns == "scalar":
            return _Statement(text, tuple_row, _scalar)
        assert function.result is not None
        return _Statement(text, class_row(function.result), _first if function.returns == "one" else _all)


def _scalar(found: list[Any]) -> Any:
    return found[0][0] if found else None


def _first(found: list[Any]) -> Any:
    return found[0] if found else None


def _all(found: list[Any]) -> Any:
    return found


class _StampRow(NamedTuple):
    """The row of the prepared stamp read (a LangGraphStamp costs ~30 % more to build)."""

    checkpoint_id: UUID | None
    stamp: str | None
    writes_stamp: str | None

def _uuid_text(value: str) -> str:
    try:
        return str(UUID(value))
    except ValueError:
        return value


@dataclass(frozen=True)
class _WritesSent:
    """What a put_writes sent, with the copy it extends (None: no copy of that checkpoint with its writes)."""

    thread_id: str
    ns: str
    copy: Stamped | None
    writes: tuple[tuple[str, str, str, bytes, str, int], ...]  # as Stamped.writes


@dataclass
class _PutSent:
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


def _pool_options(user_id: str, durable: bool, max_size: int) -> dict[str, Any]:
    """A saver pool's options (opened by its saver, after one direct attempt to connect)."""
    return {"min_size": 1, "max_size": max_size, "kwargs": _pool_kwargs(user_id, durable), "open": False}


def _pool_kwargs(user_id: str, durable: bool) -> dict[str, Any]:
    # every operation is one function call: autocommit saves the COMMIT round trip.
    # Generic plans: each read's statement (lg_checkpoint_stamp, lg_checkpoint_get:
    # inlined into the prepared call on one server, PL/pgSQL's own cached plan where
    # Citus is installed) would otherwise be planned again on every call whenever
    # PostgreSQL's cost estimate prefers custom plans;
    # planning costs more than the read (the stamp's round trip, p50 / p95: 130 / 156 us
    # generic, 137 / 197 under `auto`, 331 / 438 custom; 2026-11-29).
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

    def __init__(self, db: Database | str | None = None, *, user_id: str, policy: str = "default",
                 serde: SerializerProtocol | None = None, max_size: int = 8, durable: bool = True,
                 cache_bytes: int = CACHE_BYTES) -> None:
        super().__init__(user_id=user_id, policy=policy, serde=serde, cache_bytes=cache_bytes)
        dsn = _dsn_of(db)
        self.pool = ConnectionPool(dsn, **_pool_options(user_id, durable, max_size), name="pymemdb-langgraph")
        # the reads' own connection, beside the pool (see _call): opened by the first read, closed with the saver
        self._reader: psycopg.Connection[Any] | None = None
        self._reader_lock = threading.Lock()
        self._reader_dsn, self._reader_kwargs = dsn, _pool_kwargs(user_id, durable)
        with wrap_exceptions():
            # one direct attempt first: it fails fast with libpq's message, the pool would retry 30 s
            psycopg.connect(dsn, connect_timeout=10).close()
            self.pool.open(wait=True, timeout=30)

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self.pool.close()

    def __enter__(self) -> MemoriSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    result = self._call(call)
                except PymemdbError as exc:  # the plan may handle it (a put's missing delta base)
                    call = plan.throw(exc)
                else:
                    call = plan.send(result)
        except StopIteration as done:
            return cast(T, done.value)

    async def _arun(self, plan: Plan[T]) -> T:
        """The async methods: the sync plan in a worker thread."""
        return await asyncio.to_thread(self._run, plan)

    def _call(self, call: Call) -> Any:
        """One call on a pooled connection; the reads as prepared statements on libpq (see _libpq).

        The reads take the saver's reader connection when no other thread holds
        it (a lock and no pool checkout: ~10 µs of a ~150 µs read from the copy),
        else a pooled one.
        """
        function, args = call
        if function is LG_CHECKPOINT_STAMP or function is LG_CHECKPOINT_GET:
            if self._reader_lock.acquire(blocking=False):
                try:
                    return self._read(function, args, None)
                finally:
                    self._reader_lock.release()
            with wrap_exceptions(), self.pool.connection() as conn:
                return self._read(function, args, conn)
        with wrap_exceptions(), self.pool.connection() as conn, self._acting.call(conn):
            statement = self._statement(function, args)
            with conn.cursor(binary=True, row_factory=statement.row_factory) as cur:
                return statement.shape(cur.execute(statement.text, args).fetchall())

    def _read(self, function: SqlFunction[Any], args: dict[str, Any], conn: psycopg.Connection[Any] | None) -> Any:
        """A read on ``conn``, or on the reader connection (the caller holds its lock; opened on first use)."""
        with wrap_exceptions():
            reader = conn is None
            if conn is None:
                conn = self._reader
                if conn is None or conn.closed:
                    conn = self._reader = psycopg.Connection.connect(self._reader_dsn, **self._reader_kwargs)
            try:
                if self._acting.citus is False:  # one server: no transaction around it (its context costs ~3 µs)
                    return _fetch(function, args, conn)
                with self._acting.call(conn):
                    return _fetch(function, args, conn)
            except BaseException:
                if reader and (conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
                    self._reader = None  # the next read opens another
                    conn.close()
                raise


def _fetch(function: SqlFunction[Any], args: dict[str, Any], conn: psycopg.Connection[Any]) -> Any:
    """A read's prepared statement on libpq (see _libpq): the stamp check, or the read of a whole tuple."""
    prepared, params, shape = _read_plan(function, args)
    if (beside := args.get(_BESIDE)) is not None:
        found, done = prepared.rows_beside(conn, params, beside)
        return shape(found), done
    return shape(prepared.rows(conn, params))


async def _afetch(function: SqlFunction[Any], args: dict[str, Any], conn: psycopg.AsyncConnection[Any]) -> Any:
    """``_fetch`` on an async connection."""
    prepared, params, shape = _read_plan(function, args)
    if (beside := args.get(_BESIDE)) is not None:
        found, done = await prepared.arows_beside(conn, params, beside)
        return shape(found), done
    return shape(await prepared.arows(conn, params))


def _read_plan(function: SqlFunction[Any], args: dict[str, Any]
               ) -> tuple[Prepared, list[str | None], Callable[[list[tuple[Any, ...]]], Any]]:
    """A read's statement, its text parameters and how its rows become the call's result (None: no row)."""
    if function is LG_CHECKPOINT_STAMP:
        return _STAMP_PREPARED, [args[k] for k in _STAMP_ARGS], _first_stamp
    return _GET_PREPARED, [None if (v := args.get(k)) is None else str(v) for k in _GET_ARGS], _first_tuple


def _first_stamp(found: list[tuple[Any, ...]]) -> _StampRow | None:
    return _StampRow._make(found[0]) if found else None


def _first_tuple(found: list[tuple[Any, ...]]) -> LangGraphTuple | None:
    return LangGraphTuple(*found[0]) if found else None


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
    async def from_dsn(cls, db: Database | str | None = None, *, user_id: str, policy: str = "default",
                       serde: SerializerProtocol | None = None, max_size: int = 8, durable: bool = True,
                       cache_bytes: int = CACHE_BYTES) -> AsyncIterator[AsyncMemoriSaver]:
        """A saver with its own pool, closed on exit."""
        dsn = _dsn_of(db)
        pool = AsyncConnectionPool(dsn, **_pool_options(user_id, durable, max_size), name="pymemdb-langgraph-async")
        with wrap_exceptions():
            await (await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)).close()
            await pool.open(wait=True, timeout=30)
        try:
            yield cls(pool, user_id=user_id, policy=policy, serde=serde, cache_bytes=cache_bytes)
        finally:
            await pool.close()

    async def _arun(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    result = await self._call(call)
                except PymemdbError as exc:  # the plan may handle it (a put's missing delta base)
                    call = plan.throw(exc)
                else:
                    call = plan.send(result)
        except StopIteration as done:
            return cast(T, done.value)

    def _run(self, plan: Plan[T]) -> T:
        """The sync methods, for a graph's sync API called off the event loop: the plan on the loop."""
        try:
            if asyncio.get_running_loop() is self.loop:
                plan.close()
                raise asyncio.InvalidStateError(
                    "AsyncMemoriSaver's sync methods must be called from another thread; "
                    "use the async ones (ainvoke, astream) in the event loop, or MemoriSaver"
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(self._arun(plan), self.loop).result()

    async def _call(self, call: Call) -> Any:
        """One call on a pooled connection; the reads as prepared statements on libpq, as MemoriSaver's."""
        function, args = call
        if function is LG_CHECKPOINT_STAMP or function is LG_CHECKPOINT_GET:
            with wrap_exceptions():
                async with self.pool.connection() as conn:
                    if self._acting.citus is False:  # one server: no transaction around it, as MemoriSaver
                        return await _afetch(function, args, conn)
                    async with self._acting.acall(conn):
                        return await _afetch(function, args, conn)
        statement = self._statement(function, args)
        with wrap_exceptions():
            async with self.pool.connection() as conn, self._acting.acall(conn), \
                    conn.cursor(binary=True, row_factory=statement.row_factory) as cur:
                await cur.execute(statement.text, args)
                return statement.shape(await cur.fetchall())


# the long-term memory store (issue 17) lives in its own module; exported here beside the savers
from pymemdb.integrations.langgraph_store import AsyncMemoriStore, MemoriStore  # noqa: E402
