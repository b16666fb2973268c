"""The retention engine's cleanup: ``db.cleanup``.

Preview and execute are SQL (memori.cleanup_preview / cleanup_begin /
cleanup_batch / cleanup_finish). ``execute`` only drives the batches: each
one is its own short transaction with a statement_timeout. Retrying is SQL's
job (cleanup_batch skips rows a writer holds and retries deadlocks); a batch
over statement_timeout fails the run (PM022).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from pymemdb._sql import fn, given
from pymemdb.errors import CleanupLockTimeout, DatabaseError, wrap_exceptions
from pymemdb.types import (
    CleanupBatch,
    CleanupCandidate,
    CleanupGroup,
    CleanupJob,
    CleanupRun,
    CleanupStatus,
    CleanupSummary,
)

if TYPE_CHECKING:
    from pymemdb.db import Database

_RUN_ARGS = (("p_now", "timestamptz"), ("p_batch_size", "integer"), ("p_max_rows", "integer"))

CLEANUP_PREVIEW = fn("cleanup_preview", *_RUN_ARGS, result=CleanupCandidate, returns="many")
CLEANUP_PREVIEW_SUMMARY = fn(
    "cleanup_preview_summary", ("p_now", "timestamptz"), ("p_max_rows", "integer"),
    result=CleanupGroup, returns="many",
)
CLEANUP_COUNT = fn("cleanup_count", ("p_now", "timestamptz"), ("p_max_rows", "integer"), returns="scalar")
CLEANUP_BEGIN = fn("cleanup_begin", *_RUN_ARGS, ("p_trigger", "text"), result=CleanupRun)
CLEANUP_BATCH = fn("cleanup_batch", ("p_run_id", "bigint"), ("p_batch_size", "integer"), result=CleanupBatch)
CLEANUP_FINISH = fn("cleanup_finish", ("p_run_id", "bigint"), ("p_error", "text"), result=CleanupSummary)
CLEANUP_EXECUTE = fn("cleanup_execute", *_RUN_ARGS, ("p_trigger", "text"), result=CleanupSummary)
CLEANUP_SCHEDULE = fn("cleanup_schedule", ("p_cron", "text"), ("p_job_name", "text"), returns="scalar")
CLEANUP_UNSCHEDULE = fn("cleanup_unschedule", ("p_job_name", "text"), returns="scalar")
CLEANUP_JOB = fn("cleanup_job", ("p_job_name", "text"), ("p_now", "timestamptz"), result=CleanupJob)
CLEANUP_RUNS_RECENT = fn("cleanup_runs_recent", ("p_limit", "integer"), result=CleanupRun, returns="many")
CRON_NEXT_RUN = fn("cron_next_run", ("p_cron", "text"), ("p_after", "timestamptz"), returns="scalar")
CLEANUP_CRON_DATABASE = fn("cleanup_cron_database", returns="scalar")
CLEANUP_SCHEDULE_SQL = fn("cleanup_schedule_sql", ("p_cron", "text"), ("p_job_name", "text"), returns="scalar")
CLEANUP_UNSCHEDULE_SQL = fn("cleanup_unschedule_sql", ("p_job_name", "text"), returns="scalar")
CLEANUP_JOB_SQL = fn("cleanup_job_sql", ("p_job_name", "text"), returns="scalar")

BatchCallback = Callable[[CleanupRun, CleanupBatch], None]
STATEMENT_TIMEOUT = "57014"  # query_canceled: our statement_timeout fired


class Cleanup:
    def __init__(self, db: Database) -> None:
        self._db = db

    def preview(
        self, *, now: datetime | None = None, batch_size: int | None = None, max_rows: int | None = None
    ) -> list[CleanupCandidate]:
        """memori.cleanup_preview: exactly the rows execute would delete, in order, with reasons."""
        return self._db.call(  # type: ignore[no-any-return]
            CLEANUP_PREVIEW, **given(p_now=now, p_batch_size=batch_size, p_max_rows=max_rows)
        )

    def preview_summary(self, *, now: datetime | None = None, max_rows: int | None = None) -> list[CleanupGroup]:
        """memori.cleanup_preview_summary: the preview grouped by table, namespace and category."""
        return self._db.call(  # type: ignore[no-any-return]
            CLEANUP_PREVIEW_SUMMARY, **given(p_now=now, p_max_rows=max_rows)
        )

    def count(self, *, now: datetime | None = None, max_rows: int | None = None) -> int:
        """memori.cleanup_count: how many rows preview would return (no ordering, cheaper)."""
        return self._db.call(CLEANUP_COUNT, **given(p_now=now, p_max_rows=max_rows))  # type: ignore[no-any-return]

    def execute(
        self,
        *,
        now: datetime | None = None,
        batch_size: int | None = None,
        max_rows: int | None = None,
        trigger: str = "cli",
        on_start: Callable[[CleanupRun], None] | None = None,
        on_batch: BatchCallback | None = None,
    ) -> CleanupSummary:
        """Run a cleanup batch by batch, one short transaction each (cleanup_begin/batch/finish).

        The plan is written in chunks as the run goes (``run.planned`` grows);
        ``count()`` beforehand gives the expected total for a progress bar.

        Holds one pooled connection for the run: the cleanup lock is a
        session lock. If anything fails the run is finished as failed; if even
        that fails the connection is closed, which releases the lock.
        """
        with self._db.connection() as conn:
            try:
                return self._drive(conn, now, batch_size, max_rows, trigger, on_start, on_batch)
            except BaseException:
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise

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
            run: CleanupRun = self._db.call(
                CLEANUP_BEGIN, cur,
                **given(p_now=now, p_batch_size=batch_size, p_max_rows=max_rows, p_trigger=trigger),
            )
            timeout_ms, pause_ms = cur.execute(
                "select coalesce((select value::int from memori.settings"
                "                  where key = 'cleanup.statement_timeout_ms'), 5000),"
                "       coalesce((select value::int from memori.settings"
                "                  where key = 'cleanup.batch_pause_ms'), 0)"
            ).fetchone()  # type: ignore[misc]
        if on_start:
            on_start(run)
        try:
            while True:
                try:
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute(f"set local statement_timeout = {int(timeout_ms)}")
                        batch: CleanupBatch = self._db.call(CLEANUP_BATCH, cur, p_run_id=run.id)
                except DatabaseError as exc:
                    if exc.sqlstate != STATEMENT_TIMEOUT:
                        raise
                    # No retry here: memori.cleanup_batch owns the retry policy (rows a writer holds are
                    # skipped and tried again; a deadlock or lock timeout is retried at half size).
                    raise CleanupLockTimeout(
                        f"cleanup batch of run {run.id} exceeded statement_timeout",
                        sqlstate="PM022",
                        hint="Raise memori.settings cleanup.statement_timeout_ms "
                        "or look for a blocking transaction; the next run resumes the work.",
                    ) from exc
                if on_batch:
                    on_batch(run, batch)
                if batch.done:
                    break
                if pause_ms > 0:
                    time.sleep(pause_ms / 1000)  # yield to the workload between batches
            with conn.transaction(), conn.cursor() as cur:
                return self._db.call(CLEANUP_FINISH, cur, p_run_id=run.id)  # type: ignore[no-any-return]
        except BaseException as exc:
            self._abort(conn, run.id, exc)
            raise

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
        return self._db.call(  # type: ignore[no-any-return]
            CLEANUP_EXECUTE, **given(p_now=now, p_batch_size=batch_size, p_max_rows=max_rows, p_trigger="sql")
        )

    # -- pg_cron: here, or in the database named by cron.database_name ----------------------
    def cron_database(self) -> str | None:
        """memori.cleanup_cron_database: where pg_cron lives (this database, another one, or None)."""
        return self._db.call(CLEANUP_CRON_DATABASE)  # type: ignore[no-any-return]

    def _elsewhere(self) -> str | None:
        """The pg_cron database when it is not this one."""
        with self._db.transaction() as cur:
            here = cur.execute("select current_database()").fetchone()[0]  # type: ignore[index]
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
            return self._db.call(  # type: ignore[no-any-return]
                CLEANUP_SCHEDULE, **given(p_cron=cron, p_job_name=job_name))
        statement = self._db.call(CLEANUP_SCHEDULE_SQL, **given(p_cron=cron, p_job_name=job_name))
        return int(next(iter(self._in_cron_database(there, statement)[0].values())))

    def unschedule(self, *, job_name: str | None = None) -> bool:
        """Remove the pg_cron job (here or in the pg_cron database); False when there was none."""
        there = self._elsewhere()
        if there is None:
            return self._db.call(CLEANUP_UNSCHEDULE, **given(p_job_name=job_name))  # type: ignore[no-any-return]
        statement = self._db.call(CLEANUP_UNSCHEDULE_SQL, **given(p_job_name=job_name))
        return bool(next(iter(self._in_cron_database(there, statement)[0].values())))

    def job(self, *, job_name: str | None = None, now: datetime | None = None) -> CleanupJob | None:
        """The scheduled job, its last and next run; None without pg_cron or job (wherever pg_cron lives)."""
        there = self._elsewhere()
        if there is None:
            return self._db.call(CLEANUP_JOB, **given(p_job_name=job_name, p_now=now))  # type: ignore[no-any-return]
        found = self._in_cron_database(there, self._db.call(CLEANUP_JOB_SQL, **given(p_job_name=job_name)))
        if not found:
            return None
        row = found[0]
        return CleanupJob(**row, next_run=self.next_run(row["schedule"], after=now))

    def runs(self, *, limit: int | None = None) -> list[CleanupRun]:
        """memori.cleanup_runs_recent: the latest runs, newest first."""
        return self._db.call(CLEANUP_RUNS_RECENT, **given(p_limit=limit))  # type: ignore[no-any-return]

    def status(self) -> CleanupStatus:
        """The memori.cleanup_status view: rows waiting, expiring soon, last success, failures."""
        return self._db.rows("select * from memori.cleanup_status", CleanupStatus)[0]

    def next_run(self, cron: str, *, after: datetime | None = None) -> datetime:
        """memori.cron_next_run: validate a schedule and compute its next run (UTC)."""
        return self._db.call(CRON_NEXT_RUN, **given(p_cron=cron, p_after=after))  # type: ignore[no-any-return]
