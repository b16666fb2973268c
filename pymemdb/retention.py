"""The retention engine (sql/010-retention.sql) and its schedule (sql/020-schedule.sql): ``db.cleanup``.

Preview and execute are SQL (memori.cleanup_preview / cleanup_begin /
cleanup_batch / cleanup_finish). ``execute`` only drives the batches: it calls
memori.cleanup_batch, each in its own short transaction with the
statement_timeout of memori.settings, until the batch says done. Every rule
is SQL's: what to delete and in which order, skipping rows a writer holds and
trying them again, retrying a deadlocked batch at half size, PM022. A batch
over statement_timeout fails the run (PM022).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pymemdb._sql import NOW, Room, given, maybe, one, rows, scalar
from pymemdb.errors import CleanupLockTimeout, DatabaseError, wrap_exceptions


@dataclass(frozen=True)
class CleanupCandidate:
    """memori.cleanup_candidate: one row a cleanup would delete, in deletion order."""

    seq: int
    batch: int
    table_name: str
    row_id: str
    owner: str | None
    category: str | None
    kind: str | None
    priority: int
    expires_at: datetime
    reason: str


@dataclass(frozen=True)
class CleanupGroup:
    """A line of memori.cleanup_preview_summary."""

    table_name: str
    owner: str | None
    category: str | None
    rows: int
    oldest_expiry: datetime
    newest_expiry: datetime
    min_priority: int


@dataclass(frozen=True)
class CleanupRun:
    """A row of memori.cleanup_runs."""

    id: int
    trigger: str
    status: str
    as_of: datetime
    batch_size: int
    max_rows: int | None
    started_at: datetime
    finished_at: datetime | None
    planned: int
    next_seq: int
    deleted: int
    batches: int
    deleted_by_table: dict[str, int]
    error: str | None
    backend_pid: int
    session_lock: bool
    plan_done: bool
    cursor_priority: int | None
    cursor_expires: datetime | None
    cursor_table: str | None
    cursor_row_id: str | None
    skipped: int  # rows left to the next run: a writer held them at every attempt
    retried: int  # batches retried after a deadlock or lock timeout


@dataclass(frozen=True)
class CleanupBatch:
    """memori.cleanup_batch_result."""

    run_id: int
    batch: int
    deleted: int
    deleted_by_table: dict[str, int]
    remaining: int
    done: bool
    skipped: int  # rows of this batch a writer held: tried again at the end of the run
    pause_ms: float  # rest before the next batch (cleanup.work_share, cleanup.batch_pause_ms); 0 when done


@dataclass(frozen=True)
class CleanupSummary:
    """memori.cleanup_summary: what a finished run did."""

    run_id: int
    status: str
    trigger: str
    as_of: datetime
    planned: int
    deleted: int
    batches: int
    deleted_by_table: dict[str, int]
    seconds: Decimal
    error: str | None
    skipped: int  # rows left to the next run: a writer held them at every attempt


@dataclass(frozen=True)
class CleanupJob:
    """The pg_cron job of memori.cleanup_job."""

    job_id: int
    job_name: str
    schedule: str
    command: str
    active: bool
    last_status: str | None
    last_start: datetime | None
    last_message: str | None
    next_run: datetime | None


@dataclass(frozen=True)
class CleanupStatus:
    """The single row of the memori.cleanup_status view."""

    expired_waiting: int
    expiring_soon: int
    last_success: datetime | None
    running: int
    failures_7d: int


_RUN_ARGS = (NOW, ("p_batch_size", "integer"), ("p_max_rows", "integer"))

CLEANUP_PREVIEW = rows("cleanup_preview", *_RUN_ARGS, result=CleanupCandidate)
CLEANUP_PREVIEW_SUMMARY = rows("cleanup_preview_summary", NOW, ("p_max_rows", "integer"), result=CleanupGroup)
CLEANUP_COUNT = scalar("cleanup_count", NOW, ("p_max_rows", "integer"), result=int)
CLEANUP_BEGIN = one("cleanup_begin", *_RUN_ARGS, ("p_trigger", "text"), result=CleanupRun)
CLEANUP_BATCH = one("cleanup_batch", ("p_run_id", "bigint"), ("p_batch_size", "integer"), result=CleanupBatch)
CLEANUP_FINISH = one("cleanup_finish", ("p_run_id", "bigint"), ("p_error", "text"), result=CleanupSummary)
CLEANUP_EXECUTE = one("cleanup_execute", *_RUN_ARGS, ("p_trigger", "text"), result=CleanupSummary)
CLEANUP_SCHEDULE = scalar("cleanup_schedule", ("p_cron", "text"), ("p_job_name", "text"), result=int)
CLEANUP_UNSCHEDULE = scalar("cleanup_unschedule", ("p_job_name", "text"), result=bool)
CLEANUP_JOB = maybe("cleanup_job", ("p_job_name", "text"), NOW, result=CleanupJob)
CLEANUP_RUNS_RECENT = rows("cleanup_runs_recent", ("p_limit", "integer"), result=CleanupRun)
CRON_NEXT_RUN = scalar("cron_next_run", ("p_cron", "text"), ("p_after", "timestamptz"), result=datetime)
CLEANUP_CRON_DATABASE = scalar("cleanup_cron_database", result=str)
CLEANUP_SCHEDULE_SQL = scalar("cleanup_schedule_sql", ("p_cron", "text"), ("p_job_name", "text"), result=str)
CLEANUP_UNSCHEDULE_SQL = scalar("cleanup_unschedule_sql", ("p_job_name", "text"), result=str)
CLEANUP_JOB_SQL = scalar("cleanup_job_sql", ("p_job_name", "text"), result=str)
# memori.setting_get for the integer settings the batch driver needs
SETTING_INT = scalar("setting_get", ("p_key", "text"), ("p_default", "jsonb"), result=int)

BatchCallback = Callable[[CleanupRun, CleanupBatch], None]
STATEMENT_TIMEOUT = "57014"  # query_canceled: our statement_timeout fired


class Cleanup(Room):
    def preview(
        self, *, now: datetime | None = None, batch_size: int | None = None, max_rows: int | None = None
    ) -> list[CleanupCandidate]:
        """memori.cleanup_preview: exactly the rows execute would delete, in order, with reasons."""
        return self._db.call(
            CLEANUP_PREVIEW, **given(p_now=now, p_batch_size=batch_size, p_max_rows=max_rows)
        )

    def preview_summary(self, *, now: datetime | None = None, max_rows: int | None = None) -> list[CleanupGroup]:
        """memori.cleanup_preview_summary: the preview grouped by table, namespace and category."""
        return self._db.call(
            CLEANUP_PREVIEW_SUMMARY, **given(p_now=now, p_max_rows=max_rows)
        )

    def count(self, *, now: datetime | None = None, max_rows: int | None = None) -> int:
        """memori.cleanup_count: how many rows preview would return (no ordering, cheaper)."""
        return self._db.call(CLEANUP_COUNT, **given(p_now=now, p_max_rows=max_rows))

    def execute(
        self,
        *,
        now: datetime | None = None,
        batch_size: int | None = None,
        max_rows: int | None = None,
        trigger: str = "cli",
        on_start: Callable[[CleanupRun], None] | None = None,
        on_batch: BatchCallback | None = None,
        work_share: float | None = None,
    ) -> CleanupSummary:
        """Run a cleanup batch by batch, one short transaction each (cleanup_begin/batch/finish).

        The plan is written in chunks as the run goes (``run.planned`` grows);
        ``count()`` beforehand gives the expected total for a progress bar.
        Between batches it rests as long as each batch asks (``pause_ms``:
        ``cleanup.work_share``, default 0.03, of the run's time in batches);
        ``work_share`` sets this run's share instead (1: no rest), as
        ``SET memori.cleanup_work_share`` does (PM001 outside (0, 1]).

        Holds one pooled connection for the run: the cleanup lock is a
        session lock. If anything fails the run is finished as failed; if even
        that fails the connection is closed, which releases the lock.
        """
        with self._db.connection() as conn:
            try:
                if work_share is not None:
                    with conn.transaction():
                        conn.execute("select set_config('memori.cleanup_work_share', %s, false)", (str(work_share),))
                return self._drive(conn, now, batch_size, max_rows, trigger, on_start, on_batch)
            except BaseException:
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise
            finally:
                if work_share is not None and not conn.closed and not conn.broken:
                    with conn.transaction():  # the pooled connection goes back without this run's share
                        conn.execute("reset memori.cleanup_work_share")

    def _drive(
        self,
        conn: psycopg.Connection,
        now: datetime | None,
        batch_size: int | None,
        max_rows: int | None,
        trigger: str,
        on_start: Callable[[CleanupRun], None] | None,
        on_batch: BatchCallback | None,
    ) -> CleanupSummary:
        with conn.transaction(), conn.cursor() as cur:
            run = self._db.call(
                CLEANUP_BEGIN, cur,
                **given(p_now=now, p_batch_size=batch_size, p_max_rows=max_rows, p_trigger=trigger),
            )
            timeout_ms = int(self._db.call(SETTING_INT, cur, p_key="cleanup.statement_timeout_ms",
                                           p_default=Jsonb(5000)))
        if on_start:
            on_start(run)
        try:
            while True:
                batch = self._batch(conn, run, timeout_ms)
                if on_batch:
                    on_batch(run, batch)
                if batch.done:
                    break
                if batch.pause_ms > 0:
                    time.sleep(batch.pause_ms / 1000)  # yield to the workload: the rest the batch asked for
            with conn.transaction(), conn.cursor() as cur:
                return self._db.call(CLEANUP_FINISH, cur, p_run_id=run.id)
        except BaseException as exc:
            self._abort(conn, run.id, exc)
            raise

    def _batch(self, conn: psycopg.Connection, run: CleanupRun, timeout_ms: int) -> CleanupBatch:
        """One memori.cleanup_batch in its own transaction; over statement_timeout is PM022 (no retry here)."""
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(f"set local statement_timeout = {timeout_ms}")
                return self._db.call(CLEANUP_BATCH, cur, p_run_id=run.id)
        except DatabaseError as exc:
            if exc.sqlstate != STATEMENT_TIMEOUT:
                raise
            raise CleanupLockTimeout(
                f"cleanup batch of run {run.id} exceeded statement_timeout",
                sqlstate="PM022",
                hint="Raise memori.settings cleanup.statement_timeout_ms "
                "or look for a blocking transaction; the next run resumes the work.",
            ) from exc

    def _abort(self, conn: psycopg.Connection, run_id: int, exc: BaseException) -> None:
        """Record the failure and release the session lock; close the connection if that fails."""
        try:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()
            with conn.transaction(), conn.cursor() as cur:
                self._db.call(CLEANUP_FINISH, cur, p_run_id=run_id, p_error=str(exc)[:2000] or type(exc).__name__)
        except Exception:
            conn.close()  # the pool discards it; the server releases the lock

    def execute_in_one_transaction(
        self, *, now: datetime | None = None, batch_size: int | None = None, max_rows: int | None = None
    ) -> CleanupSummary:
        """memori.cleanup_execute: the whole cleanup in one transaction (what a psql user gets)."""
        return self._db.call(
            CLEANUP_EXECUTE, **given(p_now=now, p_batch_size=batch_size, p_max_rows=max_rows, p_trigger="sql")
        )

    # -- pg_cron: here, or in the database named by cron.database_name ----------------------
    def cron_database(self) -> str | None:
        """memori.cleanup_cron_database: where pg_cron lives (this database, another one, or None)."""
        return self._db.call(CLEANUP_CRON_DATABASE)

    def _elsewhere(self) -> str | None:
        """The pg_cron database when it is not this one."""
        with self._db.transaction() as cur:
            row = cur.execute("select current_database()").fetchone()
        here = None if row is None else row[0]
        there = self.cron_database()
        return there if there is not None and there != here else None

    def _in_cron_database(self, database: str, statement: str) -> list[dict[str, Any]]:
        """Run one statement written by memori.cleanup_*_sql in the pg_cron database (same server, same login)."""
        with wrap_exceptions(), psycopg.connect(make_conninfo(self._db.dsn, dbname=database),
                                                autocommit=True, connect_timeout=10) as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(statement.encode())
                return cur.fetchall()

    def schedule(self, cron: str | None = None, *, job_name: str | None = None) -> int:
        """Register or update the pg_cron job; returns its id.

        memori.cleanup_schedule when pg_cron is in this database; when it lives in the database named
        by cron.database_name, the statement of memori.cleanup_schedule_sql (cron.schedule_in_database)
        is run there.
        """
        there = self._elsewhere()
        if there is None:
            return self._db.call(
                CLEANUP_SCHEDULE, **given(p_cron=cron, p_job_name=job_name))
        statement = self._db.call(CLEANUP_SCHEDULE_SQL, **given(p_cron=cron, p_job_name=job_name))
        return int(next(iter(self._in_cron_database(there, statement)[0].values())))

    def unschedule(self, *, job_name: str | None = None) -> bool:
        """Remove the pg_cron job (here or in the pg_cron database); False when there was none."""
        there = self._elsewhere()
        if there is None:
            return self._db.call(CLEANUP_UNSCHEDULE, **given(p_job_name=job_name))
        statement = self._db.call(CLEANUP_UNSCHEDULE_SQL, **given(p_job_name=job_name))
        return bool(next(iter(self._in_cron_database(there, statement)[0].values())))

    def job(self, *, job_name: str | None = None, now: datetime | None = None) -> CleanupJob | None:
        """The scheduled job, its last and next run; None without pg_cron or job (wherever pg_cron lives)."""
        there = self._elsewhere()
        if there is None:
            return self._db.call(CLEANUP_JOB, **given(p_job_name=job_name, p_now=now))
        found = self._in_cron_database(there, self._db.call(CLEANUP_JOB_SQL, **given(p_job_name=job_name)))
        if not found:
            return None
        row = found[0]
        return CleanupJob(**row, next_run=self.next_run(row["schedule"], after=now))

    def runs(self, *, limit: int | None = None) -> list[CleanupRun]:
        """memori.cleanup_runs_recent: the latest runs, newest first."""
        return self._db.call(CLEANUP_RUNS_RECENT, **given(p_limit=limit))

    def status(self) -> CleanupStatus:
        """The memori.cleanup_status view: rows waiting, expiring soon, last success, failures."""
        return self._db.rows("select * from memori.cleanup_status", CleanupStatus)[0]

    def next_run(self, cron: str, *, after: datetime | None = None) -> datetime:
        """memori.cron_next_run: validate a schedule and compute its next run (UTC)."""
        return self._db.call(CRON_NEXT_RUN, **given(p_cron=cron, p_after=after))
