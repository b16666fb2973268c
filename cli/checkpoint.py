"""pymemdb checkpoint ...: the checkpoint tracker from the shell."""

from __future__ import annotations

import json
from typing import Annotated, cast

import typer
from rich.table import Table

from pymemdb.checkpoints import Checkpoint
from pymemdb.cli._common import DsnOption, JsonOption, command, database, parse_json
from pymemdb.cli._output import console, fmt_time, print_json, print_result, print_rows

app = typer.Typer(help="Typed checkpoints with retention windows, milestones and versions (seed 01).",
                  no_args_is_help=True)

UserIdOption = Annotated[str | None, typer.Option("--user")]


def _json_object(raw: str, option: str) -> dict[str, object]:
    value = parse_json(raw, option, f'Pass a JSON object, e.g. {option} \'{{"step": 1}}\'.')
    return cast(dict[str, object], value)  # the SQL rejects non-objects with PM001


def _table(rows: list[Checkpoint], title: str) -> Table:
    table = Table(title=title)
    for column in ("id", "type", "title", "session", "created", "expires", "v", "preserved"):
        table.add_column(column, overflow="fold")
    for c in rows:
        table.add_row(str(c.id), c.checkpoint_type, c.title, c.session_id, fmt_time(c.created_at),
                      fmt_time(c.expires_at), str(c.version), "yes" if c.preserve_important else "no")
    return table


@command(app)
def create(
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    user_id: Annotated[str, typer.Argument(help="User id.")],
    title: Annotated[str, typer.Argument(help="Title.")],
    data: Annotated[str, typer.Option("--data", help="Session state as a JSON object.")] = "{}",
    type: Annotated[str, typer.Option("--type", help="manual, automatic or milestone.")] = "manual",
    description: Annotated[str | None, typer.Option("--description")] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    retention_days: Annotated[
        int | None, typer.Option("--retention-days", help="Override the type's retention.")
    ] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a checkpoint (memori.checkpoint_create)."""
    with database(dsn) as db:
        row = db.checkpoints.create(session_id, user_id, type, title, _json_object(data, "--data"),
                                    description=description, tags=tags or (), retention_days=retention_days)
    print_result(row, as_json, f"created {row.checkpoint_type} checkpoint {row.id}: priority {row.priority}, "
                               f"expires {fmt_time(row.expires_at)}")


@command(app)
def get(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint id (uuid).")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one checkpoint with its data (exit 1 when missing or expired)."""
    with database(dsn) as db:
        row = db.checkpoints.get(checkpoint_id)
    if row is None:
        console.print("no such checkpoint (or it has expired)")
        raise typer.Exit(1)
    if as_json:
        print_json(row)
        return
    console.print(_table([row], "checkpoint"))
    console.print_json(json.dumps(row.data))


@command(app, "list")
def list_(
    session_id: Annotated[str | None, typer.Option("--session")] = None,
    user_id: UserIdOption = None,
    type: Annotated[str | None, typer.Option("--type")] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag")] = None,
    include_expired: Annotated[bool, typer.Option("--include-expired")] = False,
    limit: Annotated[int, typer.Option("--limit")] = 20,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Checkpoints by session, user, type and tags, newest first (memori.checkpoint_query)."""
    with database(dsn) as db:
        rows = db.checkpoints.query(session_id=session_id, user_id=user_id, type=type, tags=tags,
                                    include_expired=include_expired, limit=limit)
    print_result(rows, as_json, _table(rows, "checkpoints"))


@command(app)
def status(
    checkpoint_ids: Annotated[list[str] | None, typer.Argument(help="Checkpoint ids (default: all).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Expiry status: active, expiring_soon or expired, days left, and whether cleanup may take it."""
    with database(dsn) as db:
        rows = db.checkpoints.status(checkpoint_ids or None)
    print_rows(rows, as_json, "memori.checkpoint_expiry_status",
               ("id", "type", "status", "days left", "expires", "should cleanup"),
               lambda r: (str(r.checkpoint_id), r.checkpoint_type, r.status, str(r.days_until_expiry),
                          fmt_time(r.expires_at), "yes" if r.should_cleanup else "no"), no_wrap=True)


@command(app)
def preserve(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint id.")],
    release: Annotated[bool, typer.Option("--release", help="Let cleanup take it once expired.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Keep a manual or milestone checkpoint after it expires (memori.checkpoint_preserve)."""
    with database(dsn) as db:
        row = db.checkpoints.preserve(checkpoint_id, not release)
    console.print(f"checkpoint {row.id}: preserve_important = {row.preserve_important}")


@command(app)
def stats(
    user_id: UserIdOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Counts by type and status, raw and stored bytes, next expiry (memori.checkpoint_stats)."""
    with database(dsn) as db:
        rows = db.checkpoints.stats(user_id=user_id)
    counts = ("total", "active", "expiring soon", "expired", "preserved", "raw bytes", "stored bytes")
    print_rows(rows, as_json, "memori.checkpoint_stats", ("type", *counts, "next expiry"),
               lambda r: (r.checkpoint_type, str(r.total), str(r.active), str(r.expiring_soon), str(r.expired),
                          str(r.preserved), str(r.raw_bytes), str(r.stored_bytes), fmt_time(r.next_expiry)),
               right=counts)


@command(app)
def versions(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint id.")],
    show: Annotated[int | None, typer.Option("--show", help="Print the data of this version.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Kept versions of a checkpoint; --show N rebuilds version N (memori.checkpoint_at_version)."""
    with database(dsn) as db:
        kept = db.checkpoints.versions(checkpoint_id)
        data = db.checkpoints.at_version(checkpoint_id, show) if show is not None else None
    if as_json:
        print_json({"versions": kept, "data": data})
        return
    table = Table(title=f"versions of {checkpoint_id}")
    for column in ("version", "saved", "bytes", "current"):
        table.add_column(column)
    for v in kept:
        table.add_row(str(v.version), fmt_time(v.created_at), str(v.bytes), "yes" if v.is_current else "")
    console.print(table)
    if data is not None:
        console.print_json(json.dumps(data))
