"""Shared regions: pages cross users only through a region's access list (issue 7, seed 03 10.5).

Run as memori_app (row-level security enforced), like tests/test_isolation.py:
the owner, a listed user, an unlisted user, a revoked user and the cleaner.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests.helpers import T0, assert_sqlstate, rows, value


def act_as(conn: psycopg.Connection, user: str | None, role: str = "memori_app") -> None:
    conn.execute("reset role")
    conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
    if user is None:
        conn.execute("reset memori.user_id")
    else:
        conn.execute("select set_config('memori.user_id', %s, false)", (user,))


@pytest.fixture
def shared(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """alice: session a1 with three pages; region r_pages holds a1/p1 for bob and carol; carol is then revoked."""
    act_as(conn, "alice")
    for pid in ("p1", "p2", "p3"):
        conn.execute("select memori.page_create('a1', %s, %s, p_add_to_working_set => false, p_now => %s)",
                     (pid, f"alice secret {pid}", T0))
    conn.execute("select memori.page_representation_put('a1', 'p1', 1, 'reduced p1', p_now => %s)", (T0,))
    conn.execute("select memori.region_create('r_pages', 'pages', 'design decisions', p_now => %s)", (T0,))
    assert value(conn, "select memori.region_page_put('r_pages', 'a1', 'p1', p_now => %s)", (T0,)) is True
    assert value(conn, "select memori.region_grant('r_pages', 'bob', p_now => %s)", (T0,)) is True
    assert value(conn, "select memori.region_grant('r_pages', 'bob', p_now => %s)", (T0,)) is False
    assert value(conn, "select memori.region_grant('r_pages', 'carol', p_now => %s)", (T0,)) is True
    assert value(conn, "select memori.region_revoke('r_pages', 'carol', p_now => %s)", (T0,)) is True
    yield conn
    conn.execute("reset role")


def test_listed_user_reads_the_regions_pages_only(shared: psycopg.Connection) -> None:
    conn = shared
    act_as(conn, "bob")
    found = rows(conn, "select page_id, owner, content from memori.region_pages('r_pages')")
    assert found == [{"page_id": "p1", "owner": "alice", "content": "alice secret p1"}]
    # through the tables too: the page and its representations, nothing else of alice's
    assert [r["page_id"] for r in rows(conn, "select page_id from memori.pages")] == ["p1"]
    assert value(conn, "select count(*) from memori.page_representations") == 2  # levels 1 and 3 of p1
    assert value(conn, "select count(*) from memori.vm_sessions") == 0
    listed = rows(conn, "select region_id, owner, members, entries from memori.region_list()")
    assert listed == [{"region_id": "r_pages", "owner": "alice", "members": None, "entries": 1}]
    # read, never write
    assert conn.execute("update memori.pages set content = 'bob was here'").rowcount == 0
    assert conn.execute("delete from memori.pages").rowcount == 0
    assert conn.execute("delete from memori.page_representations").rowcount == 0
    assert_sqlstate(conn, "PM005", "select memori.page_update('a1', 'p1', 'bob was here', p_now => %s)", (T0,))
    assert_sqlstate(conn, "PM095", "select memori.region_grant('r_pages', 'mallory', p_now => %s)", (T0,))
    assert_sqlstate(conn, "PM095", "select memori.region_page_put('r_pages', 'a1', 'p2', p_now => %s)", (T0,))
    # bob's own searches stay his own
    conn.execute("select memori.page_create('b1', 'mine', 'bob secret', p_now => %s)", (T0,))
    assert [r["page_id"] for r in rows(conn, "select * from memori.search_pages(null, 'secret', p_scope => 'user')")] \
        == ["mine"]


@pytest.mark.parametrize("actor", ["mallory", "carol", None, ""])
def test_unlisted_revoked_and_anonymous_users_see_nothing(shared: psycopg.Connection, actor: str | None) -> None:
    conn = shared
    act_as(conn, actor)
    for table in ("pages", "page_representations", "vm_regions", "vm_region_pages"):
        assert value(conn, f"select count(*) from memori.{table}") == 0, table
    if actor:
        assert_sqlstate(conn, "PM095", "select * from memori.region_pages('r_pages')")
        assert rows(conn, "select * from memori.region_list()") == []


def test_forged_rows_grant_nothing(shared: psycopg.Connection) -> None:
    conn = shared
    act_as(conn, "mallory")
    # a member row in mallory's own name for alice's region, and an entry naming alice's session
    conn.execute("insert into memori.vm_region_members (region_id, user_id, region_owner, granted_at) "
                 "values ('r_pages', 'mallory', 'mallory', now())")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("insert into memori.vm_region_members (region_id, user_id, region_owner, granted_at) "
                     "values ('r_pages', 'mallory', 'alice', now())")
    # an entry naming alice's session in mallory's name names no session at all (the key is (user, session))
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        conn.execute("insert into memori.vm_region_pages (region_id, user_id, session_id, page_id, added_at) "
                     "values ('r_pages', 'mallory', 'a1', '', now())")
    assert value(conn, "select count(*) from memori.pages") == 0
    assert value(conn, "select count(*) from memori.vm_regions") == 0
    assert_sqlstate(conn, "PM095", "select * from memori.region_pages('r_pages')")


def test_session_scope_revoke_remove_and_drop(shared: psycopg.Connection) -> None:
    conn = shared
    act_as(conn, "alice")
    conn.execute("select memori.region_create('r_sess', 'session', p_now => %s)", (T0,))
    assert_sqlstate(conn, "PM097", "select memori.region_page_put('r_sess', 'a1', 'p1', p_now => %s)", (T0,))
    assert_sqlstate(conn, "PM097", "select memori.region_page_put('r_pages', 'a1', p_now => %s)", (T0,))
    assert_sqlstate(conn, "PM096", "select memori.region_create('r_sess', p_now => %s)", (T0,))
    assert_sqlstate(conn, "PM004", "select memori.region_create('r_x', 'everything', p_now => %s)", (T0,))
    conn.execute("select memori.region_page_put('r_sess', 'a1', p_now => %s)", (T0,))
    conn.execute("select memori.region_grant('r_sess', 'bob', p_now => %s)", (T0,))
    owner_view = rows(conn, "select region_id, members, entries from memori.region_list()")
    assert owner_view == [{"region_id": "r_pages", "members": ["bob"], "entries": 1},
                          {"region_id": "r_sess", "members": ["bob"], "entries": 1}]
    # pages created later in a shared session are shared too
    conn.execute("select memori.page_create('a1', 'p4', 'later', p_add_to_working_set => false, p_now => %s)", (T0,))
    act_as(conn, "bob")
    assert [r["page_id"] for r in rows(conn, "select page_id from memori.region_pages('r_sess')")] == [
        "p1", "p2", "p3", "p4"]
    act_as(conn, "alice")
    assert value(conn, "select memori.region_revoke('r_sess', 'bob')") is True
    assert value(conn, "select memori.region_page_remove('r_pages', 'a1', 'p1')") is True
    act_as(conn, "bob")
    assert value(conn, "select count(*) from memori.pages") == 0
    assert rows(conn, "select * from memori.region_pages('r_pages')") == []
    act_as(conn, "alice")
    assert value(conn, "select memori.region_drop('r_pages')") is True
    assert_sqlstate(conn, "PM005", "select memori.region_drop('r_pages')")


def test_the_cleaner_cannot_share_or_read(shared: psycopg.Connection) -> None:
    conn = shared
    act_as(conn, None, "memori_cleaner")
    assert value(conn, "select count(*) from memori.pages") == 0  # only expired rows, and there are none
    for statement in ("select count(*) from memori.vm_regions", "select count(*) from memori.vm_region_members",
                      "select memori.region_grant('r_pages', 'cleaner')"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def test_fork_and_gc_under_row_level_security(conn: psycopg.Connection) -> None:
    """As memori_app: alice forks and writes both ways; bob can neither fork nor see her forks; GC is per user."""
    act_as(conn, "alice")
    for pid in ("p1", "p2"):
        conn.execute("select memori.page_create('a1', %s, %s, p_add_to_working_set => %s, p_now => %s)",
                     (pid, f"alice {pid}", pid == "p1", T0))
    assert value(conn, "select (memori.session_fork('a1', 'a1_fork', %s)).shared_pages", (T0,)) == 1
    conn.execute("select memori.page_update('a1', 'p2', 'changed in the source', p_now => %s)", (T0,))
    conn.execute("select memori.page_update('a1_fork', 'p1', 'changed in the fork', p_now => %s)", (T0,))
    seen = {r["page_id"]: r["content"] for r in rows(
        conn, "select page_id, content from memori.vm_visible_pages where viewer_session_id = 'a1_fork'")}
    assert seen == {"p1": "changed in the fork", "p2": "alice p2"}
    act_as(conn, "bob")
    assert_sqlstate(conn, "PM005", "select memori.session_fork('a1', 'b_fork', %s)", (T0,))
    assert value(conn, "select memori.turn_begin('b0', p_now => %s)", (T0,)) == 1
    # forking into alice's fork id: session ids are per user (revision 0028), so it is bob's own fork
    with conn.transaction(force_rollback=True):
        conn.execute("select memori.session_fork('b0', 'a1_fork', %s)", (T0,))
        assert {r["user_id"] for r in rows(conn, "select user_id from memori.vm_forks")} == {"bob"}
    assert rows(conn, "select * from memori.vm_forks") == []
    assert rows(conn, "select * from memori.vm_visible_pages where viewer_session_id = 'a1_fork'") == []
    result = rows(conn, "select * from memori.vm_gc(%s)", (T0,))[0]
    assert (result["live_sessions"], result["reachable"], result["marked"]) == (1, 0, 0)  # bob's own, empty
    conn.execute("reset role")
