"""pymemdb memories ...: memories and TTL'd session checkpoints (seed 05; db.memories, sql/100-memories.sql).

``pymemdb memory ...`` is the same sub-app under its old name (hidden), so scripts keep working.
"""

from __future__ import annotations

from typing import Annotated, cast

import typer

from pymemdb.cli._common import DsnOption, JsonOption, command, database, parse_json
from pymemdb.cli._output import console, fmt_time, print_json, print_result, print_rows
from pymemdb.types import TtlStatus

app = typer.Typer(help="Memories and TTL'd session checkpoints (seed 05).", no_args_is_help=True)

TTL_COLUMNS = ("namespace", "permanent", "active_ttl", "expired")


def ttl_cells(r: TtlStatus) -> tuple[str, str, str, str]:
    """A memori.ttl_status row as TTL_COLUMNS (also the demo's table)."""
    return r.user_id, str(r.permanent), str(r.active_ttl), str(r.expired)


def _metadata(raw: str | None) -> dict[str, object] | None:
    if raw is None:
        return None
    value = parse_json(raw, "--metadata", 'Pass a JSON object, e.g. --metadata \'{"task": "api"}\'.')
    return cast("dict[str, object]", value)  # the SQL function refuses anything but an object


@command(app, "save-checkpoint")
def memory_save_checkpoint(
    skill: Annotated[str, typer.Argument(help="Skill id (skill:api-builder) or short name (api).")],
    user_id: Annotated[str, typer.Argument(help="The agent user; also the legacy namespace.")],
    content: Annotated[str, typer.Argument(help="Checkpoint text.")],
    metadata: Annotated[str | None, typer.Option("--metadata", help="Extra metadata as a JSON object.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Save a session checkpoint with the skill's TTL (memori.session_checkpoint_save)."""
    with database(dsn) as db:
        row = db.memories.save_session_checkpoint(skill, user_id, content, _metadata(metadata))
    expiry = fmt_time(row.expires_at) if row.expires_at else "never"
    print_result(row, as_json, f"saved memory {row.id} in {row.user_id}, expires {expiry}")


@command(app, "load-checkpoint")
def memory_load_checkpoint(
    skill: Annotated[str, typer.Argument(help="Skill id or short name.")],
    user_id: Annotated[str, typer.Argument(help="The agent user.")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Latest unexpired session checkpoint, with the legacy fallback (exit 1 when none)."""
    with database(dsn) as db:
        row = db.memories.load_latest_checkpoint(skill, user_id)
    if row is None:
        console.print("no unexpired checkpoint")
        raise typer.Exit(1)
    if as_json:
        print_json(row)
    else:
        console.print(f"[{row.source}] {row.user_id} #{row.id} at {fmt_time(row.created_at)}:", markup=False)
        console.print(row.content, markup=False)


@command(app, "list")
def memory_list(
    namespace: Annotated[str, typer.Argument(help="Namespace (memories.user_id).")],
    limit: Annotated[int, typer.Option("--limit")] = 20,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Newest unexpired memories of a namespace."""
    with database(dsn) as db:
        rows = db.memories.list(namespace, limit=limit)
    print_rows(rows, as_json, namespace, ("id", "created", "expires", "category", "content"),
               lambda r: (str(r.id), fmt_time(r.created_at), fmt_time(r.expires_at), r.category, r.content[:60]))


@command(app, "ttl-status")
def memory_ttl_status(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Per namespace: permanent, active TTL and expired memories (memori.ttl_status)."""
    with database(dsn) as db:
        rows = db.memories.ttl_status()
    print_rows(rows, as_json, "memori.ttl_status", TTL_COLUMNS, ttl_cells, right=TTL_COLUMNS[1:])
