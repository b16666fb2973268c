"""The LangGraph saver's tables, the store and MCP tokens on the Citus cluster (issue 20).

Three users act through an app role (memori_app) with SET LOCAL memori.user_id,
as the Python client does: the store's API works per user, row-level security
shows and changes only the acting user's rows of every table, and the per-user
reads are routed to one shard. The saver's own functions and mcp_token_verify
do not run on the cluster yet (docs/scale-out.md, "LangGraph saver"): the
strict xfails below say so, and flip when they do.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.conninfo import make_conninfo

from pymemdb.errors import DatabaseError
from pymemdb.install import install
from pymemdb.integrations.langgraph import MemoriSaver, MemoriStore
from tests.citus.conftest import placements

pytestmark = pytest.mark.citus

LANGGRAPH = ("lg_threads", "lg_checkpoints", "lg_blobs", "lg_writes")
STORE = ("store_namespaces", "store_items", "store_vectors", "mcp_tokens")
USERS = ("alice", "bob", "carol")


def _app_dsn(dsn: str) -> str:
    """A login role in memori_app (CREATE ROLE is propagated to the workers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("create role lg_app login in role memori_app")
        except psycopg.errors.DuplicateObject:
            pass  # roles are the cluster's, not the database's: made by an earlier test
    return make_conninfo(dsn, user="lg_app")


def _embed(texts: list[str]) -> list[list[float]]:
    return [[1.0, 0.0] if "coffee" in t else [0.0, 1.0] for t in texts]


def _as(conn: psycopg.Connection[Any], user: str) -> None:
    conn.execute("begin")
    conn.execute(psycopg.sql.SQL("set local memori.user_id = {}").format(psycopg.sql.Literal(user)))


def _task_count(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> int:
    plan = "\n".join(r[0] for r in conn.execute("explain " + query, params).fetchall())  # type: ignore[operator]
    found = re.search(r"Task Count: (\d+)", plan)
    assert found, plan
    return int(found.group(1))


def _saver_rows(conn: psycopg.Connection[Any], user: str) -> None:
    """A thread with a checkpoint, a blob and a pending write, inserted as the app role for ``user``."""
    _as(conn, user)
    thread = conn.execute(
        "insert into memori.lg_threads (user_id, thread_id, policy, created_at, updated_at)"
        " values (%s, 'chat', 'default', now(), now()) returning id", (user,)).fetchone()[0]  # type: ignore[index]
    checkpoint = conn.execute(
        "insert into memori.lg_checkpoints (user_id, thread, checkpoint_ns, checkpoint_id, policy, checkpoint,"
        " metadata) values (%s, %s, '', gen_random_uuid(), 'default', '{}', '{}') returning checkpoint_id",
        (user, thread)).fetchone()[0]  # type: ignore[index]
    conn.execute(
        "insert into memori.lg_blobs (user_id, thread, checkpoint_ns, channel, version, policy, type, blob)"
        " values (%s, %s, '', 'messages', '1', 'default', 'msgpack', '\\x90')", (user, thread))
    conn.execute(
        "insert into memori.lg_writes (user_id, thread, checkpoint_ns, checkpoint_id, task_id, idx, policy,"
        " channel, type, blob) values (%s, %s, '', %s, 'task', 0, 'default', 'messages', 'msgpack', '\\x90')",
        (user, thread, checkpoint))  # VALUES: Citus runs INSERT ... SELECT as a COPY, which RLS refuses
    conn.execute("commit")


def test_langgraph_tables_and_the_store_on_the_cluster(distributed_dsn: str) -> None:
    placed = placements(distributed_dsn)
    assert {t: placed.get(t) for t in LANGGRAPH + STORE} == dict.fromkeys(LANGGRAPH + STORE, "distributed")
    # sql/ again after distribute(): the functions a routed statement calls on a shard (the
    # store's full-text helpers) reach the workers only when created on a distributed schema
    install(distributed_dsn, force=True)
    app = _app_dsn(distributed_dsn)

    # the store's API, per user, as the app role (SET LOCAL per call: Citus passes it to the shards)
    for user in USERS:
        with MemoriStore(app, user_id=user, index={"dims": 2, "embed": _embed, "fields": ["text"]}) as store:
            store.put(("notes",), "n1", {"text": f"black coffee for {user}"})
            store.put(("notes",), "n2", {"text": f"green tea for {user}"}, ttl=60)
            assert store.get(("notes",), "n2", refresh_ttl=True).value["text"] == f"green tea for {user}"  # type: ignore[union-attr]
            hits = store.search(("notes",), query="coffee")
            assert hits[0].key == "n1" and all(user in h.value["text"] for h in hits)
            assert [h.key for h in store.search(("notes",), filter={"text": f"green tea for {user}"})] == ["n2"]
            assert store.list_namespaces() == [("notes",)]
            store.delete(("notes",), "n2")
            assert [h.key for h in store.search(("notes",))] == ["n1"]

    with psycopg.connect(app, autocommit=True) as conn:
        for user in USERS:
            _saver_rows(conn, user)

        # row-level security: each user sees and changes only its own rows
        for user in USERS:
            other = USERS[(USERS.index(user) + 1) % 3]
            _as(conn, user)
            for table in LANGGRAPH + STORE[:3]:
                seen = conn.execute(f"select array_agg(distinct user_id) from memori.{table}").fetchone()[0]  # type: ignore[index]
                assert seen == [user], (table, seen)
            for table in LANGGRAPH + STORE[:3]:
                if table != "store_namespaces":  # the app role never updates a namespace row
                    assert conn.execute(f"update memori.{table} set user_id = user_id where user_id = %s",
                                        (other,)).rowcount == 0
                assert conn.execute(f"delete from memori.{table} where user_id = %s", (other,)).rowcount == 0
            conn.execute("rollback")
            _as(conn, user)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # WITH CHECK: no row for another user
                conn.execute("insert into memori.lg_threads (user_id, thread_id, policy, created_at, updated_at)"
                             " values (%s, 'x', 'default', now(), now())", (other,))
            conn.execute("rollback")
            # a child row names its thread with its user: another user's thread key is no parent
            _as(conn, user)
            theirs = conn.execute("select id from memori.lg_threads").fetchone()[0]  # type: ignore[index]
            conn.execute("rollback")
            _as(conn, other)
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute("insert into memori.lg_blobs (user_id, thread, checkpoint_ns, channel, version, policy,"
                             " type, blob) values (%s, %s, '', 'c', '9', 'default', 'msgpack', '\\x90')",
                             (other, theirs))
            conn.execute("rollback")

        # per-user reads are single-shard: the saver's latest-checkpoint probe and the store's key read
        _as(conn, "alice")
        thread = conn.execute("select id from memori.lg_threads where user_id = 'alice'").fetchone()[0]  # type: ignore[index]
        assert _task_count(conn, "select c.checkpoint_id from memori.lg_threads t join memori.lg_checkpoints c"
                                 " on c.user_id = t.user_id and c.thread = t.id where t.user_id = 'alice'"
                                 " and t.thread_id = 'chat' and c.checkpoint_ns = '' order by c.checkpoint_id desc"
                                 " limit 1") == 1
        assert _task_count(conn, "select w.idx from memori.lg_writes w where w.user_id = 'alice' and w.thread = %s",
                           (thread,)) == 1
        assert _task_count(conn, "select i.value from memori.store_namespaces d join memori.store_items i"
                                 " on i.user_id = d.user_id and i.ns_id = d.id where d.user_id = 'alice'"
                                 " and d.namespace = '{notes}' and i.key = 'n1'") == 1
        conn.execute("rollback")



@pytest.mark.xfail(strict=True, raises=psycopg.errors.ConnectionFailure,
                   reason="mcp_token_verify is a security definer: Citus connects to the workers as its owner, "
                          "memori_owner, which may not log in (docs/scale-out.md)")
def test_mcp_token_verify_on_the_cluster(distributed_dsn: str) -> None:
    # a token issued for bob (a DBA's call), verified by the app role; the lookup by hash
    # runs on every shard (the user is not known before it), by design
    app = _app_dsn(distributed_dsn)
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        token = conn.execute("select token from memori.mcp_token_create('bob', 'cli')").fetchone()[0]  # type: ignore[index]
    with psycopg.connect(app, autocommit=True) as conn:
        assert conn.execute("select user_id from memori.mcp_token_verify(%s)", (token,)).fetchall() == [("bob",)]


@pytest.mark.xfail(strict=True, raises=DatabaseError,
                   reason="the saver's SQL functions are not cluster-ready: inlined SQL functions and correlated "
                          "laterals over distributed tables, generic plans (docs/scale-out.md)")
def test_saver_on_the_cluster(distributed_dsn: str) -> None:
    app = _app_dsn(distributed_dsn)
    with MemoriSaver(app, user_id="alice") as saver:
        config = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        saved = saver.put(config, checkpoint, {"source": "input", "step": 0}, {})  # type: ignore[arg-type]
        assert saver.get_tuple(saved) is not None
