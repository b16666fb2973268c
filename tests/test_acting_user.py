"""One acting-user rule in the core rooms (issue 19 item 8): memori._acting_user everywhere a user is given.

A user given that differs from the transaction's memori.user_id is PM040, even
for an owner or superuser that bypasses row-level security; no user given
means memori.user_id.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, rows, value

CALLS_FOR_ALICE = {
    "memory_save": "select * from memori.memory_save('ns', 'x', p_owner_id => 'alice')",
    "session_checkpoint_save": "select * from memori.session_checkpoint_save('api', 'alice', 'x')",
    "session_checkpoint_load_latest": "select * from memori.session_checkpoint_load_latest('api', 'alice')",
    "checkpoint_create": "select * from memori.checkpoint_create('s1', 'alice', 'manual', 't', '{}')",
    "checkpoint_create_many": """select * from memori.checkpoint_create_many(
        '[{"session_id": "s1", "user_id": "bob", "type": "manual", "title": "t", "data": {}},
          {"session_id": "s1", "user_id": "alice", "type": "manual", "title": "t", "data": {}}]')""",
    "checkpoint_detect_milestone": "select * from memori.checkpoint_detect_milestone('s1', 'alice', '{}')",
    "checkpoint_auto": "select * from memori.checkpoint_auto('s1', 'alice', 'task_complete', '{}')",
}


@pytest.mark.parametrize("function", sorted(CALLS_FOR_ALICE))
def test_another_users_id_is_pm040_even_for_the_owner(conn: psycopg.Connection, function: str) -> None:
    conn.execute("select set_config('memori.user_id', 'bob', false)")
    err = assert_sqlstate(conn, "PM040", CALLS_FOR_ALICE[function])
    assert "'bob'" in str(err) and "'alice'" in str(err)
    assert value(conn, "select count(*) from memori.memories") == 0
    assert value(conn, "select count(*) from memori.checkpoints") == 0


def test_the_same_user_is_accepted(conn: psycopg.Connection) -> None:
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    for function, query in CALLS_FOR_ALICE.items():
        if function != "checkpoint_create_many":
            rows(conn, query)


def _app(conn: psycopg.Connection, user: str) -> None:
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', %s, false)", (user,))


def test_memory_save_without_owner_saves_as_the_acting_user(conn: psycopg.Connection) -> None:
    _app(conn, "alice")
    row = one(conn, "select * from memori.memory_save('ns', 'x')")
    assert row is not None and row["owner_id"] == "alice"
    assert_sqlstate(conn, "PM040", "select * from memori.memory_save('ns', 'x', p_owner_id => 'bob')")


def test_memory_save_without_any_user_belongs_to_its_namespace(conn: psycopg.Connection) -> None:
    row = one(conn, "select * from memori.memory_save('ns', 'x')")
    assert row is not None and row["owner_id"] == "ns"


def test_session_checkpoints_without_user_act_for_memori_user_id(conn: psycopg.Connection) -> None:
    _app(conn, "alice")
    saved = one(conn, "select * from memori.session_checkpoint_save('api', null, 'x', '{}', %s)", (T0,))
    assert saved is not None and saved["owner_id"] == "alice" and saved["metadata"]["user_id"] == "alice"
    latest = one(conn, "select * from memori.session_checkpoint_load_latest('api', null, %s)", (T0,))
    assert latest is not None and latest["id"] == saved["id"]


def test_session_checkpoints_without_any_user_are_pm001(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM001", "select * from memori.session_checkpoint_save('api', null, 'x')")
    assert_sqlstate(conn, "PM001", "select * from memori.session_checkpoint_load_latest('api', null)")


def test_checkpoints_without_user_act_for_memori_user_id(conn: psycopg.Connection) -> None:
    _app(conn, "alice")
    made = one(conn, "select * from memori.checkpoint_create('s1', null, 'manual', 't', '{}')")
    assert made is not None and made["user_id"] == "alice"
    many = rows(conn, """select * from memori.checkpoint_create_many(
        '[{"session_id": "s1", "type": "manual", "title": "a", "data": {}},
          {"session_id": "s1", "user_id": "alice", "type": "manual", "title": "b", "data": {}}]')""")
    assert [r["user_id"] for r in many] == ["alice", "alice"]


def test_checkpoints_without_any_user_are_pm001(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM001", "select * from memori.checkpoint_create('s1', null, 'manual', 't', '{}')")
