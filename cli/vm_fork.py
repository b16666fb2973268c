"""pymemdb vm fork|fork-chain|storage|gc|region ...: copy-on-write forks, GC, shared regions (seed 03 10.x)."""

from __future__ import annotations

from typing import Annotated

import typer

from pymemdb.cli._common import (
    DsnOption,
    JsonOption,
    NowOption,
    console,
    database,
    fmt_time,
    handle_errors,
    print_one,
    print_rows,
)
from pymemdb.cli.vm_pages import SessionArg

UserOption = Annotated[str | None, typer.Option("--user", help="Acting user (default: memori.user_id).")]
RegionArg = Annotated[str, typer.Argument(help="Region id (unique across users).")]
OwnSessionArg = Annotated[str, typer.Argument(help="Your VM session.")]

region_app = typer.Typer(help="Shared regions: the only way pages cross users (read only, with an access list).",
                         no_args_is_help=True)


def fork(
    source_session_id: Annotated[str, typer.Argument(help="The session to fork.")],
    new_session_id: Annotated[str, typer.Argument(help="The new session's id.")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fork a session copy-on-write: it sees every page of the source, none is copied (memori.session_fork)."""
    with database(dsn) as db:
        result = db.vm_fork.fork(source_session_id, new_session_id)
    print_one(result, as_json, lambda r: f"{r.session_id}: fork of {r.source_session_id} (depth {r.depth}), "
                                         f"{r.shared_pages} pages shared, {r.working_set_pages} mapped pages copied")


def fork_chain(session_id: SessionArg, dsn: DsnOption = None,
               as_json: JsonOption = False) -> None:
    """The ancestors a forked session sees pages of (memori.session_fork_chain)."""
    with database(dsn) as db:
        chain = db.vm_fork.fork_chain(session_id)
    print_rows(chain, as_json, f"ancestors of {session_id}", ("depth", "ancestor", "max page row", "forked"),
               lambda c: (str(c.depth), c.ancestor_session_id, str(c.max_page_id), fmt_time(c.forked_at)))


def storage(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Bytes on disk of every VM table (memori.vm_storage)."""
    with database(dsn) as db:
        sizes = db.vm_fork.storage()
    print_rows(sizes, as_json, f"VM tables: {sum(s.bytes for s in sizes):,} bytes",
               ("table", "bytes", "rows (estimate)"),
               lambda s: (s.table_name, f"{s.bytes:,}", f"{max(s.row_estimate, 0):,}"))


def gc(now: NowOption = None, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Mark pages no live session reaches to expire after vm.gc_grace (memori.vm_gc); memori-cleanup deletes them."""
    with database(dsn) as db:
        result = db.vm_fork.gc(now=now)
    print_one(result, as_json, lambda r: f"{r.live_sessions} live sessions, {r.reachable} reachable pages; "
                                         f"marked {r.marked} (expire {fmt_time(r.expires_at)}), unmarked {r.unmarked}, "
                                         f"{r.already_marked} marked earlier")


@region_app.command("create")
@handle_errors
def region_create(
    region_id: RegionArg,
    scope: Annotated[str, typer.Option("--scope", help="pages (the pages put in it) or session (whole sessions).")]
    = "pages",
    description: Annotated[str | None, typer.Option("--description")] = None,
    user_id: UserOption = None,
    dsn: DsnOption = None,
) -> None:
    """Create a shared region (memori.region_create)."""
    with database(dsn) as db:
        region = db.vm_fork.region_create(region_id, scope, description, user_id=user_id)
    console.print(f"{region.region_id}: scope {region.scope}, owner {region.user_id}")


@region_app.command("grant")
@handle_errors
def region_grant(region_id: RegionArg, member: Annotated[str, typer.Argument(help="User id to let read.")],
                 user_id: UserOption = None, dsn: DsnOption = None) -> None:
    """Let a user read the region (memori.region_grant)."""
    with database(dsn) as db:
        added = db.vm_fork.region_grant(region_id, member, user_id=user_id)
    console.print("granted" if added else "already granted")


@region_app.command("revoke")
@handle_errors
def region_revoke(region_id: RegionArg, member: Annotated[str, typer.Argument(help="User id to remove.")],
                  user_id: UserOption = None, dsn: DsnOption = None) -> None:
    """Take a user off the region's access list (memori.region_revoke)."""
    with database(dsn) as db:
        removed = db.vm_fork.region_revoke(region_id, member, user_id=user_id)
    console.print("revoked" if removed else "not listed")


@region_app.command("put")
@handle_errors
def region_put(region_id: RegionArg, session_id: OwnSessionArg,
               page_id: Annotated[str | None, typer.Argument(help="Page id (omit for a session-scope region).")]
               = None,
               user_id: UserOption = None, dsn: DsnOption = None) -> None:
    """Share a page, or a whole session, through the region (memori.region_page_put)."""
    with database(dsn) as db:
        added = db.vm_fork.region_page_put(region_id, session_id, page_id, user_id=user_id)
    console.print("shared" if added else "already shared")


@region_app.command("remove")
@handle_errors
def region_remove(region_id: RegionArg, session_id: OwnSessionArg,
                  page_id: Annotated[str | None, typer.Argument(help="Page id (omit for a whole session).")] = None,
                  user_id: UserOption = None, dsn: DsnOption = None) -> None:
    """Stop sharing a page or session (memori.region_page_remove)."""
    with database(dsn) as db:
        removed = db.vm_fork.region_page_remove(region_id, session_id, page_id, user_id=user_id)
    console.print("removed" if removed else "was not shared")


@region_app.command("show")
@handle_errors
def region_show(region_id: RegionArg, limit: Annotated[int, typer.Option("--limit")] = 100,
                user_id: UserOption = None, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """The pages of a region, with content (memori.region_pages): owner or listed users only."""
    with database(dsn) as db:
        found = db.vm_fork.region_pages(region_id, user_id=user_id, limit=limit)
    print_rows(found, as_json, f"{len(found)} pages in {region_id}", ("owner", "session", "page", "type", "content"),
               lambda p: (p.owner, p.session_id, p.page_id, p.page_type, p.content or ""), overflow="fold")


@region_app.command("list")
@handle_errors
def region_list(user_id: UserOption = None, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Regions you own (with their access lists) or may read (memori.region_list)."""
    with database(dsn) as db:
        found = db.vm_fork.region_list(user_id=user_id)
    print_rows(found, as_json, "regions", ("region", "owner", "scope", "members", "entries"),
               lambda r: (r.region_id, r.owner, r.scope, "-" if r.members is None else ",".join(r.members),
                          str(r.entries)))


@region_app.command("drop")
@handle_errors
def region_drop(region_id: RegionArg, user_id: UserOption = None, dsn: DsnOption = None) -> None:
    """Delete a region with its access list and entries (memori.region_drop)."""
    with database(dsn) as db:
        db.vm_fork.region_drop(region_id, user_id=user_id)
    console.print(f"dropped {region_id}")


def register(vm_app: typer.Typer) -> None:
    """Add these commands to ``pymemdb vm``."""
    vm_app.command("fork")(handle_errors(fork))
    vm_app.command("fork-chain")(handle_errors(fork_chain))
    vm_app.command("storage")(handle_errors(storage))
    vm_app.command("gc")(handle_errors(gc))
    vm_app.add_typer(region_app, name="region")
