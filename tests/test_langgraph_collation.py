"""LangGraph's write order on a database whose collation is not code point order.

LangGraph replays a super-step's writes in ``writes_sort_key`` order, which
compares task paths and task ids as Python does: by code point. The test
server's databases are C.UTF-8, where the two orders agree; most production
databases are created with a linguistic collation (en_US.UTF-8, ICU), where
'b' sorts before 'B' and '~' before letters. The embedded server has no ICU and
this machine no linguistic libc locale, so the test runs on the pg_cron test
server (Debian's PostgreSQL, built with ICU), in an ICU en-US database of its
own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pymemdb.install import install
from tests.helpers import T0, rows
from tests.test_langgraph import READS, _write, put

# task paths (and ids) whose code point order differs from en-US's: '', 'B', 'b', '~…', 'é' against '', '~…', 'b',
# 'B', 'é'
PATHS = ("b", "B", "", "é", "~__pregel_pull, n")
TASKS = {"b": "x", "B": "Y", "": "z", "é": "w", "~__pregel_pull, n": "v"}


@pytest.fixture(scope="module", params=["sql", "plpgsql"])
def icu_server(pgcron_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database collated by ICU en-US on the pg_cron test server, the schema installed, its saver reads in the
    form the parameter names (LANGUAGE sql as on one server, PL/pgSQL as on Citus)."""
    name = f"pymemdb_icu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pgcron_server, autocommit=True) as admin:
        admin.execute(f"create database {name} template template0 encoding 'UTF8' locale_provider icu"
                      " icu_locale 'en-US' locale 'C.UTF-8'")
    url = make_conninfo(pgcron_server, dbname=name)
    try:
        install(url)
        if request.param == "plpgsql":
            with psycopg.connect(url, autocommit=True) as connection:
                for read in READS:
                    connection.execute("select memori._as_plpgsql(%s, 'memori._lg_acting(p_user_id)')", (read,))
        yield url
    finally:
        with psycopg.connect(pgcron_server, autocommit=True) as admin:
            admin.execute(f"drop database if exists {name} with (force)")


@pytest.fixture
def conn(icu_server: str) -> Iterator[psycopg.Connection]:
    """The ICU database with no LangGraph state."""
    with psycopg.connect(icu_server, autocommit=True) as connection:
        connection.execute("delete from memori.lg_threads")
        yield connection


def _ordered(conn: psycopg.Connection) -> list[str]:
    return [r["x"] for r in rows(conn, "select x from unnest(%s::text[]) x order by x", (list(PATHS),))]


def test_the_database_orders_task_paths_otherwise(conn: psycopg.Connection) -> None:
    """The premise: this database's own order is not LangGraph's (else the tests below prove nothing)."""
    assert sorted(PATHS) == ["", "B", "b", "~__pregel_pull, n", "é"]
    assert _ordered(conn) != sorted(PATHS)


def _writes(conn: psycopg.Connection, n: int) -> None:
    for path in PATHS:
        _write(conn, "t", n, TASKS[path], path, "a", path)


def _expected() -> list[str]:
    return [TASKS[p] for p in sorted(PATHS)]


def test_reads_return_pending_writes_by_code_point(conn: psycopg.Connection) -> None:
    """lg_checkpoint_get and lg_checkpoint_list give the pending writes in writes_sort_key order."""
    put(conn, "t", 1, {"a": "1"})
    _writes(conn, 1)
    got: dict[str, Any] = rows(conn, "select * from memori.lg_checkpoint_get('t', '', null, 'alice', %s)", (T0,))[0]
    assert got["write_task_ids"] == _expected()
    assert got["write_task_paths"] == sorted(PATHS)
    listed = rows(conn, "select * from memori.lg_checkpoint_list('t', p_user_id => 'alice', p_now => %s)", (T0,))
    assert [r["write_task_ids"] for r in listed] == [_expected()]
    assert [r["write_task_paths"] for r in listed] == [sorted(PATHS)]


def test_delta_history_replays_writes_by_code_point(conn: psycopg.Connection) -> None:
    """lg_delta_history gives an ancestor's writes in writes_sort_key order."""
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"})
    put(conn, "t", 2, {"a": "2"}, parent=1)
    put(conn, "t", 3, {"a": "3"}, parent=2)
    _writes(conn, 2)
    history = rows(conn, "select write_task_ids from memori.lg_delta_history('t', '{a}', '', null, 'alice', %s)",
                   (T0,))
    assert history == [{"write_task_ids": _expected()}]
