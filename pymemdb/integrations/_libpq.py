"""One SQL call run through libpq directly: prepared once per connection, text parameters and results.

A saver's read from its cached copy is a round trip that sends three short
strings and gets three back (``memori.lg_checkpoint_stamp``). Through a psycopg
cursor that call costs 30-60 µs more than the round trip itself (adapting
parameters and rows, result bookkeeping), which is as much as the server
spends on it. ``Prepared.rows`` skips that layer: ``PQexecPrepared`` on the
pooled connection's ``pgconn``, the statement prepared on first use per
connection (and again if something deallocated it), errors raised as the
psycopg exception of their SQLSTATE, so ``wrap_exceptions`` maps them as usual.

The cold read (``memori.lg_checkpoint_get``: a row of 17 columns, arrays of
blobs among them) goes the same way with binary results, decoded here by
column type (``columns``): through a cursor that row cost ~100 µs more than
the round trip (psycopg's execute and its loaders; the server's part is
~90 µs), as much as the whole read of LangGraph's own saver spends in Python.

Only for connections that nothing else uses at the same time (a connection
checked out of the saver's pool, or the saver's own reader), in autocommit or
inside the transaction the caller opened: psycopg's view of the connection
stays right because every statement here ends before the next one starts.
"""

from __future__ import annotations

import json
import struct
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast
from uuid import UUID

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result
from psycopg.generators import execute

T = TypeVar("T")


def _nothing() -> None:
    """The work beside a plain ``rows`` call: none."""


_NOT_PREPARED = b"26000"  # invalid_sql_statement_name: DEALLOCATE ALL or DISCARD ALL dropped it
_ALREADY_PREPARED = b"42P05"  # duplicate_prepared_statement

_ARRAY = struct.Struct("!iiI")  # a binary array's ndim, has-nulls flag, element type
_DIM = struct.Struct("!ii")  # a dimension's length and lower bound
_LENGTH = struct.Struct("!i")


def _text(data: bytes, encoding: str) -> str:
    return data.decode(encoding)


def _uuid(data: bytes, encoding: str) -> UUID:
    return UUID(bytes=bytes(data))


def _jsonb(data: bytes, encoding: str) -> Any:
    """jsonb's binary form: a version byte (1), then the JSON text."""
    if data[:1] != b"\x01":
        raise ValueError(f"unknown jsonb binary format version {data[:1]!r}")
    # json, as psycopg's loader: orjson would be ~3 µs faster, but it reads an integer beyond 64 bits as a float
    return json.loads(data[1:])


def _bytea(data: bytes, encoding: str) -> bytes:
    return bytes(data)


def _int4(data: bytes, encoding: str) -> int:
    return int.from_bytes(data, "big", signed=True)


def _array(element: Callable[[Any, str], Any]) -> Callable[[bytes, str], list[Any]]:
    """A one-dimensional array's binary form, as psycopg loads it: a list ([] when empty, None for NULL items)."""

    def load(data: bytes, encoding: str) -> list[Any]:
        ndim, _, _ = _ARRAY.unpack_from(data)
        if ndim == 0:
            return []
        if ndim != 1:
            raise ValueError(f"expected a one-dimensional array, got {ndim} dimensions")
        count, _ = _DIM.unpack_from(data, _ARRAY.size)
        view = memoryview(data)
        at = _ARRAY.size + _DIM.size
        items: list[Any] = []
        for _ in range(count):
            (length,) = _LENGTH.unpack_from(view, at)
            at += 4
            if length < 0:
                items.append(None)
            else:
                items.append(element(view[at:at + length], encoding))
                at += length
        return items

    return load


def _bytes_text(data: Any, encoding: str) -> str:
    return bytes(data).decode(encoding)


# a result column's binary decoder by its SQL type (as the function's result type declares it)
BINARY: dict[str, Callable[[bytes, str], Any]] = {
    "text": _text, "uuid": _uuid, "jsonb": _jsonb, "text[]": _array(_bytes_text), "bytea[]": _array(_bytea),
    "integer[]": _array(_int4),
}


class Prepared:
    """A statement with positional text parameters ($1, $2, ...), run on a connection's libpq handle.

    ``columns``: the result's column types (keys of ``BINARY``), to get binary
    results decoded by type; without, every value comes back as text.
    ``rows`` runs on a sync connection, ``arows`` on an async one without
    blocking the event loop; both send the statement and wait for its result
    as psycopg's own cursors do (its ``execute`` generator, run by the
    connection's ``wait``). ``rows_beside`` and ``arows_beside`` run the
    caller's own work between sending the statement and reading its result;
    ``rows`` and ``arows`` are them with no such work.
    """

    def __init__(self, name: str, query: str, columns: Sequence[str] | None = None) -> None:
        self.name = name.encode()
        self.query = query.encode()
        self.loaders = None if columns is None else [BINARY[c] for c in columns]
        self.result_format = 0 if columns is None else 1
        # connection -> its client encoding, for the connections the statement is prepared on
        self._prepared_on: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def rows(self, conn: psycopg.Connection[Any], params: Sequence[str | None]) -> list[tuple[Any, ...]]:
        """The result rows: as text, or decoded by ``columns`` (None for NULL)."""
        return self.rows_beside(conn, params, _nothing)[0]

    async def arows(self, conn: psycopg.AsyncConnection[Any], params: Sequence[str | None]) -> list[tuple[Any, ...]]:
        """``rows`` on an async connection."""
        return (await self.arows_beside(conn, params, _nothing))[0]

    def rows_beside(self, conn: psycopg.Connection[Any], params: Sequence[str | None],
                    beside: Callable[[], T]) -> tuple[list[tuple[Any, ...]], T]:
        """``rows``, with ``beside()`` run while the server works on the statement; its result comes second.

        The statement is sent, ``beside`` runs (once, even when the statement
        must be prepared again), then the result is read: the caller's own work
        overlaps the round trip instead of following it (a read from the
        saver's copy builds its tuple while the server checks the copy's
        stamps). If ``beside`` raises, the result is still read (and dropped)
        before the error goes on, so the connection stays usable. The wait is
        psycopg's own: the GIL released, Ctrl-C cancels the statement.
        """
        pgconn = conn.pgconn
        done: list[T] = []
        for attempt in (1, 2):
            encoding = self._prepared_on.get(conn)
            if encoding is None:
                encoding = self._prepared(conn, pgconn.prepare(self.name, self.query))
            pgconn.send_query_prepared(self.name, self._values(params, encoding), result_format=self.result_format)
            try:
                if not done:
                    done.append(beside())
            finally:
                result = conn.wait(execute(pgconn))[-1]
            if self._again(conn, result, attempt):
                continue
            return self._rows(result, encoding), done[0]
        raise AssertionError("unreachable")  # pragma: no cover

    async def arows_beside(self, conn: psycopg.AsyncConnection[Any], params: Sequence[str | None],
                           beside: Callable[[], T]) -> tuple[list[tuple[Any, ...]], T]:
        """``rows_beside`` on an async connection: the event loop runs while the statement waits for the server."""
        pgconn = conn.pgconn
        done: list[T] = []
        for attempt in (1, 2):
            encoding = self._prepared_on.get(conn)
            if encoding is None:
                pgconn.send_prepare(self.name, self.query)
                encoding = self._prepared(conn, (await conn.wait(execute(pgconn)))[-1])
            pgconn.send_query_prepared(self.name, self._values(params, encoding), result_format=self.result_format)
            pgconn.flush()  # non-blocking: on its way before beside() runs (execute flushes whatever is left)
            try:
                if not done:
                    done.append(beside())
            finally:
                result = (await conn.wait(execute(pgconn)))[-1]
            if self._again(conn, result, attempt):
                continue
            return self._rows(result, encoding), done[0]
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the steps both share ----------------------------------------------------
    def _prepared(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], result: pq.abc.PGresult) -> str:
        """After PREPARE: the connection's encoding, now remembered (already prepared counts as prepared)."""
        encoding = conn.info.encoding
        if (result.status != pq.ExecStatus.COMMAND_OK
                and result.error_field(pq.DiagnosticField.SQLSTATE) != _ALREADY_PREPARED):
            raise error_from_result(result, encoding=encoding)
        self._prepared_on[conn] = encoding
        return encoding

    @staticmethod
    def _values(params: Sequence[str | None], encoding: str) -> list[bytes]:
        return cast("list[bytes]", [None if p is None else p.encode(encoding) for p in params])  # None is NULL

    def _again(self, conn: Any, result: pq.abc.PGresult, attempt: int) -> bool:
        """True when the statement was deallocated (DEALLOCATE ALL, DISCARD ALL): prepare it and run it again."""
        if (attempt == 1 and result.status != pq.ExecStatus.TUPLES_OK
                and result.error_field(pq.DiagnosticField.SQLSTATE) == _NOT_PREPARED):
            self._prepared_on.pop(conn, None)
            return True
        return False

    def _rows(self, result: pq.abc.PGresult, encoding: str) -> list[tuple[Any, ...]]:
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise error_from_result(result, encoding=encoding)
        loaders = self.loaders
        if loaders is None:
            return [tuple(None if (v := result.get_value(r, c)) is None else v.decode(encoding)
                          for c in range(result.nfields))
                    for r in range(result.ntuples)]
        if result.nfields != len(loaders):
            raise psycopg.ProgrammingError(
                f"{self.name.decode()}: {result.nfields} result columns, expected {len(loaders)}")
        return [tuple(None if (v := result.get_value(r, c)) is None else load(v, encoding)
                      for c, load in enumerate(loaders))
                for r in range(result.ntuples)]
