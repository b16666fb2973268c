"""The embedded server: start, reuse, status, stop, and a stale pid file after a crash."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from pymemdb import embedded


@pytest.fixture
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("own_embedded")


def test_start_reuse_status_stop(base: Path) -> None:
    try:
        url = embedded.start(base)
        first = embedded.status(base)
        assert first.running and first.pid
        assert embedded.start(base) == url, "a second start reuses the running server"
        assert embedded.status(base).pid == first.pid
        with psycopg.connect(first.url or url) as conn:
            assert conn.execute("select current_database()").fetchone() == ("pymemdb",)
            # a new data directory is sized to the machine once
            assert conn.execute("select pg_size_bytes(current_setting('shared_buffers')) / 1048576"
                                ).fetchone() == (embedded.shared_buffers_mb(),)
            assert conn.execute("select default_version from pg_available_extensions where name = 'vector'"
                                ).fetchone() is not None
    finally:
        assert embedded.stop(base)
    assert not embedded.status(base).running
    assert embedded.stop(base) is False


def test_stale_pid_file_after_a_crash(base: Path) -> None:
    """A postmaster.pid left by a crash, naming a pid now used by another process, does not block start."""
    embedded.start(base)
    embedded.stop(base)
    pgdata = embedded.data_dir(base)
    pid_file = pgdata / "postmaster.pid"
    pid_file.write_text(f"{os.getpid()}\n{pgdata}\n0\n5432\n{pgdata}\n\n  0 0\nready\n")
    assert not embedded.status(base).running, "our own (python) pid is not a postgres"
    try:
        embedded.start(base)
        assert embedded.status(base).running
    finally:
        embedded.stop(base)


def test_shared_buffers_is_a_quarter_of_memory_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYMEMDB_SHARED_BUFFERS_MB", raising=False)
    mb = embedded.shared_buffers_mb()
    assert 128 <= mb <= 1024
    monkeypatch.setenv("PYMEMDB_SHARED_BUFFERS_MB", "256")
    assert embedded.shared_buffers_mb() == 256
