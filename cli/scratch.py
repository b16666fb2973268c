"""Throw-away databases next to the user's data, for `pymemdb demo` and `pymemdb bench` (not part of the library)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pymemdb import embedded
from pymemdb.db import resolve_dsn
from pymemdb.errors import wrap_exceptions
from pymemdb.install import install


def server_dsn(dsn: str | None) -> str:
    """The DSN given (argument or environment) or the embedded server's, started if needed."""
    return resolve_dsn(dsn) or embedded.start()


@contextmanager
def scratch_database(dsn: str | None, name: str, *, keep: bool = False) -> Iterator[str]:
    """Create database ``name`` on the same server as ``dsn`` with the schema installed.

    An existing database of that name is dropped first: it is ours. Dropped
    again afterwards unless ``keep``. Never touches the database ``dsn`` names.
    """
    base = server_dsn(dsn)
    with wrap_exceptions():
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        target = make_conninfo(base, dbname=name)
        install(target)
    try:
        yield target
    finally:
        if not keep:
            with wrap_exceptions(), psycopg.connect(base, autocommit=True) as conn:
                conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
