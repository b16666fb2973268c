"""Scoped context and budgets on the three-node cluster (issue 20): placement, three users with a shared project,
resolution with precedence, the row-level-security matrix, budgeted windows and chunks, and which reads are
single-shard (Citus's own statistics, citus_stat_counters)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pymemdb.install import install
from tests.citus.conftest import placements

pytestmark = pytest.mark.citus

DISTRIBUTED = ("sessions", "context_entries", "context_windows", "context_chunks", "context_optimizations")
REFERENCE = ("projects", "project_members", "chunk_types", "token_budgets")
USERS = ("alice", "bob", "carol")
OWN_ROWS = {  # table -> the rows of one user that no other user may see or change, and a harmless assignment
    "sessions": ("true", "metadata = metadata"),
    "context_windows": ("true", "priority = priority"),
    "context_chunks": ("true", "tokens = tokens"),
    "context_optimizations": ("true", "options = options"),
    "context_entries": ("scope in ('user', 'session')", "value = value"),
}


class App:
    """Connections of an app role (member of memori_app): every call in its own transaction for one user."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def run(self, user: str, query: str, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn, conn.transaction():
            conn.execute(sql.SQL("set local memori.user_id = {}").format(sql.Literal(user)))
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else [{"rowcount": cur.rowcount}]


def changed(app: App, user: str, statement: str, params: Any) -> int:
    """Rows an UPDATE or DELETE changed; 0 when a grant refuses it (context_optimizations is append-only)."""
    try:
        return int(app.run(user, statement, params)[0]["rowcount"])
    except psycopg.errors.InsufficientPrivilege:
        return 0


def counters(admin: psycopg.Connection, dbname: str) -> tuple[int, int]:
    row = admin.execute("select query_execution_single_shard, query_execution_multi_shard from citus_stat_counters"
                        " where name = %s", (dbname,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def shards_of(app: App, admin: psycopg.Connection, dbname: str, user: str, query: str) -> tuple[int, int]:
    """(single-shard, multi-shard) executions of one call (a connection of its own, closed before reading)."""
    admin.execute("select citus_stat_counters_reset(oid) from pg_database where datname = %s", (dbname,))
    app.run(user, query)
    return counters(admin, dbname)


def resolved(app: App, user: str, **who: str) -> dict[str, tuple[Any, str, str]]:
    args = ", ".join(f"p_{k}_id => %({k})s" for k in who)
    return {r["key"]: (r["value"], r["scope"], r["user_id"])
            for r in app.run(user, f"select * from memori.context_resolve({args})", who)}


def test_context_and_budgets_on_the_cluster(distributed_dsn: str) -> None:
    placed = placements(distributed_dsn)
    assert {t: placed.get(t) for t in DISTRIBUTED} == dict.fromkeys(DISTRIBUTED, "distributed")
    assert {t: placed.get(t) for t in REFERENCE} == dict.fromkeys(REFERENCE, "reference")

    # installed again once placed: the functions reach the workers (a query joining a reference table, as
    # chunk_add_many's check of chunk types, runs on a worker and calls memori functions there)
    install(distributed_dsn, force=True)
    dbname = conninfo_to_dict(distributed_dsn)["dbname"]
    role = f"ctx_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(distributed_dsn, autocommit=True) as admin:
        admin.execute(f"create role {role} login in role memori_app")
        admin.execute(f"alter database {dbname} set citus.enable_stat_counters = on")
        app = App(make_conninfo(distributed_dsn, user=role))

        # -- three users, one shared project (alice owns it, bob is a member, carol is not) ------------
        app.run("alice", "select memori.project_create('p1', 'Project one')")
        app.run("alice", "select memori.project_member_add('p1', 'bob')")
        app.run("alice", "select memori.session_context_set('s1', p_project_id => 'p1')")
        for user in USERS:  # the same session id for everyone: ids are unique per user
            app.run(user, "select memori.session_context_set('s1')")
            app.run(user, "select memori.context_set('k', %s, 'user_preferences', 'user')", (Jsonb(f"{user}-user"),))
        for user in ("alice", "bob"):
            app.run(user, "select memori.context_set('k', %s, 'session_context', 'session', p_session_id => 's1')",
                    (Jsonb(f"{user}-s1"),))
        app.run("alice", "select memori.context_set('kp', '\"alice-p1\"', 'business_context', 'project', "
                         "p_project_id => 'p1')")
        app.run("bob", "select memori.context_set('kp', '\"bob-p1\"', 'business_context', 'project', "
                       "p_project_id => 'p1')")  # the one entry of (p1, kp) moves to bob's shard
        app.run("bob", "select memori.context_set('kb', '\"bob\"', 'business_context', 'project', "
                       "p_project_id => 'p1')")
        with admin.transaction():
            admin.execute("set local memori.user_id = 'admin'")
            admin.execute("select memori.context_set('kg', '\"hello\"', 'business_context', 'global')")
            admin.execute("select memori.context_set('k', '\"global\"', 'user_preferences', 'global')")

        # -- resolution: session > project > user > global, project entries of other members ------------
        assert resolved(app, "alice", session="s1") == {
            "k": ("alice-s1", "session", "alice"), "kp": ("bob-p1", "project", "bob"),
            "kb": ("bob", "project", "bob"), "kg": ("hello", "global", "admin")}
        assert resolved(app, "bob", session="s1", project="p1") == {
            "k": ("bob-s1", "session", "bob"), "kp": ("bob-p1", "project", "bob"),
            "kb": ("bob", "project", "bob"), "kg": ("hello", "global", "admin")}
        assert resolved(app, "carol", session="s1", project="p1") == {
            "k": ("carol-user", "user", "carol"), "kg": ("hello", "global", "admin")}
        assert app.run("alice", "select value from memori.context_get('k')") == [{"value": "alice-user"}]
        assert app.run("bob", "select count(*) as n from memori.context_entries where scope = 'project'") == [{"n": 2}]

        # -- budgets: windows and stored chunks per user, the same session id ----------------------------
        for user in USERS:
            app.run(user, "select memori.session_context_add_window('s1', 'conversation', %s)", (Jsonb({"u": user}),))
            app.run(user, "select memori.chunk_add_many('s1', %s)",
                    (Jsonb([{"type": "tool_output", "content": f"{user} {n}", "tokens": 10} for n in range(3)]),))
            windows = app.run(user, "select context_windows from memori.session_context_get('s1')")
            assert [w["content"] for w in windows[0]["context_windows"]] == [{"u": user}]
            result = app.run(user, "select to_jsonb(r) as r from memori.context_optimize_stored('s1', 5000) r")[0]["r"]
            assert sorted(c["content"] for c in result["optimized_chunks"]) == [f"{user} {n}" for n in range(3)]
        assert admin.execute("select count(*) from memori.context_optimizations").fetchone() == (3,)

        # -- row-level security: no row of another user seen or changed -----------------------------------
        for user in USERS:
            for other in (u for u in USERS if u != user):
                for table, (own, assignment) in OWN_ROWS.items():
                    where = f"user_id = %(o)s and {own}"
                    assert app.run(user, f"select count(*) as n from memori.{table} where {where}", {"o": other}) == \
                        [{"n": 0}], (user, other, table)
                    for statement in (f"update memori.{table} set {assignment} where {where}",
                                      f"delete from memori.{table} where {where}"):
                        assert changed(app, user, statement, {"o": other}) == 0, (user, statement)
        assert app.run("carol", "select count(*) as n from memori.context_entries where scope = 'project'") == \
            [{"n": 0}]
        assert app.run("carol", "select count(*) as n from memori.projects") == [{"n": 0}]
        assert app.run("carol", "update memori.context_entries set value = value where scope = 'project'") == \
            [{"rowcount": 0}]
        # a member leaves: the entries they wrote stay with the project, as its owner's
        app.run("alice", "select memori.project_member_remove('p1', 'bob')")
        assert app.run("bob", "select count(*) as n from memori.context_entries where scope = 'project'") == [{"n": 0}]
        assert resolved(app, "alice", project="p1")["kp"] == ("bob-p1", "project", "alice")

        # -- single-shard: a user's own session and scopes; the shared scopes read every shard -----------
        # (s2: more chunks than the first top-N round ranks, so the bounded ranking's count pass runs too)
        app.run("alice", "select count(*) from memori.chunk_add_many('s2', %s)",
                (Jsonb([{"type": "tool_output", "content": "", "tokens": 10 + n % 7} for n in range(1100)]),))
        bounded = app.run("alice", "select to_jsonb(r) as r from memori.context_optimize_stored('s2', 5000, %s) r",
                          (Jsonb({"max_dropped_ids": 3, "max_conflicts": 0, "persist": False}),))[0]["r"]
        assert bounded["chunks_dropped"] == 1100 - len(bounded["optimized_chunks"]) and \
            len(bounded["dropped_chunk_ids"]) == 3
        for query in ("select * from memori.session_context_get('s1')",
                      "select memori.session_context_add_window('s1', 'task_execution', '{}')",
                      "select * from memori.context_optimize_stored('s1', 5000)",
                      "select * from memori.context_optimize_stored('s2', 5000, '{\"max_dropped_ids\": 3,"
                      " \"max_conflicts\": 0, \"persist\": false}')",
                      "select * from memori.business_context_get()",
                      "select memori.context_delete('k', 'session', p_session_id => 's1')"):
            single, multi = shards_of(app, admin, dbname, "alice", query)
            assert single >= 1 and multi == 0, (query, single, multi)
        # context_get: the own part (user, session) and the session's project on one shard each; the
        # global and project entries (written by any user) on every shard: one multi-shard read, by design
        single, multi = shards_of(app, admin, dbname, "alice", "select * from memori.context_get('k', "
                                                               "p_session_id => 's1')")
        assert single >= 1 and multi == 1, (single, multi)
