"""pymemdb compression ...: conversation compression from the shell (seed 04).

The sub-app is named after its concern (``db.compression``); ``pymemdb session``
stays as a hidden alias for scripts written before (``db.sessions`` is the
context store's, which is why ``session`` misled).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pymemdb.cli._common import DsnOption, JsonOption, command, database, parse_json
from pymemdb.cli._output import console, fmt_time, print_json, print_result
from pymemdb.compression.summarizers import ExtractiveSummarizer, OpenAISummarizer, Summarizer
from pymemdb.errors import InvalidArgument

app = typer.Typer(help="Conversation compression: budget, compression, export, snapshots (seed 04).",
                  no_args_is_help=True)

SessionArg = Annotated[str, typer.Argument(help="Session id.")]
# session ids are unique per user: every command acts for one (memori._acting_user)
UserOption = Annotated[
    str | None, typer.Option("--user", "-u", help="The acting user (default: memori.user_id of the connection).")
]
ContextOption = Annotated[
    int | None, typer.Option("--context-size", help="Model context in tokens (default: the session's, else 8192).")
]
SystemOption = Annotated[
    int | None,
    typer.Option("--system-prompt-tokens", help="System prompt tokens (default: system messages + goal block)."),
]


@command(app)
def status(
    session_id: SessionArg,
    context_size: ContextOption = None,
    system_prompt_tokens: SystemOption = None,
    model_size: Annotated[float, typer.Option("--model-size", help="Model size in billions (reliability).")] = 7,
    user: UserOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Budget, usage and reliability of a session (memori.compression_budget, memori.session_reliability)."""
    with database(dsn, user) as db:
        budget = db.compression.budget(session_id, context_size=context_size,
                                       system_prompt_tokens=system_prompt_tokens)
        reliability = db.compression.session_reliability(session_id, model_size)
    if as_json:
        print_json({"budget": budget, "reliability": reliability})
        return
    in_context = budget.system_prompt_tokens + budget.checkpoint_tokens + budget.used_tokens
    # the seed's status line: Context: 5,234/6,800  🟡 65%  (2 compressions)
    console.print(f"Context: {in_context:,}/{budget.usable_tokens:,}  {reliability.icon} {reliability.percent}%  "
                  f"({budget.compression_count} compressions)", markup=False)
    table = Table(title=f"session {session_id}")
    table.add_column("budget")
    table.add_column("tokens", justify="right")
    for name, amount in (("context size", budget.context_size), ("usable", budget.usable_tokens),
                         ("system prompt", budget.system_prompt_tokens), ("checkpoints", budget.checkpoint_tokens),
                         ("available", budget.available_tokens), ("trigger (80 %)", budget.trigger_tokens),
                         ("used", budget.used_tokens), ("free", budget.free_tokens)):
        table.add_row(name, f"{amount:,}")
    console.print(table)
    console.print("should compress: " + ("yes" if budget.should_compress else "no"))
    if reliability.warning:
        console.print(reliability.warning, markup=False)


def _summarizer(llm_url: str | None, model: str | None, api_key_env: str | None) -> Summarizer:
    if llm_url is None:
        return ExtractiveSummarizer()
    if not model:
        raise InvalidArgument("--llm-url needs --model", hint="Pass the model name, e.g. --model llama3.2:3b.")
    api_key = os.environ.get(api_key_env) if api_key_env else None
    return OpenAISummarizer(llm_url, model, api_key=api_key)


@command(app)
def compress(
    session_id: SessionArg,
    context_size: ContextOption = None,
    system_prompt_tokens: SystemOption = None,
    force: Annotated[bool, typer.Option("--force", help="Compress even under the trigger.")] = False,
    llm_url: Annotated[
        str | None,
        typer.Option("--llm-url", help="OpenAI-compatible API root (e.g. http://localhost:11434/v1). "
                                       "Default: the local extractive summarizer."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name for --llm-url.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option("--api-key-env", help="Name of the environment variable holding the API key.")
    ] = None,
    user: UserOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Plan, summarize and apply one compression (db.compression.run)."""
    summarizer = _summarizer(llm_url, model, api_key_env)
    with database(dsn, user) as db:
        run = db.compression.run(session_id, summarizer, context_size=context_size,
                                 system_prompt_tokens=system_prompt_tokens, force=force)
    if as_json:
        print_json({"plan": run.plan, "applied": run.applied})
        return
    if run.applied is None:
        console.print(f"skipped: {run.plan.reason}", markup=False)
        return
    a = run.applied
    console.print(f"compression {a.compression_number}: {a.message_count} messages, {a.source_tokens:,} tokens "
                  f"-> {a.summary_tokens:,}; aged {a.aged}, merged {a.merged}; checkpoints now "
                  f"{a.checkpoint_tokens:,} tokens, conversation {a.used_tokens:,}")


@command(app)
def export(
    session_id: SessionArg,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name recorded in the file.")] = None,
    provider: Annotated[str | None, typer.Option("--provider", help="Provider recorded in the file.")] = None,
    user: UserOption = None,
    dsn: DsnOption = None,
) -> None:
    """Write the seed's session file: every message uncompressed, tool calls, counts (memori.session_export)."""
    with database(dsn, user) as db:
        document = db.compression.session_export(session_id, model=model, provider=provider)
    if document is None:
        raise InvalidArgument(f"session {session_id} has no messages", hint="Check the session id.")
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {len(document['messages'])} messages to {output}", markup=False)


@command(app)
def snapshot(
    session_id: SessionArg,
    list_: Annotated[bool, typer.Option("--list", help="List the session's snapshots instead.")] = False,
    metadata: Annotated[str | None, typer.Option("--metadata", help="Metadata as a JSON object.")] = None,
    user: UserOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Snapshot the session's active state (memori.snapshot_create), or --list its snapshots."""
    meta = None
    if metadata is not None:
        meta = parse_json(metadata, "--metadata", 'Pass a JSON object, e.g. --metadata \'{"model": "llama3.2:3b"}\'.')
    with database(dsn, user) as db:
        if list_:
            rows = db.snapshots.list(session_id)
        else:
            rows = [db.snapshots.create(session_id, meta)]
    if as_json:
        print_json(rows if list_ else rows[0])
        return
    table = Table(title=f"snapshots of {session_id}")
    for column in ("id", "kind", "created", "tokens", "messages", "checkpoints", "expires"):
        table.add_column(column, no_wrap=column == "id")
    for s in rows:
        table.add_row(str(s.id), s.kind, fmt_time(s.created_at), f"{s.token_count:,}", str(s.message_count),
                      str(s.checkpoint_count), fmt_time(s.expires_at))
    console.print(table)


@command(app)
def restore(
    snapshot_id: Annotated[str, typer.Argument(help="Snapshot id (pymemdb compression snapshot SESSION --list).")],
    user: UserOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restore a session's active state from a snapshot; the replaced state is snapshotted first."""
    with database(dsn, user) as db:
        pre = db.snapshots.restore(snapshot_id)
    print_result(pre, as_json, f"restored session {pre.session_id} from {snapshot_id}; the replaced state is snapshot "
                               f"{pre.id} (pymemdb compression restore {pre.id} undoes this)", markup=False)


def register(parent: typer.Typer) -> None:
    """Add ``compression`` to the CLI, and ``session`` as its hidden alias."""
    parent.add_typer(app, name="compression")
    parent.add_typer(app, name="session", hidden=True)
