"""The MCP server (issue 18) through the SDK's own client: in process, a real stdio subprocess, a real HTTP server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import psycopg
import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

import pymemdb
from pymemdb.mcp.server import MemoriMcp, build_server
from tests.helpers import rows, value

READ_ONLY_TOOLS = {"context_resolve", "session_checkpoint_latest", "cleanup_preview"}
PAST = datetime(2020, 1, 1, tzinfo=UTC)


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert "Traceback" not in text
    return text


@pytest.fixture
def world(conn: psycopg.Connection) -> None:
    """alice and bob each have context, a session checkpoint and expired rows."""
    for user in ("alice", "bob"):
        conn.execute("select set_config('memori.user_id', %s, false)", (user,))
        conn.execute("select memori.context_set(%s, %s::jsonb, 'user_preferences', 'user', %s)",
                     (f"{user}.theme", json.dumps(f"{user}-dark"), user))
        conn.execute("select memori.session_checkpoint_save('api', %s, %s, '{}')", (user, f"{user} was here"))
        conn.execute("select memori.memory_save('notes', %s, p_ttl => interval '1 second', p_owner_id => %s, "
                     "p_now => %s)", (f"{user} old note", user, PAST))
    conn.execute("reset memori.user_id")


def run(coro: Any) -> Any:
    return anyio.run(lambda: coro)


async def _in_process(dsn: str, user: str, calls: list[tuple[str, dict[str, Any]]]) -> list[CallToolResult]:
    with pymemdb.connect(dsn) as db:
        memori = MemoriMcp(db, user=user)
        memori.check_role()
        async with Client(build_server(memori)) as client:
            return [await client.call_tool(name, args) for name, args in calls]


def test_tools_are_listed_with_schemas(dsn: str) -> None:
    async def go() -> Any:
        with pymemdb.connect(dsn) as db:
            async with Client(build_server(MemoriMcp(db, user="alice"))) as client:
                return (await client.list_tools()).tools

    tools = {t.name: t for t in anyio.run(go)}
    assert READ_ONLY_TOOLS <= set(tools)
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None, tool.name
        assert "user" not in " ".join(tool.input_schema.get("properties", {})), "no tool takes a user"
    assert tools["session_checkpoint_latest"].input_schema["required"] == ["skill"]
    assert tools["cleanup_preview"].annotations is not None and tools["cleanup_preview"].annotations.read_only_hint


def test_read_only_tools_see_only_the_users_rows(dsn: str, world: None) -> None:
    context, checkpoint, preview = anyio.run(_in_process, dsn, "alice", [
        ("context_resolve", {}), ("session_checkpoint_latest", {"skill": "api"}), ("cleanup_preview", {}),
    ])
    assert [(e["key"], e["value"]) for e in structured(context)["entries"]] == [("alice.theme", "alice-dark")]
    found = structured(checkpoint)
    assert found["found"] and found["content"] == "alice was here" and found["source"] == "current"
    rows_ = structured(preview)["rows"]
    assert [r["table_name"] for r in rows_] == ["memories"] and not structured(preview)["truncated"]


def test_errors_are_tool_errors_with_our_code(dsn: str) -> None:
    unknown, bad_limit = anyio.run(_in_process, dsn, "alice", [
        ("session_checkpoint_latest", {"skill": "no-such-skill"}), ("cleanup_preview", {"limit": 0}),
    ])
    assert "PM002: unknown skill" in error_text(unknown) and "Hint: " in error_text(unknown)
    assert "limit" in error_text(bad_limit)


def test_a_superuser_server_acts_as_memori_app(dsn: str, world: None) -> None:
    """The test server connects as a superuser: RLS applies only because each call SETs ROLE memori_app."""
    with pymemdb.connect(dsn) as db:
        memori = MemoriMcp(db, user="bob")
        memori.check_role()
        assert memori.set_role
        from pymemdb.cleanup import CLEANUP_PREVIEW

        owners = {r.owner for r in memori.run("bob", CLEANUP_PREVIEW)}
        assert owners == {"notes"}
        assert {r.row_id for r in memori.run("bob", CLEANUP_PREVIEW)} != {
            r.row_id for r in memori.run("alice", CLEANUP_PREVIEW)}


def test_a_role_that_bypasses_rls_without_memori_app_is_refused(conn: psycopg.Connection, dsn: str) -> None:
    conn.execute("drop role if exists mcp_bypass")
    conn.execute("create role mcp_bypass login bypassrls")
    conn.execute("grant memori_cleaner to mcp_bypass")  # can read the schema's revision, not act as the app
    try:
        from psycopg.conninfo import make_conninfo

        with pymemdb.connect(make_conninfo(dsn, user="mcp_bypass")) as db:
            with pytest.raises(pymemdb.PymemdbError) as info:
                MemoriMcp(db, user="alice").check_role()
        assert info.value.sqlstate == "PM134"
    finally:
        conn.execute("drop owned by mcp_bypass")
        conn.execute("drop role mcp_bypass")


# -- a real stdio subprocess ---------------------------------------------------
def _env(dsn: str) -> dict[str, str]:
    return {**os.environ, "PYMEMDB_DSN": dsn, "PYTHONUNBUFFERED": "1"}


def test_stdio_subprocess(dsn: str, world: None) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "pymemdb", "mcp", "serve", "stdio",
                                                                 "--user", "bob"], env=_env(dsn))

    async def go() -> tuple[set[str], CallToolResult]:
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            return tools, await client.call_tool("context_resolve", {})

    tools, context = anyio.run(go)
    assert READ_ONLY_TOOLS <= tools
    assert [e["key"] for e in structured(context)["entries"]] == ["bob.theme"]


# -- a real HTTP server on a loopback port -------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(dsn: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pymemdb", "mcp", "serve", "http", "--port", str(port)],
                            env=_env(dsn), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {proc.stderr.read() if proc.stderr else ''!r}") from exc
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _http_calls(url: str, token: str, calls: list[tuple[str, dict[str, Any]]],
                      headers: dict[str, str] | None = None) -> list[CallToolResult]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **(headers or {})},
                                  timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return [await client.call_tool(name, args) for name, args in calls]


def _post(url: str, headers: dict[str, str]) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx2.post(url, json=body, headers={"Accept": "application/json, text/event-stream",
                                                    "Content-Type": "application/json", **headers}, timeout=30)
    return int(response.status_code)


def test_http_users_are_isolated_and_tokens_are_checked(http_server: str, dsn: str, conn: psycopg.Connection,
                                                         world: None) -> None:
    with pymemdb.connect(dsn) as db:
        alice = db.mcp_tokens.create("alice", "test").token
        bob = db.mcp_tokens.create("bob", "test").token
        revoked = db.mcp_tokens.create("bob", "old").token
        db.mcp_tokens.revoke("bob", "old")
        expired = db.mcp_tokens.create("bob", "expired").token
    conn.execute("update memori.mcp_tokens set created_at = %s, expires_at = %s where name = 'expired'",
                 (PAST, PAST + timedelta(days=1)))

    # each user sees their own rows only, whatever the request claims
    forged = {"X-Memori-User": "bob", "X-User-Id": "bob"}
    [mine] = anyio.run(_http_calls, http_server + "?user=bob", alice, [("context_resolve", {"user_id": "bob"})],
                       forged)
    assert [e["key"] for e in structured(mine)["entries"]] == ["alice.theme"]
    [theirs, checkpoint] = anyio.run(_http_calls, http_server, bob, [
        ("context_resolve", {}), ("session_checkpoint_latest", {"skill": "api"})])
    assert [e["key"] for e in structured(theirs)["entries"]] == ["bob.theme"]
    assert structured(checkpoint)["content"] == "bob was here"

    # a missing, malformed, unknown, revoked or expired token: 401, recorded
    before = value(conn, "select count(*) from memori.events where event_type = 'mcp.auth_refused'")
    assert _post(http_server, {}) == 401
    assert _post(http_server, {"Authorization": "Basic YWxpY2U6eA=="}) == 401
    assert _post(http_server, {"Authorization": "Bearer nonsense"}) == 401
    assert _post(http_server, {"Authorization": "Bearer pmdb_" + "0" * 64}) == 401
    assert _post(http_server, {"Authorization": f"Bearer {revoked}"}) == 401
    assert _post(http_server, {"Authorization": f"Bearer {expired}"}) == 401
    assert _post(http_server, {"Authorization": f"Bearer {alice}"}) != 401  # past auth (no MCP session yet)
    reasons = [r["reason"] for r in rows(conn, "select payload->>'reason' as reason from memori.events "
                                               "where event_type = 'mcp.auth_refused' order by id offset %s",
                                         (before,))]
    assert reasons == ["missing", "missing", "malformed", "unknown", "revoked", "expired"]
    assert value(conn, "select last_used_at is not null from memori.mcp_tokens where name = 'test' "
                       "and user_id = 'alice'") is True
