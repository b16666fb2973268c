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
MEMORY_TOOLS = {"remember", "search_memories", "list_memories", "list_namespaces", "forget"}
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


def _tools(dsn: str) -> dict[str, Any]:
    """The in-process server's tools (as alice), by name."""

    async def go() -> Any:
        with pymemdb.connect(dsn) as db:
            async with Client(build_server(MemoriMcp(db, user="alice"))) as client:
                return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(go)}


def test_tools_are_listed_with_schemas(dsn: str) -> None:
    tools = _tools(dsn)
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
        from pymemdb.retention import CLEANUP_PREVIEW

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

    async def go() -> tuple[set[str], list[CallToolResult]]:
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            return tools, [await client.call_tool(name, args) for name, args in [
                ("context_resolve", {}), ("remember", {"content": "bob likes chess", "key": "hobby"}),
                ("search_memories", {"query": "chess"}), ("forget", {"id": "memories/hobby"}),
                ("remember", {"content": "x", "ttl": "whenever"}),
            ]]

    tools, (context, remembered, search, forget, bad) = anyio.run(go)
    assert READ_ONLY_TOOLS | MEMORY_TOOLS == tools
    assert [e["key"] for e in structured(context)["entries"]] == ["bob.theme"]
    assert structured(remembered)["id"] == "memories/hobby"
    assert structured(search)["memories"][0]["value"] == {"text": "bob likes chess"}
    assert structured(forget)["deleted"] == 1
    assert "PM130: " in error_text(bad)


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

    # memories: alice's are invisible and untouchable for bob, whatever he names
    [secret, _] = anyio.run(_http_calls, http_server, alice, [
        ("remember", {"content": "alice's secret plan", "namespace": "plans", "key": "s1"}),
        ("remember", {"content": "alice's grocery list"}),
    ])
    secret_id = structured(secret)["id"]
    bob_calls = anyio.run(_http_calls, http_server, bob, [
        ("search_memories", {"query": "secret plan"}), ("list_memories", {}), ("list_namespaces", {}),
        ("forget", {"id": secret_id}), ("forget", {"namespace": "plans", "whole_namespace": True}),
        ("remember", {"content": "bob's note", "namespace": "plans", "key": "s1"}),
    ], forged)
    search, listed, namespaces, forget_one, forget_ns, own = (structured(r) for r in bob_calls)
    assert search["memories"] == [] and listed["memories"] == [] and namespaces["namespaces"] == []
    assert forget_one["deleted"] == 0 and forget_ns["deleted"] == 0
    assert own["id"] == secret_id  # the same namespace and key, a different user: a different item
    [mine_again, plans] = anyio.run(_http_calls, http_server, alice, [
        ("search_memories", {"query": "secret plan"}), ("list_memories", {"namespace": "plans"})])
    assert structured(mine_again)["memories"][0]["value"] == {"text": "alice's secret plan"}
    assert [m["value"]["text"] for m in structured(plans)["memories"]] == ["alice's secret plan"]
    assert value(conn, "select count(*) from memori.store_items") == 3

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


# -- long-term memory tools (the store's items) ---------------------------------


def test_remember_search_list_forget(dsn: str, conn: psycopg.Connection) -> None:
    results = anyio.run(_in_process, dsn, "alice", [
        ("remember", {"content": "Alice prefers green tea in the morning", "namespace": "preferences",
                      "key": "drink"}),
        ("remember", {"content": {"project": "apollo", "status": "launch on friday", "priority": 3},
                      "namespace": ["projects", "apollo"]}),
        ("remember", {"content": "temporary note about the dentist", "ttl": "1h"}),
        ("search_memories", {"query": "green tea"}),
        ("search_memories", {"filter": {"priority": {"$gte": 3}}}),
        ("list_memories", {"limit": 2}),
        ("list_namespaces", {}),
        ("list_namespaces", {"max_depth": 1}),
    ])
    drink, apollo, note, tea, priority, page, namespaces, top = (structured(r) for r in results)
    assert drink["id"] == "preferences/drink" and drink["value"] == {"text": "Alice prefers green tea in the morning"}
    assert drink["expires_at"] is None and note["expires_at"] is not None
    assert apollo["namespace"] == ["projects", "apollo"] and len(apollo["key"]) == 32
    assert tea["mode"] == "full_text" and "no embedding model" in tea["note"]
    # matches first; the rest follow newest first, unscored (the store never returns fewer than it has)
    assert tea["memories"][0]["id"] == "preferences/drink" and tea["memories"][0]["score"] > 0
    assert [m["score"] for m in tea["memories"][1:]] == [None, None]
    assert priority["mode"] == "recent" and [m["id"] for m in priority["memories"]] == [apollo["id"]]
    assert [m["id"] for m in page["memories"]] == [note["id"], apollo["id"]] and page["next_offset"] == 2
    assert sorted(namespaces["namespaces"]) == ["memories", "preferences", "projects/apollo"]
    assert sorted(top["namespaces"]) == ["memories", "preferences", "projects"]

    # the same items through the store's SQL (what MemoriStore reads), and the reverse
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    assert value(conn, "select value->>'text' from memori.store_get(p_namespace => '{preferences}', "
                       "p_key => 'drink')") == "Alice prefers green tea in the morning"
    conn.execute("""select memori.store_put(p_namespace => '{langgraph,facts}', p_key => 'k1',
                                            p_value => '{"fact": "the cat is called Miso"}')""")
    conn.execute("reset memori.user_id")

    found, gone, by_key, ns, after, bob_view = anyio.run(_in_process, dsn, "alice", [
        ("search_memories", {"query": "cat Miso"}),
        ("forget", {"id": note["id"]}),
        ("forget", {"namespace": "preferences", "key": "drink"}),
        ("forget", {"namespace": "projects", "whole_namespace": True}),
        ("list_memories", {}),
        ("forget", {"id": "langgraph/facts/k1"}),  # alice's own: deleted
    ])
    assert structured(found)["memories"][0]["id"] == "langgraph/facts/k1"
    assert structured(gone)["deleted"] == 1 and structured(by_key)["deleted"] == 1
    assert structured(ns)["deleted"] == 1
    assert [m["id"] for m in structured(after)["memories"]] == ["langgraph/facts/k1"]
    assert structured(bob_view)["deleted"] == 1
    assert value(conn, "select count(*) from memori.store_items") == 0


def test_expired_memories_never_come_back(dsn: str, conn: psycopg.Connection) -> None:
    [kept, short] = anyio.run(_in_process, dsn, "alice", [
        ("remember", {"content": "keep me", "key": "kept"}),
        ("remember", {"content": "forget me soon", "key": "short", "ttl": 60}),
    ])
    assert structured(short)["expires_at"] is not None and structured(kept)["expires_at"] is None
    # an hour passes: the item has expired but cleanup has not run
    conn.execute("update memori.store_items set expires_at = now() - interval '1 second' where key = 'short'")
    results = anyio.run(_in_process, dsn, "alice", [
        ("search_memories", {"query": "forget me soon"}), ("search_memories", {}), ("list_memories", {}),
        ("list_namespaces", {}), ("cleanup_preview", {}),
    ])
    search, recent, listed, namespaces, preview = (structured(r) for r in results)
    assert [m["key"] for m in search["memories"]] == ["kept"]  # the one unexpired item, unscored
    assert [m["key"] for m in recent["memories"]] == ["kept"] == [m["key"] for m in listed["memories"]]
    assert namespaces["namespaces"] == ["memories"]
    assert [r["table_name"] for r in preview["rows"]] == ["store_items"]


def test_hybrid_search_with_an_embedder(dsn: str) -> None:
    from pymemdb.vm.embedders import HashingEmbedder

    async def go() -> list[CallToolResult]:
        with pymemdb.connect(dsn) as db:
            memori = MemoriMcp(db, user="alice", embedder=HashingEmbedder(64))
            memori.check_role()
            async with Client(build_server(memori)) as client:
                return [await client.call_tool(n, a) for n, a in [
                    ("remember", {"content": "the deploy pipeline runs on friday"}),
                    ("remember", {"content": "lunch with bob"}),
                    ("search_memories", {"query": "deployment pipeline"}),
                ]]

    *_, search = anyio.run(go)
    result = structured(search)
    assert result["mode"] == "hybrid" and result["note"] is None
    assert result["memories"][0]["value"]["text"] == "the deploy pipeline runs on friday"
    assert result["memories"][0]["score"] is not None


@pytest.mark.parametrize(("tool", "args", "code"), [
    ("remember", {"content": "x", "ttl": "soon"}, "PM130"),
    ("remember", {"content": "x", "ttl": -5}, "PM130"),
    ("remember", {"content": "x", "namespace": "a//b"}, "PM121"),
    ("search_memories", {"filter": {"x": {"$near": 1}}}, "PM120"),
    ("forget", {}, "PM130"),
    ("forget", {"namespace": "memories"}, "PM130"),
    ("forget", {"id": "no-slash"}, "PM130"),
])
def test_bad_arguments_are_tool_errors_with_our_code(dsn: str, tool: str, args: dict[str, Any], code: str) -> None:
    [result] = anyio.run(_in_process, dsn, "alice", [(tool, args)])
    text = error_text(result)
    assert f"{code}: " in text and "Hint: " in text, text


def test_memory_tools_have_schemas(dsn: str) -> None:
    tools = _tools(dsn)
    assert MEMORY_TOOLS <= set(tools)
    assert tools["remember"].input_schema["required"] == ["content"]
    assert set(tools["search_memories"].input_schema["properties"]) == {"query", "namespace", "filter", "limit",
                                                                        "offset"}
    assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint
    assert "memories" in tools["search_memories"].output_schema["properties"]


def test_memoristore_and_mcp_share_items(dsn: str) -> None:
    """What a LangGraph agent remembers for a user, that user's MCP client finds, and the reverse."""
    from pymemdb.integrations.langgraph import MemoriStore

    with MemoriStore.from_dsn(dsn, user_id="alice") as store:
        store.put(("memories",), "from-langgraph", {"text": "the launch moved to tuesday"})
        [found, _remembered] = anyio.run(_in_process, dsn, "alice", [
            ("search_memories", {"query": "launch tuesday"}),
            ("remember", {"content": "call the venue", "key": "from-mcp", "ttl": "1d"}),
        ])
        assert structured(found)["memories"][0]["id"] == "memories/from-langgraph"
        item = store.get(("memories",), "from-mcp")
        assert item is not None and item.value == {"text": "call the venue"}
        assert [i.key for i in store.search(("memories",), query="venue")][:1] == ["from-mcp"]
    with MemoriStore.from_dsn(dsn, user_id="bob") as other:
        assert other.get(("memories",), "from-mcp") is None
        assert other.search(("memories",)) == []


def test_http_concurrent_users_stay_apart(http_server: str, dsn: str) -> None:
    """Two users' sessions interleaved on one server: each call acts for its own token's user."""
    with pymemdb.connect(dsn) as db:
        tokens = {user: db.mcp_tokens.create(user, "load").token for user in ("alice", "bob")}
    seen: dict[str, set[str]] = {"alice": set(), "bob": set()}

    async def session(user: str) -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {tokens[user]}"}, timeout=60) as http:
            async with Client(streamable_http_client(http_server, http_client=http)) as client:
                for i in range(15):
                    await client.call_tool("remember", {"content": f"{user} item {i}", "key": f"{user}-{i}"})
                    listed = structured(await client.call_tool("list_memories", {"limit": 100}))
                    seen[user] |= {m["value"]["text"].split()[0] for m in listed["memories"]}

    async def both() -> None:
        async with anyio.create_task_group() as group:
            for user in ("alice", "bob", "alice", "bob"):
                group.start_soon(session, user)

    anyio.run(both)
    assert seen == {"alice": {"alice"}, "bob": {"bob"}}
