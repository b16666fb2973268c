"""Small helpers shared by the SQL-level tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

# A fixed clock: tests inject time, they never sleep.
T0 = datetime(2026, 11, 15, 12, 0, 0, tzinfo=UTC)


def rows(conn: psycopg.Connection, query: str, params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def one(conn: psycopg.Connection, query: str, params: Any = None) -> dict[str, Any] | None:
    found = rows(conn, query, params)
    return found[0] if found else None


def value(conn: psycopg.Connection, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def assert_sqlstate(conn: psycopg.Connection, code: str, query: str, params: Any = None) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(query, params)
    assert info.value.sqlstate == code, f"expected {code}, got {info.value.sqlstate}: {info.value}"
    assert info.value.diag.message_hint, "our errors always carry a hint"
    return info.value


def save(conn: psycopg.Connection, skill: str, user: str, content: str, at: datetime,
         metadata: str = "{}") -> dict[str, Any]:
    row = one(conn, "select * from memori.session_checkpoint_save(%s, %s, %s, %s::jsonb, %s)",
              (skill, user, content, metadata, at))
    assert row is not None
    return row


def memory(conn: psycopg.Connection, namespace: str, expires_at: datetime | None,
           metadata: str = "{}", created_at: datetime = T0, owner: str | None = None) -> int:
    """Insert a memory directly (as legacy clients did; its owner is the namespace unless given)."""
    return value(conn, "insert into memori.memories (user_id, content, metadata, created_at, expires_at, owner_id)"
                       " values (%s, 'x', %s::jsonb, %s, %s, %s) returning id",
                 (namespace, metadata, created_at, expires_at, owner or namespace))


def run_threads(work: Callable[[int], None], count: int) -> list[BaseException]:
    """Run ``work(0)`` ... ``work(count - 1)`` at once, a thread each; the exceptions they raised."""
    errors: list[BaseException] = []

    def guarded(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
