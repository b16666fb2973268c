"""pymemdb on the three-node Citus cluster (marker ``citus``): install, smoke, distribute.

What distributes is what the plan table in docs/scale-out.md says:
every table as memori.distribution_plan() places it: the user tables distributed
by their user in one co-location group, the global ones as reference tables.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import psutil
import psycopg
import pytest
from typer.testing import CliRunner

import pymemdb
from pymemdb.cli.main import app
from pymemdb.errors import CoordinatorHoldsShards
from pymemdb.install import install
from tests.citus.conftest import CitusCluster, placements
from tests.helpers import T0, assert_sqlstate, rows

pytestmark = pytest.mark.citus


def _planned(conn: psycopg.Connection, placement: str) -> set[str]:
    query = "select table_name from memori.distribution_plan() where placement = %s"
    return {r["table_name"] for r in rows(conn, query, (placement,))}


def _smoke(dsn: str) -> None:
    """One call or a few per concern, through the client, as two users."""
    from pymemdb.budget import Chunk
    from pymemdb.context import Scope
    from pymemdb.integrations.langgraph import MemoriSaver
    from tests.test_langgraph_saver import _graph

    with pymemdb.connect(dsn) as db:
        # memories (seed 05)
        db.memories.save_session_checkpoint("skill:api-builder", "alice", "state 1", now=T0)
        assert db.memories.load_latest_checkpoint("api", "alice", now=T0).content == "state 1"  # type: ignore[union-attr]
        # typed checkpoints
        row = db.checkpoints.create("s1", "alice", "manual", "Designed the API", {"step": 1}, now=T0)
        assert db.checkpoints.get(row.id, now=T0) == row
        # scoped context with resolution
        alice = db.as_user("alice")
        alice.sessions.set("s1", now=T0)
        alice.context.set("theme", {"mode": "dark"}, type="user_preferences", scope="user", now=T0)
        alice.context.set("theme", {"mode": "light"}, type="session_context", scope="session",
                          who=Scope(session_id="s1"), now=T0)
        assert alice.context.get("theme", Scope(session_id="s1"), now=T0).value == {"mode": "light"}  # type: ignore[union-attr]
        assert db.as_user("bob").context.get("theme", now=T0) is None
        # token budget
        result = db.budget.optimize([Chunk("sys", "system_prompt", content="You are terse."),
                                     Chunk("h", "chat_history_user", tokens=50)], 2100,
                                    user_id="alice", session_id="s1", now=T0)
        assert result.optimization_id is not None
        # virtual memory: pages, compression levels, a fault, search
        assert db.pages.turn_begin("vm1", user_id="alice", now=T0) == 1
        db.pages.create("vm1", "msg_1", "What about the paging model?", role="user", now=T0)
        db.pages.create("vm1", "doc_1", "The page table maps page ids to tiers. " * 8, page_type="artifact",
                        add_to_working_set=False, now=T0)
        db.pages.compress("vm1")
        assert db.pages.fault("vm1", "doc_1", 2, "user_requested_recall", now=T0)["page"]["level"] == 2
        assert [p.page_id for p in db.pages.search("vm1", "page table tiers", now=T0)][:1] == ["doc_1"]
        # compression (seed 04)
        db.compression.message_add("c1", "user", "[GOAL] Ship the cluster - HIGH", user_id="alice", now=T0)
        # the retention engine (a year later everything but permanent rows has expired; events the
        # preview itself records with the real clock are expired then too, hence events aside)
        later = T0.replace(year=2027)
        preview = [c for c in db.cleanup.preview(now=later) if c.table_name != "events"]
        summary = db.cleanup.execute(now=later)
        assert summary.deleted == summary.planned
        assert sum(n for t, n in summary.deleted_by_table.items() if t != "events") == len(preview) > 0
    # the LangGraph saver (also after distribute(): its reads are routed PL/pgSQL statements)
    with MemoriSaver(dsn, user_id="alice") as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "chat-1"}}
        assert graph.invoke({"messages": ["hi"]}, config)["messages"] == ["hi", "echo hi"]
    with MemoriSaver(dsn, user_id="mallory") as mallory:
        assert mallory.get_tuple({"configurable": {"thread_id": "chat-1"}}) is None


def test_schema_installs_on_the_coordinator_and_every_concern_works(citus_dsn: str) -> None:
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        # two workers, and the coordinator in the metadata for reference tables only (cluster.sh createdb)
        assert rows(conn, "select groupid = 0 as coordinator, shouldhaveshards, count(*) as n from pg_dist_node"
                          " where isactive group by 1, 2 order by 1") == [
            {"coordinator": False, "shouldhaveshards": True, "n": 2},
            {"coordinator": True, "shouldhaveshards": False, "n": 1}]
        assert rows(conn, "select extversion from pg_extension where extname = 'citus'")[0]["extversion"] >= "14"
    _smoke(citus_dsn)
    assert install(citus_dsn, force=True).changed  # re-applying sql/ on the coordinator works


def test_distribute_places_every_table_as_planned(citus_dsn: str) -> None:
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        settings_before = rows(conn, "select key, value from memori.settings order by key")
        plan = {p["table_name"]: p for p in rows(conn, "select * from memori.distribution_plan()")}
        reference, distributed = _planned(conn, "reference"), _planned(conn, "distributed")
        dry = {r["table_name"]: r for r in rows(conn, "select * from memori.distribute(p_dry_run => true)")}
        assert set(dry) == set(plan)
        # nothing blocks any table any more (issue 20's key migrations 0024-0029)
        assert {t: r["blockers"] for t, r in dry.items() if r["blockers"]} == {}
        assert {t for t, r in dry.items() if r["status"] == "ready"} == reference | distributed
        done = {r["table_name"]: r for r in rows(conn, "select * from memori.distribute()")}
        assert {t: r["status"] for t, r in done.items()} == {t: p["placement"] for t, p in plan.items()}
        assert done["settings"]["rows_moved"] == len(settings_before) > 0
        # Citus moved the rows: the same rows, now read from the workers' shards
        assert rows(conn, "select key, value from memori.settings order by key") == settings_before
        assert placements(citus_dsn) == {t: p["placement"] for t, p in plan.items() if p["placement"] != "local"}
        # one co-location group: every join and foreign key between one user's rows stays on one node
        groups = rows(conn, """select count(distinct colocationid) as n from pg_dist_partition
                                where partmethod = 'h' and logicalrelid::text like 'memori.%'""")
        assert groups == [{"n": 1}]
        # the forks' copy-on-write triggers were dropped (Citus refuses triggers); a re-install keeps them away
        assert rows(conn, """select count(*) as n from pg_trigger where not tgisinternal and tgrelid
                              in ('memori.pages'::regclass, 'memori.page_representations'::regclass)""") == [{"n": 0}]
        # every memori role exists on every worker (delegated calls run there as the caller)
        on_workers = rows(conn, """select result from run_command_on_workers(
            $$select string_agg(rolname, ',' order by rolname) from pg_roles where rolname like 'memori%'$$)""")
        assert [r["result"] for r in on_workers] == ["memori_admin,memori_app,memori_cleaner,memori_owner"] * 2
        # idempotent
        again = {r["table_name"]: r["status"] for r in rows(conn, "select * from memori.distribute()")}
        assert {t for t, s in again.items() if s == "already"} == reference | distributed
    # an upgrade after distribute still installs (and propagates sql/ to the workers), and everything works
    assert install(citus_dsn, force=True).changed
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        assert rows(conn, """select count(*) as n from pg_trigger where not tgisinternal
                              and tgrelid = 'memori.pages'::regclass""") == [{"n": 0}]
    _smoke(citus_dsn)


def test_init_distribute_on_the_cluster(citus_db: str) -> None:
    result = CliRunner().invoke(app, ["init", "--distribute", "--dsn", citus_db])
    assert result.exit_code == 0, result.output
    with psycopg.connect(citus_db, autocommit=True) as conn:
        reference, distributed = _planned(conn, "reference"), _planned(conn, "distributed")
    assert f"{len(reference)} reference" in result.output and f"{len(distributed)} distributed" in result.output
    assert "blocked" not in result.output


def _port(dsn: str) -> int:
    return int(dsn.rsplit(":", 1)[1].split("/")[0])


def test_a_coordinator_that_may_hold_shards_is_pm142(citus_dsn: str) -> None:
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute("select citus_set_node_property('127.0.0.1', %s, 'shouldhaveshards', true)", (_port(citus_dsn),))
    with pymemdb.connect(citus_dsn) as db, pytest.raises(CoordinatorHoldsShards) as caught:
        db.cluster.distribute()
    assert caught.value.hint and "'shouldhaveshards', false" in caught.value.hint
    assert placements(citus_dsn) == {}  # nothing was placed


def _remote_commands(conn: psycopg.Connection, query: str, params: Any = None) -> list[str]:
    """The commands the coordinator sends to the workers for ``query`` (citus.log_remote_commands)."""
    sent: list[str] = []

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if message.startswith("issuing "):
            sent.append(message.removeprefix("issuing "))

    conn.add_notice_handler(notice)
    try:
        with conn.transaction():
            conn.execute("set local memori.user_id = 'alice'")
            conn.execute("set local citus.log_remote_commands = on")
            conn.execute("set local client_min_messages = log")
            conn.execute(query, params).fetchall()
    finally:
        conn.remove_notice_handler(notice)
    return sent


def test_the_coordinator_reads_reference_tables_without_a_round_trip(distributed_dsn: str) -> None:
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        # every reference table has a placement on the coordinator (group 0), no distributed shard has
        on_coordinator = rows(conn, """select p.partmethod, count(*) as n from pg_dist_placement pp
                                         join pg_dist_shard s using (shardid)
                                         join pg_dist_partition p using (logicalrelid)
                                        where pp.groupid = 0 group by 1""")
        assert on_coordinator == [{"partmethod": "n", "n": len(_planned(conn, "reference"))}]
        assert rows(conn, "select * from memori._coordinator_reference_gap()") == []
    with psycopg.connect(distributed_dsn) as conn:
        # reads of settings and skills: local, nothing sent to a worker
        assert _remote_commands(conn, "select memori._setting('vm.claim_max_tokens')") == []
        assert _remote_commands(conn, "select * from memori.session_skills") == []
        # a seed 05 save reads its skill locally: only the write of alice's memories goes to a worker
        sent = _remote_commands(conn, "select * from memori.session_checkpoint_save('skill:api-builder', 'alice', 's')")
        assert [c for c in sent if re.search(r"\bmemori\.[a-z_]+_\d{6,}", c)
                and not re.search(r"\bmemori\.memories_\d{6,}", c)] == [], sent
        assert any("memories_" in c for c in sent)
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        # writes still reach every node's copy (two-phase commit), the coordinator's too
        conn.execute("update memori.settings set value = '150' where key = 'vm.claim_max_tokens'")
        copies = rows(conn, """select nodeport, result from run_command_on_placements('memori.settings',
                                 $$select value from %s where key = 'vm.claim_max_tokens'$$)""")
        assert len(copies) == 3 and {c["result"] for c in copies} == {"150"}
        # a CHECK that runs a subtransaction on the coordinator's copy (recall signals): PM093 as on one server
        conn.execute("insert into memori.vm_recall_signals (pattern, description) values ('(shard local)', 'x')")
        assert_sqlstate(conn, "PM093", "insert into memori.vm_recall_signals (pattern) values ('(unclosed')")
    # and an upgrade after all that still installs: it writes reference tables, then changes the schema
    assert install(distributed_dsn, force=True).changed
    result = CliRunner().invoke(app, ["init", "--force", "--distribute", "--dsn", distributed_dsn])
    assert result.exit_code == 0, result.output
    assert "note:" not in result.output


def test_a_coordinator_outside_the_metadata_is_reported_with_the_command(citus_db: str) -> None:
    port = _port(citus_db)
    with psycopg.connect(citus_db, autocommit=True) as conn:
        conn.execute("select citus_remove_node('127.0.0.1', %s)", (port,))
    result = CliRunner().invoke(app, ["init", "--distribute", "--dsn", citus_db])
    assert result.exit_code == 0, result.output
    assert "the coordinator is not a node of this Citus cluster" in result.output
    assert "SELECT citus_set_coordinator_host('<coordinator host>', <port>)" in " ".join(result.output.split())
    with psycopg.connect(citus_db) as conn:  # reads of reference tables go to a worker
        assert any("settings_" in c for c in _remote_commands(conn, "select memori._setting('vm.claim_max_tokens')"))
    # added later, the coordinator has no copy of the tables placed before: said so, with the remedy
    with psycopg.connect(citus_db, autocommit=True) as conn:
        conn.execute("select citus_set_coordinator_host('127.0.0.1', %s)", (port,))
    result = CliRunner().invoke(app, ["init", "--distribute", "--dsn", citus_db])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    with psycopg.connect(citus_db, autocommit=True) as conn:
        n = len(_planned(conn, "reference"))
    assert f"the coordinator holds no placement of {n} of the {n} memori reference tables" in output
    assert "SELECT replicate_reference_tables();" in output
    with psycopg.connect(citus_db, autocommit=True) as conn:
        for statement in ("alter role memori_owner login", "select replicate_reference_tables()",
                          "alter role memori_owner nologin"):
            conn.execute(statement)
        assert rows(conn, "select * from memori._coordinator_reference_gap()") == []
    with psycopg.connect(citus_db) as conn:
        assert _remote_commands(conn, "select memori._setting('vm.claim_max_tokens')") == []


def test_cluster_script_reports_and_exports(citus_cluster: CitusCluster) -> None:
    status = citus_cluster.run("status", str(citus_cluster.directory))
    assert [line.split()[0] for line in status.splitlines()[:3]] == ["coordinator", "worker1", "worker2"]
    assert status.count("running") == 3 and f"dsn {citus_cluster.dsn}" in status
    exports = citus_cluster.exports()
    assert exports["PYMEMDB_CITUS_DSN"] == citus_cluster.dsn
    for worker in ("PYMEMDB_CITUS_WORKER1_DSN", "PYMEMDB_CITUS_WORKER2_DSN"):
        with psycopg.connect(exports[worker], autocommit=True) as conn:
            assert rows(conn, "select extname from pg_extension where extname in ('citus', 'vector') order by 1") == [
                {"extname": "citus"}, {"extname": "vector"}]
    # the servers run as an unprivileged user, never as root
    pids = [int(line.split()[4]) for line in status.splitlines()[:3]]
    assert all(psutil.Process(pid).username() != "root" for pid in pids)


def test_a_worker_restart_keeps_the_placed_rows(citus_dsn: str, citus_cluster: CitusCluster) -> None:
    with pymemdb.connect(citus_dsn) as db:
        db.cluster.distribute()
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        before = rows(conn, "select key, value from memori.settings order by key")
        citus_cluster.run("restart", "worker2", str(citus_cluster.directory))
        assert rows(conn, "select key, value from memori.settings order by key") == before
        conn.execute("update memori.settings set value = value where key = 'cleanup.enabled'")  # 2PC on both workers
    _smoke(citus_dsn)


def test_moving_a_users_shards_to_another_worker_with_the_owner_allowed_to_log_in(distributed_dsn: str) -> None:
    """The docs' recipe for rebalancing: Citus copies a shard as its table's owner, memori_owner, which
    may log in only for the move (ALTER ROLE on the coordinator reaches every node)."""
    with pymemdb.connect(distributed_dsn, user_id="alice") as db:
        db.store.put(["notes"], "k", {"moved": True})
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        shard = rows(conn, "select get_shard_id_for_distribution_column('memori.store_items', 'alice') as id")[0]["id"]
        where = "select nodeport from pg_dist_shard_placement where shardid = %s"
        source = rows(conn, where, (shard,))[0]["nodeport"]
        target = rows(conn, "select nodeport from pg_dist_node where groupid > 0 and shouldhaveshards"
                            " and nodeport <> %s", (source,))[0]["nodeport"]
        move = "select citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s, 'block_writes')"
        with pytest.raises(psycopg.Error, match=r"memori_owner.* is not permitted to log in"):
            conn.execute(move, (shard, source, target))
        conn.execute("alter role memori_owner login")
        try:
            conn.execute(move, (shard, source, target))
        finally:
            conn.execute("alter role memori_owner nologin")
        assert rows(conn, where, (shard,))[0]["nodeport"] == target
        # the co-located shards of every table moved with it, and the owner may not log in anywhere again
        group = rows(conn, "select count(distinct p.nodeport) as nodes from pg_dist_shard s"
                           " join pg_dist_shard_placement p using (shardid)"
                           " join pg_dist_partition d on d.logicalrelid = s.logicalrelid"
                           " where d.partmethod = 'h' and s.shardminvalue = (select shardminvalue from pg_dist_shard"
                           " where shardid = %s)", (shard,))
        assert group == [{"nodes": 1}]
        logins = conn.execute("select result from run_command_on_workers("
                              "$$select rolcanlogin from pg_roles where rolname = 'memori_owner'$$)").fetchall()
        assert logins == [("f",), ("f",)]
    with pymemdb.connect(distributed_dsn, user_id="alice") as db:
        assert db.store.get(["notes"], "k").value == {"moved": True}  # type: ignore[union-attr]


def test_the_psql_install_script_works_on_the_coordinator_before_and_after_distribute(
        citus_db: str, citus_cluster: CitusCluster) -> None:
    from pymemdb.install import head_revision, install_script

    psql = citus_cluster.exports()["PYMEMDB_CITUS_PGBIN"] + "/psql"

    def run(script: str) -> None:
        done = subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", citus_db], input=script,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]

    run(install_script())
    with psycopg.connect(citus_db, autocommit=True) as conn:
        placed = {r["table_name"] for r in rows(conn, "select * from memori.distribute()")
                  if r["status"] in ("reference", "distributed")}
        assert placed == _planned(conn, "reference") | _planned(conn, "distributed")
    run(install_script(head_revision()))  # the upgrade script (sql/ re-applied) after the placement
