"""Garbage collection of pages (issue 7, seed 03 10.4): mark through vm_gc, sweep through the retention engine."""

from __future__ import annotations

from datetime import timedelta

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import T0, one, rows, value

GRACE = timedelta(days=7)


def page(conn: psycopg.Connection, session: str, page_id: str, provenance: list[str] | None = None,
         mapped: bool = False, user: str = "alice") -> None:
    conn.execute("select memori.page_create(p_session_id => %s, p_page_id => %s, p_content => %s, "
                 "p_provenance => %s, p_add_to_working_set => %s, p_user_id => %s, p_now => %s)",
                 (session, page_id, f"{session}/{page_id}", provenance, mapped, user, T0))


def kill(conn: psycopg.Connection, session: str) -> None:
    conn.execute("update memori.vm_sessions set expires_at = %s where session_id = %s", (T0, session))


def gc(conn: psycopg.Connection, at: object = T0) -> dict:
    found = one(conn, "select * from memori.vm_gc(%s)", (at,))
    assert found is not None
    return found


def surviving(conn: psycopg.Connection) -> set[tuple[str, str]]:
    return {(r["session_id"], r["page_id"]) for r in rows(conn, "select session_id, page_id from memori.pages")}


def sweep(conn: psycopg.Connection, at: object) -> None:
    conn.execute("select memori.cleanup_execute(%s)", (at,))


def test_pages_of_a_dead_session_are_marked_and_swept_after_the_grace(conn: psycopg.Connection) -> None:
    page(conn, "live", "a")
    page(conn, "dead", "b")
    page(conn, "dead", "claim", ["b"])
    kill(conn, "dead")
    result = gc(conn, T0 + timedelta(seconds=1))
    assert (result["live_sessions"], result["reachable"], result["marked"], result["unmarked"]) == (1, 1, 2, 0)
    assert result["expires_at"] == T0 + timedelta(seconds=1) + GRACE
    # the retention engine shows and deletes them only after the grace period (claims included)
    sweep(conn, T0 + GRACE)
    assert surviving(conn) == {("live", "a")}
    assert gc(conn, T0 + GRACE)["marked"] == 0


def test_marks_are_taken_back_when_a_page_is_reachable_again(conn: psycopg.Connection) -> None:
    page(conn, "s", "a")
    kill(conn, "s")
    assert gc(conn, T0 + timedelta(seconds=1))["marked"] == 1
    conn.execute("update memori.vm_sessions set expires_at = null where session_id = 's'")
    result = gc(conn, T0 + timedelta(seconds=2))
    assert (result["unmarked"], result["marked"], result["already_marked"]) == (1, 0, 0)
    assert value(conn, "select expires_at from memori.pages where page_id = 'a'") is None
    # a page with an expiry of its own is left to it
    conn.execute("update memori.pages set expires_at = %s", (T0 + timedelta(days=1),))
    kill(conn, "s")
    assert gc(conn, T0 + timedelta(seconds=3))["marked"] == 0


def test_a_live_fork_keeps_its_dead_parents_pages(conn: psycopg.Connection) -> None:
    for pid in ("a", "b", "c"):
        page(conn, "parent", pid)
    conn.execute("select memori.session_fork('parent', 'child', %s)", (T0,))
    conn.execute("select memori.page_update('child', 'b', 'the child''s b', p_now => %s)", (T0,))
    page(conn, "parent", "late")  # after the fork: the child does not see it
    kill(conn, "parent")
    result = gc(conn, T0 + timedelta(seconds=1))
    assert result["marked"] == 2  # the parent's b (overridden in the child) and late
    reach = {(r["session_id"], r["page_id"], r["via"]) for r in rows(conn, "select * from memori.vm_gc_reachable(%s)",
                                                                       (T0 + timedelta(seconds=1),))}
    assert reach == {("parent", "a", "live_session"), ("parent", "c", "live_session"), ("child", "b", "live_session")}
    sweep(conn, T0 + GRACE + timedelta(seconds=2))
    assert {r["page_id"]: r["content"] for r in rows(
        conn, "select page_id, content from memori.vm_visible_pages where viewer_session_id = 'child'")} == {
        "a": "parent/a", "b": "the child's b", "c": "parent/c"}


def test_provenance_and_working_set_keep_expired_pages(conn: psycopg.Connection) -> None:
    page(conn, "s", "src")
    page(conn, "s", "mapped", mapped=True)
    page(conn, "s", "claim", ["src"])
    page(conn, "s", "loose")
    conn.execute("update memori.pages set expires_at = %s where page_id <> 'claim'", (T0,))
    reach = {(r["page_id"], r["via"]) for r in rows(conn, "select * from memori.vm_gc_reachable(%s)",
                                                      (T0 + timedelta(seconds=1),))}
    assert reach == {("claim", "live_session"), ("src", "provenance"), ("mapped", "working_set")}


# -- property: never a reachable page, every unreachable one --------------------------------
@st.composite
def scripts(draw: st.DrawFn) -> list[tuple[str, object]]:
    """A script: create sessions and pages, fork, update in forks; then which sessions die."""
    ids = [f"p{i}" for i in range(6)]
    steps: list[tuple[str, object]] = []
    sessions = ["s0"]
    for _ in range(draw(st.integers(3, 14))):
        kind = draw(st.sampled_from(["page", "page", "fork", "update"]))
        s = draw(st.sampled_from(sessions))
        if kind == "page":
            provenance = tuple(draw(st.lists(st.sampled_from(ids), max_size=2)))
            steps.append(("page", (s, draw(st.sampled_from(ids)), provenance, draw(st.booleans()),
                                   draw(st.booleans()))))
        elif kind == "fork" and len(sessions) < 5:
            new = f"s{len(sessions)}"
            sessions.append(new)
            steps.append(("fork", (s, new)))
        else:
            steps.append(("update", (s, draw(st.sampled_from(ids)))))
    dead = draw(st.lists(st.sampled_from(sessions), unique=True))
    return steps + [("kill", d) for d in dead]


def oracle_reachable(conn: psycopg.Connection, now: object) -> set[int]:
    """The rule, in Python, from plain reads of the tables."""
    sessions = {r["session_id"]: r["expires_at"] for r in rows(conn, "select * from memori.vm_sessions")}
    live = {s for s, e in sessions.items() if e is None or e > now}
    pages = rows(conn, "select id, session_id, page_id, provenance, expires_at, gc_marked_at from memori.pages")
    chains = {}
    for r in rows(conn, "select * from memori.vm_forks order by depth"):
        chains.setdefault(r["session_id"], []).append((r["ancestor_session_id"], r["max_page_id"]))

    def visible(viewer: str) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for owner, horizon in [(viewer, None), *chains.get(viewer, [])]:
            for p in pages:
                if p["session_id"] == owner and (horizon is None or p["id"] <= horizon) and p["page_id"] not in out:
                    out[p["page_id"]] = p
        return out

    reachable: set[int] = set()
    for viewer in live:
        seen = visible(viewer)
        todo = [pid for pid, p in seen.items()
                if p["expires_at"] is None or p["expires_at"] > now or p["gc_marked_at"] is not None]
        todo += [r["page_id"] for r in rows(conn, "select page_id from memori.working_set where session_id = %s",
                                            (viewer,))]
        done: set[str] = set()
        while todo:
            pid = todo.pop()
            if pid in done or pid not in seen:
                continue
            done.add(pid)
            reachable.add(seen[pid]["id"])
            todo.extend(seen[pid]["provenance"])
    return reachable


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=scripts())
def test_gc_never_removes_a_reachable_page_and_removes_every_unreachable_one(
        conn: psycopg.Connection, steps: list[tuple[str, object]]) -> None:
    conn.execute("truncate memori.vm_sessions, memori.vm_forks, memori.sessions cascade")
    conn.execute("select memori.turn_begin('s0', 'alice', %s)", (T0,))
    for kind, arg in steps:
        if kind == "page":
            s, pid, prov, mapped, expired = arg  # type: ignore[misc]
            if value(conn, "select memori._page_resolve(%s, %s)", (s, pid)) is None:
                page(conn, s, pid, list(prov), mapped)
                if expired:
                    conn.execute("update memori.pages set expires_at = %s where session_id = %s and page_id = %s",
                                 (T0 + timedelta(hours=1), s, pid))
        elif kind == "fork":
            conn.execute("select memori.session_fork(%s, %s, %s)", (*arg, T0))  # type: ignore[misc]
        elif kind == "update":
            s, pid = arg  # type: ignore[misc]
            if value(conn, "select memori.page_lookup(%s, %s, %s)", (s, pid, T0)) is not None:
                conn.execute("select memori.page_update(%s, %s, 'updated', p_now => %s)", (s, pid, T0))
        else:
            kill(conn, arg)  # type: ignore[arg-type]
    now = T0 + timedelta(hours=2)
    expected = oracle_reachable(conn, now)
    assert {r["id"] for r in rows(conn, "select id from memori.vm_gc_reachable(%s)", (now,))} == expected
    before = {r["id"]: r for r in rows(conn, "select id, session_id, page_id, content, expires_at from memori.pages")}
    live_views = {s: {r["page_id"]: r["content"] for r in rows(
        conn, "select page_id, content from memori.vm_visible_pages "
              "where viewer_session_id = %s and id = any(%s) and expires_at is null", (s, list(expected)))}
        for s in {r["session_id"] for r in rows(conn, "select session_id from memori.vm_sessions "
                                                      "where expires_at is null")}}
    result = gc(conn, now)
    assert result["reachable"] == len(expected)
    unreachable_unexpiring = {i for i, r in before.items() if i not in expected and r["expires_at"] is None}
    assert result["marked"] == len(unreachable_unexpiring)
    # the sweep after the grace period: only the pages reachable from live sessions are left,
    # and every live session still sees what it saw (rows its dead parent shared were copied down)
    conn.execute("delete from memori.vm_sessions where expires_at is not null")
    sweep(conn, now + GRACE + timedelta(seconds=1))
    left = {r["id"] for r in rows(conn, "select id from memori.pages")}
    assert unreachable_unexpiring.isdisjoint(left)
    assert {i for i in expected if before[i]["expires_at"] is None} <= left | {
        i for i in expected if before[i]["session_id"] not in live_views}
    for s, view in live_views.items():
        now_seen = {r["page_id"]: r["content"] for r in rows(
            conn, "select page_id, content from memori.vm_visible_pages where viewer_session_id = %s", (s,))}
        assert {k: v for k, v in now_seen.items() if k in view} == view


def test_the_cleaner_deleting_a_dead_parent_copies_what_its_live_fork_shares(conn: psycopg.Connection) -> None:
    for pid in ("a", "b"):
        page(conn, "parent", pid)
    conn.execute("select memori.session_fork('parent', 'child', %s)", (T0,))
    kill(conn, "parent")
    assert gc(conn, T0 + timedelta(seconds=1))["marked"] == 0  # the child still sees both
    conn.execute("set role memori_cleaner")
    try:
        summary = one(conn, "select * from memori.cleanup_execute(%s)", (T0 + timedelta(days=1),))
    finally:
        conn.execute("reset role")
    assert summary is not None and summary["deleted_by_table"].get("vm_sessions") == 1
    assert {r["page_id"]: r["content"] for r in rows(
        conn, "select page_id, content from memori.vm_visible_pages where viewer_session_id = 'child'")} == {
        "a": "parent/a", "b": "parent/b"}
    assert value(conn, "select count(*) from memori.pages where session_id = 'child'") == 2
