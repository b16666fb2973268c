"""Memories, events and checkpoints on the Citus cluster (issue 20): placement, the API for three users acting as an
app role, the row-level-security matrix, and single-shard per-user calls (citus_stat_counters)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tests.citus.conftest import placements

pytestmark = pytest.mark.citus

USERS = ("alice", "bob", "carol")
TABLES = {"memories": "distributed", "events": "distributed", "checkpoints": "distributed",
          "checkpoint_versions": "distributed", "session_skills": "reference"}


@pytest.fixture
def app_dsn(distributed_dsn: str) -> Iterator[str]:
    """A login role in memori_app (roles are cluster-wide: a new name per test), with Citus's statement counters on."""
    role = f"kc_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        conn.execute(f"create role {role} login in role memori_app")
        dbname = conn.execute("select current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"alter database {dbname} set citus.enable_stat_counters = on")
        # a system event (the system user ''): one emitted without memori.user_id
        conn.execute("select memori._event_emit('test.system', '{}')")
    try:
        yield distributed_dsn.replace("postgres@", f"{role}@", 1)
    finally:
        with psycopg.connect(distributed_dsn, autocommit=True) as conn:
            conn.execute(f"drop owned by {role}")
            conn.execute(f"drop role {role}")


def act(conn: psycopg.Connection[dict[str, Any]], user: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    """Run one statement in its own transaction as ``user`` (SET LOCAL reaches the shards), return its rows."""
    with conn.transaction():
        conn.execute(sql.SQL("set local memori.user_id = {}").format(sql.Literal(user)))
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def counters(conn: psycopg.Connection[dict[str, Any]]) -> tuple[int, int]:
    row = conn.execute("select query_execution_single_shard as single, query_execution_multi_shard as multi"
                       " from citus_stat_counters where name = current_database()").fetchone()
    assert row is not None
    return row["single"], row["multi"]


def test_tables_are_placed(distributed_dsn: str) -> None:
    placed = placements(distributed_dsn)
    assert {t: placed.get(t) for t in TABLES} == TABLES
    with psycopg.connect(distributed_dsn) as conn:
        left = conn.execute("select table_name, blockers from memori.distribute(p_dry_run => true)"
                            " where table_name = any(%s) and status not in ('already', 'distributed', 'reference')",
                            (list(TABLES),)).fetchall()
    assert left == []


def test_the_inlined_reads_are_plpgsql_on_every_node(distributed_dsn: str) -> None:
    """One server inlines them (LANGUAGE sql); Citus refuses SQL functions over distributed tables, so the
    install made each PL/pgSQL of the same statement (memori._as_plpgsql), on the coordinator and the workers."""
    reads = ["memori._session_checkpoint_current(text,text,timestamp with time zone)",
             "memori.lg_checkpoint_stamp(text,text,uuid,text,timestamp with time zone)",
             "memori.lg_checkpoint_get(text,text,uuid,text,timestamp with time zone,text,text)"]
    names = ",".join(f'"{r}"' for r in reads)
    form = ("select string_agg(l.lanname, ',' order by p.oid::regprocedure::text) from pg_proc p"
            f" join pg_language l on l.oid = p.prolang where p.oid = any ('{{{names}}}'::regprocedure[])")
    with psycopg.connect(distributed_dsn) as conn:
        assert conn.execute(form).fetchone() == ("plpgsql,plpgsql,plpgsql",)
        workers = conn.execute("select result from run_command_on_workers(%s)", (form,)).fetchall()
        assert workers == [("plpgsql,plpgsql,plpgsql",)] * 2
        assert conn.execute("select l.lanname from pg_proc p join pg_language l on l.oid = p.prolang"
                            " where p.oid = 'memori.session_checkpoint_load_latest'::regproc").fetchone() == ("sql",)


def test_three_users_rls_matrix_and_single_shard_calls(app_dsn: str) -> None:
    with psycopg.connect(app_dsn, autocommit=True, row_factory=dict_row) as conn:
        made: dict[str, dict[str, Any]] = {}
        for user in USERS:
            saved = act(conn, user, "select * from memori.session_checkpoint_save('api', null, %s, '{}')",
                        (f"{user}'s state",))[0]
            assert saved["owner_id"] == user and saved["user_id"].startswith("session_api_")
            latest = act(conn, user, "select * from memori.session_checkpoint_load_latest('api', null)")
            assert [(r["id"], r["source"]) for r in latest] == [(saved["id"], "current")]
            memory = act(conn, user, "select * from memori.memory_save('shared_ns', %s)", (f"{user}'s note",))[0]
            assert memory["owner_id"] == user
            assert [r["content"] for r in act(conn, user, "select * from memori.memory_list('shared_ns')")] == \
                [f"{user}'s note"]
            cp = act(conn, user, "select * from memori.checkpoint_create('s1', null, 'manual', 't', %s)",
                     (Jsonb({"step": 1}),))[0]
            assert cp["user_id"] == user and cp["pxyz"]["operation"] == "created"
            updated = act(conn, user, "select * from memori.checkpoint_update(%s, %s)", (cp["id"], Jsonb({"step": 2})))
            assert updated[0]["version"] == 2 and updated[0]["pxyz"]["operation"] == "updated"
            versions = act(conn, user, "select * from memori.checkpoint_versions(%s)", (cp["id"],))
            assert [v["version"] for v in versions] == [2, 1]
            assert act(conn, user, "select memori.checkpoint_at_version(%s, 1) as d", (cp["id"],))[0]["d"] == \
                {"step": 1}
            assert len(act(conn, user, "select * from memori.checkpoint_get(%s)", (cp["id"],))) == 1
            assert len(act(conn, user, "select * from memori.checkpoint_query(p_session_id => 's1')")) == 1
            stats = act(conn, user, "select * from memori.checkpoint_stats()")
            assert {s["checkpoint_type"]: s["total"] for s in stats}["manual"] == 1
            made[user] = cp

        # row-level security: nothing of another user (or of the system user '') is visible or changed
        for user in USERS:
            other = next(u for u in USERS if u != user)
            for table, col in (("memories", "owner_id"), ("checkpoints", "user_id"),
                               ("checkpoint_versions", "user_id"), ("events", "user_id")):
                seen = act(conn, user, f"select count(*) as n from memori.{table} where {col} <> %s", (user,))
                assert seen[0]["n"] == 0, (user, table)
                assert act(conn, user, f"select count(*) as n from memori.{table}")[0]["n"] > 0, (user, table)
            theirs = made[other]["id"]
            assert act(conn, user, "select * from memori.checkpoint_get(%s)", (theirs,)) == []
            assert act(conn, user, "select memori.checkpoint_delete(%s) as d", (theirs,))[0]["d"] is False
            for table, col in (("memories", "owner_id"), ("checkpoints", "user_id"),
                               ("checkpoint_versions", "user_id")):
                with conn.transaction():
                    conn.execute(sql.SQL("set local memori.user_id = {}").format(sql.Literal(user)))
                    assert conn.execute(f"update memori.{table} set {col} = {col} where {col} = %s",
                                        (other,)).rowcount == 0
                    assert conn.execute(f"delete from memori.{table} where {col} = %s", (other,)).rowcount == 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                act(conn, user, "insert into memori.events (event_type, user_id) values ('x', %s)", (other,))

        # the per-user calls are single-shard: a hit, a miss of all three tiers, a checkpoint read and update
        before = counters(conn)
        act(conn, "alice", "select * from memori.session_checkpoint_load_latest('skill:api-builder', null)")
        hit = counters(conn)  # a hit is one statement, the skill joined to the probe: one round trip
        assert (hit[0] - before[0], hit[1] - before[1]) == (1, 0)
        act(conn, "alice", "select * from memori.session_checkpoint_load_latest('lead_architect', null)")
        act(conn, "alice", "select * from memori.checkpoint_get(%s)", (made["alice"]["id"],))
        act(conn, "alice", "select * from memori.checkpoint_update(%s, %s)", (made["alice"]["id"], Jsonb({"step": 3})))
        act(conn, "alice", "select * from memori.checkpoint_versions(%s)", (made["alice"]["id"],))
        after = counters(conn)
        assert after[1] == before[1], "no multi-shard statement"
        assert after[0] - before[0] >= 5


def test_seed05_reads_of_a_shared_namespace_span_owners(distributed_dsn: str) -> None:
    """A namespace read by an owner role sees every owner's rows (multi-shard by design); per owner it is one shard."""
    with psycopg.connect(distributed_dsn, autocommit=True, row_factory=dict_row) as conn:
        for user in USERS:
            act(conn, user, "select * from memori.session_checkpoint_save('api', null, %s, '{}')", (user,))
        ns = conn.execute("select memori.session_namespace('api') as ns").fetchone()["ns"]  # type: ignore[index]
        owners = conn.execute("select owner_id from memori.memory_list(%s) order by 1", (ns,)).fetchall()
        assert [r["owner_id"] for r in owners] == list(USERS)
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "explain select * from memori.memories where owner_id = 'alice' and user_id = %s"
            " and metadata->>'type' = 'session_checkpoint' order by created_at desc, id desc limit 1", (ns,)))
        assert "Task Count: 1" in plan, plan
