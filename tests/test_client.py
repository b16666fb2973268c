"""The Python client: typed results, error mapping, the batched cleanup driver, events."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymemdb
from pymemdb.memories import Memory, SessionCheckpoint
from pymemdb.retention import CleanupSummary
from tests.helpers import T0, memory

DAY = timedelta(days=1)


def test_save_and_load_are_typed(db: pymemdb.Database) -> None:
    saved = db.memories.save_session_checkpoint("skill:api-builder", "alice", "state", {"task": 1}, now=T0)
    assert isinstance(saved, Memory) and saved.expires_at == T0 + 7 * DAY
    latest = db.memories.load_latest_checkpoint("api", "alice", now=T0 + DAY)
    assert isinstance(latest, SessionCheckpoint) and latest.id == saved.id and latest.source == "current"
    assert db.memories.load_latest_checkpoint("api", "alice", now=T0 + 7 * DAY) is None
    assert db.memories.session_namespace("api", now=T0) == "session_api_2026_11"
    kept = db.memories.save("notes", "remember", ttl=timedelta(hours=1), now=T0)
    assert [m.id for m in db.memories.list("notes", now=T0)] == [kept.id]
    assert db.memories.list("notes", now=T0 + timedelta(hours=1)) == []


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda db: db.memories.save_session_checkpoint("nope", "alice", "x"), pymemdb.UnknownSkill),
        (lambda db: db.memories.save_session_checkpoint("api", "", "x"), pymemdb.InvalidArgument),
        (lambda db: db.memories.save_session_checkpoint("api", "al\x00ice", "x"), pymemdb.InvalidArgument),
        (lambda db: db.memories.save_session_checkpoint("api", "alice", "x\x00"), pymemdb.InvalidArgument),
        (lambda db: db.memories.save_session_checkpoint("api", "alice", "x", {"a": "\x00"}), pymemdb.InvalidArgument),
        (lambda db: db.memories.save_session_checkpoint("api", "alice", "x" * 1_048_577), pymemdb.PayloadTooLarge),
        (lambda db: db.cleanup.preview(batch_size=-1), pymemdb.InvalidArgument),
        (lambda db: db.cleanup.next_run("61 * * * *"), pymemdb.InvalidArgument),
    ],
)
def test_errors_map_to_the_tree(db: pymemdb.Database, call, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as info:
        call(db)
    assert isinstance(info.value, pymemdb.PymemdbError)
    assert info.value.hint, "every error says what to do"
    assert db.memories.list("session_api_2026_11") == []


def test_execute_drives_batches_in_separate_transactions(db: pymemdb.Database, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(7):
            memory(conn, "ns", T0 - timedelta(seconds=i + 1))
    preview = db.cleanup.preview(now=T0, batch_size=3)
    seen = []
    summary = db.cleanup.execute(now=T0, batch_size=3, on_batch=lambda run, batch: seen.append(batch.deleted))
    assert isinstance(summary, CleanupSummary)
    assert summary.deleted == len(preview) == 7 and summary.batches == 3 and summary.trigger == "cli"
    assert seen == [3, 3, 1]
    assert db.cleanup.runs(limit=1)[0].id == summary.run_id
    assert db.cleanup.status().expired_waiting == 0



def test_execute_rests_between_batches_as_each_batch_asks(
    db: pymemdb.Database, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client sleeps the pause_ms each batch returns (cleanup.work_share's rule, in SQL), none after the last."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(7):
            memory(conn, "ns", T0 - timedelta(seconds=i + 1))
        conn.execute("update memori.settings set value = '0.2' where key = 'cleanup.work_share'")
    slept: list[float] = []
    asked: list[float] = []
    monkeypatch.setattr("pymemdb.retention.time.sleep", slept.append)
    summary = db.cleanup.execute(now=T0, batch_size=3, on_batch=lambda run, batch: asked.append(batch.pause_ms))
    assert summary.deleted == 7 and summary.batches == 3
    assert asked[-1] == 0 and all(ms >= 5 for ms in asked[:-1])  # at least cleanup.batch_pause_ms (5)
    assert slept == [ms / 1000 for ms in asked[:-1]]
    # this run's own share (1: no rest beyond the 5 ms), not left on the pooled connection afterwards
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(4):
            memory(conn, "ns", T0 - timedelta(seconds=i + 1))
    slept.clear()
    assert db.cleanup.execute(now=T0, batch_size=2, work_share=1).deleted == 4
    assert slept == [0.005]
    with db.connection() as conn:
        assert conn.execute("select current_setting('memori.cleanup_work_share', true)").fetchone() in [(None,), ("",)]
    with pytest.raises(pymemdb.InvalidArgument):
        db.cleanup.execute(now=T0, work_share=0)


def test_statement_timeout_fails_the_run_and_releases_the_lock(db: pymemdb.Database, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        memory(conn, "ns", T0 - DAY)
        conn.execute("update memori.settings set value = '1' where key = 'cleanup.statement_timeout_ms'")
        # make every batch slower than 1 ms
        conn.execute("create function public.slow() returns trigger language plpgsql as "
                     "$$ begin perform pg_sleep(0.05); return old; end $$")
        conn.execute("create trigger slow before delete on memori.memories for each row execute function public.slow()")
    with pytest.raises(pymemdb.CleanupLockTimeout):
        db.cleanup.execute(now=T0, batch_size=4)
    run = db.cleanup.runs(limit=1)[0]
    assert run.status == "failed" and "statement_timeout" in (run.error or "")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop trigger slow on memori.memories")
        conn.execute("update memori.settings set value = '5000' where key = 'cleanup.statement_timeout_ms'")
    assert db.cleanup.execute(now=T0).deleted == 1, "the lock was released"


def test_one_transaction_execute(db: pymemdb.Database, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        memory(conn, "ns", T0 - DAY)
    assert db.cleanup.execute_in_one_transaction(now=T0).trigger == "sql"


def test_events_listen(db: pymemdb.Database, dsn: str) -> None:
    got: list[dict] = []
    ready = threading.Event()

    def listen() -> None:
        ready.set()
        got.extend(db.events.listen(timeout=10, stop_after=2))

    listener = threading.Thread(target=listen)
    listener.start()
    ready.wait()
    import time

    time.sleep(0.5)  # LISTEN must be issued before the events are committed
    with psycopg.connect(dsn, autocommit=True) as conn:
        memory(conn, "ns", T0 - DAY)
    db.cleanup.execute(now=T0)
    listener.join(timeout=15)
    assert [e["type"] for e in got] == ["cleanup.batch_completed", "cleanup.cleaned_up"]
    assert got[0]["payload"]["deleted_count"] == 1
    assert [e.event_type for e in db.events.list(limit=5)][:2] == ["cleanup.cleaned_up", "cleanup.batch_completed"]


def test_uninstalled_database_says_run_init(server_dsn: str) -> None:
    from psycopg.conninfo import make_conninfo

    with pytest.raises(pymemdb.SchemaNotInstalled) as info:
        pymemdb.connect(make_conninfo(server_dsn, dbname="postgres"))
    assert "pymemdb init" in (info.value.hint or "")


def test_unreachable_server_is_a_server_error() -> None:
    with pytest.raises(pymemdb.ServerError):
        pymemdb.connect("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_now_defaults_to_the_database_clock(db: pymemdb.Database) -> None:
    saved = db.memories.save_session_checkpoint("api", "alice", "x")
    assert abs(saved.created_at - datetime.now(UTC)) < timedelta(minutes=1)
