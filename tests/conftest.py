"""Test databases: one server per session, one fresh database per test.

The server is the embedded one (started in a temporary directory and stopped
by pid at the end) unless PYMEMDB_TEST_DSN names another. The schema is
installed once into a template database; each test gets a clone made by
pytest-postgresql's DatabaseJanitor.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql.janitor import DatabaseJanitor

import pymemdb
from pymemdb import embedded
from pymemdb.install import install

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "pymemdb_test_template"


@pytest.fixture(scope="session")
def server_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("PYMEMDB_TEST_DSN")
    if external:
        yield external
        return
    base = tmp_path_factory.mktemp("embedded")
    url = embedded.start(base)
    try:
        yield url
    finally:
        embedded.stop(base)


def _janitor(server: str, dbname: str, **kwargs: object) -> DatabaseJanitor:
    info = conninfo_to_dict(server)
    return DatabaseJanitor(
        user=str(info.get("user", "postgres")),
        host=str(info.get("host", "localhost")),
        port=str(info.get("port", 5432)),
        password=info.get("password") or None,  # type: ignore[arg-type]
        dbname=dbname,
        maintenance_dbname=str(info.get("dbname", "postgres")),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def template_dsn(server_dsn: str) -> Iterator[str]:
    janitor = _janitor(server_dsn, TEMPLATE, as_template=False)
    janitor.drop()
    janitor.init()
    dsn = make_conninfo(server_dsn, dbname=TEMPLATE)
    install(dsn)
    yield dsn
    janitor.drop()


@contextmanager
def database(server: str, template: str | None = None) -> Iterator[str]:
    """A new database (a clone of ``template`` if given), dropped afterwards."""
    name = f"pymemdb_test_{uuid.uuid4().hex[:12]}"
    janitor = _janitor(server, name, template_dbname=template)
    janitor.init()
    try:
        yield make_conninfo(server, dbname=name)
    finally:
        janitor.drop()


@pytest.fixture
def dsn(server_dsn: str, template_dsn: str) -> Iterator[str]:
    """A fresh database with the schema installed, dropped after the test."""
    with database(server_dsn, TEMPLATE) as url:
        yield url


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection for SQL-level tests."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def db(dsn: str) -> Iterator[pymemdb.Database]:
    with pymemdb.connect(dsn) as database:
        yield database


# -- the PostgreSQL 15 + pg_cron server (scripts/pgcron) -------------------------
@pytest.fixture
def env(dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database as the CLI's default ($PYMEMDB_DSN), for CliRunner tests."""
    monkeypatch.setenv("PYMEMDB_DSN", dsn)
    return dsn


@pytest.fixture(scope="session")
def pgcron_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DSN of the pg_cron test server's cron database, with the schema installed.

    Skipped when the server's Debian packages are absent, except under CI=true
    where the pg_cron tests must run (.ci/run installs them).
    """
    directory = tmp_path_factory.mktemp("pgcron")
    script = ROOT / "scripts" / "pgcron" / "server.sh"
    started = subprocess.run(["bash", str(script), "start", str(directory)],
                             capture_output=True, text=True, check=False)
    if started.returncode != 0:
        message = f"pg_cron server unavailable: {started.stderr.strip().splitlines()[-1:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: run scripts/pgcron/install-deps.sh)")
        pytest.skip(message)
    url = started.stdout.strip().splitlines()[-1]
    try:
        install(url)
        yield url
    finally:
        subprocess.run(["bash", str(script), "stop", str(directory)], capture_output=True, check=False)


@pytest.fixture
def pgcron_dsn(pgcron_server: str) -> Iterator[str]:
    """The pg_cron database, emptied of pymemdb rows and jobs before and after each test."""

    def reset() -> None:
        with psycopg.connect(pgcron_server, autocommit=True) as c:
            c.execute("select cron.unschedule(jobid) from cron.job")
            c.execute("truncate memori.memories, memori.events, memori.cleanup_runs, memori.cleanup_queue")

    reset()
    yield pgcron_server
    reset()


@pytest.fixture(scope="session")
def pgcron_other_server(pgcron_server: str) -> str:
    """DSN of memori_mem on the pg_cron test server: a database without pg_cron (it lives in memori_cron)."""
    url = make_conninfo(pgcron_server, dbname="memori_mem")
    install(url)
    return url


@pytest.fixture
def pgcron_other_dsn(pgcron_other_server: str, pgcron_dsn: str) -> Iterator[str]:
    """memori_mem, emptied of pymemdb rows before and after each test (pgcron_dsn clears the jobs)."""

    def reset() -> None:
        with psycopg.connect(pgcron_other_server, autocommit=True) as c:
            c.execute("truncate memori.memories, memori.events, memori.cleanup_runs, memori.cleanup_queue")

    reset()
    yield pgcron_other_server
    reset()
