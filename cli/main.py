"""pymemdb: install the schema, run the embedded server, demo and benchmarks, memories."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from pymemdb import embedded
from pymemdb.cli._common import (
    DsnOption,
    JsonOption,
    OneLineErrors,
    console,
    database,
    fmt_time,
    handle_errors,
    print_json,
)
from pymemdb.cli.budget import app as budget_app
from pymemdb.cli.checkpoint import app as checkpoint_app
from pymemdb.cli.context import app as context_app
from pymemdb.cli.mcp import app as mcp_app
from pymemdb.cli.session import app as session_app
from pymemdb.cli.vm import app as vm_app
from pymemdb.db import resolve_dsn
from pymemdb.errors import InvalidArgument

app = typer.Typer(
    cls=OneLineErrors,
    name="pymemdb",
    help="pymemdb: the memory layer for AI agents that lives inside PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="The embedded PostgreSQL server (used when no DSN is given).", no_args_is_help=True)
memory_app = typer.Typer(help="Memories and TTL'd session checkpoints (seed 05).", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks: each runs its baseline in the same run and prints ratios.",
                        no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(checkpoint_app, name="checkpoint")
app.add_typer(context_app, name="context")
app.add_typer(session_app, name="session")
app.add_typer(budget_app, name="budget")
app.add_typer(vm_app, name="vm")
app.add_typer(vm_app, name="pages", hidden=True)  # the VM's old name: scripts keep working
app.add_typer(memory_app, name="memory")
app.add_typer(mcp_app, name="mcp")
app.add_typer(bench_app, name="bench")


# -- init ---------------------------------------------------------------------
@app.command()
@handle_errors
def init(
    dsn: DsnOption = None,
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the install script for psql instead of installing.")
    ] = False,
    from_revision: Annotated[
        str | None, typer.Option("--from", help="With --sql: upgrade from this alembic revision.", show_default=False)
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-apply sql/ even when nothing changed.")] = False,
    embedding_dim: Annotated[
        int | None,
        typer.Option("--embedding-dim", help="Dimension of page embeddings (1-2000; 384 on a new install). "
                     "Refused once pages have embeddings.", show_default=False),
    ] = None,
    distribute: Annotated[
        bool, typer.Option("--distribute", help="Then place the tables on the Citus cluster this DSN's coordinator "
                           "runs (memori.distribute(); docs/scale-out.md). Fails without Citus.")
    ] = False,
) -> None:
    """Install or upgrade the memori schema (alembic revisions, then every sql/ file)."""
    from pymemdb.install import install, install_script

    if sql:
        typer.echo(install_script(from_revision, embedding_dim=embedding_dim), nl=False)
        return
    target = resolve_dsn(dsn) or embedded.start()
    result = install(target, force=force, embedding_dim=embedding_dim)
    dim = f", embeddings {result.embedding_dim}-d" if result.embedding_dim else ""
    if result.changed:
        console.print(f"installed: schema memori at revision {result.to_revision} "
                      f"(was {result.from_revision or 'not installed'}), sql {result.sql_sha256[:12]}{dim}")
    else:
        console.print(f"up to date: schema memori at revision {result.to_revision}, "
                      f"sql {result.sql_sha256[:12]}{dim}")
    if distribute:
        _print_distribution(target)


def _print_distribution(dsn: str) -> None:
    """memori.distribute() and one line per table that is not simply where it was."""
    with database(dsn) as db:
        results = db.cluster.distribute()
    table = Table("table", "placement", "status", "blockers / error")
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status in ("local", "already"):
            continue
        why = "; ".join(r.blockers) if r.blockers else (r.error or "")
        table.add_row(r.table_name, r.placement, r.status, why)
    console.print(table)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.print(f"distribute: {summary} (memori.distribute(p_dry_run => true) lists the blockers again)")


# -- db -----------------------------------------------------------------------
@db_app.command("start")
@handle_errors
def db_start() -> None:
    """Start the embedded server (or find it running) and install or upgrade the schema."""
    embedded.start_installed()
    state = embedded.status()
    console.print(f"running: pid {state.pid}, data {state.data_dir}")


@db_app.command("stop")
@handle_errors
def db_stop() -> None:
    """Stop the embedded server."""
    console.print("stopped" if embedded.stop() else "not running")


@db_app.command("status")
@handle_errors
def db_status(as_json: JsonOption = False) -> None:
    """Is the embedded server running, where is its data, what is its URL."""
    state = embedded.status()
    if as_json:
        print_json(state)
        return
    if state.running:
        console.print(f"running: pid {state.pid}, data {state.data_dir}, url {state.url}")
    else:
        console.print(f"not running (data {state.data_dir})")
        raise typer.Exit(1)


@db_app.command("url")
@handle_errors
def db_url() -> None:
    """Print the embedded server's URL, starting it and installing or upgrading the schema if needed.

    For psql: psql "$(pymemdb db url)".
    """
    typer.echo(embedded.start_installed())


# -- memory -------------------------------------------------------------------
def _metadata(raw: str | None) -> dict[str, object] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"--metadata is not valid JSON: {exc.msg}",
                              hint='Pass a JSON object, e.g. --metadata \'{"task": "api"}\'.') from None
    return value  # type: ignore[no-any-return]


@memory_app.command("save-checkpoint")
@handle_errors
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
    if as_json:
        print_json(row)
    else:
        expiry = fmt_time(row.expires_at) if row.expires_at else "never"
        console.print(f"saved memory {row.id} in {row.user_id}, expires {expiry}")


@memory_app.command("load-checkpoint")
@handle_errors
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


@memory_app.command("list")
@handle_errors
def memory_list(
    namespace: Annotated[str, typer.Argument(help="Namespace (memories.user_id).")],
    limit: Annotated[int, typer.Option("--limit")] = 20,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Newest unexpired memories of a namespace."""
    with database(dsn) as db:
        rows = db.memories.list(namespace, limit=limit)
    if as_json:
        print_json(rows)
        return
    table = Table(title=namespace)
    for column in ("id", "created", "expires", "category", "content"):
        table.add_column(column)
    for r in rows:
        table.add_row(str(r.id), fmt_time(r.created_at), fmt_time(r.expires_at), r.category, r.content[:60])
    console.print(table)


@memory_app.command("ttl-status")
@handle_errors
def memory_ttl_status(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Per namespace: permanent, active TTL and expired memories (memori.ttl_status)."""
    with database(dsn) as db:
        rows = db.memories.ttl_status()
    if as_json:
        print_json(rows)
        return
    table = Table(title="memori.ttl_status")
    for column in ("namespace", "permanent", "active_ttl", "expired"):
        table.add_column(column, justify="left" if column == "namespace" else "right")
    for r in rows:
        table.add_row(r.user_id, str(r.permanent), str(r.active_ttl), str(r.expired))
    console.print(table)


# -- demo and bench -------------------------------------------------------------
# `pymemdb demo` alone runs the seed 05 walk-through as before; `pymemdb demo vm` the North Star run
demo_app = typer.Typer(invoke_without_command=True)
app.add_typer(demo_app, name="demo")


@demo_app.callback()
@handle_errors
def demo(
    ctx: typer.Context,
    dsn: DsnOption = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the pymemdb_demo database afterwards.")] = False,
) -> None:
    """A scripted walk through seed 05 in a scratch database (pymemdb_demo): your data is untouched."""
    if ctx.invoked_subcommand is not None:
        return
    from pymemdb.demo import run_demo

    run_demo(dsn, keep=keep, console=console)


@demo_app.command("vm")
@handle_errors
def demo_vm(
    dsn: DsnOption = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the pymemdb_demo_vm database afterwards.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The seed 03 North Star run: 200+ turns, 5 decisions recalled with citations, metrics (scratch database)."""
    from pymemdb.demo_vm import run_demo_vm

    if not run_demo_vm(dsn, keep=keep, as_json=as_json, console=console):
        raise typer.Exit(1)


def _bench(suite: str, dsn: str | None, rows: int, seed: int, as_json: bool) -> None:
    """Run pymemdb.bench.<suite> on a scratch database and print its tables or JSON."""
    import importlib

    from pymemdb.scratch import scratch_database

    module = importlib.import_module(f"pymemdb.bench.{suite}")
    with scratch_database(dsn, "pymemdb_bench") as target:
        result = module.run(target, rows, seed=seed,
                            progress=None if as_json else (lambda msg: console.print(f"[dim]{msg}[/dim]")))
    result["finished_at"] = datetime.now(UTC).isoformat()
    if as_json:
        print_json(result)
    else:
        for table in module.render(result):
            console.print(table)


RowsOption = Annotated[int, typer.Option("--rows", help="Rows generated for the benchmark.")]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the generated data.")]


@bench_app.command("checkpoints")
@handle_errors
def bench_checkpoints(
    rows: RowsOption = 1_000_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """Checkpoint create throughput (one per transaction vs. create_many) and latest-per-session query."""
    _bench("checkpoints", dsn, rows, seed, as_json)


@bench_app.command("context")
@handle_errors
def bench_context(
    rows: RowsOption = 1_000_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """context_get across four scopes vs. a primary-key get (superuser and RLS); context_resolve of 200 keys."""
    _bench("context", dsn, rows, seed, as_json)


@bench_app.command("compression")
@handle_errors
def bench_compression(
    rows: RowsOption = 10_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """message_add throughput (one per transaction vs. batched) and compression_plan p95 on a long session."""
    _bench("compression", dsn, rows, seed, as_json)


@bench_app.command("langgraph")
@handle_errors
def bench_langgraph(
    rows: RowsOption = 20_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    r"""MemoriSaver vs. LangGraph's PostgresSaver on one database: get_tuple, put, storage, retention.

    Needs the bench extra: pip install 'pymemdb\[bench]'.
    """
    _bench("langgraph", dsn, rows, seed, as_json)


@bench_app.command("budget")
@handle_errors
def bench_budget(
    rows: Annotated[int, typer.Option("--rows", help="Chunks of the larger session (the smaller has a tenth).")]
    = 20_000,
    dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1,
) -> None:
    """context_optimize_stored vs. a lean client (metadata, rank in Python, winners' content) and the naive one."""
    _bench("budget", dsn, rows, seed, as_json)


@bench_app.command("search")
@handle_errors
def bench_search(
    rows: RowsOption = 100_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """search_pages p95 and recall@10 vs. exact ranking: session scope, user scope (HNSW), a 1 % filter."""
    _bench("search", dsn, rows, seed, as_json)


@bench_app.command("fork")
@handle_errors
def bench_fork(
    rows: RowsOption = 10_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """session_fork's storage growth (O(1) until writes, O(N) for N writes) vs. a full copy; reads in a fork."""
    _bench("fork", dsn, rows, seed, as_json)
@bench_app.command("lifecycle")
@handle_errors
def bench_lifecycle(
    rows: RowsOption = 10_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """vm_turn_start with the pre-pass vs. a plain turn; vm_prepass vs. search_pages; vm_metrics; segment_close."""
    _bench("lifecycle", dsn, rows, seed, as_json)


@bench_app.command("store")
@handle_errors
def bench_store(
    rows: RowsOption = 20_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    r"""MemoriStore vs. LangGraph's PostgresStore: put, get, filtered and 1 % vector search, namespaces, storage.

    Needs the bench extra: pip install 'pymemdb\[bench]'.
    """
    _bench("store", dsn, rows, seed, as_json)


@bench_app.command("ttl")
@handle_errors
def bench_ttl(
    rows: RowsOption = 1_000_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """Latest-checkpoint lookup vs. a PK lookup; batched cleanup vs. one naive DELETE (scratch database)."""
    _bench("ttl", dsn, rows, seed, as_json)


@bench_app.command("vm")
@handle_errors
def bench_vm(
    rows: RowsOption = 100_000, dsn: DsnOption = None, as_json: JsonOption = False, seed: SeedOption = 1
) -> None:
    """page_fault p50/p95 among --rows pages; vm_context + vm_manifest of a 32k-token working set; replay."""
    _bench("vm", dsn, rows, seed, as_json)
