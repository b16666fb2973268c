"""Bearer tokens for ``pymemdb mcp serve http``, through the MCP SDK's TokenVerifier.

A request's token is checked by ``memori.mcp_token_verify`` (a hash lookup;
the refusal of a missing, malformed, unknown, revoked or expired token is
recorded there as an ``mcp.auth_refused`` event). The SDK's bearer middleware
answers 401 to anything it does not accept; ``RecordMissingToken`` records the
requests that carry no bearer token at all, which the SDK refuses without
asking the verifier.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio.to_thread
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Receive, Scope, Send

from pymemdb.db import Database
from pymemdb.errors import PymemdbError
from pymemdb.mcp.tokens import MCP_TOKEN_VERIFY, McpPrincipal

log = logging.getLogger("pymemdb.mcp")

# the peer of the HTTP request being authenticated, for the refusal record
_client: contextvars.ContextVar[str | None] = contextvars.ContextVar("pymemdb_mcp_client", default=None)


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


class MemoriTokenVerifier:
    """The SDK's ``TokenVerifier`` over ``memori.mcp_token_verify``: the token's user is the AccessToken's subject."""

    def __init__(self, db: Database, in_role: Callable[[Any], None]) -> None:
        self._db = db
        self._in_role = in_role

    def lookup(self, token: str | None, client: str | None) -> McpPrincipal | None:
        with self._db.transaction() as cur:
            self._in_role(cur)
            args: dict[str, Any] = {"p_token": token, "p_client": client}
            return self._db.call(MCP_TOKEN_VERIFY, cur, **args)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await anyio.to_thread.run_sync(partial(self.lookup, token, _client.get()))
        except PymemdbError as exc:  # the database is down: refuse, never crash the request
            log.error("token verification failed: %s", exc.one_line())
            return None
        if principal is None:
            return None
        return AccessToken(
            token=token,
            client_id=f"pymemdb-token-{principal.token_id}",
            subject=principal.user_id,
            scopes=[],
            expires_at=int(principal.expires_at.timestamp()),
            claims={"name": principal.name},
        )


class RecordMissingToken:
    """ASGI middleware: remember the peer for the verifier, and record MCP requests without a bearer token."""

    def __init__(self, app: ASGIApp, verifier: MemoriTokenVerifier, path: str) -> None:
        self.app = app
        self.verifier = verifier
        self.path = path.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = _peer(scope)
        reset = _client.set(peer)
        try:
            if str(scope.get("path", "")).rstrip("/") == self.path:
                header = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
                if not header.lower().startswith(b"bearer "):
                    try:
                        await anyio.to_thread.run_sync(partial(self.verifier.lookup, None, peer))
                    except PymemdbError as exc:
                        log.error("recording a refused request failed: %s", exc.one_line())
            await self.app(scope, receive, send)
        finally:
            _client.reset(reset)
