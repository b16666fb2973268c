"""Users never see each other's rows: row-level security on every user-scoped table.

The matrix: every user-scoped table, view and reading function x select /
insert / update / delete x actor (another user, a project non-member, no
user, an empty user, the cleaner). Then 10,000 interleaved calls of two users
over two pooled connections, and the catalog lint that keeps later tables in.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pymemdb
from pymemdb import Scope
from tests.helpers import T0, one, rows, value

# table -> (primary key expression, a harmless UPDATE assignment, an INSERT of a row claiming alice)
TABLES: dict[str, tuple[str, str, str]] = {
    "memories": ("id::text", "content = content",
                 "insert into memori.memories (user_id, content, owner_id) values ('ns', 'x', 'alice')"),
    "checkpoints": ("id::text", "title = title",
                    "insert into memori.checkpoints (session_id, user_id, checkpoint_type, title, data, priority, "
                    "retention_days, pxyz) values ('s', 'alice', 'manual', 't', '{}', 8, 90, "
                    "memori._checkpoint_pxyz('created', 'manual', now()))"),
    "checkpoint_versions": ("checkpoint_id::text || '/' || version", "data_bytes = data_bytes",
                            "insert into memori.checkpoint_versions (user_id, checkpoint_id, version, reverse_patch, "
                            "data_bytes, created_at) values ('alice', %(alice_checkpoint)s::uuid, 99, '{}', 1, now())"),
    "events": ("id::text", "payload = payload",
               "insert into memori.events (event_type, payload, user_id) values ('x', '{}', 'alice')"),
    "projects": ("project_id", "name = name",
                 "insert into memori.projects (project_id, name, owner_id) values ('px', 'n', 'alice')"),
    "project_members": ("project_id || '/' || user_id", "role = role",
                        "insert into memori.project_members (project_id, user_id, project_owner) "
                        "values ('p1', 'intruder', 'alice')"),
    "sessions": ("session_id", "metadata = metadata",
                 "insert into memori.sessions (session_id, user_id) values ('sx', 'alice')"),
    "context_entries": ("id::text", "value = value",
                        "insert into memori.context_entries (key, value, type, scope, user_id) "
                        "values ('k', '1', 'user_preferences', 'user', 'alice')"),
    "mcp_tokens": ("id::text", "last_used_at = last_used_at",
                   "insert into memori.mcp_tokens (user_id, name, token_hash, token_prefix, created_at, expires_at) "
                   "values ('alice', 'x', sha256('x'), 'pmdb_x', now(), now() + interval '1 day')"),
    "context_windows": ("window_id::text", "priority = priority",
                        "insert into memori.context_windows (session_id, user_id, window_type, content, priority, "
                        "retention_policy) values ('s1', 'alice', 'conversation', '{}', 1, 'session')"),
}

# Writes an actor makes in its own name that must still be refused: a global
# entry, an entry or window on alice's session, an entry of a project it is not in.
FORGED_OWN_NAME = [
    "insert into memori.context_entries (key, value, type, scope, user_id) "
    "values ('g', '1', 'user_preferences', 'global', %(me)s)",
    "insert into memori.context_entries (key, value, type, scope, user_id, session_id) "
    "values ('k', '1', 'user_preferences', 'session', %(me)s, 's1')",
    "insert into memori.context_entries (key, value, type, scope, user_id, project_id) "
    "values ('k', '1', 'user_preferences', 'project', %(me)s, 'p1')",
    "insert into memori.context_windows (session_id, user_id, window_type, content, priority, retention_policy) "
    "values ('s1', %(me)s, 'conversation', '{}', 1, 'session')",
    "insert into memori.project_members (project_id, user_id, project_owner) values ('p1', %(me)s, 'alice')",
]

# Views and reading functions, each with the rows of alice's it would show.
READERS = [
    "select * from memori.active_memories where owner_id = 'alice'",
    "select * from memori.ttl_status where user_id like 'session_api%%'",
    "select * from memori.retention_rows where owner = 'alice' or owner like 'session_api%%'",
    "select * from memori.retention_candidates where owner = 'alice' or owner like 'session_api%%'",
    "select * from memori.checkpoint_expiry_status",
    "select * from memori.cleanup_preview(%(far)s) where owner = 'alice' or owner like 'session_api%%'",
    "select * from memori.checkpoint_query(p_user_id => 'alice')",
    "select * from memori.checkpoint_stats('alice') where total > 0",
    "select * from memori.session_checkpoint_load_latest('api', 'alice')",
    "select * from memori.memory_list(memori.session_namespace('api'), 10)",
    "select * from memori.event_list()",
    "select * from memori.context_search(p_key_pattern => 'alice%%')",
    "select * from memori.context_resolve(p_session_id => 's1') where key like 'alice%%'",
    "select * from memori.context_get('alice.user', p_session_id => 's1')",
    "select * from memori.context_get('alice.session', p_session_id => 's1')",
    "select * from memori.session_context_get('s1')",
    "select * from memori.context_stats(p_session_id => 's1') where total > 0 and dimension = 'scope' "
    "and name <> 'global'",
]

ACTORS = {
    "other user": ("memori_app", "mallory"),
    "project non-member": ("memori_app", "carol"),
    "no user set": ("memori_app", None),
    "empty user": ("memori_app", ""),
    "cleaner": ("memori_cleaner", None),
}


@pytest.fixture
def alice_world(conn: psycopg.Connection) -> dict[str, Any]:
    """Rows of alice (and her project p1 with member bob) in every user-scoped table, written as alice."""
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    conn.execute("select memori.project_create('p1', 'P1', 'alice')")
    conn.execute("select memori.project_member_add('p1', 'bob', 'alice')")
    conn.execute("select memori.session_context_set('s1', 'alice', 'p1')")
    conn.execute("select memori.session_context_add_window('s1', 'conversation', '{\"x\": 1}', 5, 'session', 'alice')")
    conn.execute("select memori.context_set('alice.user', '1', 'user_preferences', 'user', 'alice')")
    conn.execute("select memori.context_set('alice.session', '1', 'session_context', 'session', 'alice', null, 's1')")
    conn.execute("select memori.context_set('alice.project', '1', 'business_context', 'project', 'alice', 'p1')")
    conn.execute("select memori.business_context_set('{\"focus_mode\": \"planning\"}', 'alice')")
    conn.execute("select memori.session_checkpoint_save('api', 'alice', 'secret', '{}')")
    conn.execute("select memori.mcp_token_create('alice', 'laptop')")
    cp = value(conn, "select (memori.checkpoint_create('s1', 'alice', 'manual', 'secret', '{\"a\": 1}')).id")
    conn.execute("select memori.checkpoint_update(%s, '{\"a\": 2}')", (cp,))
    conn.execute("reset memori.user_id")
    conn.execute("select memori.context_set('motd', '\"hi\"', 'business_context', 'global', 'admin')")
    ids = {t: [r["k"] for r in rows(conn, f"select {pk} as k from memori.{t}")] for t, (pk, _, _) in TABLES.items()}
    ids["context_entries"] = [r["k"] for r in rows(conn, "select id::text as k from memori.context_entries "
                                                         "where scope <> 'global'")]
    ids["events"] = [r["k"] for r in rows(conn, "select id::text as k from memori.events where user_id = 'alice'")]
    for table, found in ids.items():
        assert found, f"the fixture writes alice rows to {table}"
    return {"ids": ids, "alice_checkpoint": str(cp)}


def act_as(conn: psycopg.Connection, role: str, user: str | None) -> None:
    conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
    if user is None:
        conn.execute("reset memori.user_id")
    else:
        conn.execute("select set_config('memori.user_id', %s, false)", (user,))


def attempt(conn: psycopg.Connection, query: str, params: dict[str, Any] | None = None) -> int | None:
    """Row count of a statement run in a rolled-back transaction; None when it was refused."""
    try:
        with conn.transaction(force_rollback=True):
            cur = conn.execute(query, params)
            return cur.rowcount
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.RaiseException) as exc:
        assert exc.sqlstate in ("42501", "PM041", "PM040", "PM001"), exc
        return None
    except psycopg.Error as exc:
        # 23503: an entry or window naming a session of someone else (keys (user_id, session_id), issue 20)
        if exc.sqlstate in ("PM041", "PM040", "PM001", "PM005", "23503"):
            return None
        raise


@pytest.mark.parametrize("actor", list(ACTORS))
def test_isolation_matrix(conn: psycopg.Connection, alice_world: dict[str, Any], actor: str) -> None:
    role, user = ACTORS[actor]
    act_as(conn, role, user)
    params = {"alice_checkpoint": alice_world["alice_checkpoint"], "me": user or "nobody",
              "far": T0.replace(year=2100)}
    for table, (pk, assignment, insert) in TABLES.items():
        mine = alice_world["ids"][table]
        where = sql.SQL("{} = any(%(ids)s)").format(sql.SQL(pk))  # type: ignore[arg-type]
        seen = attempt(conn, sql.SQL("select 1 from memori.{} where {}").format(  # type: ignore[arg-type]
            sql.Identifier(table), where), {"ids": mine})
        assert not seen, f"{actor} read {seen} alice rows of {table}"
        for verb in ("update", "delete"):
            statement = (sql.SQL("update memori.{} set {} where {}").format(sql.Identifier(table), sql.SQL(assignment),  # type: ignore[arg-type]
                                                                             where)
                         if verb == "update" else
                         sql.SQL("delete from memori.{} where {}").format(sql.Identifier(table), where))
            changed = attempt(conn, statement, {"ids": mine})  # type: ignore[arg-type]
            assert not changed, f"{actor} could {verb} {changed} alice rows of {table}"
        assert attempt(conn, insert, params) is None, f"{actor} inserted a row of alice into {table}"
    for forged in FORGED_OWN_NAME:
        assert attempt(conn, forged, params) is None, f"{actor}: {forged}"
    for reader in READERS:
        found = attempt(conn, reader, params)
        assert not found, f"{actor} saw {found} alice rows through: {reader}"
    conn.execute("reset role")


def test_project_member_sees_project_entries_only(conn: psycopg.Connection, alice_world: dict[str, Any]) -> None:
    act_as(conn, "memori_app", "bob")
    assert value(conn, "select value from memori.context_get('alice.project', p_project_id => 'p1')") == 1
    assert value(conn, "select count(*) from memori.context_entries") == 2  # the project entry and the global one
    assert value(conn, "select count(*) from memori.projects") == 1
    assert value(conn, "select count(*) from memori.project_members") == 1  # bob's own membership
    for table in ("memories", "checkpoints", "sessions", "context_windows", "events"):
        assert value(conn, f"select count(*) from memori.{table}") == 0, table
    # a member may change project entries (signing them as the writer), not alice's user entries
    assert attempt(conn, "update memori.context_entries set value = '2' where key = 'alice.project'") is None
    assert conn.execute("update memori.context_entries set value = '2', user_id = 'bob' "
                        "where key = 'alice.project'").rowcount == 1
    assert conn.execute("update memori.context_entries set value = '2' where key = 'alice.user'").rowcount == 0
    # members do not manage the member list
    assert attempt(conn, "select memori.project_member_add('p1', 'mallory', 'bob')") is None
    conn.execute("reset role")


def test_owner_and_admin(conn: psycopg.Connection, alice_world: dict[str, Any]) -> None:
    act_as(conn, "memori_app", "alice")
    assert value(conn, "select count(*) from memori.project_members") == 2  # the owner sees the list
    assert value(conn, "select count(*) from memori.context_entries") == 5  # 4 own + global
    assert attempt(conn, "update memori.context_entries set value = '2' where scope = 'global'") == 0
    conn.execute("reset role")
    act_as(conn, "memori_admin", "root")
    assert attempt(conn, "update memori.context_entries set value = '2', user_id = 'root' where scope = 'global'") == 1
    assert value(conn, "select count(*) from memori.context_entries where scope <> 'global'") == 0
    conn.execute("reset role")


def test_cleaner_deletes_expired_rows_of_every_user_and_reads_nothing_else(conn: psycopg.Connection,
                                                                            alice_world: dict[str, Any]) -> None:
    conn.execute("select set_config('memori.user_id', 'bob', false)")
    conn.execute("select memori.context_set('bob.tmp', '1', 'temporary_state', 'user', 'bob', p_ttl_ms => 1000, "
                 "p_now => %s)", (T0,))
    conn.execute("reset memori.user_id")
    act_as(conn, "memori_cleaner", None)
    # sees exactly the expired row, not alice's live ones
    assert value(conn, "select count(*) from memori.context_entries") == 1
    summary = one(conn, "select * from memori.cleanup_execute()")
    assert summary is not None and summary["deleted_by_table"].get("context_entries") == 1
    conn.execute("reset role")
    assert value(conn, "select count(*) from memori.context_entries where key = 'bob.tmp'") == 0
    assert value(conn, "select count(*) from memori.context_entries") == 5


def test_every_user_scoped_table_has_forced_rls(conn: psycopg.Connection) -> None:
    """A table with a user column (user_id / owner_id) must be in the policy loop of sql/900-security.sql."""
    unprotected = rows(conn, """
        select c.relname from pg_class c
         where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'p')
           and exists (select 1 from pg_attribute a where a.attrelid = c.oid and not a.attisdropped
                          and a.attname in ('user_id', 'owner_id'))
           and not (c.relrowsecurity and c.relforcerowsecurity)""")
    assert unprotected == []
    without_policy = rows(conn, """
        select c.relname from pg_class c where c.relnamespace = 'memori'::regnamespace and c.relrowsecurity
           and not exists (select 1 from pg_policy p where p.polrelid = c.oid)""")
    assert without_policy == []
    assert value(conn, "select count(*) from pg_roles where rolname like 'memori\\_%' and rolbypassrls") == 0


# -- pooled connections -----------------------------------------------------------------
@pytest.fixture
def app_dsn(dsn: str, conn: psycopg.Connection) -> Iterator[str]:
    """A login role that is a member of memori_app, as a service would use."""
    role = f"pymemdb_app_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("create role {} login in role memori_app").format(sql.Identifier(role)))
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def test_interleaved_calls_over_pooled_connections_never_mix_users(app_dsn: str) -> None:
    """10,000 calls of two users, interleaved on two pooled connections: zero foreign rows."""
    calls_per_user = 5_000
    foreign: list[str] = []
    with pymemdb.connect(app_dsn, min_size=2, max_size=2) as db:
        barrier = threading.Barrier(2)

        def work(user: str) -> None:
            me = db.as_user(user)
            who = Scope(session_id=f"{user}-s")
            me.sessions.set(f"{user}-s")
            barrier.wait()
            for i in range(calls_per_user // 4):
                me.context.set(f"k{i % 50}", {"owner": user, "i": i}, type="session_context", scope="session",
                               who=who)
                got = me.context.get(f"k{i % 50}", who)
                if got is None or got.user_id != user or got.value["owner"] != user:
                    foreign.append(f"{user} got {got}")
                for v in me.context.resolve(who, prefix="k1"):
                    if v.user_id != user:
                        foreign.append(f"{user} resolved {v}")
                for e in me.events.list(limit=5):
                    if e.user_id != user:
                        foreign.append(f"{user} saw event {e}")

        threads = [threading.Thread(target=work, args=(u,)) for u in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # a call without a user after them sees nothing: the setting did not outlive its transaction
        with db.transaction() as cur:
            assert cur.execute("select count(*) from memori.context_entries").fetchone() == (0,)
    assert foreign == []


def test_client_refuses_acting_for_another_user(app_dsn: str) -> None:
    with pymemdb.connect(app_dsn, user_id="alice") as db:
        db.context.set("k", 1, type="user_preferences", scope="user")
        with pytest.raises(pymemdb.AccessDenied):
            db.context.set("k", 1, type="user_preferences", scope="global")
        bob = db.as_user("bob")
        assert bob.context.get("k") is None
        with pytest.raises(pymemdb.AccessDenied):
            # RLS refuses writing a checkpoint in alice's name while acting as bob
            with bob.transaction() as cur:
                cur.execute("insert into memori.context_entries (key, value, type, scope, user_id) "
                            "values ('x', %s, 'user_preferences', 'user', 'alice')", (Jsonb(1),))


def test_page_change_notices_reveal_no_ids(conn: psycopg.Connection) -> None:
    """LISTEN is not subject to RLS: memori_pages notices carry an opaque tag, not session or page ids."""
    from pymemdb.vm.page_cache import page_tag

    conn.execute("select memori.page_create('secret-session', 'msg_secret', 'hello', p_user_id => 'alice')")
    conn.execute("listen memori_pages")
    conn.execute("select memori.page_update('secret-session', 'msg_secret', 'changed')")
    notices = list(conn.notifies(timeout=5, stop_after=1))
    assert notices and "secret" not in notices[0].payload
    assert json.loads(notices[0].payload) == {"tag": page_tag("secret-session", "msg_secret")}


def test_a_session_in_a_project_shows_nothing_of_it_to_a_non_member(conn: psycopg.Connection,
                                                                     alice_world: dict[str, Any]) -> None:
    """Row-level security no longer checks a session's project (on Citus a policy reads no other table): a
    non-member may name the project on a session of their own, and reads still check membership."""
    act_as(conn, "memori_app", "carol")
    conn.execute("insert into memori.sessions (session_id, user_id, project_id) values ('sy', 'carol', 'p1')")
    assert rows(conn, "select * from memori.context_resolve(p_session_id => 'sy')") == \
        rows(conn, "select * from memori.context_resolve()")
    assert value(conn, "select count(*) from memori.context_entries where scope = 'project'") == 0
    conn.execute("reset role")
