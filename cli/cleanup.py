"""memori-cleanup: preview, execute and schedule the retention engine's cleanup.

Exit codes: 0 success, 1 error, 2 usage or invalid argument, 3 another cleanup
holds the lock.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pymemdb.cli._common import DsnOption, JsonOption, NowOption, OneLineErrors, command, database
from pymemdb.cli._output import console, err_console, fmt_time, print_json
from pymemdb.errors import InvalidArgument
from pymemdb.retention import CleanupBatch, CleanupRun

app = typer.Typer(
    cls=OneLineErrors,
    name="memori-cleanup",
    help="Preview, execute and schedule cleanup of expired pymemdb rows (default: preview).",
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

BatchSizeOption = Annotated[int, typer.Option("--batch-size", help="Rows per batch (one transaction each).")]
MaxRowsOption = Annotated[
    int | None, typer.Option("--max-rows", help="Delete at most this many rows in this run.", show_default=False)
]
JobNameOption = Annotated[str, typer.Option("--job-name", help="pg_cron job name.")]


def _utc(now: datetime | None) -> datetime | None:
    """Naive --now values are UTC."""
    return now.replace(tzinfo=UTC) if now is not None and now.tzinfo is None else now


def _check_caps(**caps: int | None) -> None:
    """Row caps are NULL (none) or >= 0 everywhere (PM001, like memori._check_cap); checked before connecting."""
    for name, cap in caps.items():
        if cap is not None and cap < 0:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be >= 0, got {cap}",
                                  hint=f"Omit --{name.replace('_', '-')} for no cap, or pass 0 or a positive number.")


@app.callback()
def main(ctx: typer.Context) -> None:
    """With no command: preview."""
    if ctx.invoked_subcommand is None:
        preview(dsn=None, limit=0, max_rows=None, now=None, as_json=False)


@command(app)
def preview(
    dsn: DsnOption = None,
    limit: Annotated[int, typer.Option("--limit", help="Also list the first N rows in deletion order.")] = 0,
    max_rows: MaxRowsOption = None,
    now: NowOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show what execute would delete, grouped by table and namespace, and why."""
    _check_caps(limit=limit, max_rows=max_rows)
    with database(dsn) as db:
        groups = db.cleanup.preview_summary(now=_utc(now), max_rows=max_rows)
        sample = db.cleanup.preview(now=_utc(now), max_rows=limit) if limit > 0 else []
    if as_json:
        print_json({"groups": groups, "total": sum(g.rows for g in groups), "rows": sample})
        return
    if not groups:
        console.print("Nothing to clean up: no expired rows.")
        return
    table = Table(title="Rows that memori-cleanup execute would delete")
    for column in ("table", "namespace / owner", "category", "rows", "priority", "oldest expiry", "newest expiry"):
        table.add_column(column, justify="right" if column in ("rows", "priority") else "left")
    for g in groups:
        table.add_row(g.table_name, g.owner or "-", g.category or "-", str(g.rows), str(g.min_priority),
                      fmt_time(g.oldest_expiry), fmt_time(g.newest_expiry))
    console.print(table)
    console.print(f"total: {sum(g.rows for g in groups)} rows")
    if sample:
        rows = Table(title=f"First {len(sample)} rows in deletion order")
        for column in ("#", "batch", "table", "id", "owner", "reason"):
            rows.add_column(column)
        for c in sample:
            rows.add_row(str(c.seq), str(c.batch), c.table_name, c.row_id, c.owner or "-", c.reason)
        console.print(rows)


@command(app)
def execute(
    dsn: DsnOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    batch_size: BatchSizeOption = 1000,
    max_rows: MaxRowsOption = None,
    now: NowOption = None,
    as_json: JsonOption = False,
    work_share: Annotated[float | None, typer.Option(
        "--work-share",
        help="Largest share of the run's time spent in batches, above 0 and at most 1 (1: no rest between "
             "batches). Default: memori.settings cleanup.work_share (0.03), which leaves the cores to the "
             "application's queries.")] = None,
) -> None:
    """Delete expired rows in short batches, with a progress bar and a summary."""
    _check_caps(max_rows=max_rows)
    with database(dsn) as db:
        show_progress = not as_json and sys.stderr.isatty()
        interactive = not yes and sys.stdin.isatty()
        expected = db.cleanup.count(now=_utc(now), max_rows=max_rows) if interactive or show_progress else None
        if interactive:
            if expected == 0:
                console.print("Nothing to clean up: no expired rows.")
                return
            if not typer.confirm(f"Delete {expected} expired rows?"):
                raise typer.Exit(1)
        progress = Progress(TextColumn("cleanup"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=err_console)
        task = progress.add_task("cleanup", total=expected)
        # the bar is started only on a terminal: a disabled one still ended with an empty line on
        # stderr before rich 14.3, in front of the one-line error or under cron
        with progress if show_progress else nullcontext():

            def on_batch(run: CleanupRun, batch: CleanupBatch) -> None:
                progress.advance(task, batch.deleted)

            summary = db.cleanup.execute(
                now=_utc(now), batch_size=batch_size, max_rows=max_rows,
                on_batch=on_batch, work_share=work_share,
            )
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"Cleanup run {summary.run_id}: {summary.status}")
    table.add_column("table")
    table.add_column("deleted", justify="right")
    for name, count in sorted(summary.deleted_by_table.items()):
        table.add_row(name, str(count))
    table.add_row("total", str(summary.deleted), end_section=True)
    console.print(table)
    console.print(f"planned {summary.planned}, deleted {summary.deleted} in {summary.batches} batches, "
                  f"{summary.seconds} s")
    if summary.skipped:
        console.print(f"{summary.skipped} rows were locked by other transactions at every attempt: "
                      "left for the next run")


@command(app)
def schedule(
    cron: Annotated[str, typer.Argument(help="pg_cron schedule, e.g. '0 3 * * *' (UTC).")] = "0 3 * * *",
    job_name: JobNameOption = "memori-cleanup",
    dsn: DsnOption = None,
) -> None:
    """Run the cleanup on a pg_cron schedule (from the database pg_cron lives in: cron.database_name)."""
    with database(dsn) as db:
        job_id = db.cleanup.schedule(cron, job_name=job_name)
        job = db.cleanup.job(job_name=job_name)
        where = db.cleanup.cron_database()
    next_run = fmt_time(job.next_run if job else None)
    console.print(f"scheduled pg_cron job {job_id} ({job_name}) '{cron}' in database {where}; next run {next_run}")


@command(app)
def unschedule(job_name: JobNameOption = "memori-cleanup", dsn: DsnOption = None) -> None:
    """Remove the pg_cron cleanup job."""
    with database(dsn) as db:
        removed = db.cleanup.unschedule(job_name=job_name)
    console.print(f"removed pg_cron job {job_name}" if removed else f"no pg_cron job named {job_name}")


@command(app)
def status(
    dsn: DsnOption = None,
    runs: Annotated[int, typer.Option("--runs", help="How many recent runs to show.")] = 5,
    job_name: JobNameOption = "memori-cleanup",
    as_json: JsonOption = False,
) -> None:
    """Recent runs, the pg_cron job and its next run, and rows waiting for cleanup."""
    with database(dsn) as db:
        state = db.cleanup.status()
        recent = db.cleanup.runs(limit=runs)
        job = db.cleanup.job(job_name=job_name)
    if as_json:
        print_json({"status": state, "job": job, "runs": recent})
        return
    console.print(f"expired rows waiting: {state.expired_waiting}   expiring soon: {state.expiring_soon}   "
                  f"last success: {fmt_time(state.last_success)}   failed/abandoned (7 d): {state.failures_7d}")
    if job:
        console.print(f"pg_cron job {job.job_id} '{job.job_name}' '{job.schedule}' "
                      f"{'active' if job.active else 'inactive'}; last: {job.last_status or '-'} "
                      f"{fmt_time(job.last_start)}; next: {fmt_time(job.next_run)}")
    else:
        console.print("not scheduled in the database (memori-cleanup schedule, or run execute from cron)")
    table = Table(title="Recent cleanup runs")
    for column in ("run", "trigger", "status", "started", "planned", "deleted", "batches", "error"):
        table.add_column(column)
    for r in recent:
        table.add_row(str(r.id), r.trigger, r.status, fmt_time(r.started_at), str(r.planned), str(r.deleted),
                      str(r.batches), (r.error or "")[:60])
    console.print(table)
