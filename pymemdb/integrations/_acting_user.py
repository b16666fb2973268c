"""The acting user of the LangGraph saver's and store's calls on a Citus coordinator.

Their pooled connections carry the user as a session setting
(``-c memori.user_id=...``): one server's row-level security reads it, at no
cost per call. Citus does not pass a session setting to the workers, where
row-level security runs on the shards; it passes a ``SET LOCAL`` made in a
transaction block (``citus.propagate_set_commands = local``, set by
``memori.distribute()``). So on a server with the citus extension, found on the
first call, each call is a transaction that sets the user with ``SET LOCAL``
first; one server keeps the single statement (no extra round trips).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, LiteralString

import psycopg

from pymemdb.db import _set_user

CITUS: LiteralString = "select exists (select from pg_catalog.pg_extension where extname = 'citus')"


class ActingUser:
    """Wraps a call in a ``SET LOCAL memori.user_id`` transaction when the server runs Citus."""

    def __init__(self, user_id: str) -> None:
        self.citus: bool | None = None  # unknown until the first call
        self.statement = _set_user(user_id)

    @contextmanager
    def call(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        if self.citus is None:
            self.citus = conn.execute(CITUS).fetchone() == (True,)
        if not self.citus:
            yield
            return
        with conn.transaction():
            conn.execute(self.statement)
            yield

    @asynccontextmanager
    async def acall(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
        if self.citus is None:
            self.citus = await (await conn.execute(CITUS)).fetchone() == (True,)
        if not self.citus:
            yield
            return
        async with conn.transaction():
            await conn.execute(self.statement)
            yield
