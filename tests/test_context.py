"""The context store (seed 01, part 2) through SQL: resolution, TTL, scopes, windows, bad input."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import T0, assert_sqlstate, one, rows, value

SCOPES = ("global", "user", "project", "session")
SECOND = timedelta(seconds=1)


def put(conn: psycopg.Connection, key: str, val: Any, scope: str, *, user: str = "alice",
        project: str | None = None, session: str | None = None, ttl_ms: int | None = None,
        type_: str = "user_preferences", at: Any = T0) -> dict[str, Any]:
    row = one(conn, "select * from memori.context_set(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
              (key, Jsonb(val), type_, scope, user, project, session, ttl_ms, at))
    assert row is not None
    return row


def get(conn: psycopg.Connection, key: str, *, user: str = "alice", project: str | None = None,
        session: str | None = None, at: Any = T0) -> dict[str, Any] | None:
    return one(conn, "select * from memori.context_get(%s, %s, %s, %s, %s)", (key, user, project, session, at))


@pytest.fixture
def world(conn: psycopg.Connection) -> psycopg.Connection:
    """alice owns project p1 (bob is a member) and session s1 in it; carol is an outsider."""
    conn.execute("select memori.project_create('p1', 'Project one', 'alice', '{}', %s)", (T0,))
    conn.execute("select memori.project_member_add('p1', 'bob', 'alice', %s)", (T0,))
    conn.execute("select memori.session_context_set('s1', 'alice', 'p1', null, %s)", (T0,))
    return conn


def owner_args(scope: str) -> dict[str, str | None]:
    return {"project": "p1" if scope == "project" else None, "session": "s1" if scope == "session" else None}


# -- resolution -------------------------------------------------------------------
@pytest.mark.parametrize("states", list(itertools.product(("absent", "present", "expired"), repeat=4)))
def test_resolution_for_every_combination_of_present_absent_expired(world: psycopg.Connection,
                                                                    states: tuple[str, ...]) -> None:
    """The most specific present, unexpired entry wins: session > project > user > global."""
    for scope, state in zip(SCOPES, states, strict=True):
        if state == "absent":
            continue
        put(world, "k", f"from-{scope}", scope, ttl_ms=1000 if state == "expired" else None,
            at=T0 - timedelta(seconds=5) if state == "expired" else T0, **owner_args(scope))
    expected = next((s for s, st in reversed(list(zip(SCOPES, states, strict=True))) if st == "present"), None)
    got = get(world, "k", project="p1", session="s1")
    if expected is None:
        assert got is None
    else:
        assert got is not None and got["scope"] == expected and got["value"] == f"from-{expected}"


def test_session_project_is_the_default_project(world: psycopg.Connection) -> None:
    put(world, "k", "p", "project", project="p1")
    assert get(world, "k", session="s1")["scope"] == "project"  # type: ignore[index]
    assert get(world, "k") is None


def test_matches_scope_hides_other_owners(world: psycopg.Connection) -> None:
    put(world, "k", "alice-user", "user")
    put(world, "k", "alice-session", "session", session="s1")
    put(world, "k", "p1", "project", project="p1")
    # bob: a member of p1 but not the owner of s1, and not alice
    assert get(world, "k", user="bob", project="p1", session="s1")["value"] == "p1"  # type: ignore[index]
    assert get(world, "k", user="bob") is None
    # carol: not a member of p1
    assert get(world, "k", user="carol", project="p1", session="s1") is None


def test_resolve_merges_every_key(world: psycopg.Connection) -> None:
    put(world, "app.theme", "light", "global", user="admin")
    put(world, "app.theme", "dark", "user")
    put(world, "app.lang", "en", "global", user="admin")
    put(world, "app.lang", "de", "session", session="s1")
    put(world, "other", 1, "project", project="p1")
    put(world, "app.gone", 1, "user", ttl_ms=1000, at=T0 - timedelta(seconds=2))
    merged = {r["key"]: (r["value"], r["scope"]) for r in
              rows(world, "select * from memori.context_resolve('alice', null, 's1', null, %s)", (T0,))}
    assert merged == {"app.theme": ("dark", "user"), "app.lang": ("de", "session"), "other": (1, "project")}
    prefixed = rows(world, "select key from memori.context_resolve('alice', null, 's1', 'app.', %s)", (T0,))
    assert [r["key"] for r in prefixed] == ["app.lang", "app.theme"]


def test_prefix_bounds_are_exact(world: psycopg.Connection) -> None:
    for key in ("a", "ab", "abc", "abd", "ac", "b", "ab\u00ff", "ab\U0010ffff"):
        put(world, key, 1, "user")
    keys = [r["key"] for r in rows(world, "select key from memori.context_resolve('alice', p_prefix => 'ab', "
                                          "p_now => %s)", (T0,))]
    assert keys == sorted(["ab", "abc", "abd", "ab\u00ff", "ab\U0010ffff"], key=lambda k: k.encode())
    assert value(world, "select count(*) from memori.context_resolve('alice', p_prefix => '', p_now => %s)", (T0,)) == 8


# -- TTL ---------------------------------------------------------------------------
def test_ttl_boundaries(world: psycopg.Connection) -> None:
    row = put(world, "k", 1, "user", ttl_ms=60_000)
    assert row["ttl"] == 60_000 and row["expires_at"] == T0 + timedelta(minutes=1)
    assert get(world, "k", at=T0 + timedelta(minutes=1) - SECOND) is not None
    assert get(world, "k", at=T0 + timedelta(minutes=1)) is None  # expires_at > now is required
    assert get(world, "k", at=T0 + timedelta(minutes=1) + SECOND) is None


def test_ttl_is_recomputed_on_every_set(world: psycopg.Connection) -> None:
    put(world, "k", 1, "user", ttl_ms=60_000)
    row = put(world, "k", 2, "user", ttl_ms=60_000, at=T0 + timedelta(seconds=30))
    assert row["expires_at"] == T0 + timedelta(seconds=90)
    row = put(world, "k", 3, "user", at=T0 + timedelta(seconds=40))
    assert row["ttl"] is None and row["expires_at"] is None  # user_preferences: permanent by default
    assert value(world, "select count(*) from memori.context_entries") == 1


def test_temporary_state_defaults_to_one_hour(world: psycopg.Connection) -> None:
    row = put(world, "tmp", 1, "user", type_="temporary_state")
    assert row["ttl"] == 3_600_000 and row["expires_at"] == T0 + timedelta(hours=1)


def test_expired_entry_set_again_is_new(world: psycopg.Connection) -> None:
    first = put(world, "k", 1, "user", ttl_ms=1000)
    again = put(world, "k", 2, "user", at=T0 + timedelta(seconds=5))
    assert again["id"] == first["id"] and again["created_at"] == T0 + timedelta(seconds=5)
    live = put(world, "k", 3, "user", at=T0 + timedelta(seconds=6))
    assert live["created_at"] == T0 + timedelta(seconds=5)


def test_expiring_soon_window(world: psycopg.Connection) -> None:
    put(world, "soon", 1, "user", ttl_ms=3_600_000)
    put(world, "later", 1, "user", ttl_ms=3_600_000 + 1000)
    put(world, "gone", 1, "user", ttl_ms=1000, at=T0 - timedelta(seconds=1))
    put(world, "forever", 1, "user")
    found = [r["key"] for r in rows(world, "select key from memori.context_expiring_soon(p_user_id => 'alice', "
                                          "p_now => %s)", (T0,))]
    assert found == ["soon"]


def test_expired_entries_go_through_the_retention_engine(world: psycopg.Connection) -> None:
    put(world, "tmp", 1, "user", type_="temporary_state", ttl_ms=1000)
    put(world, "pref", 1, "user", type_="user_preferences", ttl_ms=1000)
    put(world, "keep", 1, "user")
    preview = rows(world, "select table_name, kind, priority from memori.cleanup_preview(%s) "
                          "where table_name = 'context_entries'", (T0 + timedelta(seconds=2),))
    assert [(r["kind"], r["priority"]) for r in preview] == [("temporary_state", 1), ("user_preferences", 6)]
    world.execute("select * from memori.cleanup_execute(%s)", (T0 + timedelta(seconds=2),))
    assert [r["key"] for r in rows(world, "select key from memori.context_entries")] == ["keep"]


# -- scope/owner consistency and bad input -------------------------------------------------
@pytest.mark.parametrize(("query", "params", "code"), [
    ("select memori.context_set('k', '1', 'user_preferences', 'planet', 'alice')", None, "PM004"),
    ("select memori.context_set('k', '1', 'mood', 'user', 'alice')", None, "PM004"),
    ("select memori.context_set('k', '1', 'user_preferences', 'session', 'alice')", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'project', 'alice')", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'user', 'alice', 'p1')", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'user', 'alice', null, 's1')", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'session', 'alice', 'p1', 's1')", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'user', 'alice', p_ttl_ms => 0)", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'user', 'alice', p_ttl_ms => -5)", None, "PM001"),
    ("select memori.context_set('', '1', 'user_preferences', 'user', 'alice')", None, "PM001"),
    ("select memori.context_set(e'a\\tb', '1', 'user_preferences', 'user', 'alice')", None, "PM001"),
    ("select memori.context_set('k', null, 'user_preferences', 'user', 'alice')", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'user', null)", None, "PM001"),
    ("select memori.context_set('k', '1', 'user_preferences', 'project', 'carol', 'p1')", None, "PM041"),
    ("select memori.context_delete('k', 'planet', 'alice')", None, "PM004"),
    ("select memori.context_delete('k', 'project', 'alice')", None, "PM001"),
    ("select memori.context_search('alice', p_limit => 0)", None, "PM001"),
    ("select memori.context_search('alice', p_scopes => '{planet}')", None, "PM004"),
    ("select memori.context_search('alice', p_types => '{mood}')", None, "PM004"),
    ("select memori.context_expiring_soon('-1 hour', 'alice')", None, "PM001"),
    ("select memori.context_prune_old('0 days', 'alice')", None, "PM001"),
    ("select memori.context_cleanup_by_scope('session', 'alice')", None, "PM001"),
    ("select memori.session_context_add_window('s1', 'conversation', '{}', 0, 'session', 'alice')", None, "PM001"),
    ("select memori.session_context_add_window('s1', 'conversation', '{}', 11, 'session', 'alice')", None, "PM001"),
    ("select memori.session_context_add_window('s1', 'chat', '{}', 5, 'session', 'alice')", None, "PM004"),
    ("select memori.session_context_add_window('s1', 'conversation', '{}', 5, 'forever', 'alice')", None, "PM004"),
    ("select memori.session_context_add_window('s1', 'conversation', '[1]', 5, 'session', 'alice')", None, "PM001"),
    ("select memori.business_context_set('{\"focus_mode\": \"napping\"}', 'alice')", None, "PM004"),
    ("select memori.business_context_set('{\"mood\": 1}', 'alice')", None, "PM001"),
    ("select memori.business_context_set('{\"business_objectives\": {}}', 'alice')", None, "PM001"),
    ("select memori.project_create('p1', 'again', 'bob')", None, "PM001"),
    ("select memori.project_member_add('p1', 'carol', 'bob')", None, "PM041"),
    ("select memori.project_member_remove('p1', 'alice', 'alice')", None, "PM001"),
])
def test_bad_input_is_refused_with_our_codes(world: psycopg.Connection, query: str, params: Any, code: str) -> None:
    before = value(world, "select count(*) from memori.context_entries") + \
        value(world, "select count(*) from memori.context_windows")
    assert_sqlstate(world, code, query, params)
    after = value(world, "select count(*) from memori.context_entries") + \
        value(world, "select count(*) from memori.context_windows")
    assert before == after, "nothing partially written"


def test_oversized_value_is_refused(world: psycopg.Connection) -> None:
    world.execute("update memori.settings set value = '100' where key = 'context.max_value_bytes'")
    assert_sqlstate(world, "PM003", "select memori.context_set('k', %s, 'user_preferences', 'user', 'alice')",
                    (Jsonb("x" * 200),))
    put(world, "k", "x" * 90, "user")  # 92 bytes with quotes: fits


def test_nul_bytes_in_json_are_refused(world: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as info:
        world.execute("select memori.context_set('k', '\"a\\u0000b\"'::jsonb, 'user_preferences', 'user', 'alice')")
    assert info.value.sqlstate == "22P05"  # the client maps it to InvalidArgument with a hint


def test_acting_user_must_match_memori_user_id(world: psycopg.Connection) -> None:
    world.execute("select set_config('memori.user_id', 'bob', false)")
    assert_sqlstate(world, "PM040", "select memori.context_set('k', '1', 'user_preferences', 'user', 'alice')")
    row = one(world, "select * from memori.context_set('k', '1', 'user_preferences', 'user')")
    assert row is not None and row["user_id"] == "bob"


def test_global_writes_need_memori_admin(world: psycopg.Connection) -> None:
    world.execute("set role memori_app")
    world.execute("select set_config('memori.user_id', 'alice', false)")
    assert_sqlstate(world, "PM041", "select memori.context_set('k', '1', 'user_preferences', 'global')")
    world.execute("reset role")
    world.execute("set role memori_admin")
    put(world, "k", 1, "global")
    world.execute("reset role")


# -- delete, search, cleanup, prune, stats ------------------------------------------
def test_delete_removes_one_scope_only(world: psycopg.Connection) -> None:
    put(world, "k", "u", "user")
    put(world, "k", "s", "session", session="s1")
    assert value(world, "select memori.context_delete('k', 'session', 'alice', null, 's1')") is True
    assert value(world, "select memori.context_delete('k', 'session', 'alice', null, 's1')") is False
    assert get(world, "k", session="s1")["scope"] == "user"  # type: ignore[index]


def test_search_filters(world: psycopg.Connection) -> None:
    put(world, "ui.theme", {"mode": "dark", "size": 2}, "user")
    put(world, "ui.theme", {"mode": "light"}, "session", session="s1", type_="session_context")
    put(world, "ui.font", {"mode": "dark"}, "project", project="p1", type_="business_context")
    put(world, "api.key", {"mode": "dark"}, "user", ttl_ms=1000, at=T0 - timedelta(seconds=5))

    def search(**kw: Any) -> list[tuple[str, str]]:
        args = ", ".join(f"{k} => %({k})s" for k in kw)
        found = rows(world, f"select key, scope from memori.context_search('alice', null, 's1'{', ' if args else ''}"
                            f"{args})", kw)
        return [(r["key"], r["scope"]) for r in found]

    assert search() == [("ui.font", "project"), ("ui.theme", "session"), ("ui.theme", "user")]
    assert search(p_key_pattern="ui.t%") == [("ui.theme", "session"), ("ui.theme", "user")]
    assert search(p_value_contains=Jsonb({"mode": "dark"})) == [("ui.font", "project"), ("ui.theme", "user")]
    assert search(p_scopes=["user", "project"]) == [("ui.font", "project"), ("ui.theme", "user")]
    assert search(p_types=["session_context"]) == [("ui.theme", "session")]
    assert search(p_limit=1) == [("ui.font", "project")]


def test_cleanup_by_scope_and_prune_old(world: psycopg.Connection) -> None:
    put(world, "a", 1, "session", session="s1")
    put(world, "b", 1, "session", session="s1", ttl_ms=1000)
    put(world, "c", 1, "user", at=T0 - timedelta(days=100))
    put(world, "d", 1, "user")
    assert value(world, "select memori.context_cleanup_by_scope('session', 'alice', null, 's1', true, %s)",
                 (T0 + timedelta(seconds=2),)) == 1
    assert value(world, "select memori.context_cleanup_by_scope('session', 'alice', null, 's1')") == 1
    assert value(world, "select memori.context_prune_old('90 days', 'alice', %s)", (T0,)) == 1
    assert [r["key"] for r in rows(world, "select key from memori.context_entries")] == ["d"]


def test_stats_by_scope_and_type(world: psycopg.Connection) -> None:
    put(world, "a", 1, "user")
    put(world, "b", 1, "user", type_="temporary_state", ttl_ms=1000)
    put(world, "c", 1, "session", session="s1", ttl_ms=10 * 60_000, type_="session_context")
    put(world, "d", 1, "project", project="p1", type_="business_context")
    stats = {(r["dimension"], r["name"]): r for r in
             rows(world, "select * from memori.context_stats('alice', null, 's1', p_now => %s)",
                  (T0 + timedelta(seconds=2),))}
    assert len(stats) == 8
    assert (stats["scope", "user"]["total"], stats["scope", "user"]["expired"]) == (2, 1)
    assert stats["scope", "session"]["expiring_soon"] == 1
    assert stats["scope", "project"]["active"] == 1  # the session's project
    assert stats["scope", "global"]["total"] == 0
    assert stats["type", "temporary_state"]["expired"] == 1


# -- business context -----------------------------------------------------------------
def test_business_context_set_get_update(world: psycopg.Connection) -> None:
    assert value(world, "select memori.business_context_get('alice')") is None
    ctx = {"current_project": "p1", "focus_mode": "deep_work", "business_objectives": ["ship"],
           "context_variables": {"a": 1}, "workspace_settings": {}}
    got = value(world, "select memori.business_context_set(%s, 'alice')", (Jsonb(ctx),))
    assert got == {**ctx, "user_id": "alice"}
    got = value(world, "select memori.business_context_update('{\"focus_mode\": \"planning\"}', 'alice')")
    assert got["focus_mode"] == "planning" and got["business_objectives"] == ["ship"]
    assert value(world, "select memori.business_context_get('bob')") is None
    resolved = get(world, "business_context")
    assert resolved is not None and resolved["type"] == "business_context" and resolved["scope"] == "user"


# -- sessions and windows -------------------------------------------------------------
def window(conn: psycopg.Connection, priority: int, at: Any, policy: str = "session",
           session: str = "s1") -> str:
    return str(value(conn, "select (memori.session_context_add_window(%s, 'conversation', %s, %s, %s, 'alice', %s))"
                           ".window_id", (session, Jsonb({"p": priority}), priority, policy, at)))


def test_window_limit_removes_lowest_priority_oldest_first(world: psycopg.Connection) -> None:
    world.execute("update memori.settings set value = '3' where key = 'context.max_windows'")
    w1 = window(world, 5, T0)
    window(world, 2, T0 + SECOND)  # w2
    w3 = window(world, 2, T0 + 2 * SECOND)

    def ids() -> set[str]:
        session = value(world, "select context_windows from memori.session_context_get('s1', 'alice', %s)",
                        (T0 + 6 * SECOND,))
        return {w["window_id"] for w in session}

    # full (3 of 3): the 4th removes the lowest priority, oldest first -> w2
    w4 = window(world, 7, T0 + 3 * SECOND)
    assert ids() == {w1, w3, w4}
    w5 = window(world, 9, T0 + 4 * SECOND)  # removes w3 (priority 2)
    assert ids() == {w1, w4, w5}
    w6 = window(world, 1, T0 + 5 * SECOND)  # the seed removes the lowest existing (w1, priority 5), then adds
    assert ids() == {w4, w5, w6}
    event = one(world, "select payload from memori.events where event_type = 'context.window_added' "
                       "order by id desc limit 1")
    assert event is not None and event["payload"]["removed_window_ids"] == [w1]
    session = one(world, "select * from memori.session_context_get('s1', 'alice', %s)", (T0 + 6 * SECOND,))
    assert session is not None and session["last_activity"] == T0 + 5 * SECOND
    assert [w["priority"] for w in session["context_windows"]] == [9, 7, 1]


def test_expired_windows_do_not_count(world: psycopg.Connection) -> None:
    world.execute("update memori.settings set value = '2' where key = 'context.max_windows'")
    tmp = window(world, 9, T0, policy="temporary")  # expires after one hour
    keep = window(world, 1, T0 + SECOND)
    later = T0 + timedelta(hours=2)
    new = window(world, 1, later)
    got = {w["window_id"] for w in value(world, "select context_windows from memori.session_context_get('s1', "
                                                "'alice', %s)", (later,))}
    assert got == {keep, new}
    assert value(world, "select count(*) from memori.context_windows where window_id = %s", (tmp,)) == 0


def test_remove_window(world: psycopg.Connection) -> None:
    w = window(world, 5, T0)
    assert value(world, "select memori.session_context_remove_window('s1', %s, 'alice', %s)", (w, T0)) is True
    assert value(world, "select memori.session_context_remove_window('s1', %s, 'alice', %s)", (w, T0)) is False
    assert value(world, "select count(*) from memori.events where event_type = 'context.window_removed'") == 1


def test_sessions_belong_to_one_user(world: psycopg.Connection) -> None:
    """Session ids are unique per user (issue 20): bob's s1 is another session than alice's."""
    assert one(world, "select * from memori.session_context_get('s1', 'bob')") is None
    put(world, "k", "alice-s1", "session", session="s1")
    bob = one(world, "select * from memori.session_context_set('s1', 'bob', null, '{\"b\": 1}', %s)", (T0,))
    assert bob is not None and bob["user_id"] == "bob" and bob["project_id"] is None
    put(world, "k", "bob-s1", "session", user="bob", session="s1")
    assert get(world, "k", session="s1")["value"] == "alice-s1"  # type: ignore[index]
    assert get(world, "k", user="bob", session="s1")["value"] == "bob-s1"  # type: ignore[index]
    assert value(world, "select project_id from memori.sessions where user_id = 'alice' and session_id = 's1'") == "p1"
    s = one(world, "select * from memori.session_context_set('s2', 'bob', null, '{\"agent\": \"x\"}', %s)", (T0,))
    assert s is not None and s["metadata"] == {"agent": "x"} and s["context_windows"] == []
    assert_sqlstate(world, "PM041", "select memori.session_context_set('s3', 'carol', 'p1')")


def test_deleting_a_session_deletes_its_entries_and_windows(world: psycopg.Connection) -> None:
    put(world, "k", 1, "session", session="s1")
    window(world, 5, T0)
    world.execute("update memori.sessions set expires_at = %s where session_id = 's1'", (T0,))
    world.execute("select * from memori.cleanup_execute(%s)", (T0 + SECOND,))
    assert value(world, "select count(*) from memori.context_entries") == 0
    assert value(world, "select count(*) from memori.context_windows") == 0


def test_pxyz_is_filled(world: psycopg.Connection) -> None:
    first = put(world, "k", 1, "user")
    again = put(world, "k", 2, "user", at=T0 + SECOND)
    assert {k: first["pxyz"][k] for k in ("entity", "operation", "scope")} == \
        {"entity": "context_store_entry", "operation": "store", "scope": "user"}
    assert again["pxyz"]["operation"] == "update"


def test_conversations_and_context_share_one_session_namespace(world: psycopg.Connection) -> None:
    """A compressed conversation is a session of memori.sessions (ids unique per user, issue 20)."""
    world.execute("select memori.message_add('chat-1', 'user', 'hello', p_user_id => 'bob')")
    assert value(world, "select user_id from memori.sessions where session_id = 'chat-1'") == "bob"
    put(world, "k", 1, "session", user="bob", session="chat-1", type_="session_context")
    assert get(world, "k", user="bob", session="chat-1")["value"] == 1  # type: ignore[index]
    assert get(world, "k", session="chat-1") is None  # alice's chat-1 is not bob's


def test_a_shared_entry_stays_one_per_key_and_moves_to_its_last_writer(world: psycopg.Connection) -> None:
    """A project (or global) entry is keyed by its writer (issue 20): setting it again as another member moves it."""
    first = put(world, "k", "alice", "project", project="p1", ttl_ms=3_600_000)
    again = put(world, "k", "bob", "project", user="bob", project="p1", at=T0 + SECOND)
    assert value(world, "select count(*) from memori.context_entries where scope = 'project'") == 1
    assert (again["id"], again["user_id"], again["created_at"]) == (first["id"], "bob", first["created_at"])
    assert again["pxyz"]["operation"] == "update" and again["expires_at"] is None
    assert get(world, "k", project="p1", at=T0 + SECOND)["value"] == "bob"  # type: ignore[index]
    assert value(world, "select memori.context_delete('k', 'project', 'alice', 'p1')") is True
    assert get(world, "k", user="bob", project="p1") is None


def test_cleanup_deletes_the_expired_session_only_not_another_users_of_the_same_id(world: psycopg.Connection) -> None:
    """Session ids are unique per user (issue 20): the retention engine deletes alice's expired s1, not bob's."""
    world.execute("select memori.session_context_set('s1', 'bob', null, null, %s)", (T0,))
    put(world, "k", "bob", "session", user="bob", session="s1")
    world.execute("update memori.sessions set expires_at = %s where user_id = 'alice'", (T0,))
    world.execute("select * from memori.cleanup_execute(%s)", (T0 + SECOND,))
    assert [r["user_id"] for r in rows(world, "select user_id from memori.sessions")] == ["bob"]
    assert get(world, "k", user="bob", session="s1")["value"] == "bob"  # type: ignore[index]
