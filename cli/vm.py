"""pymemdb vm ...: the AI virtual memory (seed 03, issue 7), one sub-app like db.pages, db.vm and db.vm_fork.

Pages and the working set (cli/vm_pages.py), the lifecycle here (claims, segments,
pre-pass, prefetch, metrics), forks, GC and shared regions (cli/vm_fork.py).
``pymemdb pages ...`` is the same sub-app under its old name, hidden, so scripts keep working.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.table import Table

from pymemdb.cli import vm_fork, vm_pages
from pymemdb.cli._common import DsnOption, JsonOption, console, database, handle_errors, print_json
from pymemdb.vm.lifecycle import VmPrefetchItem

app = typer.Typer(help="AI virtual memory: pages, working set, faults, context, search, claims, segments, prefetch, "
                       "forks, GC and shared regions (seed 03).", no_args_is_help=True)
app.registered_commands.extend(vm_pages.app.registered_commands)
vm_fork.register(app)

SessionArg = Annotated[str, typer.Argument(help="VM session id.")]


def _items(items: list[VmPrefetchItem], title: str) -> Table:
    table = Table(title=title)
    for column in ("page_id", "type", "tier", "reason", "why", "outcome"):
        table.add_column(column)
    for i in items:
        table.add_row(i.page_id, i.page_type, i.tier, i.reason, i.why, i.outcome or "-")
    return table


@app.command()
@handle_errors
def claim(
    session_id: SessionArg,
    content: Annotated[str, typer.Argument(help="The decision, e.g. 'Decision: use PostgreSQL for the database'.")],
    provenance: Annotated[list[str], typer.Option("--from", help="Page id it was decided in (repeat).")],
    topic: Annotated[str | None, typer.Option("--topic", help="Topic, e.g. database_choice (names the claim).")]
    = None,
    importance: Annotated[float, typer.Option("--importance", help="0..1.")] = 0.95,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record a decision as a claim page with provenance (memori.claim_create)."""
    with database(dsn) as db:
        page = db.vm.claim_create(session_id, content, provenance, topic=topic, importance=importance)
    if as_json:
        print_json(page)
    else:
        console.print(f"{page.page_id}: {page.tier}, {page.tokens} tokens, from {', '.join(page.provenance)}")


@app.command()
@handle_errors
def supersede(
    session_id: SessionArg,
    claim_id: Annotated[str, typer.Argument(help="The claim the new decision replaces.")],
    content: Annotated[str, typer.Argument(help="The new decision, e.g. 'Decision: use MySQL for database_choice'.")],
    provenance: Annotated[list[str], typer.Option("--from", help="Page id it was decided in (repeat).")],
    reason: Annotated[str, typer.Option("--reason", help="Why the decision changed.")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replace a claim with a new one on its topic; the old one stays as history (memori.claim_supersede)."""
    with database(dsn) as db:
        page = db.vm.claim_supersede(session_id, claim_id, content, provenance, reason)
    if as_json:
        print_json(page)
    else:
        console.print(f"{page.page_id} supersedes {claim_id}: {page.tier}, from {', '.join(page.provenance)}")


@app.command()
@handle_errors
def conflicts(session_id: SessionArg, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Pairs of current claims on one topic that disagree (memori.claim_conflicts); exit 1 when there are some."""
    with database(dsn) as db:
        found = db.vm.claim_conflicts(session_id)
    if as_json:
        print_json(found)
    else:
        table = Table(title="Conflicting current claims (resolve with: pymemdb vm supersede)")
        for column in ("topic", "claim", "says", "other claim", "other says"):
            table.add_column(column)
        for c in found:
            table.add_row(c.topic, c.claim_id, c.content or "", c.other_claim_id, c.other_content or "")
        console.print(table)
    if found:
        raise typer.Exit(1)


@app.command("segment-close")
@handle_errors
def segment_close(
    session_id: SessionArg,
    summary: Annotated[str | None, typer.Option("--summary", help="Summary text (default: the extractive "
                                                                  "Summarizer writes it).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Close the open segment: summary page in, transcript out to L2, next segment open (memori.segment_close)."""
    with database(dsn) as db:
        seg = db.vm.segment_close(session_id, summary)
    if as_json:
        print_json(seg)
    else:
        console.print(f"{seg.segment} closed: {seg.pages} pages ({seg.source_tokens} tokens) -> {seg.summary_page_id} "
                      f"({seg.summary_tokens} tokens), {seg.evicted} swapped out to L2")


@app.command()
@handle_errors
def segments(session_id: SessionArg, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Closed segments of a session (memori.segment_list)."""
    with database(dsn) as db:
        found = db.vm.segment_list(session_id)
    if as_json:
        print_json(found)
        return
    table = Table(title=f"segments of {session_id}")
    for column in ("segment", "turns", "pages", "evicted", "tokens", "summary"):
        table.add_column(column)
    for s in found:
        table.add_row(s.segment, f"{s.first_turn}-{s.last_turn}", str(s.pages), str(s.evicted),
                      f"{s.source_tokens} -> {s.summary_tokens}", s.summary_page_id)
    console.print(table)


@app.command()
@handle_errors
def prepass(
    session_id: SessionArg,
    message: Annotated[str, typer.Argument(help="The user's message.")],
    apply: Annotated[bool, typer.Option("--apply", help="Fault the proposed pages in.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """The runtime pre-pass: pages to prefetch for a user message (memori.vm_prepass)."""
    with database(dsn) as db:
        items = db.vm.prepass(session_id, message, apply=apply)
    if as_json:
        print_json(items)
    else:
        console.print(_items(items, "vm_prepass"))


@app.command()
@handle_errors
def prefetch(
    session_id: SessionArg,
    apply: Annotated[bool, typer.Option("--apply", help="Fault the proposed pages in.")] = False,
    tool: Annotated[list[str] | None, typer.Option("--tool", help="A likely tool (repeat); default: recent ones.")]
    = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """The simple prefetcher: last summary, top claims, tool prerequisites (memori.vm_prefetch)."""
    with database(dsn) as db:
        items = db.vm.prefetch(session_id, apply=apply, tools=tool)
    if as_json:
        print_json(items)
    else:
        console.print(_items(items, "vm_prefetch"))


@app.command()
@handle_errors
def metrics(session_id: SessionArg, dsn: DsnOption = None) -> None:
    """VM metrics of a session as JSON, with lifecycle figures and the TLB counters (memori.vm_metrics)."""
    with database(dsn) as db:
        found = db.pages.metrics(session_id)
        print_json({**dataclasses.asdict(found), "tlb": db.pages.tlb.stats()})
