"""Scheduling: cron validation and next run, PM030 without pg_cron, and a real pg_cron server."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymemdb
from tests.helpers import assert_sqlstate, rows, value

AFTER = datetime(2026, 11, 22, 13, 37, 20, tzinfo=UTC)  # a Sunday


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("0 3 * * *", datetime(2026, 11, 23, 3, 0, tzinfo=UTC)),
        ("* * * * *", datetime(2026, 11, 22, 13, 38, tzinfo=UTC)),
        ("*/15 * * * *", datetime(2026, 11, 22, 13, 45, tzinfo=UTC)),
        ("30 13-14 * * *", datetime(2026, 11, 22, 14, 30, tzinfo=UTC)),
        ("0 0 1 * *", datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
        ("0 9 * * 1-5", datetime(2026, 11, 23, 9, 0, tzinfo=UTC)),
        ("0 9 * * 7", datetime(2026, 11, 29, 9, 0, tzinfo=UTC)),  # 7 is Sunday too
        ("0 9 13 * 5", datetime(2026, 11, 27, 9, 0, tzinfo=UTC)),  # dom OR dow when both are set
        ("0 0 29 2 *", datetime(2028, 2, 29, 0, 0, tzinfo=UTC)),
        ("@daily", datetime(2026, 11, 23, 0, 0, tzinfo=UTC)),
        ("@hourly", datetime(2026, 11, 22, 14, 0, tzinfo=UTC)),
        ("30 seconds", AFTER + timedelta(seconds=30)),
    ],
)
def test_cron_next_run(conn: psycopg.Connection, cron: str, expected: datetime) -> None:
    assert value(conn, "select memori.cron_next_run(%s, %s)", (cron, AFTER)) == expected


@pytest.mark.parametrize("cron", ["", "* * * *", "61 * * * *", "* 24 * * *", "0 0 31 2 *", "a b c d e",
                                  "0 3 * * * *", "5-1 * * * *", "*/0 * * * *", "90 seconds"])
def test_invalid_cron_is_rejected(conn: psycopg.Connection, cron: str) -> None:
    assert_sqlstate(conn, "PM001", "select memori.cron_next_run(%s)", (cron,))


def test_schedule_without_pg_cron_says_what_to_do(conn: psycopg.Connection) -> None:
    err = assert_sqlstate(conn, "PM030", "select memori.cleanup_schedule()")
    assert "memori-cleanup execute" in (err.diag.message_hint or "")
    assert_sqlstate(conn, "PM030", "select memori.cleanup_unschedule()")
    assert rows(conn, "select * from memori.cleanup_job()") == []
    # a bad schedule is reported as such even without pg_cron
    assert_sqlstate(conn, "PM001", "select memori.cleanup_schedule('nonsense')")


def test_client_maps_pm030(db: pymemdb.Database) -> None:
    with pytest.raises(pymemdb.PgCronMissing) as info:
        db.cleanup.schedule()
    assert info.value.hint and "memori-cleanup execute" in info.value.hint


# -- against PostgreSQL 15 + pg_cron (scripts/pgcron/server.sh) ----------------------
@pytest.mark.pgcron
def test_schedule_registers_updates_and_removes_the_job(pgcron_dsn: str) -> None:
    with pymemdb.connect(pgcron_dsn) as db:
        job_id = db.cleanup.schedule()
        job = db.cleanup.job()
        assert job is not None and job.job_id == job_id and job.schedule == "0 3 * * *" and job.active
        assert "memori.cleanup_run" in job.command
        assert job.next_run is not None and job.next_run.hour == 3
        assert db.cleanup.schedule("*/5 * * * *") == job_id, "re-scheduling updates the same job"
        assert db.cleanup.job().schedule == "*/5 * * * *"  # type: ignore[union-attr]
        assert db.cleanup.unschedule() is True
        assert db.cleanup.unschedule() is False
        assert db.cleanup.job() is None


@pytest.mark.pgcron
@pytest.mark.slow
def test_cron_job_really_deletes_expired_rows(pgcron_dsn: str) -> None:
    """A `* * * * *` job runs memori.cleanup_run inside the server (waits up to 150 s).

    pg_cron starts jobs on minute boundaries, so the first run comes up to a
    minute after scheduling, and on a loaded machine the scheduler can miss a
    boundary and start at the next one: 75 s failed in CI with the job started
    but not yet finished.
    """
    with psycopg.connect(pgcron_dsn, autocommit=True) as conn:
        conn.execute("insert into memori.memories (user_id, content, expires_at, owner_id) select"
                     " 'session_api_2026_01', 'x', now() - interval '1 second', 'alice' from generate_series(1, 2500)")
        conn.execute("insert into memori.memories (user_id, content, expires_at, owner_id) "
                     "values ('keep', 'live', now() + interval '1 day', 'keep'), ('keep', 'permanent', null, 'keep')")
        value(conn, "select memori.cleanup_schedule('* * * * *')")
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            done = rows(conn, "select * from memori.cleanup_runs where trigger = 'cron' and status <> 'running'")
            if done:
                break
            time.sleep(2)
        value(conn, "select memori.cleanup_unschedule()")
        assert done, "the cron job did not finish within 150 s: " + str(
            rows(conn, "select status, return_message, start_time, now() from cron.job_run_details")) + str(
            rows(conn, "select status, started_at, batches, deleted from memori.cleanup_runs"))
        run = done[0]
        assert run["status"] == "succeeded" and run["deleted"] == 2500 and run["batches"] == 3
        assert value(conn, "select count(*) from memori.memories") == 2
        detail = rows(conn, "select status, command from cron.job_run_details order by start_time limit 1")[0]
        assert detail["status"] == "succeeded"


# -- pg_cron in another database (cron.database_name), issue 16 item 6 ------------------------
@pytest.mark.pgcron
def test_schedule_from_a_database_without_pg_cron(pgcron_other_dsn: str, pgcron_dsn: str) -> None:
    """memori_mem has no pg_cron; it lives in memori_cron: the job is made there with schedule_in_database."""
    with psycopg.connect(pgcron_other_dsn, autocommit=True) as conn:
        assert value(conn, "select memori.cleanup_cron_database()") == "memori_cron"
        err = assert_sqlstate(conn, "PM012", "select memori.cleanup_schedule()")
        assert "memori.cleanup_schedule_sql()" in (err.diag.message_hint or "")
        assert "schedule_in_database" in value(conn, "select memori.cleanup_schedule_sql('0 4 * * *')")
        assert_sqlstate(conn, "PM001", "select memori.cleanup_schedule_sql('61 * * * *')")
    with pymemdb.connect(pgcron_other_dsn) as db:
        assert db.cleanup.cron_database() == "memori_cron"
        job_id = db.cleanup.schedule()
        job = db.cleanup.job()
        assert job is not None and job.job_id == job_id and job.schedule == "0 3 * * *" and job.active
        assert "memori.cleanup_run" in job.command and job.last_status is None
        assert job.next_run is not None and job.next_run.hour == 3
        assert db.cleanup.schedule("*/5 * * * *") == job_id, "re-scheduling updates the same job"
        assert db.cleanup.job().schedule == "*/5 * * * *"  # type: ignore[union-attr]
    with psycopg.connect(pgcron_dsn, autocommit=True) as cron:
        assert rows(cron, "select database, jobname from cron.job") == [
            {"database": "memori_mem", "jobname": "memori-cleanup"}]
    with pymemdb.connect(pgcron_dsn) as here:
        assert here.cleanup.job() is None, "the cron database's own job of that name is another one"
    with pymemdb.connect(pgcron_other_dsn) as db:
        assert db.cleanup.unschedule() is True
        assert db.cleanup.unschedule() is False
        assert db.cleanup.job() is None


@pytest.mark.pgcron
def test_cli_schedule_and_status_where_pg_cron_lives_elsewhere(pgcron_other_dsn: str) -> None:
    from typer.testing import CliRunner

    from pymemdb.cli.cleanup import app

    runner = CliRunner()
    done = runner.invoke(app, ["schedule", "0 2 * * *", "--dsn", pgcron_other_dsn])
    assert done.exit_code == 0, done.output
    assert "scheduled pg_cron job" in done.output and "in database memori_cron" in done.output
    status = runner.invoke(app, ["status", "--dsn", pgcron_other_dsn])
    assert status.exit_code == 0, status.output
    assert "'memori-cleanup' '0 2 * * *' active" in status.output
    gone = runner.invoke(app, ["unschedule", "--dsn", pgcron_other_dsn])
    assert gone.exit_code == 0 and "removed pg_cron job" in gone.output


@pytest.mark.pgcron
@pytest.mark.slow
def test_cron_job_in_another_database_really_runs(pgcron_other_dsn: str) -> None:
    """pg_cron in memori_cron runs CALL memori.cleanup_run() in memori_mem; status shows the last run."""
    with psycopg.connect(pgcron_other_dsn, autocommit=True) as conn:
        conn.execute("insert into memori.memories (user_id, content, expires_at, owner_id) "
                     "select 'ns', 'x', now() - interval '1 second', 'ns' from generate_series(1, 30)")
    with pymemdb.connect(pgcron_other_dsn) as db:
        db.cleanup.schedule("* * * * *")
        deadline = time.monotonic() + 150
        job = db.cleanup.job()
        while time.monotonic() < deadline:
            job = db.cleanup.job()
            if job is not None and job.last_status in ("succeeded", "failed"):
                break
            time.sleep(2)
        db.cleanup.unschedule()
        assert job is not None and job.last_status == "succeeded", job
        assert job.last_start is not None
        run = db.cleanup.runs(limit=1)[0]
        assert run.trigger == "cron" and run.status == "succeeded" and run.deleted == 30
