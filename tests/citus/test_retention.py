"""The retention engine on the three-node Citus cluster (marker ``citus``, issue 20 items 2, 4, 6).

The registry is a reference table (qualified names, no OIDs), the run log and
plan stay on the coordinator, and a batch locks and deletes its rows by
(owner, id), one shard at a time. Tested on the distributed tables of today
(store items, MCP tokens), for three users: preview == execute across shards,
a worker restart in the middle of a run loses nothing, one cleanup at a time
cluster-wide, and none on a worker.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from pymemdb.errors import CleanupAlreadyRunning, NotCoordinator, from_psycopg
from pymemdb.install import install
from tests.citus.conftest import CitusCluster, placements
from tests.helpers import rows, value

pytestmark = pytest.mark.citus

USERS = ("alice", "bob", "carol")
EXPIRED = 7  # expired store items per user (and one expired MCP token each)


def _as(dsn: str, role: str) -> str:
    """The same database, logged in as another role (trust on loopback)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))


def _on_node(dsn: str, node_dsn: str) -> str:
    """This test's database on another node of the cluster."""
    return urlunsplit(urlsplit(node_dsn)._replace(path=urlsplit(dsn).path))


def _roles(dsn: str) -> tuple[str, str]:
    """An app role and a cleaner role with login (roles are cluster-wide: unique names)."""
    tag = uuid.uuid4().hex[:8]
    app, cleaner = f"ret_app_{tag}", f"ret_cleaner_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create role {app} login in role memori_app")
        conn.execute(f"create role {cleaner} login in role memori_cleaner")
    return _as(dsn, app), _as(dsn, cleaner)


def _fill(dsn: str, app_dsn: str, expired: int = EXPIRED) -> None:
    """Per user: expired store items and one live item (as the app role), one expired MCP token
    (issued by the owner role: memori_app may not create tokens)."""
    with psycopg.connect(app_dsn) as app, psycopg.connect(dsn) as admin:
        for user in USERS:
            with app.transaction():
                app.execute(f"set local memori.user_id = '{user}'")
                for i in range(expired):
                    app.execute("select memori.store_put(%s, array['notes'], %s, '{\"n\": 1}', interval '1 hour',"
                                " null, now() - interval '2 days')", (user, f"k{i}"))
                app.execute("select memori.store_put(%s, array['notes'], 'live', '{\"n\": 1}', interval '30 days')",
                            (user,))
            with admin.transaction():
                admin.execute(f"set local memori.user_id = '{user}'")
                admin.execute("select memori.mcp_token_create(%s, 'old', interval '1 hour', now() - interval '2 days')",
                              (user,))


def _left(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            "expired": value(conn, "select count(*) from memori.store_items where expires_at <= now()")
            + value(conn, "select count(*) from memori.mcp_tokens where expires_at <= now()"),
            "live": value(conn, "select count(*) from memori.store_items where expires_at > now()"),
        }


def test_registry_is_a_reference_table_and_the_plan_stays_on_the_coordinator(distributed_dsn: str) -> None:
    placed = placements(distributed_dsn)
    assert placed["retention_tables"] == placed["retention_policies"] == "reference"
    assert placed["store_items"] == placed["mcp_tokens"] == "distributed"
    assert "cleanup_queue" not in placed and "cleanup_runs" not in placed  # plain coordinator tables
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        # names, not OIDs: the same on every node
        registry = dict(conn.execute("select table_name, relation from memori.retention_tables").fetchall())
        assert registry["store_items"] == "memori.store_items"
        owner = "select owner_column from memori.retention_tables where table_name = 'memories'"
        assert value(conn, owner) == "owner_id"
        blocked = rows(conn, "select table_name, blockers from memori.distribute(p_dry_run => true)"
                             " where table_name in ('retention_tables', 'retention_policies', 'cleanup_queue')")
        assert all(r["blockers"] == [] for r in blocked), blocked


def test_three_users_rls_matrix_and_preview_equals_execute_across_shards(distributed_dsn: str) -> None:
    app, cleaner = _roles(distributed_dsn)
    _fill(distributed_dsn, app)
    with psycopg.connect(app) as conn:
        for user in USERS:
            with conn.transaction():
                conn.execute(f"set local memori.user_id = '{user}'")
                # each user sees their own rows only, in the engine's views and its preview
                owners = {r["owner"] for r in rows(conn, "select owner from memori.retention_status"
                                                         " where table_name in ('store_items', 'mcp_tokens')")}
                assert owners == {user}
                mine = rows(conn, "select table_name, owner from memori.cleanup_preview(now(), 4)")
                assert len(mine) == EXPIRED + 1 and {r["owner"] for r in mine} == {user}
                # ...and change nothing of the others'
                others = [u for u in USERS if u != user]
                gone = conn.execute("delete from memori.store_items where user_id = any(%s)", (others,)).rowcount
                assert gone == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select memori.cleanup_execute()")  # running a cleanup is the cleaner's job
    with psycopg.connect(cleaner, autocommit=True) as conn:
        planned = rows(conn, "select batch, table_name, row_id, owner from memori.cleanup_preview(now(), 4)")
        assert len(planned) == 3 * (EXPIRED + 1)
        assert {r["owner"] for r in planned} == set(USERS)
        summary = rows(conn, "select * from memori.cleanup_execute(now(), 4)")[0]
        assert summary["status"] == "succeeded"
        assert summary["planned"] == summary["deleted"] == len(planned)
        assert summary["deleted_by_table"] == {"store_items": 3 * EXPIRED, "mcp_tokens": 3}
        assert summary["batches"] >= max(r["batch"] for r in planned)
        assert value(conn, "select count(*) from memori.cleanup_preview(now())") == 0
    assert _left(distributed_dsn) == {"expired": 0, "live": 3}


def test_the_batch_statements_are_single_shard(distributed_dsn: str) -> None:
    app, _ = _roles(distributed_dsn)
    _fill(distributed_dsn, app, expired=1)
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        item = value(conn, "select id from memori.store_items where user_id = 'alice' and key = 'k0'")
        shapes = {
            # a batch's re-check of rows a writer held: are they still due? (the preview and plan
            # read every shard by design: one global order)
            "read": "select t.user_id, t.id from memori.store_items t where t.user_id = any ('{alice}'::text[])"
                    " and (t.user_id, t.id) in (select * from unnest('{alice}'::text[], %s::bigint[]))"
                    " and t.expires_at is not null and t.expires_at <= now()",
            # a batch's lock and delete for the owners of one shard (_cleanup_delete_range)
            "lock": "select t.user_id, t.id from memori.store_items t where t.user_id = any ('{alice}'::text[])"
                    " and (t.user_id, t.id) in (select * from unnest('{alice}'::text[], %s::bigint[]))"
                    " order by t.id for update of t skip locked",
            "delete": "delete from memori.store_items t using (select x.o, x.i from unnest('{alice}'::text[],"
                      " %s::bigint[]) with ordinality x(o, i, n) order by x.n) x"
                      " where t.user_id = any ('{alice}'::text[]) and t.id = x.i and t.user_id = x.o",
        }
        for name, statement in shapes.items():
            with conn.transaction():
                plan = "\n".join(r[0] for r in conn.execute("explain " + statement, ([item],) * statement.count("%s")))
                assert "Task Count: 1" in plan, (name, plan)


def test_a_worker_restart_in_the_middle_of_a_cleanup_loses_nothing(
        distributed_dsn: str, citus_cluster: CitusCluster) -> None:
    app, cleaner = _roles(distributed_dsn)
    _fill(distributed_dsn, app)
    due = _left(distributed_dsn)["expired"]
    assert due == 3 * (EXPIRED + 1)
    deleted = 0
    with psycopg.connect(cleaner, autocommit=True) as conn:
        run = rows(conn, "select * from memori.cleanup_begin(now(), 3)")[0]
        for _ in range(2):
            deleted += rows(conn, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]["deleted"]
        citus_cluster.run("restart", "worker2", str(citus_cluster.directory))
        # the run goes on or fails on the lost connection; either way nothing half-done stays
        try:
            while True:
                batch = rows(conn, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
                deleted += batch["deleted"]
                if batch["done"]:
                    break
            conn.execute("select memori.cleanup_finish(%s)", (run["id"],))
        except psycopg.Error:
            pass  # the connection (and its session lock) goes; the next run marks this one abandoned
    assert deleted == 3 * 2 or deleted == due  # two batches of 3 committed, or the whole run
    assert _left(distributed_dsn)["live"] == 3
    with psycopg.connect(cleaner, autocommit=True) as conn:
        summary = rows(conn, "select * from memori.cleanup_execute(now(), 3)")[0]
        assert summary["deleted"] == due - deleted
    assert _left(distributed_dsn) == {"expired": 0, "live": 3}


def test_one_cleanup_at_a_time_cluster_wide_and_none_on_a_worker(
        distributed_dsn: str, citus_cluster: CitusCluster) -> None:
    app, cleaner = _roles(distributed_dsn)
    _fill(distributed_dsn, app, expired=2)
    with psycopg.connect(cleaner, autocommit=True) as first, psycopg.connect(cleaner, autocommit=True) as second:
        run = rows(first, "select * from memori.cleanup_begin(now(), 2)")[0]
        with pytest.raises(psycopg.Error) as refused:
            second.execute("select memori.cleanup_execute(now(), 2)")
        assert isinstance(from_psycopg(refused.value), CleanupAlreadyRunning)
        rows(first, "select * from memori.cleanup_batch(%s)", (run["id"],))
        first.execute("select memori.cleanup_finish(%s)", (run["id"],))
        assert rows(second, "select * from memori.cleanup_execute(now(), 2)")[0]["status"] == "succeeded"
    # On a worker: PM141 once the functions are there (Citus propagates them with a `pymemdb init`
    # after distribute()), before that they do not exist there at all.
    install(distributed_dsn, force=True)
    worker = _on_node(distributed_dsn, citus_cluster.exports()["PYMEMDB_CITUS_WORKER1_DSN"])
    with psycopg.connect(worker, autocommit=True) as conn:
        for statement in ("select memori.cleanup_execute()", "call memori.cleanup_run()"):
            with pytest.raises(psycopg.Error) as refused:
                conn.execute(statement)
            assert isinstance(from_psycopg(refused.value), NotCoordinator), statement
    assert _left(distributed_dsn)["live"] == 3
