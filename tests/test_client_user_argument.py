"""The client never leaves a per-user function's user argument out, nor sends it NULL (issue 20).

Citus 14.0.1 crashes the coordinator (signal 11) when a function registered for
delegation (``memori.distribute_functions(p_delegate => true)``) is called with a
NULL constant as its distribution argument, its ``default null`` included. So
every call the client composes names the user: the acting user when the caller
gave none, else ``NO_USER`` (what NULL means, as an expression Citus does not
delegate). This records the statements the client sends; the Citus side is
tests/citus/test_single_shard.py (delegated calls through the client).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pymemdb
from pymemdb import _sql
from pymemdb.budget import Budget  # noqa: F401  (every concern's declarations into REGISTRY)
from pymemdb.checkpoints import Checkpoints  # noqa: F401
from pymemdb.compression import Compression  # noqa: F401
from pymemdb.context import Scope
from pymemdb.integrations import langgraph, langgraph_store  # noqa: F401
from pymemdb.mcp import server  # noqa: F401
from pymemdb.mcp.tokens import MCP_TOKEN_LIST, MCP_TOKEN_REVOKE
from pymemdb.store import STORE_GET, STORE_PUT
from pymemdb.vm import fork, lifecycle, pages  # noqa: F401

CALL = re.compile(r'"memori"\."([a-z_0-9]+)"\(')
NO_USER = _sql.NO_USER.as_string(None)
BY_NAME = {f.name: f for f in _sql.REGISTRY}


def test_every_declaration_with_a_user_argument_always_names_it() -> None:
    with_user = [f for f in _sql.REGISTRY if f.user_param is not None]
    assert len(with_user) > 50
    for function in with_user:
        # p_owner_id is memory_save's distribution argument (memori.distribute_functions' rule)
        names = {p for p, _ in function.params}
        assert function.user_param == ("p_owner_id" if "p_owner_id" in names else "p_user_id")
        left_out = function.query({}).as_string(None)
        assert f'"{function.user_param}" => {NO_USER}::text' in left_out, left_out
        given = function.query({function.user_param: "alice"}).as_string(None)
        assert f'"{function.user_param}" => %({function.user_param})s::text' in given and NO_USER not in given
        assert f'"{function.user_param}" => {NO_USER}' in function.positional([])
    # a NULL user is every user there (an admin's call): left to the SQL default, never delegated
    assert {f.name for f in _sql.REGISTRY if f.user_param is None and any(p == "p_user_id" for p, _ in f.params)} \
        == {MCP_TOKEN_LIST.name, MCP_TOKEN_REVOKE.name}


class Recorder:
    """Every memori function call the client executes: (function, its user argument or a marker)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def record(self, cur: psycopg.Cursor[Any], query: Any, params: Any) -> None:
        text = query.as_string(cur) if hasattr(query, "as_string") else str(query)
        match = CALL.search(text)
        if not match or match[1] not in BY_NAME or BY_NAME[match[1]].user_param is None:
            return
        param = BY_NAME[match[1]].user_param
        if f'"{param}" => {NO_USER}' in text:
            self.calls.append((match[1], NO_USER))
        else:
            assert f'"{param}" => %({param})s' in text, text
            self.calls.append((match[1], (params or {}).get(param)))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    execute = psycopg.Cursor.execute

    def recording(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kwargs: Any) -> Any:
        recorder.record(self, query, params)
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    yield recorder


def _calls_for_the_connections_user(db: pymemdb.Database) -> None:
    """One call per concern where the caller names no user (the connection's user acts)."""
    db.memories.save("ns", "a memory without owner")
    db.memories.save_session_checkpoint("api", "alice", "state")
    db.memories.load_latest_checkpoint("api", "alice")
    db.checkpoints.create("s1", "alice", "manual", "t", {"k": 1})
    db.checkpoints.query(session_id="s1")
    db.checkpoints.stats()
    db.context.set("theme", {"v": 1}, type="user_preferences", scope="user")
    db.context.resolve(Scope())
    db.business.get()
    db.sessions.set("s1")
    db.sessions.get("s1")
    db.budget.add_many("s1", [{"content": "chunk", "type": "chat_history_user"}])
    db.store.put(["docs"], "k", {"text": "one"})
    db.store.get(["docs"], "k")
    db.store.search(["docs"], query=None)
    db.pages.turn_begin("vm1")
    db.mcp_tokens.create("alice", "cli", ttl=timedelta(days=1))


def test_calls_for_the_connections_user_pass_it(dsn: str, recorder: Recorder) -> None:
    with pymemdb.connect(dsn, user_id="alice") as db:
        _calls_for_the_connections_user(db)
    called = {name for name, _ in recorder.calls}
    assert {"memory_save", "session_checkpoint_save", "checkpoint_query", "checkpoint_stats", "context_set",
            "business_context_get", "session_context_set", "chunk_add_many", "store_put", "store_search",
            "turn_begin", "mcp_token_create"} <= called
    assert [c for c in recorder.calls if c[1] != "alice"] == []


def test_a_call_on_a_transaction_of_another_user_passes_that_user(dsn: str, recorder: Recorder) -> None:
    """The MCP server's way: db.transaction(user), then db.call(fn, cur, ...) without p_user_id."""
    with pymemdb.connect(dsn) as db:
        with db.transaction("bob") as cur:
            db.call(STORE_PUT, cur, p_namespace=["docs"], p_key="k", p_value=psycopg.types.json.Jsonb({"b": 1}))
            item = db.call(STORE_GET, cur, p_namespace=["docs"], p_key="k", p_user_id=None)
        assert item is not None and item.value == {"b": 1}
    assert recorder.calls == [("store_put", "bob"), ("store_get", "bob")]


def test_without_any_user_the_argument_is_what_null_means(dsn: str, recorder: Recorder) -> None:
    """No acting user: the expression of memori.user_id (NULL here), same results as the NULL default."""
    with pymemdb.connect(dsn) as db:
        memory = db.memories.save("ns", "nobody's")
        assert memory.owner_id == "ns"  # seed 05's rule without any user: the namespace owns it
        with pytest.raises(pymemdb.errors.PymemdbError, match="no acting user"):
            db.business.get()
        db.mcp_tokens.list()  # NULL there is every user: left to the SQL default
    assert recorder.calls == [("memory_save", NO_USER), ("business_context_get", NO_USER)]
