"""What a LangGraph saver keeps in memory: delta bases of list channels and stamped copies of checkpoints.

Neither is ever trusted on its own:

* a **delta base** (the last value of a channel this saver wrote, as bytes)
  lets a put send only the items appended to a growing list; the server checks
  that the base version exists unexpired in the thread (else ``PM081``, and the
  saver sends the full value), and reads rebuild the full value from the chain;
* a **stamped copy** of a checkpoint (its JSON, serialised blobs and pending
  writes, never the deserialised objects, which LangGraph mutates) is used by
  ``get_tuple`` only when the server (``memori.lg_checkpoint_stamp``, one round
  trip) says both stamps are still current: the checkpoint's (thread key, row
  version, checkpoint id) and its writes' (their row versions). Any put,
  write, update, delete or re-creation by any process changes one of them.

Both live in one LRU bounded in bytes, guarded by a lock held for dict
operations only (never across a database call).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

CACHE_BYTES = 64 * 2**20  # default budget of a saver's delta bases and stamped copies
DELTA_MAX_CHAIN = 16  # a delta chain longer than this is cut by a full value (bounds a cold read)
_ENTRY_OVERHEAD = 200  # rough bytes of an entry beyond its payloads


def msgpack_array(data: bytes) -> tuple[int, int] | None:
    """(items, header length) of a msgpack array (fixarray, array 16, array 32); None for anything else."""
    if not data:
        return None
    b = data[0]
    if 0x90 <= b <= 0x9F:
        return b - 0x90, 1
    if b == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big"), 3
    if b == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big"), 5
    return None


@dataclass(frozen=True)
class DeltaBase:
    """The last full value of a channel this saver stored: its version, item count and items' bytes."""

    version: str
    items: int
    body: bytes  # the array's items, without its header
    depth: int  # deltas between this version and its chain's full value


@dataclass(frozen=True)
class Stamped:
    """A checkpoint as stored, with the stamp the server gave it (writes are always read fresh)."""

    stamp: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint_json: str
    metadata_json: str
    blobs: tuple[tuple[str, str, str, bytes], ...]  # (channel, version, type, serialised value)
    writes_stamp: str | None = None  # None: the writes are not held (always read)
    writes: tuple[tuple[str, str, str, bytes, str, int], ...] = ()  # (task, channel, type, value, path, idx)


def _size(value: Any) -> int:
    if isinstance(value, DeltaBase):
        return _ENTRY_OVERHEAD + len(value.body)
    assert isinstance(value, Stamped)
    return (_ENTRY_OVERHEAD + len(value.checkpoint_json) + len(value.metadata_json)
            + sum(len(b[3]) + 64 for b in value.blobs) + sum(len(w[3]) + 96 for w in value.writes))


class SaverMemory:
    """An LRU of delta bases and stamped copies, bounded by ``max_bytes`` (0 turns both off)."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        size = _size(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes // 4:  # one huge value would evict everything else
                return
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def drop(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

    def drop_thread(self, thread_id: str | None = None) -> None:
        """Forget a thread's entries (every thread's when None): keys start with (kind, thread_id)."""
        with self._lock:
            for key in [k for k in self._entries if thread_id is None or k[1] == thread_id]:
                self._bytes -= self._entries.pop(key)[1]

    def __len__(self) -> int:
        return len(self._entries)


# -- arrays as binary parameters ------------------------------------------------------
# psycopg finds a list's dumper by looking at its elements (in Python) on every
# call: for a put's six arrays that is most of the client's time. The savers
# wrap their arrays in these types, whose dumpers write PostgreSQL's binary
# array format directly (a list subclass: without the dumpers registered,
# psycopg's own list dumper still applies).
_ARRAY_HEADER = struct.Struct("!iiiii")  # ndim, has nulls, element oid, length, lower bound
_NULL = b"\xff\xff\xff\xff"


class TextArray(list[str | None]):
    """A text[] parameter."""


class ByteaArray(list[bytes | None]):
    """A bytea[] parameter."""


class IntArray(list[int | None]):
    """An integer[] parameter."""


class _ArrayDumper(Dumper):
    format = Format.BINARY
    element_oid = 0

    def _element(self, value: Any) -> bytes:
        raise NotImplementedError

    def dump(self, obj: Any) -> Buffer:
        if not obj:
            return struct.pack("!iii", 0, 0, self.element_oid)
        parts = []
        nulls = 0
        for value in obj:
            if value is None:
                parts.append(_NULL)
                nulls = 1
            else:
                data = self._element(value)
                parts.append(len(data).to_bytes(4, "big"))
                parts.append(data)
        return _ARRAY_HEADER.pack(1, nulls, self.element_oid, len(obj), 1) + b"".join(parts)


class _TextArrayDumper(_ArrayDumper):
    oid = 1009
    element_oid = 25

    def _element(self, value: Any) -> bytes:
        return str(value).encode()


class _ByteaArrayDumper(_ArrayDumper):
    oid = 1001
    element_oid = 17

    def _element(self, value: Any) -> bytes:
        return bytes(value)


class _IntArrayDumper(_ArrayDumper):
    oid = 1007
    element_oid = 23

    def _element(self, value: Any) -> bytes:
        return int(value).to_bytes(4, "big", signed=True)


def register_array_dumpers(adapters: AdaptersMap) -> None:
    adapters.register_dumper(TextArray, _TextArrayDumper)
    adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
    adapters.register_dumper(IntArray, _IntArrayDumper)
