"""pymemdb vm add|turn|fault|evict|manifest|context|history|replay|search: pages and the working set (seed 03).

The commands are registered into the ``vm`` sub-app (cli/vm.py).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from pymemdb.cli._common import DsnOption, JsonOption, console, database, fmt_time, handle_errors, print_one, print_rows
from pymemdb.errors import InvalidArgument
from pymemdb.vm.embedders import HashingEmbedder

app = typer.Typer(help="AI virtual memory: pages, working set, faults, manifest and context (seed 03).")

SessionArg = Annotated[str, typer.Argument(help="VM session id.")]
PageArg = Annotated[str, typer.Argument(help="Page id (unique within the session), e.g. msg_042.")]


@app.command()
@handle_errors
def add(
    session_id: SessionArg,
    page_id: PageArg,
    content: Annotated[str, typer.Argument(help="Text (or caption/transcript for media).")],
    page_type: Annotated[str, typer.Option("--type", help="transcript, summary, artifact, claim, procedure, index.")]
    = "transcript",
    modality: Annotated[str, typer.Option("--modality", help="text, image, audio, video, structured.")] = "text",
    role: Annotated[str | None, typer.Option("--role", help="user, assistant, tool or system.")] = None,
    importance: Annotated[float, typer.Option("--importance", help="0..1.")] = 0.5,
    hint: Annotated[str | None, typer.Option("--hint", help="Discovery hint shown in the manifest.")] = None,
    segment: Annotated[str | None, typer.Option("--segment", help="Conversation segment id.")] = None,
    no_map: Annotated[bool, typer.Option("--no-map", help="Register only; do not map into L0.")] = False,
    pin: Annotated[bool | None, typer.Option("--pin/--no-pin", help="Pin (default: the seed's pinned set).")] = None,
    user_id: Annotated[str | None, typer.Option("--user", help="Owner (default: memori.user_id).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Register a page and map it into the working set (memori.page_create)."""
    with database(dsn) as db:
        page = db.pages.create(session_id, page_id, content, page_type=page_type, modality=modality, role=role,
                               importance=importance, hint=hint, segment=segment, add_to_working_set=not no_map,
                               pin=pin, user_id=user_id)
    print_one(page, as_json, lambda p: f"{p.page_id}: {p.tier}, {p.tokens} tokens, version {p.version}")


@app.command()
@handle_errors
def turn(session_id: SessionArg, user_id: Annotated[str | None, typer.Option("--user")] = None,
         dsn: DsnOption = None) -> None:
    """Start the session's next turn (memori.turn_begin)."""
    with database(dsn) as db:
        console.print(str(db.pages.turn_begin(session_id, user_id=user_id)))


@app.command()
@handle_errors
def fault(
    session_id: SessionArg,
    page_id: PageArg,
    level: Annotated[int, typer.Option("--level", help="0 full, 1 reduced, 2 abstract, 3 reference.")] = 2,
    reason: Annotated[str, typer.Option("--reason", help="user_requested_recall, resolve_reference, tool_prereq, "
                                                         "speculative.")] = "resolve_reference",
    dsn: DsnOption = None,
) -> None:
    """Fault a page in; prints the tool-result envelope (memori.page_fault)."""
    with database(dsn) as db:
        envelope = db.pages.fault(session_id, page_id, level, reason)
    print(json.dumps(envelope, indent=2))
    if envelope.get("page") is None:
        raise typer.Exit(1)


@app.command()
@handle_errors
def evict(
    session_id: SessionArg,
    tokens: Annotated[int, typer.Argument(help="L0 tokens to free.")],
    policy: Annotated[str | None, typer.Option("--policy", help="lru, importance_weighted_lru, modality_aware_lru.")]
    = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Free working-set tokens, compressing before evicting (memori.vm_evict)."""
    with database(dsn) as db:
        done = db.pages.evict(session_id, tokens, policy)
    print_rows(done, as_json, f"freed {sum(d.tokens_freed for d in done)} tokens",
               ("page", "action", "level", "tier", "tokens freed"),
               lambda d: (d.page_id, d.action, "" if d.level_after is None else str(d.level_after), d.tier_after,
                          str(d.tokens_freed)))


@app.command()
@handle_errors
def manifest(session_id: SessionArg, dsn: DsnOption = None) -> None:
    """Print VM:MANIFEST_JSON (memori.vm_manifest)."""
    with database(dsn) as db:
        print(json.dumps(db.pages.manifest(session_id), indent=2))


@app.command()
@handle_errors
def context(
    session_id: SessionArg,
    budget: Annotated[int | None, typer.Option("--budget", help="Token budget (default max_l0_tokens).")] = None,
    developer: Annotated[str | None, typer.Option("--developer", help="Print the whole developer message in this "
                                                                       "mode: strict, relaxed or passive.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Print VM:CONTEXT (memori.vm_context) or the developer message (memori.vm_developer_message)."""
    with database(dsn) as db:
        if developer:
            print(db.pages.developer_message(session_id, developer, token_budget=budget))
        else:
            print(db.pages.context(session_id, budget))


@app.command()
@handle_errors
def history(session_id: SessionArg, page_id: PageArg, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Every logged mutation of a page (memori.page_history)."""
    with database(dsn) as db:
        found = db.pages.history(session_id, page_id)
    print_rows(found, as_json, f"{session_id} / {page_id}",
               ("#", "at", "turn", "type", "tier", "level", "actor", "cause"),
               lambda m: (str(m.id), fmt_time(m.at), str(m.turn), m.mutation_type,
                          f"{m.tier_before or '-'} → {m.tier_after}",
                          f"{'-' if m.level_before is None else m.level_before} → "
                          f"{'-' if m.level_after is None else m.level_after}", m.actor, m.cause or ""),
               overflow="fold")


@app.command()
@handle_errors
def replay(
    session_id: SessionArg,
    turn: Annotated[int, typer.Argument(help="Turn to replay.")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which pages were in L0 at the end of a turn, from the mutation log (memori.vm_context_at_turn)."""
    if turn < 0:
        raise InvalidArgument(f"turn must be >= 0, got {turn}", hint="Turns start at 1 (turn_begin).")
    with database(dsn) as db:
        found = db.pages.context_at_turn(session_id, turn)
    print_rows(found, as_json, f"L0 of {session_id} at turn {turn}: {sum(s.tokens for s in found)} tokens",
               ("page", "level", "tokens"), lambda s: (s.page_id, str(s.level), str(s.tokens)))


@app.command()
@handle_errors
def search(
    session_id: SessionArg,
    query: Annotated[str, typer.Argument(help="Words to find in page content and hints.")],
    scope: Annotated[str, typer.Option("--scope", help="session (this session) or user (all the user's).")]
    = "session",
    limit: Annotated[int, typer.Option("--limit", help="1..100 pages.")] = 5,
    modality: Annotated[str | None, typer.Option("--modality", help="text, image, audio, video, structured.")]
    = None,
    page_type: Annotated[list[str] | None, typer.Option("--type", help="Page type(s) to keep (repeatable).")]
    = None,
    embed: Annotated[bool, typer.Option("--embed", help="Hybrid: embed the query with the local HashingEmbedder.")]
    = False,
    user_id: Annotated[str | None, typer.Option("--user", help="Acting user (default: the session's owner).")]
    = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Find pages by full text (and vectors with --embed): metadata only (memori.search_pages)."""
    with database(dsn) as db:
        found = db.pages.search(session_id, query, embedder=HashingEmbedder() if embed else None,
                                modality=modality, page_types=page_type or None, limit=limit, scope=scope,
                                user_id=user_id)
    total = found[0].total_available if found else 0
    at_least = "" if not found or found[0].total_exact is not False else "at least "
    mode = found[0].mode if found else ("hybrid" if embed else "full_text")
    print_rows(found, as_json, f"{len(found)} of {at_least}{total} matching pages ({mode})",
               ("page", "session", "modality", "tier", "levels", "relevance", "hint"),
               lambda r: (r.page_id, r.session_id, r.modality, r.tier, ",".join(map(str, r.levels)),
                          f"{r.relevance:.4f}", r.hint), overflow="fold")
