"""The LangGraph saver's tables, the store and MCP tokens on the Citus cluster (issue 20).

Three users act through an app role (memori_app) with SET LOCAL memori.user_id,
as the Python client does: the store's API works per user, row-level security
shows and changes only the acting user's rows of every table, and the per-user
reads are routed to one shard. The saver's calls run for three users with their
reads on one shard; mcp_token_verify runs as the app role (docs/scale-out.md,
"LangGraph saver").
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import ormsgpack
import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from psycopg.conninfo import make_conninfo

from pymemdb.install import install
from pymemdb.integrations.langgraph import AsyncMemoriSaver, MemoriSaver, MemoriStore
from tests.citus.conftest import placements
from tests.citus.test_single_shard import _assert_single_shard, _shard_ranges, _traced

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



def test_mcp_token_verify_on_the_cluster(distributed_dsn: str) -> None:
    # tokens issued for three users (a DBA's call), verified by the app role as itself (no security
    # definer: memori_owner never connects to a worker); the lookup by hash runs on every shard
    # (the user is not known before it), in the transaction block the Python client opens
    app = _app_dsn(distributed_dsn)
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        tokens = {user: conn.execute("select token from memori.mcp_token_create(%s, 'cli')", (user,)).fetchone()[0]  # type: ignore[index]
                  for user in USERS}
    with psycopg.connect(app) as conn:
        for user, token in tokens.items():
            with conn.transaction():
                assert conn.execute("select user_id from memori.mcp_token_verify(%s)", (token,)).fetchall() == [(user,)]
            with conn.transaction():  # a request acting for another user learns the token's own user
                conn.execute("set local memori.user_id = 'alice'")
                assert conn.execute("select user_id from memori.mcp_token_verify(%s)", (token,)).fetchall() == [(user,)]
                # the hash is the lookup's only: afterwards no other user's token is visible again
                others = conn.execute("select count(*) from memori.mcp_tokens where user_id <> 'alice'").fetchone()
                assert others == (0,)
        with conn.transaction():  # an unknown token: no row, the refusal recorded as a system event
            assert conn.execute("select * from memori.mcp_token_verify(%s)", ("pmdb_" + "0" * 64,)).fetchall() == []
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        used = conn.execute("select count(*) from memori.mcp_tokens where last_used_at is not null").fetchone()
        refused = conn.execute("select count(*) from memori.events where event_type = 'mcp.auth_refused'"
                               " and payload ->> 'reason' = 'unknown'").fetchone()
    assert used == (3,) and refused == (1,)
    # as the Python client calls it (a transaction per call)
    with MemoriStore(app, user_id="bob") as _, __import__("pymemdb").connect(app) as db:
        principal = db.mcp_tokens.verify(tokens["carol"])
        assert principal is not None and principal.user_id == "carol"


def _messages(n: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [f"m{i}" for i in range(n)], "step": n}
    checkpoint["channel_versions"] = {"messages": str(n), "step": str(n)}
    return checkpoint


async def _async_reads(dsn: str, user: str) -> list[Any]:
    """The latest checkpoint of "chat" read twice by AsyncMemoriSaver (libpq, in the acting user's transaction)."""
    async with AsyncMemoriSaver.from_dsn(dsn, user_id=user, max_size=1) as saver:
        latest: Any = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
        return [await saver.aget_tuple(latest), await saver.aget_tuple(latest)]


def test_saver_on_the_cluster(distributed_dsn: str) -> None:
    """Every saver call for three users as the app role; the reads go to one shard."""
    app = _app_dsn(distributed_dsn)
    for user in USERS:
        with MemoriSaver(app, user_id=user) as saver, MemoriSaver(app, user_id=user, cache_bytes=0) as cold:
            config: Any = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
            saved = []
            for step in (1, 2, 3):  # a growing list: the saver stores deltas on their base versions
                checkpoint = _messages(step)
                config = saver.put(config, checkpoint, {"source": "loop", "step": step, "run_id": f"run-{step}"},
                                   {"messages": str(step), "step": str(step)})
                saver.put_writes(config, [("messages", f"w{step}")], f"task-{step}")
                saved.append(config)
            latest = cold.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}})
            assert latest is not None and latest.checkpoint["channel_values"]["messages"] == ["m0", "m1", "m2"]
            assert [w[1:] for w in latest.pending_writes or []] == [("messages", "w3")]
            assert saver.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}) == latest  # its copy
            assert asyncio.run(_async_reads(app, user)) == [latest, latest]  # cold, then its copy
            first = cold.get_tuple(saved[0])
            assert first is not None and first.checkpoint["channel_values"]["messages"] == ["m0"]
            # LangGraph's DeltaChannel history in one call: the parent's whole value (a delta joined on the shard)
            # and its writes, as LangGraph's own walk of get_tuple reads them
            latest_config: Any = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
            assert cold.get_delta_channel_history(config=latest_config, channels=["messages"]) == \
                BaseCheckpointSaver.get_delta_channel_history(cold, config=latest_config, channels=["messages"]) == \
                {"messages": {"writes": [("task-2", "messages", "w2")], "seed": ["m0", "m1"]}}
            history = list(cold.list({"configurable": {"thread_id": "chat"}}))
            assert [t.metadata["step"] for t in history] == [3, 2, 1]
            assert [t.metadata["step"] for t in cold.list(None, filter={"step": 2})] == [2]
            cold.copy_thread("chat", "copy")
            copied = cold.get_tuple({"configurable": {"thread_id": "copy", "checkpoint_ns": ""}})
            assert copied is not None and copied.checkpoint["channel_values"]["messages"] == ["m0", "m1", "m2"]
            cold.prune(["copy"])
            assert [t.metadata["step"] for t in cold.list({"configurable": {"thread_id": "copy"}})] == [3]
            cold.delete_for_runs(["run-3"])
            assert [t.metadata["step"] for t in cold.list({"configurable": {"thread_id": "chat"}})] == [2, 1]
            cold.delete_thread("copy")
            assert cold.get_tuple({"configurable": {"thread_id": "copy", "checkpoint_ns": ""}}) is None

    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        deltas = conn.execute("select array_agg(distinct user_id order by user_id) from memori.lg_blobs"
                              " where base is not null").fetchone()
    assert deltas == (list(USERS),)  # the reads above joined delta chains on the shards
    # each user's reads are answered by one shard (one node, one hash range)
    shards = _shard_ranges(distributed_dsn)
    with psycopg.connect(app) as conn:
        for user in USERS:
            for name, call in (
                ("lg_checkpoint_get", "select * from memori.lg_checkpoint_get('chat', '', null, %(u)s)"),
                ("lg_checkpoint_stamp", "select * from memori.lg_checkpoint_stamp('chat', '', null, %(u)s)"),
                ("lg_checkpoint_list", "select * from memori.lg_checkpoint_list('chat', p_user_id => %(u)s)"),
                ("lg_blob_value", "select memori.lg_blob_value('chat', 'messages', '2', p_user_id => %(u)s)"),
                ("lg_delta_history", "select * from memori.lg_delta_history('chat', '{messages}', p_user_id => %(u)s)"),
            ):
                _assert_single_shard(name, _traced(conn, user, call), shards, delegated=False)
            with conn.transaction():
                conn.execute(psycopg.sql.SQL("set local memori.user_id = {}").format(psycopg.sql.Literal(user)))
                full = conn.execute("select memori.lg_blob_value('chat', 'messages', '2')").fetchone()
                assert full is not None and ormsgpack.unpackb(full[0]) == ["m0", "m1"]
