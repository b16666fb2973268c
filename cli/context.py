"""pymemdb context ...: the scoped context store from the shell."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Annotated, Any

import typer
from rich.table import Table

from pymemdb.cli._common import DsnOption, JsonOption, command, database, parse_json
from pymemdb.cli._output import console, fmt_time, print_result, print_rows
from pymemdb.context import ContextValue, Scope

app = typer.Typer(help="Scoped context (global, user, project, session) resolved most specific first (seed 01).",
                  no_args_is_help=True)

UserOption = Annotated[str, typer.Option("--user", "-u", help="The acting user (memori.user_id).")]
ProjectOption = Annotated[str | None, typer.Option("--project", "-p", help="Project id.", show_default=False)]
SessionOption = Annotated[str | None, typer.Option("--session", "-s", help="Session id.", show_default=False)]
ScopeOption = Annotated[str, typer.Option("--scope", help="global, user, project or session.")]
KeyArg = Annotated[str, typer.Argument(help="Key.")]


def _json(raw: str, what: str) -> Any:
    return parse_json(raw, what, 'Pass JSON, e.g. \'"dark"\', 42 or \'{"mode": "dark"}\'.')


def _values_table(values: list[ContextValue], title: str) -> Table:
    table = Table(title=title)
    for column in ("key", "value", "scope", "type", "expires"):
        table.add_column(column, overflow="fold")
    for v in values:
        table.add_row(v.key, json.dumps(v.value), v.scope, v.type, fmt_time(v.expires_at))
    return table


@command(app, "set")
def set_(
    key: KeyArg,
    value: Annotated[str, typer.Argument(help="Value as JSON.")],
    user: UserOption,
    scope: ScopeOption = "user",
    type: Annotated[str, typer.Option("--type", help="business_context, session_context, user_preferences or "
                                                     "temporary_state.")] = "user_preferences",
    project: ProjectOption = None,
    session: SessionOption = None,
    ttl_ms: Annotated[int | None, typer.Option("--ttl-ms", help="TTL in milliseconds (default: the type's).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a value at one scope (memori.context_set)."""
    with database(dsn) as db:
        row = db.context.set(key, _json(value, "VALUE"), type=type, scope=scope,
                             who=Scope(user, project, session), ttl_ms=ttl_ms)
    print_result(row, as_json, f"set {row.key} at scope {row.scope} ({row.type}), expires {fmt_time(row.expires_at)}")


@command(app)
def get(
    key: KeyArg,
    user: UserOption,
    project: ProjectOption = None,
    session: SessionOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resolve a key: the most specific visible value and its scope (exit 1 when none)."""
    with database(dsn) as db:
        row = db.context.get(key, Scope(user, project, session))
    if row is None:
        console.print(f"no value for {key!r}")
        raise typer.Exit(1)
    print_result(row, as_json, f"{json.dumps(row.value)}  (from scope {row.scope})", markup=False, highlight=False)


@command(app)
def resolve(
    user: UserOption,
    project: ProjectOption = None,
    session: SessionOption = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Only keys starting with this.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every visible key resolved, as one merged view (memori.context_resolve)."""
    with database(dsn) as db:
        values = db.context.resolve(Scope(user, project, session), prefix=prefix)
    print_result({v.key: {"value": v.value, "scope": v.scope} for v in values}, as_json,
                 _values_table(values, "resolved context"))


@command(app, "list")
def list_(
    user: UserOption,
    project: ProjectOption = None,
    session: SessionOption = None,
    key_pattern: Annotated[str | None, typer.Option("--key", help="SQL LIKE pattern, e.g. 'ui.%'.")] = None,
    contains: Annotated[str | None, typer.Option("--contains", help="JSON the value must contain.")] = None,
    scopes: Annotated[list[str] | None, typer.Option("--scope", help="Only this scope (repeatable).")] = None,
    types: Annotated[list[str] | None, typer.Option("--type", help="Only this type (repeatable).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows.")] = 100,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Visible entries at every scope, not resolved (memori.context_search)."""
    with database(dsn) as db:
        values = db.context.search(Scope(user, project, session), key_pattern=key_pattern,
                                   value_contains=None if contains is None else _json(contains, "--contains"),
                                   scopes=scopes, types=types, limit=limit)
    print_result(values, as_json, _values_table(values, "context entries"))


@command(app)
def delete(
    key: KeyArg,
    user: UserOption,
    scope: ScopeOption = "user",
    project: ProjectOption = None,
    session: SessionOption = None,
    dsn: DsnOption = None,
) -> None:
    """Delete the entry of a key at one scope (exit 1 when there was none)."""
    with database(dsn) as db:
        deleted = db.context.delete(key, scope=scope, who=Scope(user, project, session))
    console.print("deleted" if deleted else f"no {scope} entry {key!r}")
    if not deleted:
        raise typer.Exit(1)


@command(app)
def stats(
    user: UserOption,
    project: ProjectOption = None,
    session: SessionOption = None,
    within_minutes: Annotated[int, typer.Option("--within-minutes", help="Expiring-soon window.")] = 60,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Visible entries by scope and by type: total, active, expiring soon, expired, bytes."""
    with database(dsn) as db:
        rows = db.context.stats(Scope(user, project, session), within=timedelta(minutes=within_minutes))
    counts = ("total", "active", "expiring_soon", "expired", "bytes")
    print_rows(rows, as_json, "memori.context_stats", ("by", "name", *counts),
               lambda r: (r.dimension, r.name, str(r.total), str(r.active), str(r.expiring_soon), str(r.expired),
                          str(r.value_bytes)), right=counts)
