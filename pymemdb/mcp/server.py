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

import inspect
import logging
import uuid
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
from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from pymemdb._sql import SqlFunction, given
from pymemdb.context import CONTEXT_RESOLVE
from pymemdb.db import Database
from pymemdb.errors import McpInvalidArgument, McpUnsafeRole, PymemdbError
from pymemdb.install import package_version
from pymemdb.mcp.auth import MemoriTokenVerifier, RecordMissingToken
from pymemdb.mcp.memory import (
    DEFAULT_NAMESPACE,
    STORE_DELETE,
    STORE_LIST_NAMESPACES,
    STORE_NAMESPACE_DELETE,
    STORE_PUT,
    STORE_SEARCH,
    StoreItem,
    StoreSearchResult,
    item_id,
    namespace_path,
    parse_item_id,
    text_of,
    vector_text,
)
from pymemdb.mcp.tokens import parse_ttl
from pymemdb.memories import SESSION_CHECKPOINT_LOAD_LATEST
from pymemdb.retention import CLEANUP_PREVIEW
from pymemdb.vm.embedders import Embedder

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
class Memory(BaseModel):
    id: str = Field(description="The memory's id: namespace labels and key joined by '/' (pass it to forget).")
    namespace: list[str] = Field(description="The namespace path.")
    key: str
    value: dict[str, Any] = Field(description='The stored JSON object; a text memory is {"text": ...}.')
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = Field(description="When it expires (then it is never returned); null = never.")


class ScoredMemory(Memory):
    score: float | None = Field(description="Relevance: vector similarity (hybrid mode) or full-text rank; "
                                            "null when listing by recency.")
    rank: int = Field(description="Position in the ranking, from 1.")


class SearchResult(BaseModel):
    mode: str = Field(description="hybrid (embeddings + full text), full_text (no embedding model) or recent "
                                  "(no query: newest first).")
    note: str | None = Field(default=None, description="Why the mode is what it is, when it is not hybrid.")
    memories: list[ScoredMemory]


class ListResult(BaseModel):
    memories: list[Memory] = Field(description="Newest first.")
    next_offset: int | None = Field(description="Pass as offset for the next page; null at the end.")


class NamespacesResult(BaseModel):
    namespaces: list[str] = Field(description="Namespaces that hold unexpired memories, labels joined by '/'.")


class ForgetResult(BaseModel):
    deleted: int = Field(description="How many memories were deleted (0 when there was nothing to delete).")


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

    def run(self, user: str, function: SqlFunction[Any], **args: Any) -> Any:
        with self.db.transaction(user) as cur:
            self.in_role(cur)
            return self.db.call(function, cur, **args)

    def run_many(self, user: str, calls: list[tuple[SqlFunction[Any], dict[str, Any]]]) -> list[Any]:
        """Several calls in one transaction (one user, one round of RLS)."""
        with self.db.transaction(user) as cur:
            self.in_role(cur)
            return [self.db.call(function, cur, **args) for function, args in calls]

    def embed(self, text: str) -> str | None:
        """pgvector text of the embedder's vector for ``text``; None without an embedder or for empty text."""
        if self.embedder is None or not text.strip():
            return None
        [vector] = self.embedder.embed([text])
        if not any(vector):
            return None
        return vector_text(vector)

    async def call(self, function: SqlFunction[Any], **args: Any) -> Any:
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

    def tool(name: str, title: str, annotations: ToolAnnotations) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Register a tool; its description is its docstring, dedented (what the model reads)."""

        def register(func: Callable[P, R]) -> Callable[P, R]:
            server.add_tool(func, name=name, title=title, annotations=annotations,
                            description=inspect.cleandoc(func.__doc__ or ""))
            return func

        return register

    @tool(name="context_resolve", title="Resolve scoped context", annotations=READ_ONLY)
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

    @tool(name="session_checkpoint_latest", title="Latest session checkpoint", annotations=READ_ONLY)
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

    @tool(name="cleanup_preview", title="Preview expiry cleanup", annotations=READ_ONLY)
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

    # -- long-term memory (memori.store_*: the items MemoriStore reads and writes) ---------
    @tool(name="remember", title="Remember",
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False))
    @reports_errors
    async def remember(
        content: Annotated[str | dict[str, Any], Field(
            description='What to remember: plain text (stored as {"text": ...}) or a JSON object.')],
        namespace: Annotated[str | list[str] | None, Field(
            description="Where to file it: labels joined by '/' (e.g. 'preferences' or 'projects/apollo') or a "
                        "list of labels. Default 'memories'.")] = None,
        key: Annotated[str | None, Field(
            description="The memory's key within the namespace; remembering the same key again replaces it. "
                        "Default: a new random key.")] = None,
        ttl: Annotated[str | float | None, Field(
            description="Time to live: seconds, or '90s', '30m', '12h', '7d', '2w'. After it the memory is gone "
                        "for good. Default: kept until forgotten.")] = None,
    ) -> Memory:
        """Store a memory for this user (a fact, preference, decision or note) and return it with its id.

        Use a stable key to keep one current version of something (e.g. key 'favorite-color' in namespace
        'preferences'); omit it to add a new memory. Memories with a ttl expire exactly then.
        """
        value = {"text": content} if isinstance(content, str) else content
        if not isinstance(value, dict):
            raise McpInvalidArgument("content must be text or a JSON object", sqlstate="PM130",
                                     hint='Pass a string, or an object such as {"food": "pizza"}.')
        labels = namespace_path(namespace, default=DEFAULT_NAMESPACE)
        lifetime = None if ttl is None else parse_ttl(ttl)
        text = text_of(value)
        embedding = await anyio.to_thread.run_sync(memori.embed, text)
        args: dict[str, Any] = {"p_namespace": labels, "p_key": key or uuid.uuid4().hex, "p_value": Jsonb(value),
                                **given(p_ttl=lifetime)}
        if embedding is not None:
            args.update(p_text=text, p_fields=["$"], p_embeddings=[embedding])
        row: StoreItem = await memori.call(STORE_PUT, **args)
        return _memory(row)

    @tool(name="search_memories", title="Search memories", annotations=READ_ONLY)
    @reports_errors
    async def search_memories(
        query: Annotated[str | None, Field(
            description="What to look for, in natural language. Omit to get the newest memories.")] = None,
        namespace: Annotated[str | list[str] | None, Field(
            description="Only memories in this namespace or below it ('projects' includes 'projects/apollo'). "
                        "Default: all.")] = None,
        filter: Annotated[dict[str, Any] | None, Field(
            description='Match fields of the stored JSON: {"type": "preference"}, or with operators $eq $ne $gt '
                        '$gte $lt $lte: {"priority": {"$gte": 2}}.')] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many results.")] = 10,
        offset: Annotated[int, Field(ge=0, description="Skip this many (paging).")] = 0,
    ) -> SearchResult:
        """Find this user's memories by meaning and words (hybrid search), most relevant first.

        Combines vector similarity (when the server has an embedding model) and full-text rank; without a
        model the search is full-text only and the result says so. When fewer memories match than `limit`,
        the newest of the others follow with score null. Expired memories are never returned.
        """
        has_query = bool(query and query.strip())
        embedding = await anyio.to_thread.run_sync(memori.embed, query or "") if has_query else None
        rows: list[StoreSearchResult] = await memori.call(
            STORE_SEARCH, p_namespace_prefix=namespace_path(namespace),
            **given(p_filter=None if filter is None else Jsonb(filter), p_query=query if has_query else None,
                    p_query_embedding=embedding),
            p_limit=limit, p_offset=offset,
        )
        if not has_query:
            mode, note = "recent", "No query: the newest memories first."
        elif embedding is not None:
            mode, note = "hybrid", None
        else:
            mode = "full_text"
            note = ("Full-text search only: this server has no embedding model (start it with --embedder), so "
                    "memories match by their words, not by meaning.") if memori.embedder is None else (
                    "Full-text search only: the query has no text the embedding model can use.")
        return SearchResult(mode=mode, note=note, memories=[
            ScoredMemory(**_memory(r).model_dump(), rank=r.rank,
                         score=r.score if r.score is not None else (None if r.text_score is None
                                                                    else float(r.text_score)))
            for r in rows
        ])

    @tool(name="list_memories", title="List memories", annotations=READ_ONLY)
    @reports_errors
    async def list_memories(
        namespace: Annotated[str | list[str] | None, Field(
            description="Only this namespace and those below it. Default: all.")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Page size.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Skip this many (next_offset of the previous page).")] = 0,
    ) -> ListResult:
        """Browse this user's memories, newest first, a page at a time. Expired memories are never listed."""
        rows: list[StoreSearchResult] = await memori.call(
            STORE_SEARCH, p_namespace_prefix=namespace_path(namespace), p_limit=limit + 1, p_offset=offset,
        )
        return ListResult(memories=[_memory(r) for r in rows[:limit]],
                          next_offset=offset + limit if len(rows) > limit else None)

    @tool(name="list_namespaces", title="List namespaces", annotations=READ_ONLY)
    @reports_errors
    async def list_namespaces(
        prefix: Annotated[str | list[str] | None, Field(
            description="Only namespaces under this one. Default: all.")] = None,
        max_depth: Annotated[int | None, Field(
            ge=1, description="Cut namespaces to this many labels (e.g. 1: top-level only).")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many.")] = 100,
        offset: Annotated[int, Field(ge=0, description="Skip this many (paging).")] = 0,
    ) -> NamespacesResult:
        """The namespaces that hold this user's (unexpired) memories."""
        rows = await memori.call(
            STORE_LIST_NAMESPACES, **given(p_prefix=namespace_path(prefix) or None, p_max_depth=max_depth),
            p_limit=limit, p_offset=offset,
        )
        return NamespacesResult(namespaces=["/".join(r.namespace) for r in rows])

    @tool(name="forget", title="Forget",
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    @reports_errors
    async def forget(
        id: Annotated[str | None, Field(description="The id of one memory (from remember, search or list).")]
        = None,
        namespace: Annotated[str | list[str] | None, Field(
            description="With key: that memory. With whole_namespace: everything in it and below it.")] = None,
        key: Annotated[str | None, Field(description="The key of one memory in namespace.")] = None,
        whole_namespace: Annotated[bool, Field(
            description="Delete every memory in namespace and below it (namespace required).")] = False,
    ) -> ForgetResult:
        """Delete memories of this user for good: one by id (or namespace + key), or a whole namespace.

        Returns how many were deleted.
        """
        if id is not None:
            if namespace is not None or key is not None or whole_namespace:
                raise _forget_usage("pass either id, or namespace with key or whole_namespace, not both")
            labels, item_key = parse_item_id(id)
            return ForgetResult(deleted=int(bool(await memori.call(STORE_DELETE, p_namespace=labels,
                                                                   p_key=item_key))))
        labels = namespace_path(namespace)
        if namespace is None:
            raise _forget_usage("say what to forget")
        if whole_namespace:
            if key is not None:
                raise _forget_usage("whole_namespace deletes a namespace: leave key out")
            return ForgetResult(deleted=int(await memori.call(STORE_NAMESPACE_DELETE, p_prefix=labels)))
        if key is None:
            raise _forget_usage("namespace alone is ambiguous: add key, or whole_namespace=true")
        return ForgetResult(deleted=int(bool(await memori.call(STORE_DELETE, p_namespace=labels, p_key=key))))

    return server


def _forget_usage(message: str) -> McpInvalidArgument:
    return McpInvalidArgument(message, sqlstate="PM130",
                              hint="forget takes id; or namespace and key; or namespace and whole_namespace=true.")


def _memory(row: StoreItem | StoreSearchResult) -> Memory:
    return Memory(id=item_id(row.namespace, row.key), namespace=row.namespace, key=row.key, value=row.value,
                  created_at=row.created_at, updated_at=row.updated_at, expires_at=row.expires_at)


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
