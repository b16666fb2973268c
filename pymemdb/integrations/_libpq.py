"""One SQL call run through libpq directly: prepared once per connection, text parameters, binary results.

A saver's read from its cached copy is a round trip that sends three short
strings and gets three back (``memori.lg_checkpoint_stamp``). Through a psycopg
cursor that call costs 30-60 µs more than the round trip itself (adapting
parameters and rows, result bookkeeping), which is as much as the server
spends on it. ``Prepared.rows`` skips that layer: ``PQexecPrepared`` on the
pooled connection's ``pgconn``, the statement prepared on first use per
connection (and again if something deallocated it), errors raised as the
psycopg exception of their SQLSTATE, so ``wrap_exceptions`` maps them as usual.

The cold read (``memori.lg_checkpoint_get``: a row of 17 columns, arrays of
blobs among them) goes the same way. Results come in binary and are loaded
by psycopg's own ``Transformer`` with the connection's loaders (C in
psycopg[binary]): the values and types a cursor would give, for ~14 µs a row
where decoding the binary arrays in Python cost ~23 µs.

Only for connections that nothing else uses at the same time (a connection
checked out of the saver's pool, or the saver's own reader), in autocommit or
inside the transaction the caller opened: psycopg's view of the connection
stays right because every statement here ends before the next one starts.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer
from psycopg.errors import error_from_result
from psycopg.generators import execute

T = TypeVar("T")


def _nothing() -> None:
    """The work beside a plain ``rows`` call: none."""


_NOT_PREPARED = b"26000"  # invalid_sql_statement_name: DEALLOCATE ALL or DISCARD ALL dropped it
_ALREADY_PREPARED = b"42P05"  # duplicate_prepared_statement


class Prepared:
    """A statement with positional text parameters ($1, $2, ...), run on a connection's libpq handle.

    Its rows are tuples of the values a psycopg cursor would give (None for
    NULL), loaded from binary results. ``rows`` runs on a sync connection,
    ``arows`` on an async one without blocking the event loop; both send the
    statement and wait for its result as psycopg's own cursors do (its
    ``execute`` generator, run by the connection's ``wait``). ``rows_beside``
    and ``arows_beside`` run the caller's own work between sending the
    statement and reading its result; ``rows`` and ``arows`` are them with no
    such work.
    """

    def __init__(self, name: str, query: str) -> None:
        self.name = name.encode()
        self.query = query.encode()
        # connection -> its client encoding, for the connections the statement is prepared on
        self._prepared_on: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def rows(self, conn: psycopg.Connection[Any], params: Sequence[str | None]) -> list[tuple[Any, ...]]:
        """The result rows, as a cursor's ``tuple_row`` would give them."""
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
            pgconn.send_query_prepared(self.name, self._values(params, encoding), result_format=pq.Format.BINARY)
            try:
                if not done:
                    done.append(beside())
            finally:
                result = conn.wait(execute(pgconn))[-1]
            if self._again(conn, result, attempt):
                continue
            return self._rows(result, conn, encoding), done[0]
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
            pgconn.send_query_prepared(self.name, self._values(params, encoding), result_format=pq.Format.BINARY)
            pgconn.flush()  # non-blocking: on its way before beside() runs (execute flushes whatever is left)
            try:
                if not done:
                    done.append(beside())
            finally:
                result = (await conn.wait(execute(pgconn)))[-1]
            if self._again(conn, result, attempt):
                continue
            return self._rows(result, conn, encoding), done[0]
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

    def _rows(self, result: pq.abc.PGresult, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
              encoding: str) -> list[tuple[Any, ...]]:
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise error_from_result(result, encoding=encoding)
        # a Transformer of its own each time: ~5 µs more than one kept per connection, which would hold the
        # connection (a Transformer refers to it) for as long as the statement lives
        loader = Transformer(conn)
        loader.set_pgresult(result, set_loaders=True, format=pq.Format.BINARY)
        return loader.load_rows(0, result.ntuples, tuple)
