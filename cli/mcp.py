"""pymemdb mcp ...: the MCP memory server and its bearer tokens (issue 18)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from pymemdb.cli._common import DsnOption, JsonOption, command, database
from pymemdb.cli._output import console, fmt_time, print_json, print_rows
from pymemdb.errors import InvalidArgument

app = typer.Typer(help="The MCP memory server (stdio for desktop clients, streamable HTTP with bearer tokens).",
                  no_args_is_help=True)
token_app = typer.Typer(help="Bearer tokens of the HTTP server: each maps to one user.", no_args_is_help=True)
app.add_typer(token_app, name="token")


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class EmbedderChoice(StrEnum):
    none = "none"
    hashing = "hashing"
    sentence_transformers = "sentence-transformers"


def _embedder(choice: EmbedderChoice, model: str | None) -> object | None:
    if choice is EmbedderChoice.none:
        return None
    if choice is EmbedderChoice.hashing:
        from pymemdb.vm.embedders import HashingEmbedder

        return HashingEmbedder()
    from pymemdb.vm.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(model) if model else SentenceTransformerEmbedder()


@command(app)
def serve(
    transport: Annotated[Transport, typer.Argument(help="stdio (one user, fixed by --user) or http (bearer tokens).")]
    = Transport.stdio,
    user: Annotated[str | None, typer.Option("--user", help="stdio: the user every call acts for.")] = None,
    host: Annotated[str, typer.Option("--host", help="http: address to bind (loopback unless told otherwise).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="http: port.")] = 8765,
    path: Annotated[str, typer.Option("--path", help="http: the MCP endpoint's path.")] = "/mcp",
    public_url: Annotated[str | None, typer.Option(
        "--public-url", help="http: the server's URL as clients reach it (behind a proxy), for the auth metadata.",
        show_default=False)] = None,
    embedder: Annotated[EmbedderChoice, typer.Option(
        "--embedder", help="Embeddings for semantic search; none = full-text search only.")] = EmbedderChoice.none,
    model: Annotated[str | None, typer.Option("--model", help="sentence-transformers model name.",
                                              show_default=False)] = None,
    dsn: DsnOption = None,
) -> None:
    """Serve pymemdb's memory tools over MCP until interrupted."""
    try:
        from pymemdb.mcp.server import MemoriMcp, serve_http, serve_stdio
    except ImportError as exc:  # the extra is missing
        raise InvalidArgument(f"the MCP SDK is not installed ({exc.name})",
                              hint="pip install 'pymemdb[mcp]'") from None
    if transport is Transport.stdio and not user:
        raise InvalidArgument("stdio serves one user: pass --user", hint="e.g. pymemdb mcp serve stdio --user alice")
    if transport is Transport.http and user:
        raise InvalidArgument("http takes the user from each request's bearer token, not --user",
                              hint="Issue a token: pymemdb mcp token create <user>")
    import pymemdb

    # HTTP serves clients concurrently: each call holds a pooled connection for one short transaction
    with pymemdb.connect(dsn, min_size=1, max_size=2 if transport is Transport.stdio else 8) as db:
        memori = MemoriMcp(db, user=user, embedder=_embedder(embedder, model))  # type: ignore[arg-type]
        memori.check_role()
        if transport is Transport.stdio:
            serve_stdio(memori)
        else:
            print(f"pymemdb MCP server on http://{host}:{port}{path} (bearer tokens: pymemdb mcp token create)",
                  file=sys.stderr, flush=True)
            serve_http(memori, host=host, port=port, path=path, public_url=public_url)


@command(token_app, "create")
def token_create(
    user: Annotated[str, typer.Argument(help="The user the token acts for.")],
    name: Annotated[str, typer.Option("--name", help="A name for the token (unique among the user's active ones).")]
    = "default",
    ttl: Annotated[str | None, typer.Option("--ttl", help="Lifetime: '30d', '12h', ... (default 90 days).",
                                            show_default=False)] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Issue a bearer token for USER (memori.mcp_token_create). The secret is printed once: store it now."""
    from pymemdb.mcp.tokens import parse_ttl

    with database(dsn) as db:
        secret = db.mcp_tokens.create(user, name, ttl=None if ttl is None else parse_ttl(ttl))
    if as_json:
        print_json(secret)
        return
    console.print(f"token {secret.token_id} ({secret.name}) for user {secret.user_id}, "
                  f"expires {fmt_time(secret.expires_at)}:", markup=False)
    typer.echo(secret.token)
    console.print("Shown once: only its hash is stored. Send it as 'Authorization: Bearer <token>'.",
                  markup=False, style="dim")


@command(token_app, "list")
def token_list(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's tokens.", show_default=False)] = None,
    include_inactive: Annotated[bool, typer.Option("--all", help="Include expired and revoked tokens.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Tokens without their secrets (memori.mcp_token_list)."""
    with database(dsn) as db:
        tokens = db.mcp_tokens.list(user, include_inactive=include_inactive)
    print_rows(tokens, as_json, "MCP tokens", ("id", "user", "name", "prefix", "status", "expires", "last used"),
               lambda t: (str(t.token_id), t.user_id, t.name, t.token_prefix, t.status, fmt_time(t.expires_at),
                          fmt_time(t.last_used_at)))


@command(token_app, "revoke")
def token_revoke(
    user: Annotated[str | None, typer.Option("--user", help="The token's user (with --name).",
                                             show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name", help="The token's name.", show_default=False)] = None,
    token_id: Annotated[int | None, typer.Option("--id", help="The token's id.", show_default=False)] = None,
    dsn: DsnOption = None,
) -> None:
    """Revoke a token by --user and --name, or by --id (memori.mcp_token_revoke); refused at once."""
    if name is None and token_id is None:
        raise InvalidArgument("name the token to revoke", hint="Pass --user and --name, or --id.")
    with database(dsn) as db:
        count = db.mcp_tokens.revoke(user, name, token_id=token_id)
    console.print(f"revoked {count} token(s)", markup=False)
