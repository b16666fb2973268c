"""The MCP server: pymemdb's memory as tools any MCP client can call (issue 18).

Every tool is a thin call of documented SQL functions (the same declarations
the Python client uses), in its own transaction that acts for one user: the
``--user`` fixed at start over stdio, the bearer token's user over HTTP. The
transaction sets ``memori.user_id`` and, when the server's database role could
otherwise bypass row-level security, ``SET LOCAL ROLE memori_app``, so RLS
decides what a call can see. No tool takes a user argument. Errors are MCP
tool errors carrying our SQLSTATE, message and hint; never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial, wraps
from typing import Annotated, Any, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from pymemdb._sql import SqlFunction, given
from pymemdb.cleanup import CLEANUP_PREVIEW
from pymemdb.context import CONTEXT_RESOLVE
from pymemdb.db import Database
from pymemdb.embedders import Embedder
from pymemdb.errors import McpUnsafeRole, PymemdbError
from pymemdb.install import package_version
from pymemdb.mcp.auth import MemoriTokenVerifier, RecordMissingToken
from pymemdb.memories import SESSION_CHECKPOINT_LOAD_LATEST

log = logging.getLogger("pymemdb.mcp")

APP_ROLE = "memori_app"
INSTRUCTIONS = (
    "Long-term memory for this user, kept in PostgreSQL by pymemdb. Use `remember` to store a fact, preference "
    "or note (optionally in a namespace such as 'preferences' or 'projects/apollo', with a time to live), "
    "`search_memories` to find memories by meaning or words, `list_memories` to browse, and `forget` to delete. "
    "Memories with a TTL disappear when it passes. Read-only: `context_resolve` (scoped context entries), "
    "`session_checkpoint_latest` (the last saved session checkpoint of a skill), `cleanup_preview` (what "
    "expiry will delete next)."
)

P = ParamSpec("P")
R = TypeVar("R")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def tool_error(exc: PymemdbError) -> ToolError:
    """Our error as the text an MCP client shows the model: code, message, hint."""
    text = f"{exc.sqlstate or 'error'}: {exc.message.rstrip('.')}."
    if exc.hint:
        text += f" Hint: {exc.hint}"
    return ToolError(text)


def reports_errors(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Turn pymemdb errors into MCP tool errors (is_error results), with our code and hint."""

    @wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await func(*args, **kwargs)
        except PymemdbError as exc:
            raise tool_error(exc) from None

    return wrapper


# -- results ------------------------------------------------------------------
class ContextEntry(BaseModel):
    key: str = Field(description="The context key.")
    value: Any = Field(description="Its JSON value, from the most specific scope that has it.")
    scope: str = Field(description="Where it was resolved from: session, project, user or global.")
    type: str = Field(description="The entry's type (user_preferences, business_context, ...).")
    project_id: str | None = None
    session_id: str | None = None
    expires_at: datetime | None = Field(default=None, description="When it expires; null = never.")
    updated_at: datetime


class ContextResult(BaseModel):
    entries: list[ContextEntry]


class SessionCheckpointResult(BaseModel):
    found: bool = Field(description="False when the user has no unexpired checkpoint for this skill.")
    id: int | None = None
    content: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = Field(default=None, description="When it expires; null = never.")
    source: str | None = Field(default=None, description="current, legacy or previous namespace.")


class CleanupRow(BaseModel):
    seq: int
    table_name: str
    row_id: str
    category: str | None
    kind: str | None
    priority: int
    expires_at: datetime
    reason: str


class CleanupPreviewResult(BaseModel):
    rows: list[CleanupRow] = Field(description="The user's expired rows cleanup will delete, in deletion order.")
    truncated: bool = Field(description="True when there are more than `limit` rows.")


@dataclass
class MemoriMcp:
    """What every tool needs: the database, how a call acts for its user, the embedder."""

    db: Database
    user: str | None = None  # fixed at start (stdio); None: the bearer token's user (HTTP)
    embedder: Embedder | None = None
    set_role: bool = False

    def check_role(self) -> None:
        """Decide whether calls SET LOCAL ROLE memori_app; refuse a role that would see every user's rows."""
        with self.db.transaction() as cur:
            cur.execute(
                "select r.rolsuper or r.rolbypassrls as bypass,"
                " exists (select 1 from pg_catalog.pg_roles where rolname = %(app)s) as app_exists,"
                " exists (select 1 from pg_catalog.pg_roles where rolname = %(app)s)"
                "   and pg_catalog.pg_has_role(current_user, %(app)s, 'MEMBER') as member,"
                " current_user as me"
                " from pg_catalog.pg_roles r where r.rolname = current_user",
                {"app": APP_ROLE},
            )
            bypass, _exists, member, me = cur.fetchone() or (False, False, False, "")
        self.set_role = bool(member) and me != APP_ROLE
        if bypass and not self.set_role:
            raise McpUnsafeRole(
                f"database role {me} bypasses row-level security and cannot SET ROLE {APP_ROLE}",
                sqlstate="PM134",
                hint=f"Grant {APP_ROLE} to {me}, or connect as a login role that is a member of {APP_ROLE}.",
            )

    def in_role(self, cur: Any) -> None:
        if self.set_role:
            cur.execute(f"set local role {APP_ROLE}")

    def acting_user(self) -> str:
        """The user this call acts for: --user over stdio, the verified token's user over HTTP."""
        if self.user is not None:
            return self.user
        token = get_access_token()
        if token is None or not token.subject:
            raise ToolError("PM041: this call carries no authenticated user. Hint: Send a valid bearer token.")
        return token.subject

    def run(self, user: str, function: SqlFunction, **args: Any) -> Any:
        with self.db.transaction(user) as cur:
            self.in_role(cur)
            return self.db.call(function, cur, **args)

    def run_many(self, user: str, calls: list[tuple[SqlFunction, dict[str, Any]]]) -> list[Any]:
        """Several calls in one transaction (one user, one round of RLS)."""
        with self.db.transaction(user) as cur:
            self.in_role(cur)
            return [self.db.call(function, cur, **args) for function, args in calls]

    async def call(self, function: SqlFunction, **args: Any) -> Any:
        user = self.acting_user()
        return await anyio.to_thread.run_sync(partial(self.run, user, function, **args))


def build_server(memori: MemoriMcp, *, auth: AuthSettings | None = None) -> MCPServer[Any]:
    """The MCPServer with pymemdb's tools; with ``auth``, HTTP requests need a pymemdb bearer token."""
    verifier = MemoriTokenVerifier(memori.db, memori.in_role) if auth is not None else None
    server: MCPServer[Any] = MCPServer(
        name="pymemdb",
        title="pymemdb memory",
        instructions=INSTRUCTIONS,
        version=package_version(),
        token_verifier=verifier,
        auth=auth,
    )

    @server.tool(name="context_resolve", title="Resolve scoped context", annotations=READ_ONLY)
    @reports_errors
    async def context_resolve(
        project_id: Annotated[str | None, Field(description="Also include this project's entries "
                                                             "(the user must be a member).")] = None,
        session_id: Annotated[str | None, Field(description="Also include this session's entries "
                                                             "(one of the user's sessions).")] = None,
        prefix: Annotated[str | None, Field(description="Only keys starting with this prefix.")] = None,
    ) -> ContextResult:
        """The user's context entries, each key resolved from its most specific visible scope.

        Session beats project beats user beats global. Expired entries never appear.
        """
        values = await memori.call(
            CONTEXT_RESOLVE, **given(p_project_id=project_id, p_session_id=session_id, p_prefix=prefix)
        )
        return ContextResult(entries=[
            ContextEntry(key=v.key, value=v.value, scope=v.scope, type=v.type, project_id=v.project_id,
                         session_id=v.session_id, expires_at=v.expires_at, updated_at=v.updated_at)
            for v in values
        ])

    @server.tool(name="session_checkpoint_latest", title="Latest session checkpoint", annotations=READ_ONLY)
    @reports_errors
    async def session_checkpoint_latest(
        skill: Annotated[str, Field(description="The skill whose checkpoint to load, e.g. 'api' or "
                                                "'skill:api-development' (see memori.session_skills).")],
    ) -> SessionCheckpointResult:
        """The user's latest unexpired session checkpoint for a skill (seed 05's load_latest_checkpoint).

        Looked up in the current month's session namespace, then the legacy namespace, then earlier months.
        """
        user = memori.acting_user()
        found = await anyio.to_thread.run_sync(
            partial(memori.run, user, SESSION_CHECKPOINT_LOAD_LATEST, p_skill=skill, p_user_id=user)
        )
        if found is None:
            return SessionCheckpointResult(found=False)
        return SessionCheckpointResult(found=True, id=found.id, content=found.content, metadata=found.metadata,
                                       created_at=found.created_at, expires_at=found.expires_at,
                                       source=found.source)

    @server.tool(name="cleanup_preview", title="Preview expiry cleanup", annotations=READ_ONLY)
    @reports_errors
    async def cleanup_preview(
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many rows.")] = 100,
    ) -> CleanupPreviewResult:
        """The user's own expired rows that the next cleanup will delete, in deletion order, with the reason.

        Memories, checkpoints, context, long-term memory items, ...: expired rows are already invisible to
        every other tool; this shows what is left to reclaim.
        """
        rows = await memori.call(CLEANUP_PREVIEW, p_max_rows=limit + 1)
        return CleanupPreviewResult(
            rows=[CleanupRow(seq=r.seq, table_name=r.table_name, row_id=r.row_id, category=r.category,
                             kind=r.kind, priority=r.priority, expires_at=r.expires_at, reason=r.reason)
                  for r in rows[:limit]],
            truncated=len(rows) > limit,
        )

    return server


def http_app(
    memori: MemoriMcp, *, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
    public_url: str | None = None,
) -> ASGIApp:
    """The streamable HTTP app: bearer auth on ``path``, refusals recorded."""
    base = (public_url or f"http://{host}:{port}").rstrip("/")
    auth = AuthSettings(issuer_url=base, resource_server_url=f"{base}{path}",  # type: ignore[arg-type]
                        validate_token_resource=False)
    server = build_server(memori, auth=auth)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    verifier = server._token_verifier  # the one build_server made
    assert isinstance(verifier, MemoriTokenVerifier)
    return RecordMissingToken(app, verifier, path)


def serve_stdio(memori: MemoriMcp) -> None:
    """Serve over stdio (desktop clients launch this as a subprocess)."""
    build_server(memori).run("stdio")


def serve_http(memori: MemoriMcp, *, host: str, port: int, path: str = "/mcp", public_url: str | None = None) -> None:
    """Serve streamable HTTP with uvicorn until interrupted."""
    import uvicorn

    app = http_app(memori, host=host, port=port, path=path, public_url=public_url)
    uvicorn.run(app, host=host, port=port, log_level="warning")
