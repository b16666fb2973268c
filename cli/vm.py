"""pymemdb vm ...: the AI virtual memory (seed 03, issue 7), one sub-app like db.pages, db.vm and db.vm_fork.

Pages and the working set (cli/vm_pages.py), the lifecycle here (claims, segments,
pre-pass, prefetch, metrics), forks, GC and shared regions (cli/vm_fork.py).
``pymemdb pages ...`` is the same sub-app under its old name, hidden, so scripts keep working.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from pymemdb.cli import vm_fork, vm_pages
from pymemdb.cli._common import DsnOption, JsonOption, database, handle_errors, print_json, print_one, print_rows
from pymemdb.cli.vm_pages import SessionArg
from pymemdb.vm.lifecycle import VmPrefetchItem

app = typer.Typer(help="AI virtual memory: pages, working set, faults, context, search, claims, segments, prefetch, "
                       "forks, GC and shared regions (seed 03).", no_args_is_help=True)
app.registered_commands.extend(vm_pages.app.registered_commands)
vm_fork.register(app)


def _items(items: list[VmPrefetchItem], as_json: bool, title: str) -> None:
    print_rows(items, as_json, title, ("page_id", "type", "tier", "reason", "why", "outcome"),
               lambda i: (i.page_id, i.page_type, i.tier, i.reason, i.why, i.outcome or "-"))


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
    print_one(page, as_json, lambda p: f"{p.page_id}: {p.tier}, {p.tokens} tokens, from {', '.join(p.provenance)}")


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
    print_one(page, as_json, lambda p: f"{p.page_id} supersedes {claim_id}: {p.tier}, from {', '.join(p.provenance)}")


@app.command()
@handle_errors
def conflicts(session_id: SessionArg, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Pairs of current claims on one topic that disagree (memori.claim_conflicts); exit 1 when there are some."""
    with database(dsn) as db:
        found = db.vm.claim_conflicts(session_id)
    print_rows(found, as_json, "Conflicting current claims (resolve with: pymemdb vm supersede)",
               ("topic", "claim", "says", "other claim", "other says"),
               lambda c: (c.topic, c.claim_id, c.content or "", c.other_claim_id, c.other_content or ""))
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
    print_one(seg, as_json, lambda s: f"{s.segment} closed: {s.pages} pages ({s.source_tokens} tokens) -> "
                                      f"{s.summary_page_id} ({s.summary_tokens} tokens), {s.evicted} swapped out to L2")


@app.command()
@handle_errors
def segments(session_id: SessionArg, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Closed segments of a session (memori.segment_list)."""
    with database(dsn) as db:
        found = db.vm.segment_list(session_id)
    print_rows(found, as_json, f"segments of {session_id}",
               ("segment", "turns", "pages", "evicted", "tokens", "summary"),
               lambda s: (s.segment, f"{s.first_turn}-{s.last_turn}", str(s.pages), str(s.evicted),
                          f"{s.source_tokens} -> {s.summary_tokens}", s.summary_page_id))


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
    _items(items, as_json, "vm_prepass")


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
    _items(items, as_json, "vm_prefetch")


@app.command()
@handle_errors
def metrics(session_id: SessionArg, dsn: DsnOption = None) -> None:
    """VM metrics of a session as JSON, with lifecycle figures and the TLB counters (memori.vm_metrics)."""
    with database(dsn) as db:
        found = db.pages.metrics(session_id)
        print_json({**dataclasses.asdict(found), "tlb": db.pages.tlb.stats()})
