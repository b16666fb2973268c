"""The context store through the client (db.context/business/sessions/projects) and the CLI."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

import pymemdb
from pymemdb import Scope
from pymemdb.cli.main import app as main_app
from pymemdb.context import CONTEXT_SET, ContextEntry, ContextStat, ContextValue, SessionContext
from tests.helpers import T0

runner = CliRunner()


def test_round_trip_is_typed(db: pymemdb.Database) -> None:
    alice = db.as_user("alice")
    alice.projects.create("p1", "Project one", now=T0)
    alice.projects.member_add("p1", "bob", now=T0)
    assert [m.user_id for m in alice.projects.member_list("p1")] == ["alice", "bob"]
    session = alice.sessions.set("s1", project_id="p1", metadata={"agent": "builder"}, now=T0)
    assert isinstance(session, SessionContext) and session.project_id == "p1"
    entry = alice.context.set("theme", {"mode": "dark"}, type="user_preferences", scope="user", now=T0)
    assert isinstance(entry, ContextEntry) and entry.user_id == "alice" and entry.expires_at is None
    alice.context.set("theme", {"mode": "light"}, type="session_context", scope="session",
                      who=Scope(session_id="s1"), ttl_ms=60_000, now=T0)
    got = alice.context.get("theme", Scope(session_id="s1"), now=T0)
    assert isinstance(got, ContextValue) and got.scope == "session" and got.value == {"mode": "light"}
    assert alice.context.get("theme", Scope(session_id="s1"), now=T0 + timedelta(minutes=1)).scope == "user"  # type: ignore[union-attr]
    merged = {v.key: v.value for v in alice.context.resolve(Scope(session_id="s1"), now=T0)}
    assert merged == {"theme": {"mode": "light"}}
    assert [v.key for v in alice.context.expiring_soon(Scope(session_id="s1"), now=T0)] == ["theme"]
    assert [v.scope for v in alice.context.search(Scope(session_id="s1"), key_pattern="th%", now=T0)] == \
        ["session", "user"]
    stats = alice.context.stats(Scope(session_id="s1"), now=T0)
    assert all(isinstance(s, ContextStat) for s in stats) and len(stats) == 8
    assert alice.context.delete("theme", scope="session", who=Scope(session_id="s1"))
    assert alice.context.cleanup_by_scope("user") == 1
    assert alice.context.prune_old(timedelta(days=1), now=T0) == 0

    w = alice.sessions.add_window("s1", "conversation", {"messages": []}, priority=3, now=T0)
    assert alice.sessions.get("s1", now=T0).context_windows[0]["window_id"] == str(w.window_id)  # type: ignore[union-attr]
    assert alice.sessions.remove_window("s1", w.window_id, now=T0)
    assert alice.sessions.get("nope") is None

    assert alice.business.get() is None
    assert alice.business.set({"focus_mode": "deep_work"})["focus_mode"] == "deep_work"
    assert alice.business.update({"active_workflow": "launch"}) == \
        {"focus_mode": "deep_work", "active_workflow": "launch", "user_id": "alice"}
    assert alice.projects.member_remove("p1", "bob")


@pytest.mark.parametrize(("call", "error"), [
    (lambda db: db.context.set("k", 1, type="mood", scope="user"), pymemdb.UnknownValue),
    (lambda db: db.context.set("k", 1, type="user_preferences", scope="planet"), pymemdb.UnknownValue),
    (lambda db: db.context.set("k", 1, type="user_preferences", scope="session"), pymemdb.InvalidArgument),
    (lambda db: db.context.set("k", 1, type="user_preferences", scope="user", ttl_ms=0), pymemdb.InvalidArgument),
    (lambda db: db.context.set("k", "a\x00b", type="user_preferences", scope="user"), pymemdb.InvalidArgument),
    (lambda db: db.context.set("k", "x" * 1_048_577, type="user_preferences", scope="user"), pymemdb.PayloadTooLarge),
    (lambda db: db.context.set("k", 1, type="user_preferences", scope="project", who=Scope(project_id="nope")),
     pymemdb.AccessDenied),
    (lambda db: db.context.set("k", 1, type="user_preferences", scope="user", who=Scope("bob")), pymemdb.WrongUser),
    (lambda db: db.sessions.add_window("s", "conversation", {}, priority=11), pymemdb.InvalidArgument),
])
def test_bad_input_maps_to_the_tree(db: pymemdb.Database, call, error) -> None:  # type: ignore[no-untyped-def]
    alice = db.as_user("alice")
    if error is pymemdb.WrongUser:
        # a transaction acting for alice, and a call that names bob
        with pytest.raises(error), alice.transaction() as cur:
            alice.call(CONTEXT_SET, cur, p_key="k", p_value=Jsonb(1), p_type="user_preferences", p_scope="user",
                       p_user_id="bob")
        return
    with pytest.raises(error) as info:
        call(alice)
    assert info.value.hint
    assert alice.context.search() == []


@pytest.fixture
def env_dsn(dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYMEMDB_DSN", dsn)
    return dsn


def test_cli_set_get_resolve_list_delete_stats(env_dsn: str) -> None:
    def run(*args: str) -> tuple[int, str]:
        result = runner.invoke(main_app, ["context", *args])
        return result.exit_code, result.output

    assert run("set", "theme", '"dark"', "--user", "alice")[0] == 0
    assert run("set", "theme", '"light"', "--user", "alice", "--scope", "session", "--session", "s1",
               "--type", "session_context")[0] == 0
    code, out = run("get", "theme", "--user", "alice", "--session", "s1", "--json")
    assert code == 0 and json.loads(out)["scope"] == "session"
    code, out = run("resolve", "--user", "alice", "--json")
    assert code == 0 and json.loads(out) == {"theme": {"value": "dark", "scope": "user"}}
    code, out = run("list", "--user", "alice", "--session", "s1", "--json")
    assert code == 0 and [r["scope"] for r in json.loads(out)] == ["session", "user"]
    assert run("delete", "theme", "--user", "alice")[0] == 0
    assert run("delete", "theme", "--user", "alice")[0] == 1
    assert run("get", "theme", "--user", "bob")[0] == 1
    code, out = run("stats", "--user", "alice", "--session", "s1", "--json")
    assert code == 0 and len(json.loads(out)) == 8
    code, out = run("set", "k", "1", "--user", "alice", "--scope", "planet")
    assert code == 2 and "unknown scope" in out and "Use one of" in out and "Traceback" not in out
    code, out = run("set", "k", "{nope", "--user", "alice")
    assert code == 2 and "not valid JSON" in out


def test_bench_context_small(dsn: str) -> None:
    """`pymemdb bench context` on its smallest data: the rows it writes pass the schema's rules (a project entry
    carries its project's owner and readers, as context_set writes it), so every requester resolves all its
    keys, and the superuser and row-level-security reads both run."""
    from pymemdb.bench import context as bench

    result = bench.run(dsn, 10_000, iterations=200)
    assert result["data"]["entries"] == 10_000
    assert result["reads"]["resolve"]["keys"] == bench.KEYS
    assert {"superuser", "rls", "client_get"} <= set(result["reads"])
    assert bench.render(result)
