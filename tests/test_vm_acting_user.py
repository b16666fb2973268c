"""One acting-user rule for the VM functions that take a user (issue 19 item 8).

memori._acting_user: p_user_id must equal memori.user_id when that is set
(PM040), and no user given means memori.user_id. The `conn` fixture connects as
the owner, which bypasses row-level security: exactly the caller that used to
get another user's id accepted silently.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, value


def act_for(conn: psycopg.Connection, user: str) -> None:
    conn.execute("select set_config('memori.user_id', %s, false)", (user,))


@pytest.mark.parametrize("query", [
    "select memori.page_create(p_session_id => 's_new', p_page_id => 'm1', p_content => 'x', p_user_id => 'alice',"
    " p_now => %(t)s)",
    "select memori.turn_begin('s_new', 'alice', %(t)s)",
    "select memori.vm_turn_start('s_new', 'hello', p_user_id => 'alice', p_now => %(t)s)",
    "select memori.vm_session_configure('s_new', '{}', 'alice', %(t)s)",
    "select * from memori.search_pages(null, 'kestrel', p_scope => 'user', p_user_id => 'alice', p_now => %(t)s)",
    "select * from memori.region_create('r_new', 'pages', 'x', 'alice', %(t)s)",
    "select * from memori.region_list('alice')",
])
def test_another_users_id_is_refused_pm040(conn: psycopg.Connection, query: str) -> None:
    act_for(conn, "bob")
    assert_sqlstate(conn, "PM040", query, {"t": T0})


def test_an_existing_session_refuses_a_mismatch_too(conn: psycopg.Connection) -> None:
    # alice's session, written by alice; then a call for bob naming alice is PM040, not a silent write
    act_for(conn, "alice")
    conn.execute("select memori.page_create(p_session_id => 's_a', p_page_id => 'm1', p_content => 'x', p_now => %s)",
                 (T0,))
    act_for(conn, "bob")
    assert_sqlstate(conn, "PM040", "select memori.claim_create('s_a', 'Decision: x', array['m1'], p_user_id => 'alice',"
                                   " p_now => %(t)s)", {"t": T0})
    # the same user on both sides is fine
    act_for(conn, "alice")
    claim = one(conn, "select user_id from memori.claim_create('s_a', 'Decision: x', array['m1'],"
                      " p_user_id => 'alice', p_now => %s)", (T0,))
    assert claim == {"user_id": "alice"}


def test_no_user_means_memori_user_id(conn: psycopg.Connection) -> None:
    act_for(conn, "carol")
    page = one(conn, "select user_id from memori.page_create(p_session_id => 's_c', p_page_id => 'm1',"
                     " p_content => 'x', p_now => %s)", (T0,))
    assert page == {"user_id": "carol"}
    region = one(conn, "select user_id from memori.region_create('r_c', 'pages', 'notes', p_now => %s)", (T0,))
    assert region == {"user_id": "carol"}
    assert value(conn, "select count(*) from memori.region_list()") == 1
    conn.execute("reset memori.user_id")
    assert_sqlstate(conn, "PM001", "select memori.page_create(p_session_id => 's_none', p_page_id => 'm1',"
                                   " p_content => 'x', p_now => %(t)s)", {"t": T0})


def test_an_owner_without_a_user_names_the_session_or_gets_pm001(conn: psycopg.Connection) -> None:
    """Session ids are per user (revision 0028): an owner's call with no user finds the one user with that
    session id, and is PM001 (with a hint) when several users have it."""
    conn.execute("select memori.turn_begin('dup', p_user_id => 'alice', p_now => %s)", (T0,))
    conn.execute("reset memori.user_id")
    assert value(conn, "select memori._vm_user('dup')") == "alice"  # one user: that user
    assert value(conn, "select memori._vm_user('nobody')") is None  # none: no rows, no error
    conn.execute("select memori.turn_begin('dup', p_user_id => 'bob', p_now => %s)", (T0,))
    conn.execute("reset memori.user_id")
    error = assert_sqlstate(conn, "PM001", "select memori.working_set_list('dup')")
    assert error.diag.message_hint and "memori.user_id" in error.diag.message_hint
    act_for(conn, "bob")
    assert value(conn, "select memori._vm_user('dup')") == "bob"
