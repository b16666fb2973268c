"""pymemdb: install the schema, run the embedded server, demo and benchmarks; registers one sub-app per concern."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from pymemdb import embedded
from pymemdb.cli._common import DsnOption, JsonOption, command, database, handle_errors, script_app
from pymemdb.cli._output import console, print_json
from pymemdb.cli.budget import app as budget_app
from pymemdb.cli.checkpoint import app as checkpoint_app
from pymemdb.cli.compression import register as register_compression
from pymemdb.cli.context import app as context_app
from pymemdb.cli.mcp import app as mcp_app
from pymemdb.cli.memories import app as memories_app
from pymemdb.cli.vm import app as vm_app
from pymemdb.db import resolve_dsn

app = script_app("pymemdb", "pymemdb: the memory layer for AI agents that lives inside PostgreSQL.",
                 no_args_is_help=True)
db_app = typer.Typer(help="The embedded PostgreSQL server (used when no DSN is given).", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks: each runs its baseline in the same run and prints ratios.",
                        no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(checkpoint_app, name="checkpoint")
app.add_typer(context_app, name="context")
register_compression(app)
app.add_typer(budget_app, name="budget")
app.add_typer(vm_app, name="vm")
app.add_typer(vm_app, name="pages", hidden=True)  # the VM's old name: scripts keep working
app.add_typer(memories_app, name="memories")
app.add_typer(memories_app, name="memory", hidden=True)  # the old name, for scripts
app.add_typer(mcp_app, name="mcp")
app.add_typer(bench_app, name="bench")


# -- init ---------------------------------------------------------------------
@command(app)
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
    delegate: Annotated[
        bool, typer.Option("--delegate", help="With --distribute: also register the delegable per-user functions "
                           "with Citus (memori.distribute_functions(p_delegate => true)). Only when every caller "
                           "passes the user: Citus 14.0.1 crashes on a NULL user argument (docs/scale-out.md).")
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
    if delegate and not distribute:
        raise typer.BadParameter("--delegate needs --distribute", param_hint="--delegate")
    if distribute:
        _print_distribution(target, delegate=delegate)


def _print_distribution(dsn: str, *, delegate: bool = False) -> None:
    """memori.distribute() and one line per table that is not simply where it was; then the functions."""
    from psycopg.errors import Diagnostic

    from pymemdb.cluster import DISTRIBUTE
    from pymemdb.install import install

    notices: list[str] = []
    with database(dsn) as db, db.transaction() as cur:
        # memori.distribute()'s own notices (rows kept on the coordinator, a coordinator that does not
        # hold the reference tables) are what a DBA acts on: print them with their hints
        def keep(diag: Diagnostic) -> None:
            message = diag.message_primary or ""
            if message.startswith("pymemdb: "):
                notices.append(message.removeprefix("pymemdb: ") + "."
                               + (f"\n  hint: {diag.message_hint}" if diag.message_hint else ""))

        cur.connection.add_notice_handler(keep)
        try:
            results = db.call(DISTRIBUTE, cur)
        finally:
            cur.connection.remove_notice_handler(keep)
    # sql/ again, now that tables are placed: the install propagates every function to the workers,
    # where Citus runs the functions a statement on a shard calls (installed before, they exist only here)
    install(dsn, force=True)
    with database(dsn) as db:
        functions = db.cluster.distribute_functions(delegate=delegate)
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
    for notice in notices:
        console.print(f"note: {notice}")
    kinds: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for f in functions:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
        if f.kind == "delegate":
            statuses[f.status] = statuses.get(f.status, 0) + 1
    delegated = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    console.print("functions: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                  + (f" (delegate: {delegated})" if delegated else "")
                  + "; memori.distribute_functions(p_dry_run => true) lists each with its reason")


# -- db -----------------------------------------------------------------------
@command(db_app, "start")
def db_start() -> None:
    """Start the embedded server (or find it running) and install or upgrade the schema."""
    embedded.start_installed()
    state = embedded.status()
    console.print(f"running: pid {state.pid}, data {state.data_dir}")


@command(db_app, "stop")
def db_stop() -> None:
    """Stop the embedded server."""
    console.print("stopped" if embedded.stop() else "not running")


@command(db_app, "status")
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


@command(db_app, "url")
def db_url() -> None:
    """Print the embedded server's URL, starting it and installing or upgrading the schema if needed.

    For psql: psql "$(pymemdb db url)".
    """
    typer.echo(embedded.start_installed())


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
    from pymemdb.cli.demo.walk import run_demo

    run_demo(dsn, keep=keep, console=console)


@command(demo_app, "vm")
def demo_vm(
    dsn: DsnOption = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the pymemdb_demo_vm database afterwards.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The seed 03 North Star run: 200+ turns, 5 decisions recalled with citations, metrics (scratch database)."""
    from pymemdb.cli.demo.vm import run_demo_vm

    if not run_demo_vm(dsn, keep=keep, as_json=as_json, console=console):
        raise typer.Exit(1)


def _bench(suite: str, dsn: str | None, rows: int, seed: int, as_json: bool, **options: Any) -> None:
    """Run pymemdb.bench.<suite> on a scratch database and print its tables or JSON (``options``: the suite's own)."""
    import importlib

    from pymemdb.cli.scratch import scratch_database

    module = importlib.import_module(f"pymemdb.bench.{suite}")
    # one database per run: two benchmarks on one server must not drop each other's data
    with scratch_database(dsn, f"pymemdb_bench_{suite}_{os.getpid()}") as target:
        result = module.run(target, rows, seed=seed, **options,
                            progress=None if as_json else (lambda msg: console.print(f"[dim]{msg}[/dim]")))
    result["finished_at"] = datetime.now(UTC).isoformat()
    if as_json:
        print_json(result)
    else:
        for table in module.render(result):
            console.print(table)


SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the generated data.")]


@dataclass(frozen=True)
class BenchSuite:
    """One ``pymemdb bench <name>`` command: runs pymemdb.bench.<name> with these defaults."""

    name: str
    rows: int  # --rows default
    help: str  # the command's help; its first sentence is the line in ``pymemdb bench --help``
    rows_help: str = "Rows generated for the benchmark."
    needs_bench_extra: bool = False  # LangGraph's own Postgres classes are the baseline
    windows: int | None = None  # --windows default, for a suite that measures in interleaved windows


BENCH_SUITES = (
    BenchSuite("checkpoints", 1_000_000,
               "Checkpoint create throughput (one per transaction vs. create_many) and latest-per-session query."),
    BenchSuite("context", 1_000_000, "context_get across four scopes vs. a primary-key get (superuser and RLS); "
               "context_resolve of 200 keys."),
    BenchSuite("cluster", 1_000_000, "The same per-user calls on one server and on a three-node Citus cluster, "
               "coordinator-run and delegated: p50 ratio, commands per call, single-shard share, cleanup time and WAL.",
               rows_help="Expired rows the cleanup step deletes."),
    BenchSuite("compression", 10_000,
               "message_add throughput (one per transaction vs. batched) and compression_plan p95 on a long session."),
    BenchSuite("langgraph", 20_000,
               "MemoriSaver vs. LangGraph's PostgresSaver on one database: get_tuple, put, storage, retention.",
               needs_bench_extra=True),
    BenchSuite("budget", 20_000, "context_optimize_stored vs. a lean client (metadata, rank in Python, winners' "
               "content) and the naive one.", rows_help="Chunks of the larger session (the smaller has a tenth)."),
    BenchSuite("search", 100_000,
               "search_pages p95 and recall@10 vs. exact ranking: session scope, user scope (HNSW), a 1 % filter."),
    BenchSuite("fork", 10_000, "session_fork's storage growth (O(1) until writes, O(N) for N writes) vs. a full "
               "copy; reads in a fork."),
    BenchSuite("lifecycle", 10_000, "vm_turn_start with the pre-pass vs. a plain turn; vm_prepass vs. search_pages; "
               "vm_metrics; segment_close."),
    BenchSuite("store", 20_000, "MemoriStore vs. LangGraph's PostgresStore: put, get, filtered and 1 % vector "
               "search, namespaces, storage.", needs_bench_extra=True),
    BenchSuite("ttl", 1_000_000,
               "Latest-checkpoint lookup vs. a PK lookup; batched cleanup vs. one naive DELETE (scratch database).",
               windows=10),
    BenchSuite("vm", 100_000,
               "page_fault p50/p95 among --rows pages; vm_context + vm_manifest of a 32k-token working set; replay."),
)


def _register_bench(suite: BenchSuite) -> None:
    """Declare ``pymemdb bench <suite.name>``: --rows (the suite's default), --dsn, --json, --seed[, --windows]."""

    # --rows is given as a default (not in Annotated) because its default and help differ per suite
    def run_suite(
        rows: int = typer.Option(suite.rows, "--rows", help=suite.rows_help),
        dsn: DsnOption = None,
        as_json: JsonOption = False,
        seed: SeedOption = 1,
    ) -> None:
        _bench(suite.name, dsn, rows, seed, as_json)

    def run_windowed_suite(
        rows: int = typer.Option(suite.rows, "--rows", help=suite.rows_help),
        dsn: DsnOption = None,
        as_json: JsonOption = False,
        seed: SeedOption = 1,
        windows: int = typer.Option(
            suite.windows, "--windows", min=1,
            help="Cleanup windows, each followed by an idle window of its length; "
            "the readers' samples of each kind are pooled."),
    ) -> None:
        _bench(suite.name, dsn, rows, seed, as_json, windows=windows)

    if suite.windows is not None:
        run_suite = run_windowed_suite
    extra = "\n\nNeeds the bench extra: pip install 'pymemdb\\[bench]'." if suite.needs_bench_extra else ""
    run_suite.__name__ = run_suite.__qualname__ = f"bench_{suite.name}"
    command(bench_app, suite.name, help=suite.help + extra)(run_suite)


for _suite in BENCH_SUITES:
    _register_bench(_suite)
