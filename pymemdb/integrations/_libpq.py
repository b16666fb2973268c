"""One SQL call run through libpq directly: prepared once per connection, text parameters and results.

A saver's read from its cached copy is a round trip that sends three short
strings and gets three back (``memori.lg_checkpoint_stamp``). Through a psycopg
cursor that call costs 30-60 µs more than the round trip itself (adapting
parameters and rows, result bookkeeping), which is as much as the server
spends on it. ``Prepared.rows`` skips that layer: ``PQexecPrepared`` on the
pooled connection's ``pgconn``, the statement prepared on first use per
connection (and again if something deallocated it), errors raised as the
psycopg exception of their SQLSTATE, so ``wrap_exceptions`` maps them as usual.

Only for autocommit connections that nothing else uses at the same time (a
connection checked out of the saver's pool): there is no transaction to keep
in step with psycopg's view of the connection.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, cast

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result

_NOT_PREPARED = b"26000"  # invalid_sql_statement_name: DEALLOCATE ALL or DISCARD ALL dropped it
_ALREADY_PREPARED = b"42P05"  # duplicate_prepared_statement


class Prepared:
    """A statement with positional text parameters ($1, $2, ...), run on a connection's libpq handle."""

    def __init__(self, name: str, query: str) -> None:
        self.name = name.encode()
        self.query = query.encode()
        # connection -> its client encoding, for the connections the statement is prepared on
        self._prepared_on: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()

    def rows(self, conn: psycopg.Connection[Any], params: Sequence[str | None]) -> list[tuple[str | None, ...]]:
        """The result rows as text (None for NULL)."""
        pgconn = conn.pgconn
        encoding = self._prepared_on.get(conn)
        for attempt in (1, 2):
            if encoding is None:
                encoding = conn.info.encoding
                prepared = pgconn.prepare(self.name, self.query)
                if (prepared.status != pq.ExecStatus.COMMAND_OK
                        and prepared.error_field(pq.DiagnosticField.SQLSTATE) != _ALREADY_PREPARED):
                    raise error_from_result(prepared, encoding=encoding)
                self._prepared_on[conn] = encoding
            values = [None if p is None else p.encode(encoding) for p in params]
            result = pgconn.exec_prepared(self.name, cast("list[bytes]", values))  # None is NULL
            if result.status == pq.ExecStatus.TUPLES_OK:
                return [tuple(None if (v := result.get_value(r, c)) is None else v.decode(encoding)
                              for c in range(result.nfields))
                        for r in range(result.ntuples)]
            if attempt == 1 and result.error_field(pq.DiagnosticField.SQLSTATE) == _NOT_PREPARED:
                self._prepared_on.pop(conn, None)
                encoding = None
                continue
            raise error_from_result(result, encoding=encoding)
        raise AssertionError("unreachable")  # pragma: no cover
