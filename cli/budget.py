"""pymemdb budget ...: the context window manager (seed 02) from the shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.table import Table

from pymemdb.budget import Optimization, OptimizeOptions
from pymemdb.cli._common import DsnOption, JsonOption, command, database
from pymemdb.cli._output import console, print_json, print_result
from pymemdb.errors import InvalidArgument

app = typer.Typer(help="Token budgets: which context chunks fit the model's window, by priority (seed 02).",
                  no_args_is_help=True)

TokensOption = Annotated[int, typer.Option("--tokens", help="Tokens available (the model's context window).")]
ReserveOption = Annotated[
    int | None,
    typer.Option("--reserve", help="Tokens kept free. Default: maxSystemPrompt (2000) from memori.token_budgets.",
                 show_default=False),
]
CapsOption = Annotated[
    bool, typer.Option("--category-budgets", help="Also cap history, RAG and system chunks (maxHistory, ...).")
]
OrderOption = Annotated[str, typer.Option("--order", help="priority (selection order) or original (input order).")]
RecencyOption = Annotated[str, typer.Option("--recency", help="linear (20 - age in days) or exponential.")]
UserOption = Annotated[
    str | None,
    typer.Option("--user", help="Record the optimisation (and its events) for this user; without it nothing is "
                                "written.", show_default=False),
]


def _read_chunks(path: str) -> list[dict[str, Any]]:
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror}", hint="Pass a JSON file, or - for stdin.") from None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})",
                              hint='Write [{"id": "a", "type": "system_prompt", "content": "..."}, ...].') from None
    if isinstance(doc, dict) and "chunks" in doc:
        doc = doc["chunks"]
    return cast("list[dict[str, Any]]", doc)  # the SQL rejects anything but an array of chunks


def _options(reserve: int | None, category_budgets: bool, order: str, recency: str,
             user: str | None) -> OptimizeOptions:
    """The options optimize and stored share; --user also records the optimisation (persist)."""
    return OptimizeOptions(reserve_tokens=reserve, category_budgets=category_budgets or None, order=order,
                           recency_mode=recency, persist=user is not None, user_id=user)


def _show(result: Optimization, as_json: bool, title: str) -> None:
    """An optimisation as JSON with --json, else as the allocation table."""
    if as_json:
        print_json(result)
    else:
        _render(result, title)


def _render(result: Optimization, title: str) -> None:
    table = Table(title=title)
    for column in ("#", "id", "type", "tokens", "priority", "span", "original"):
        table.add_column(column, justify="right" if column in ("#", "tokens", "priority", "original") else "left")
    for n, c in enumerate(result.optimized_chunks, 1):
        table.add_row(str(n), str(c.id), c.type, f"{c.tokens:,}", f"{c.priority:.2f}",
                      f"[{c.token_span[0]:,}, {c.token_span[1]:,})", str(c.original_index))
    console.print(table)
    used = result.total_tokens_used
    console.print(f"used {used:,} of {used + result.tokens_remaining:,} tokens ({result.tokens_available:,} available, "
                  f"{result.reserved_tokens:,} reserved), {result.tokens_remaining:,} left")
    if result.chunks_dropped:
        shown = ", ".join(str(i) for i in result.dropped_chunk_ids[:10])
        more = f" and {result.chunks_dropped - 10:,} more" if result.chunks_dropped > 10 else ""
        console.print(f"dropped {result.chunks_dropped:,}: {shown}{more}; {result.conflicts_count:,} conflicts",
                      markup=False)
    if result.requires_summarization:
        console.print("above the summary threshold: " + ", ".join(str(i) for i in result.requires_summarization),
                      markup=False)
    m = result.optimization_metrics
    console.print(f"mean priority {m.prioritization_score:.2f}, business boost {m.business_relevance_boost:.2f}, "
                  f"recency boost {m.recency_boost:.2f}"
                  + (f"; recorded as {result.optimization_id}" if result.optimization_id else ""))


@command(app)
def optimize(
    file: Annotated[str, typer.Option("--file", "-f", help="JSON array of chunks, or {\"chunks\": [...]}; - = stdin.",
                                      show_default=False)],
    tokens: TokensOption = 32000,
    reserve: ReserveOption = None,
    category_budgets: CapsOption = False,
    order: OrderOption = "priority",
    recency: RecencyOption = "linear",
    user: UserOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which chunks of a file fit TOKENS, by priority (memori.context_optimize)."""
    chunks = _read_chunks(file)
    with database(dsn) as db:
        result = db.budget.optimize(chunks, tokens, **_options(reserve, category_budgets, order, recency, user))
    _show(result, as_json, f"{len(result.optimized_chunks)} of {len(chunks)} chunks fit")


@command(app)
def stored(
    session_id: Annotated[str, typer.Argument(help="Session whose stored chunks are ranked.")],
    tokens: TokensOption = 32000,
    reserve: ReserveOption = None,
    category_budgets: CapsOption = False,
    order: OrderOption = "priority",
    recency: RecencyOption = "linear",
    user: UserOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which stored chunks of a session fit TOKENS (memori.context_optimize_stored)."""
    with database(dsn) as db:
        result = db.budget.optimize_stored(session_id, tokens,
                                           **_options(reserve, category_budgets, order, recency, user))
    _show(result, as_json, f"session {session_id}: {len(result.optimized_chunks)} chunks fit")


@command(app)
def add(
    session_id: Annotated[str, typer.Argument(help="Session the chunks belong to.")],
    user: Annotated[str, typer.Option("--user", help="Owner of the chunks.")],
    file: Annotated[str, typer.Option("--file", "-f", help="JSON array of chunks; - = stdin.")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store chunks of a session (memori.chunk_add_many)."""
    chunks = _read_chunks(file)
    with database(dsn) as db:
        added = db.budget.add_many(session_id, chunks, user_id=user)
    print_result(added, as_json,
                 f"stored {len(added)} chunks ({sum(a.tokens for a in added):,} tokens) in session {session_id}")


@command(app)
def estimate(
    text: Annotated[str, typer.Argument(help="Text to estimate; - reads stdin.")],
    content_type: Annotated[str, typer.Option("--type", help="general, business, code or auto.")] = "general",
    dsn: DsnOption = None,
) -> None:
    """Estimated tokens of a text (memori.estimate_tokens)."""
    with database(dsn) as db:
        console.print(db.budget.estimate_tokens(sys.stdin.read() if text == "-" else text, content_type))
