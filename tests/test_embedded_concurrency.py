"""Concurrent first use of the embedded default (issue 16, item 8): one server, one database, one schema."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pymemdb import embedded
from pymemdb.install import head_revision

WORKERS = 8

# Each worker waits for the same instant, then uses the embedded default as an application would.
WORKER = """
import sys, time
start_at = float(sys.argv[1])
time.sleep(max(0.0, start_at - time.time()))
import pymemdb
with pymemdb.connect(user_id="alice") as db:
    with db.transaction() as cur:
        cur.execute("select memori.memory_save('ns', 'hello', p_owner_id => 'alice')")
print("ok")
"""


@pytest.mark.slow
def test_eight_processes_start_the_embedded_default_at_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYMEMDB_DSN", "DATABASE_URL")}
    env["PYMEMDB_HOME"] = str(tmp_path)
    env["PYMEMDB_SHARED_BUFFERS_MB"] = "64"  # differs from initdb's 128 MB: the first start restarts once
    start_at = time.time() + 3.0  # after every interpreter has imported pymemdb
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(start_at)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(WORKERS)]
    try:
        results = [(w.wait(timeout=300), *w.communicate()) for w in workers]
        failures = [err.strip().splitlines()[-1:] for code, _out, err in results if code != 0]
        assert not failures, f"{len(failures)} of {WORKERS} failed: {failures}"
        assert all(out.strip() == "ok" for _code, out, _err in results)
        state = embedded.status(tmp_path)
        assert state.running and state.url
        with psycopg.connect(state.url) as conn:
            assert conn.execute("select version_num from memori.alembic_version").fetchall() == [(head_revision(),)]
            assert conn.execute("select count(*) from memori.installs").fetchone() == (1,), "installed once"
            assert conn.execute("select count(*) from memori.memories").fetchone() == (WORKERS,)
            assert conn.execute("select count(*) from pg_database where datname = 'pymemdb'").fetchone() == (1,)
            # one server: every worker's connection went to this postmaster (no restart under them)
            assert conn.execute("select count(*) from pg_stat_activity where backend_type = 'client backend'"
                                ).fetchone() == (1,)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        embedded.stop(tmp_path)


def test_a_held_lock_is_pm110_after_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process stuck while holding the lock does not hang the others forever."""
    from pymemdb.errors import EmbeddedServerBusy

    monkeypatch.setenv("PYMEMDB_LOCK_TIMEOUT_S", "0.3")
    with embedded.lock(tmp_path):  # another open file description: flock conflicts even in one process
        began = time.monotonic()
        with pytest.raises(EmbeddedServerBusy) as caught:
            embedded.start(tmp_path)
        assert 0.3 <= time.monotonic() - began < 5
    assert caught.value.sqlstate == "PM110" and "PYMEMDB_LOCK_TIMEOUT_S" in (caught.value.hint or "")
    assert not (tmp_path / "pgdata").exists(), "nothing started without the lock"
