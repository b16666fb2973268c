"""Compression (seed 04) on the three-node Citus cluster (marker ``citus``, issue 20).

The nine compression tables are distributed by ``user_id`` and co-located;
three users work through the client as an app role (messages, compress with
plan / prompt / apply and aging, snapshots, goals), none of them sees or
changes another's rows, and every call of the flow runs single-shard
statements only (Citus's own counters), each on its user's hash range (the
coordinator's remote-command log), a snapshot of a session with virtual memory
included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pymemdb
from pymemdb.compression import ExtractiveSummarizer
from tests.citus.conftest import placements
from tests.helpers import T0

pytestmark = pytest.mark.citus

TABLES = ("messages", "compression_state", "compression_plans", "compression_checkpoints", "snapshots", "goals",
          "goal_checkpoints", "goal_decisions", "goal_artifacts")
USERS = ("alice", "bob", "carol")
SHARD_NAME = re.compile(r"\bmemori\.[a-z_]+?_(\d{6,})\b")
APP_ROLE = "compression_app"


@pytest.fixture
def app_dsn(distributed_dsn: str) -> Iterator[str]:
    """The distributed database as a login role of memori_app (row-level security applies), counters on."""
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        # roles belong to the cluster, not to the test's database: the second test finds it
        if conn.execute("select from pg_roles where rolname = %s", (APP_ROLE,)).fetchone() is None:
            conn.execute(f"create role {APP_ROLE} login in role memori_app")
        dbname = conninfo_to_dict(distributed_dsn)["dbname"]
        conn.execute(f"alter database {dbname} set citus.enable_stat_counters = on")
    yield make_conninfo(distributed_dsn, user=APP_ROLE)


def _counters(admin: psycopg.Connection) -> tuple[int, int]:
    """(single-shard, multi-shard) query executions of this database on the coordinator."""
    row = admin.execute("select query_execution_single_shard, query_execution_multi_shard from citus_stat_counters"
                        " where name = current_database()").fetchone()
    assert row is not None
    return row[0], row[1]


def _log_remote_commands(db: pymemdb.Database) -> list[str]:
    """The commands the coordinator sends the workers for this client's calls (its one pooled connection)."""
    commands: list[str] = []

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith("issuing "):
            commands.append(diag.message_primary or "")

    with db.connection() as conn:
        conn.add_notice_handler(notice)
        conn.execute("set citus.log_remote_commands = on")
        conn.execute("set client_min_messages = log")
        conn.commit()
    return commands


def _work(db: pymemdb.Database, user: str) -> dict[str, Any]:
    """The compression API for one user's session: what the RLS matrix then probes."""
    session = f"chat-{user}"
    db.compression.message_add(session, "system", "You are terse. " * 20, context_size=4000, now=T0)
    db.compression.message_add(session, "assistant", f"[GOAL] Ship {user}'s feature - HIGH\n"
                               "[DECISION] Keep PostgreSQL - LOCKED\n[CHECKPOINT] keys - IN PROGRESS\n"
                               "[ARTIFACT] Created keys.py", now=T0)
    for i in range(12):
        db.compression.message_add(session, "user", f"{user} asks question {i}?", now=T0)
        db.compression.message_add(session, "assistant", f"{user} answers {i}. " + "Details follow here. " * 60,
                                   now=T0)
    assert db.compression.budget(session).should_compress
    first = db.compression.run(session, ExtractiveSummarizer(), force=True, now=T0)
    assert first.applied is not None and first.applied.compression_number == 1
    snap = db.snapshots.create(session, {"at": "one compression"}, now=T0)
    for i in range(8):
        db.compression.message_add(session, "assistant", f"{user} later {i}. " + "More words here. " * 40, now=T0)
    second = db.compression.run(session, ExtractiveSummarizer(), force=True, now=T0)
    assert second.applied is not None and second.applied.aged + second.applied.merged >= 1  # the older one aged
    context = db.compression.active_context(session)
    assert [c.kind for c in context][:2] == ["system", "goal"] and f"Ship {user}'s feature" in context[1].content
    pre = db.snapshots.restore(snap.id, now=T0)
    assert pre.kind == "pre_restore" and db.compression.budget(session).compression_count == 1
    assert [g.description for g in db.goals.list(session)] == [f"Ship {user}'s feature"]
    assert "Keep PostgreSQL" in (db.goals.block(session) or "")
    export = db.compression.session_export(session)
    assert export is not None and export["sessionId"] == session
    # the other calls that take only a session or a plan id (each statement names the acting user)
    marked = db.goals.markers_apply(session, "[CHECKPOINT] keys - COMPLETED", now=T0)
    assert marked.checkpoints_updated == 1 and "✅ keys" in (db.goals.block(session) or "")
    assert {s.kind for s in db.snapshots.list(session, now=T0)} >= {"manual", "pre_restore"}
    assert db.compression.session_reliability(session, 3).compression_count == 1
    failed = db.compression.abort(db.compression.plan(session, force=True, now=T0).id, "summarizer down", now=T0)
    assert failed.status == "failed"
    plan = db.compression.plan(session, force=True, now=T0)  # left planned: another user probes it
    return {"session": session, "snapshot": snap.id, "plan": plan.id, "plan_status": plan.status}


def test_compression_is_distributed_per_user_and_single_shard(distributed_dsn: str, app_dsn: str) -> None:
    # (1) every compression table is distributed, co-located with the other user tables
    placed = placements(distributed_dsn)
    assert {t: placed.get(t) for t in TABLES} == dict.fromkeys(TABLES, "distributed")
    with psycopg.connect(distributed_dsn, autocommit=True) as admin:
        groups = admin.execute("select count(distinct colocationid) from pg_dist_partition"
                               " where logicalrelid::text = any(%s)", ([f"memori.{t}" for t in TABLES],)).fetchone()
        assert groups == (1,)

        # (2) three users through the client, as the app role; (4) single-shard statements only
        admin.execute("select citus_stat_counters_reset(oid) from pg_database where datname = current_database()")
        ranges = dict(admin.execute("select s.shardid, s.shardminvalue from pg_dist_shard s join pg_dist_partition p"
                                    " using (logicalrelid) where p.partmethod = 'h'").fetchall())
        work = {}
        for user in USERS:
            with pymemdb.connect(app_dsn, user_id=user, max_size=1) as db:
                commands = _log_remote_commands(db)
                work[user] = _work(db, user)
            # every command for the user's calls (the session, the emitted events too) on the user's hash range
            reached = {ranges[int(s)] for c in commands for s in SHARD_NAME.findall(c) if int(s) in ranges}
            assert len(reached) == 1, (user, reached)
        single, multi = _counters(admin)
        assert multi == 0 and single > 100, (single, multi)
        by_user = admin.execute("select user_id, count(*) from memori.messages group by 1 order by 1").fetchall()
        assert by_user == [(u, 34) for u in USERS]
        # each user's rows sit on one shard of each table
        for table in TABLES:
            shards = admin.execute(f"select user_id, count(distinct get_shard_id_for_distribution_column("
                                   f"'memori.{table}', user_id)) from memori.{table} group by 1").fetchall()
            assert all(n == 1 for _, n in shards), (table, shards)

    # (3) the row-level-security matrix: bob, as the app role, sees and changes none of alice's rows
    alice = work["alice"]
    with psycopg.connect(app_dsn) as bob:
        def as_bob(sql: str, *args: Any) -> list[tuple[Any, ...]]:
            bob.execute("set local memori.user_id = 'bob'")
            try:
                cur = bob.execute(sql, args)
                rows = cur.fetchall() if cur.description else []
            finally:
                bob.rollback()
            return rows

        for table in TABLES:
            assert as_bob(f"select count(*) from memori.{table} where user_id <> 'bob'") == [(0,)], table
            assert as_bob(f"select count(*) from memori.{table}")[0][0] > 0, table  # his own are there
        for table in TABLES[2:]:  # the tables the app may update and delete (messages: append-only)
            assert as_bob(f"with d as (delete from memori.{table} where user_id = 'alice' returning 1)"
                          " select count(*) from d") == [(0,)], table
        assert as_bob("with u as (update memori.goals set description = 'mine' where user_id = 'alice' returning 1)"
                      " select count(*) from u") == [(0,)]
        assert as_bob("with u as (update memori.compression_state set version = 99 where user_id = 'alice'"
                      " returning 1) select count(*) from u") == [(0,)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # a row for alice: refused on the shard
            as_bob("insert into memori.goals (session_id, user_id, description, created_at)"
                   " values ('chat-alice', 'alice', 'planted', now())")
        # alice's ids mean nothing to bob's calls
        assert as_bob("select count(*) from memori.active_context(%s)", alice["session"]) == [(0,)]
        assert as_bob("select count(*) from memori.goal_list(%s)", alice["session"]) == [(0,)]
        assert as_bob("select count(*) from memori.snapshot_list(%s)", alice["session"]) == [(0,)]
        assert as_bob("select memori.session_export(%s)", alice["session"]) == [(None,)]
        for sql, arg in (("select memori.compression_apply(%s, 'mine')", alice["plan"]),
                         ("select * from memori.compression_prompt(%s)", alice["plan"]),
                         ("select memori.compression_abort(%s, 'no')", alice["plan"]),
                         ("select memori.snapshot_restore(%s)", alice["snapshot"]),
                         ("select memori.compression_budget(%s)", alice["session"])):
            with pytest.raises(psycopg.Error) as refused:
                as_bob(sql, arg)
            assert refused.value.sqlstate == "PM005", sql

    with psycopg.connect(distributed_dsn, autocommit=True) as admin:
        # nothing of alice's changed: her last plan as she left it, her goal hers
        assert admin.execute("select status from memori.compression_plans where user_id = 'alice' and id = %s",
                             (alice["plan"],)).fetchone() == (alice["plan_status"],)
        assert admin.execute("select count(*) from memori.goals where user_id = 'alice' and description = 'mine'"
                             ).fetchone() == (0,)
        # (4) the main per-user read, as Citus plans it: one task
        plan = "\n".join(r[0] for r in admin.execute(
            "explain select * from memori.messages where user_id = 'alice' and session_id = 'chat-alice'"
            " order by seq").fetchall())
        assert "Task Count: 1" in plan, plan


def test_snapshot_of_a_session_with_virtual_memory_is_single_shard(distributed_dsn: str, app_dsn: str) -> None:
    with psycopg.connect(distributed_dsn, autocommit=True) as admin:
        for user in USERS:
            with pymemdb.connect(app_dsn, user_id=user) as db:
                session = f"vm-chat-{user}"
                db.compression.message_add(session, "user", f"{user} says hello", now=T0)
                with db.transaction() as cur:
                    cur.execute("select memori.page_create(%s, 'doc_1', %s)", (session, f"notes of {user}"))
                admin.execute("select citus_stat_counters_reset(oid) from pg_database"
                              " where datname = current_database()")
                snap = db.snapshots.create(session, now=T0)
                assert snap.state["vm"]["pages"] == [{"page_id": "doc_1", "version": 1}]
                with db.transaction() as cur:
                    cur.execute("select memori.page_update(%s, 'doc_1', %s)", (session, f"edited by {user}"))
                pre = db.snapshots.restore(snap.id, now=T0)
                assert pre.state["vm"]["pages"] == [{"page_id": "doc_1", "version": 2}]
                single, multi = _counters(admin)
                assert multi == 0 and single > 0, (user, single, multi)
