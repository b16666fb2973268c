"""LangGraph storage through SQL: users, supersede-and-expire, idle threads, prune, runs, copy, retention cycles.

Every test here (and in test_langgraph_delta) runs twice: on the saver's reads as
one server has them (LANGUAGE sql, inlined) and as a Citus server has them
(PL/pgSQL of the same statement, memori._as_plpgsql).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from tests.helpers import T0, assert_sqlstate, memory, one, rows, value

DAY = timedelta(days=1)
SEC = timedelta(seconds=1)
KEEP = 30 * DAY  # the default policy's retention of superseded checkpoints
READS = ("memori.lg_checkpoint_stamp(text,text,uuid,text,timestamp with time zone)",
         "memori.lg_checkpoint_get(text,text,uuid,text,timestamp with time zone,text,text)")


@pytest.fixture(name="dsn", params=["sql", "plpgsql"])
def dsn_of_each_read_form(dsn: str, request: pytest.FixtureRequest) -> str:
    """A fresh database, its saver reads in the form the parameter names."""
    if request.param == "plpgsql":
        with psycopg.connect(dsn, autocommit=True) as conn:
            made = [conn.execute("select memori._as_plpgsql(%s, 'memori._lg_acting(p_user_id)')", (f,)).fetchone()
                    for f in (*READS, *READS)]
            assert made == [(True,), (True,), (False,), (False,)]  # the second time: already PL/pgSQL
    return dsn


def read_form(conn: psycopg.Connection) -> str:
    forms = {r["sig"]: (r["lang"], tuple(r["proconfig"] or ())) for r in rows(conn, """
        select p.oid::regprocedure::text as sig, l.lanname as lang, p.proconfig
          from pg_proc p join pg_language l on l.oid = p.prolang
         where p.oid = any (%s::regprocedure[])""", (list(READS),))}
    assert len(forms) == 2
    assert set(forms.values()) in ({("sql", ())}, {("plpgsql", ("search_path=pg_catalog, memori, pg_temp",))})
    return next(iter(forms.values()))[0]


def cid(n: int) -> UUID:
    """Checkpoint ids in put order (LangGraph's uuid6 sort by time)."""
    return UUID(int=n)


def put(conn: psycopg.Connection, thread: str, n: int, versions: dict[str, str], *, parent: int | None = None,
        blobs: dict[str, str] | None = None, at: datetime = T0, user: str = "alice", ns: str = "",
        metadata: dict[str, Any] | None = None, policy: str = "default") -> None:
    """A checkpoint whose channels are at ``versions``; ``blobs`` = {channel: version} stored with it."""
    blobs = blobs or {}
    conn.execute(
        "select memori.lg_checkpoint_put(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::bytea[], %s, %s, %s)",
        (thread, ns, cid(n), cid(parent) if parent is not None else None,
         Jsonb({"v": 4, "ts": at.isoformat(), "channel_values": {}, "channel_versions": versions,
                "versions_seen": {}}),
         Jsonb(metadata if metadata is not None else {"source": "loop", "step": n}),
         list(blobs), list(blobs.values()), ["bytes"] * len(blobs),
         [f"{c}@{v}".encode() for c, v in blobs.items()], policy, user, at))


def get(conn: psycopg.Connection, thread: str, n: int | None = None, *, at: datetime = T0, user: str = "alice",
        ns: str = "") -> dict[str, Any] | None:
    return one(conn, "select * from memori.lg_checkpoint_get(%s, %s, %s, %s, %s)",
               (thread, ns, cid(n) if n is not None else None, user, at))


def blob_values(row: dict[str, Any] | None) -> dict[str, bytes]:
    assert row is not None
    return dict(zip(row["blob_channels"] or [], [bytes(b) for b in row["blob_values"] or []], strict=True))


def expiries(conn: psycopg.Connection, table: str) -> dict[str, Any]:
    key = {"lg_checkpoints": "c.checkpoint_id::text", "lg_blobs": "c.channel || '@' || c.version"}[table]
    return {r["k"]: r["expires_at"] for r in rows(conn, f"select {key} as k, c.expires_at from memori.{table} c")}


def cleanup(conn: psycopg.Connection, at: datetime) -> dict[str, int]:
    summary = one(conn, "select * from memori.cleanup_execute(%s)", (at,))
    assert summary is not None
    return {k: v for k, v in summary["deleted_by_table"].items() if v}


# -- users -------------------------------------------------------------------------
def test_state_belongs_to_a_user(conn: psycopg.Connection) -> None:
    err = assert_sqlstate(conn, "PM001", "select memori.lg_checkpoint_put('t', '', %s, null, '{}', '{}')", (cid(1),))
    assert "user_id" in (err.diag.message_hint or "")
    conn.execute("set memori.user_id = 'carol'")
    conn.execute("select memori.lg_checkpoint_put('t', '', %s, null, '{}', '{}', p_now => %s)", (cid(1), T0))
    assert value(conn, "select user_id from memori.lg_threads") == "carol"
    assert value(conn, "select count(*) from memori.lg_checkpoint_get('t', p_now => %s)", (T0,)) == 1


def test_one_thread_id_of_two_users_is_two_threads(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, user="alice")
    put(conn, "t", 2, {"a": "1"}, blobs={"a": "1"}, user="bob")
    assert get(conn, "t", user="alice")["checkpoint_id"] == cid(1)  # type: ignore[index]
    assert get(conn, "t", user="bob")["checkpoint_id"] == cid(2)  # type: ignore[index]
    conn.execute("select memori.lg_thread_delete('t', 'bob')")
    assert get(conn, "t", user="bob") is None and get(conn, "t", user="alice") is not None
    assert value(conn, "select count(*) from memori.lg_blobs where user_id = 'alice'") == 1


def test_unknown_policy_is_refused(conn: psycopg.Connection) -> None:
    err = assert_sqlstate(conn, "PM004", "select memori.lg_checkpoint_put('t', '', %s, null, '{}', '{}', "
                                         "p_policy => 'nope', p_user_id => 'u')", (cid(1),))
    assert "default" in (err.diag.message_hint or "")


# -- supersede and expire --------------------------------------------------------------
def test_latest_is_kept_superseded_expire_with_the_blobs_only_they_use(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1", "b": "1"}, blobs={"a": "1", "b": "1"}, at=T0)
    put(conn, "t", 2, {"a": "2", "b": "1"}, parent=1, blobs={"a": "2"}, at=T0 + DAY)
    assert expiries(conn, "lg_checkpoints") == {str(cid(1)): T0 + DAY + KEEP, str(cid(2)): None}
    # b@1 is still carried by the latest checkpoint: it does not expire
    assert expiries(conn, "lg_blobs") == {"a@1": T0 + DAY + KEEP, "b@1": None, "a@2": None}
    assert blob_values(get(conn, "t", at=T0 + DAY)) == {"a": b"a@2", "b": b"b@1"}


def test_a_checkpoint_without_channel_versions_is_superseded_too(conn: psycopg.Connection) -> None:
    # a bare checkpoint object (SQL callers): nothing to expire but itself
    for n in (1, 2):
        conn.execute("select memori.lg_checkpoint_put('t', '', %s, null, '{}', '{}', p_user_id => 'u', p_now => %s)",
                     (cid(n), T0 + n * SEC))
    assert expiries(conn, "lg_checkpoints") == {str(cid(1)): T0 + 2 * SEC + KEEP, str(cid(2)): None}


def test_expiry_boundary_to_the_second(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, at=T0)
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, at=T0)
    assert get(conn, "t", 1, at=T0 + KEEP - SEC) is not None
    assert blob_values(get(conn, "t", 1, at=T0 + KEEP - SEC)) == {"a": b"a@1"}
    assert get(conn, "t", 1, at=T0 + KEEP) is None  # the boundary second belongs to "expired"
    assert value(conn, "select count(*) from memori.lg_checkpoint_list('t', p_user_id => 'alice', p_now => %s)",
                 (T0 + KEEP,)) == 1
    assert cleanup(conn, T0 + KEEP - SEC) == {}
    assert cleanup(conn, T0 + KEEP) == {"lg_checkpoints": 1, "lg_blobs": 1}
    assert blob_values(get(conn, "t", at=T0 + KEEP)) == {"a": b"a@2"}


def test_retention_cycle_removes_expired_langgraph_state_and_nothing_else(conn: psycopg.Connection) -> None:
    memory(conn, "permanent_alice", None)
    for thread in ("t1", "t2"):
        put(conn, thread, 1, {"a": "1", "b": "1"}, blobs={"a": "1", "b": "1"}, at=T0)
        put(conn, thread, 2, {"a": "2", "b": "1"}, parent=1, blobs={"a": "2"}, at=T0)
        put(conn, thread, 3, {"a": "3", "b": "1"}, parent=2, blobs={"a": "3"}, at=T0)
        conn.execute("select memori.lg_writes_put(%s, '', %s, 'task', '', '{0}', '{ch}', '{bytes}', '{x}'::bytea[],"
                     " p_user_id => 'alice', p_now => %s)", (thread, cid(2), T0))
        conn.execute("select memori.lg_writes_put(%s, '', %s, 'task', '', '{0}', '{ch}', '{bytes}', '{y}'::bytea[],"
                     " p_user_id => 'alice', p_now => %s)", (thread, cid(3), T0))
    preview = rows(conn, "select table_name, count(*) as n from memori.cleanup_preview(%s) group by 1 order by 1",
                   (T0 + KEEP,))
    assert preview == [{"table_name": "lg_blobs", "n": 4}, {"table_name": "lg_checkpoints", "n": 4},
                       {"table_name": "lg_writes", "n": 2}]
    assert cleanup(conn, T0 + KEEP) == {"lg_blobs": 4, "lg_checkpoints": 4, "lg_writes": 2}  # = the preview
    for thread in ("t1", "t2"):
        latest = get(conn, thread, at=T0 + KEEP)
        assert latest is not None and latest["checkpoint_id"] == cid(3)
        assert blob_values(latest) == {"a": b"a@3", "b": b"b@1"}
        assert [bytes(v) for v in latest["write_values"]] == [b"y"]
    # the superseded checkpoint's writes went with it; the memory was not touched
    assert value(conn, "select count(*) from memori.lg_writes") == 2
    assert value(conn, "select count(*) from memori.memories") == 1


def test_a_put_below_the_latest_is_superseded_at_once(conn: psycopg.Connection) -> None:
    put(conn, "t", 5, {"a": "5"}, blobs={"a": "5"})
    put(conn, "t", 3, {"a": "3"}, blobs={"a": "3"})  # copied or raced: older than the latest
    assert expiries(conn, "lg_checkpoints") == {str(cid(5)): None, str(cid(3)): T0 + KEEP}
    assert get(conn, "t")["checkpoint_id"] == cid(5)  # type: ignore[index]


def test_forking_from_an_old_checkpoint_keeps_the_blobs_it_carries(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1", "b": "1"}, blobs={"a": "1", "b": "1"})
    put(conn, "t", 2, {"a": "2", "b": "2"}, parent=1, blobs={"a": "2", "b": "2"})
    assert expiries(conn, "lg_blobs")["b@1"] == T0 + KEEP
    # update_state on checkpoint 1: the fork carries b@1 and writes a new a
    put(conn, "t", 3, {"a": "3x", "b": "1"}, parent=1, blobs={"a": "3x"}, at=T0 + DAY)
    blobs = expiries(conn, "lg_blobs")
    assert blobs["b@1"] is None and blobs["a@3x"] is None
    assert blobs["a@2"] == blobs["b@2"] == T0 + DAY + KEEP
    cleanup(conn, T0 + DAY + KEEP)
    assert blob_values(get(conn, "t", at=T0 + DAY + KEEP)) == {"a": b"a@3x", "b": b"b@1"}


def test_namespaces_supersede_separately(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"})
    put(conn, "t", 2, {"a": "1"}, blobs={"a": "1"}, ns="child:1")
    put(conn, "t", 3, {"a": "2"}, parent=1, blobs={"a": "2"})
    assert expiries(conn, "lg_checkpoints") == {str(cid(1)): T0 + KEEP, str(cid(2)): None, str(cid(3)): None}


def test_policy_is_per_saver(conn: psycopg.Connection) -> None:
    conn.execute("select memori.lg_policy_set('short', '1 day', '7 days')")
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, policy="short")
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, policy="short")
    assert expiries(conn, "lg_checkpoints")[str(cid(1))] == T0 + DAY
    assert value(conn, "select expires_at from memori.lg_threads") == T0 + 7 * DAY
    kinds = rows(conn, "select table_name, kind, retention from memori.retention_policies "
                       "where kind = 'short' order by 1")
    assert [(k["table_name"], k["retention"]) for k in kinds] == [
        ("lg_blobs", DAY), ("lg_checkpoints", DAY), ("lg_threads", 7 * DAY), ("lg_writes", DAY)]
    assert_sqlstate(conn, "PM001", "select memori.lg_policy_set('bad', '-1 day')")


# -- idle threads ----------------------------------------------------------------------
def test_idle_threads_expire_whole_and_do_not_come_back(conn: psycopg.Connection) -> None:
    conn.execute("select memori.lg_policy_set('short', '1 day', '7 days')")
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, policy="short")
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, policy="short", at=T0 + DAY)
    idle_end = T0 + DAY + 7 * DAY
    assert get(conn, "t", at=idle_end - SEC) is not None
    assert get(conn, "t", at=idle_end) is None
    # a put after expiry (before cleanup ran) starts a new thread: the old state stays gone
    put(conn, "t", 9, {"a": "9"}, blobs={"a": "9"}, policy="short", at=idle_end)
    assert [r["checkpoint_id"] for r in rows(conn, "select * from memori.lg_checkpoint_list('t', p_user_id => "
                                                   "'alice', p_now => %s)", (idle_end,))] == [cid(9)]
    assert value(conn, "select count(*) from memori.lg_checkpoints") == 1


def test_cleanup_of_an_idle_thread_takes_everything_of_it(conn: psycopg.Connection) -> None:
    conn.execute("select memori.lg_policy_set('short', '30 days', '7 days')")
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, policy="short")
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, policy="short")
    conn.execute("select memori.lg_writes_put('t', '', %s, 'task', '', '{0}', '{ch}', '{bytes}', '{x}'::bytea[],"
                 " p_policy => 'short', p_user_id => 'alice', p_now => %s)", (cid(2), T0))
    put(conn, "other", 1, {"a": "1"}, blobs={"a": "1"})
    assert cleanup(conn, T0 + 7 * DAY) == {"lg_threads": 1}
    assert value(conn, "select count(*) from memori.lg_checkpoints") == 1
    assert value(conn, "select count(*) from memori.lg_blobs") == 1
    assert value(conn, "select count(*) from memori.lg_writes") == 0
    assert rows(conn, "select event_type from memori.events where event_type like 'langgraph.thread.%' "
                      "order by id") == [{"event_type": "langgraph.thread.expired"},
                                         {"event_type": "langgraph.thread.cleaned_up"},
                                         {"event_type": "langgraph.thread.cleanup_batch_completed"}]


# -- DeltaChannel graphs ---------------------------------------------------------------
def test_delta_channel_threads_are_never_thinned(conn: psycopg.Connection) -> None:
    delta = {"source": "loop", "step": 1, "counters_since_delta_snapshot": {"messages": [1, 1]}}
    put(conn, "d", 1, {"m": "1"}, blobs={"m": "1"}, metadata=delta)
    put(conn, "d", 2, {"m": "2"}, parent=1, blobs={"m": "2"})  # later metadata without the marker
    assert set(expiries(conn, "lg_checkpoints").values()) == {None}
    assert value(conn, "select uses_delta from memori.lg_threads") is True
    err = assert_sqlstate(conn, "PM080", "select memori.lg_threads_prune('{d}', 'keep_latest', 'alice')")
    assert "delete" in (err.diag.message_hint or "")
    assert value(conn, "select count(*) from memori.lg_checkpoints") == 2
    assert value(conn, "select threads from memori.lg_threads_prune('{d}', 'delete', 'alice')") == 1


def test_a_deltachannel_snapshot_alone_marks_the_thread(conn: psycopg.Connection) -> None:
    """A snapshot (a blob behind LangGraph's inline true marker) marks a DeltaChannel thread without the metadata
    counters; a plain inline true (no blob) does not: its checkpoints thin as usual."""
    for thread, blobs in (("snap", ["items"]), ("plain", [])):
        for n in (1, 2):
            conn.execute("select memori.lg_checkpoint_put(%s, '', %s, %s, %s, '{}', %s, %s, %s, %s::bytea[],"
                         " p_user_id => 'alice', p_now => %s)",
                         (thread, cid(n), cid(n - 1) if n > 1 else None,
                          Jsonb({"v": 4, "channel_values": {"items": True} if n == 1 else {},
                                 "channel_versions": {"items": str(n)}}),
                          blobs if n == 1 else [], ["1"] if blobs and n == 1 else [],
                          ["msgpack"] if blobs and n == 1 else [], [b"\xc7"] if blobs and n == 1 else [], T0))
    marked = {r["thread_id"]: r["uses_delta"]
              for r in rows(conn, "select thread_id, uses_delta from memori.lg_threads")}
    assert marked == {"snap": True, "plain": False}
    assert value(conn, "select count(*) from memori.lg_checkpoints c join memori.lg_threads t on t.id = c.thread"
                       " where t.thread_id = 'plain' and c.expires_at is not null") == 1


def _write(conn: psycopg.Connection, thread: str, n: int, task: str, path: str, channel: str, data: str) -> None:
    conn.execute("select memori.lg_writes_put(%s, '', %s, %s, %s, '{0}', %s, '{bytes}', %s::bytea[],"
                 " p_user_id => 'alice', p_now => %s)", (thread, cid(n), task, path, [channel], [data.encode()], T0))


def _history(conn: psycopg.Connection, thread: str, at: datetime, n: int | None = None) -> list[dict[str, Any]]:
    return rows(conn, "select channel, seeded, seed_version, seed_type, seed_value, seed_inline, write_task_ids,"
                      " write_values from memori.lg_delta_history(%s, '{a,b}', '', %s, 'alice', %s)",
                (thread, cid(n) if n is not None else None, at))


def test_delta_history_stops_at_an_expired_ancestor(conn: psycopg.Connection) -> None:
    """The walk ends where a read of the parent would find nothing: at the superseded checkpoints' expiry."""
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"})
    put(conn, "t", 2, {"a": "2"}, parent=1)  # a DeltaChannel between snapshots: a version, no value
    put(conn, "t", 3, {"a": "3"}, parent=2)
    for n, task in ((1, "t1"), (2, "t2"), (3, "t3")):
        _write(conn, "t", n, task, "", "a", f"w{n}")
    before = _history(conn, "t", T0 + KEEP - SEC)
    assert [(r["channel"], r["seeded"], r["seed_version"], r["seed_type"], r["write_task_ids"]) for r in before] == \
        [("a", True, "1", "bytes", ["t1", "t2"]), ("b", False, None, None, [])]  # 3's own write is pending
    assert bytes(before[0]["seed_value"]) == b"a@1" and [bytes(v) for v in before[0]["write_values"]] == [b"w1", b"w2"]
    after = _history(conn, "t", T0 + KEEP)  # checkpoints 1 and 2 expired (3 is the latest: kept)
    assert [(r["channel"], r["seeded"], r["write_task_ids"]) for r in after] == [("a", False, []), ("b", False, [])]
    assert [r["write_task_ids"] for r in _history(conn, "t", T0, 2)] == [["t1"], []]  # from a given checkpoint
    assert _history(conn, "missing", T0) == [
        {"channel": c, "seeded": False, "seed_version": None, "seed_type": None, "seed_value": None,
         "seed_inline": None, "write_task_ids": [], "write_values": []} for c in ("a", "b")]


def test_delta_history_orders_writes_by_code_point_and_ends_a_cycle(conn: psycopg.Connection) -> None:
    """writes_sort_key order (task_path, task_id, idx) by code point whatever the database's collation; a parent
    cycle (a put may make one; LangGraph never does) is walked once."""
    put(conn, "t", 5, {"b": "1"}, parent=6)
    put(conn, "t", 6, {"b": "2"}, parent=5)
    for task, path in (("x", "b"), ("y", "B"), ("z", ""), ("w", "é"), ("v", "~__pregel_pull, n")):
        _write(conn, "t", 5, task, path, "b", task)
    _write(conn, "t", 6, "t6", "", "b", "own")
    found = _history(conn, "t", T0)
    assert found[1]["channel"] == "b" and not found[1]["seeded"]
    assert found[1]["write_task_ids"] == ["z", "y", "x", "v", "w"]  # '', 'B', 'b', '~...', 'é'
    assert sorted(["b", "B", "", "é", "~__pregel_pull, n"]) == ["", "B", "b", "~__pregel_pull, n", "é"]


def test_delta_history_seeds_from_an_inline_value(conn: psycopg.Connection) -> None:
    """A value kept in the checkpoint's channel_values (LangGraph's primitives, JSON null included) is a seed."""
    for n, inline in ((1, {"a": None, "b": 7}), (2, {})):
        conn.execute("select memori.lg_checkpoint_put('i', '', %s, %s, %s, '{}', '{}', '{}', '{}', '{}'::bytea[],"
                     " p_user_id => 'alice', p_now => %s)",
                     (cid(n), cid(n - 1) if n > 1 else None,
                      Jsonb({"v": 4, "channel_values": inline, "channel_versions": {"a": str(n), "b": str(n)}}), T0))
    assert [(r["channel"], r["seeded"], r["seed_version"], r["seed_inline"]) for r in _history(conn, "i", T0)] == \
        [("a", True, "1", None), ("b", True, "1", 7)]
    assert value(conn, "select seed_inline is not null from memori.lg_delta_history('i', '{a}', p_user_id => 'alice',"
                       " p_now => %s)", (T0,)) is True  # JSON null, not SQL NULL: seeded with None


# -- prune, runs, copy, delete -----------------------------------------------------------
def test_prune_keep_latest_keeps_one_per_namespace_and_its_blobs(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1", "b": "1"}, blobs={"a": "1", "b": "1"})
    put(conn, "t", 2, {"a": "2", "b": "1"}, parent=1, blobs={"a": "2"})
    put(conn, "t", 3, {"a": "3", "b": "1"}, parent=2, blobs={"a": "3"})
    put(conn, "t", 4, {"a": "1"}, blobs={"a": "1"}, ns="child:1")
    put(conn, "t", 5, {"a": "5"}, parent=4, blobs={"a": "5"}, ns="child:1")
    result = one(conn, "select * from memori.lg_threads_prune('{t}', 'keep_latest', 'alice', %s)", (T0,))
    assert result == {"threads": 0, "checkpoints": 3, "blobs": 3}
    latest = get(conn, "t")
    assert latest is not None and latest["parent_id"] is None  # its parent is gone
    assert blob_values(latest) == {"a": b"a@3", "b": b"b@1"}
    assert set(expiries(conn, "lg_checkpoints").values()) == {None}
    assert_sqlstate(conn, "PM001", "select memori.lg_threads_prune('{t}', 'oldest', 'alice')")
    assert one(conn, "select * from memori.lg_threads_prune('{}', 'keep_latest', 'alice')") == \
        {"threads": 0, "checkpoints": 0, "blobs": 0}


def test_delete_for_runs_keeps_a_latest_checkpoint(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, metadata={"run_id": "r1"})
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, metadata={"run_id": "r2"})
    assert value(conn, "select memori.lg_runs_delete('{r2}', 'alice', %s)", (T0,)) == 1
    latest = get(conn, "t")
    assert latest is not None and latest["checkpoint_id"] == cid(1)
    assert expiries(conn, "lg_checkpoints") == {str(cid(1)): None}  # it is the latest again: kept
    assert expiries(conn, "lg_blobs") == {"a@1": None}  # a@2 went with its checkpoint
    assert value(conn, "select memori.lg_runs_delete('{}', 'alice')") == 0


def test_deleting_the_latest_run_never_revives_an_expired_checkpoint(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, metadata={"run_id": "r1"})
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, metadata={"run_id": "r2"})
    # checkpoint 1 has expired (cleanup has not run yet) when run r2 is deleted
    assert value(conn, "select memori.lg_runs_delete('{r2}', 'alice', %s)", (T0 + KEEP,)) == 1
    assert get(conn, "t", at=T0 + KEEP) is None
    assert expiries(conn, "lg_checkpoints") == {str(cid(1)): T0 + KEEP}


def test_copy_thread_copies_everything_unexpired_and_keeps_ids(conn: psycopg.Connection) -> None:
    put(conn, "src", 1, {"a": "1"}, blobs={"a": "1"})
    put(conn, "src", 2, {"a": "2"}, parent=1, blobs={"a": "2"})
    conn.execute("select memori.lg_writes_put('src', '', %s, 'task', '', '{0}', '{ch}', '{bytes}', '{x}'::bytea[],"
                 " p_user_id => 'alice', p_now => %s)", (cid(2), T0))
    assert value(conn, "select memori.lg_thread_copy('src', 'dst', p_user_id => 'alice', p_now => %s)",
                 (T0 + KEEP,)) == 1  # checkpoint 1 had expired
    copied = get(conn, "dst", at=T0 + KEEP)
    assert copied is not None and copied["checkpoint_id"] == cid(2)
    assert blob_values(copied) == {"a": b"a@2"} and [bytes(v) for v in copied["write_values"]] == [b"x"]
    assert value(conn, "select memori.lg_thread_copy('missing', 'dst2', p_user_id => 'alice')") == 0
    assert value(conn, "select count(*) from memori.lg_threads where thread_id = 'dst2'") == 0


def test_list_filters(conn: psycopg.Connection) -> None:
    for n in range(1, 5):
        put(conn, "t", n, {}, parent=n - 1 if n > 1 else None,
            metadata={"source": "input" if n % 2 else "loop", "step": n})
    put(conn, "u", 9, {})

    def ids(**kw: Any) -> list[int]:
        args = ", ".join(f"{k} => %({k})s" for k in kw)
        found = rows(conn, f"select checkpoint_id from memori.lg_checkpoint_list({args}, p_user_id => 'alice',"
                           " p_now => %(now)s)", {**kw, "now": T0})
        return [r["checkpoint_id"].int for r in found]

    assert ids(p_thread_id="t") == [4, 3, 2, 1]
    assert ids(p_thread_id="t", p_filter=Jsonb({"source": "input"})) == [3, 1]
    assert ids(p_thread_id="t", p_before=cid(3), p_limit=1) == [2]
    assert ids(p_limit=2) == [9, 4]  # every thread of the user
    assert_sqlstate(conn, "PM001", "select * from memori.lg_checkpoint_list(p_limit => -1, p_user_id => 'a')")
    assert_sqlstate(conn, "PM001", "select * from memori.lg_checkpoint_list(p_filter => '[]', p_user_id => 'a')")


def stamp(conn: psycopg.Connection, thread: str, n: int | None = None, *, at: datetime = T0,
          user: str | None = "alice") -> tuple[str, str] | None:
    found = one(conn, "select * from memori.lg_checkpoint_stamp(%s, '', %s, %s, %s)",
                (thread, cid(n) if n is not None else None, user, at))
    return None if found is None else (found["stamp"], found["writes_stamp"])


WRITE = ("select * from memori.lg_writes_put('t', '', %s, %s, '', %s, %s, %s, %s::bytea[], p_user_id => 'alice',"
         " p_now => %s, p_known_writes => %s)")


def test_stamps_change_with_every_change_and_agree_with_the_full_read(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"})
    first = stamp(conn, "t")
    full = get(conn, "t")
    assert first is not None and full is not None and first == (full["stamp"], full["writes_stamp"])
    assert first[1] == "" and stamp(conn, "t", 1) == first  # by id: the same checkpoint
    conn.execute(WRITE, (cid(1), "task", [0], ["ch"], ["bytes"], [b"x"], T0, None))
    written = stamp(conn, "t")
    assert written is not None and written[0] == first[0] and written[1] not in ("", first[1])
    put(conn, "t", 2, {"a": "2"}, blobs={"a": "2"}, parent=1)
    latest = stamp(conn, "t")
    assert latest is not None and latest[0] != first[0] and latest[0].endswith(str(cid(2)))
    assert stamp(conn, "t", 1) not in (None, written)  # superseded: its row changed
    conn.execute("update memori.lg_checkpoints set metadata = '{}' where checkpoint_id = %s", (cid(2),))
    assert stamp(conn, "t") != latest  # an update in psql
    assert stamp(conn, "t", user="bob") is None and stamp(conn, "nope") is None
    assert stamp(conn, "t", 1, at=T0 + KEEP - SEC) is not None
    assert stamp(conn, "t", 1, at=T0 + KEEP) is None  # expired at the boundary second, as lg_checkpoint_get
    assert_sqlstate(conn, "PM001", "select * from memori.lg_checkpoint_stamp('t')")
    conn.execute("select memori.lg_thread_delete('t', 'alice')")
    put(conn, "t", 2, {"a": "2"}, blobs={"a": "2"})  # the same ids again, in a new thread
    assert stamp(conn, "t") not in (None, latest)


def test_writes_put_vouches_for_a_copy_only_when_it_plus_these_writes_is_all(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {})

    def write(task: str, idx: int, data: bytes, known: str | None) -> str | None:
        row = one(conn, WRITE, (cid(1), task, [idx], ["ch"], ["bytes"], [data], T0, known))
        assert row is not None
        return cast(str | None, row["writes_stamp"])

    assert write("a", 0, b"1", None) is None  # no copy, no stamp
    known = stamp(conn, "t")
    assert known is not None
    mine = write("b", 0, b"2", known[1])
    assert mine is not None and mine == stamp(conn, "t")[1]  # type: ignore[index]
    assert write("b", 0, b"2", mine) == mine  # a retried regular write changes nothing
    write("c", 0, b"3", None)  # another process
    assert write("d", 0, b"4", mine) is None  # our copy misses c's write
    current = stamp(conn, "t")[1]  # type: ignore[index]
    assert write("e", -1, b"err", current) is not None
    assert write("e", -1, b"err again", stamp(conn, "t")[1]) is None  # type: ignore[index]  # a replaced row


def test_the_reads_are_inlined_on_one_server_and_one_statement_of_plpgsql_for_citus(conn: psycopg.Connection) -> None:
    """One server inlines the saver's reads into the caller's statement (no call); the Citus form is the same
    statement in PL/pgSQL, the user in a variable (what Citus routes on), and answers the same."""
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"})
    form = read_form(conn)
    for call in ("memori.lg_checkpoint_stamp('t', '', null, 'alice')",
                 "memori.lg_checkpoint_get('t', '', null, 'alice')"):
        plan = "\n".join(r[0] for r in conn.execute(f"explain (costs off) select * from {call}"))
        assert ("Function Scan on lg_checkpoint_" in plan) == (form == "plpgsql"), plan
    body = {r["proname"]: r["prosrc"] for r in rows(conn, "select proname, prosrc from pg_proc where oid = any (%s"
                                                           "::regprocedure[])", (list(READS),))}
    for src in body.values():  # the user: in the statement, or once in a variable the statement names
        assert src.count("memori._lg_acting(p_user_id)") == (1 if form == "plpgsql" else src.count("user_id ="))
        assert ("v_user" in src) == (form == "plpgsql")
    assert stamp(conn, "t") is not None and get(conn, "t") is not None
    assert_sqlstate(conn, "PM001", "select * from memori.lg_checkpoint_get('t')")


def test_a_read_by_id_probes_that_id_and_the_latest_skips_expired_ones(conn: psycopg.Connection) -> None:
    """The given id, else the latest unexpired: one backward index scan bounded to [id, id], else to every id,
    also in a generic plan (the saver's): a read by id meets no other checkpoint, expired or not."""
    for n in range(1, 31):
        put(conn, "t", n, {})  # each supersedes the one before: 1..29 expire 30 days on
    later = T0 + 30 * DAY + SEC
    assert get(conn, "t", 5, at=T0 + 30 * DAY - SEC) is not None  # expires at T0 + 30 days: gone from then on
    assert get(conn, "t", 5, at=T0 + 30 * DAY) is None and get(conn, "t", 5, at=later) is None
    assert stamp(conn, "t", 5, at=later) is None
    assert get(conn, "t", 30, at=later)["checkpoint_id"] == cid(30)  # type: ignore[index]
    assert get(conn, "t", at=later)["checkpoint_id"] == cid(30)  # type: ignore[index]
    assert stamp(conn, "t", 30, at=later) == stamp(conn, "t", at=later) is not None
    assert get(conn, "t", 31, at=T0) is None  # an id past the latest is no checkpoint
    last = 2**128 - 1  # ids at both ends of the uuid range
    put(conn, "u", 0, {})
    assert get(conn, "u")["checkpoint_id"] == cid(0) and get(conn, "u", 0) is not None  # type: ignore[index]
    put(conn, "u", last, {})
    assert get(conn, "u")["checkpoint_id"] == cid(last) and stamp(conn, "u", 0) is not None  # type: ignore[index]
    if read_form(conn) == "sql":  # the inlined statement's plan (the Citus form hides it in a function scan)
        conn.execute("set plan_cache_mode = force_generic_plan")
        for function in ("lg_checkpoint_stamp", "lg_checkpoint_get"):
            conn.execute(f"prepare by_id_{function}(uuid, timestamptz) as"
                         f" select * from memori.{function}('t', '', $1, 'alice', $2)")
            plan = "\n".join(r[0] for r in conn.execute(
                f"explain (analyze, costs off, timing off, summary off)"
                f" execute by_id_{function}('{cid(5)}', '{later.isoformat()}')"))
            assert "Rows Removed by Filter: 1\n" in plan, plan  # checkpoint 5 alone, found and expired
            assert plan.count("Rows Removed by Filter") == 1, plan


def test_stamp_reads_ignore_the_callers_search_path(conn: psycopg.Connection) -> None:
    """The saver's reads qualify every name (or pin their search_path, the Citus form): a caller's functions
    and tables do not reach them."""
    put(conn, "t", 1, {})
    expected = stamp(conn, "t")
    conn.execute("create function public.current_setting(text, boolean) returns text language sql "
                 "as $$ select 'mallory' $$")
    conn.execute("create function public.now() returns timestamptz language sql "
                 "as $$ select '2000-01-01'::timestamptz $$")
    conn.execute("create temp table lg_threads (id bigint, user_id text, thread_id text, expires_at timestamptz)")
    conn.execute("set memori.user_id = 'alice'")
    conn.execute("set search_path = pg_temp, public, pg_catalog")
    found = rows(conn, "select * from memori.lg_checkpoint_stamp('t')")
    assert [(r["stamp"], r["writes_stamp"]) for r in found] == [expected]


def test_special_writes_replace_regular_writes_are_written_once(conn: psycopg.Connection) -> None:
    put(conn, "t", 1, {})
    call = ("select written from memori.lg_writes_put('t', '', %s, 'task', '', %s, %s, '{bytes,bytes}', %s::bytea[],"
            " p_user_id => 'alice', p_now => %s)")
    assert value(conn, call, (cid(1), [0, 1], ["a", "b"], [b"1", b"2"], T0)) == 2
    assert value(conn, call, (cid(1), [0, 1], ["a", "b"], [b"3", b"4"], T0)) == 0
    assert value(conn, call, (cid(1), [-1, -3], ["__error__", "__interrupt__"], [b"e", b"i"], T0)) == 2
    assert value(conn, call, (cid(1), [-1, -3], ["__error__", "__interrupt__"], [b"E", b"I"], T0)) == 2
    found = get(conn, "t")
    assert found is not None
    assert dict(zip(found["write_channels"], [bytes(v) for v in found["write_values"]], strict=True)) == {
        "a": b"1", "b": b"2", "__error__": b"E", "__interrupt__": b"I"}
    assert_sqlstate(conn, "PM001", "select memori.lg_writes_put('t', '', %s, 'task', '', '{0}', '{a,b}', '{x}',"
                                   " '{}', p_user_id => 'alice')", (cid(1),))


# -- the invariant, against a small oracle -------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40)), min_size=1, max_size=12),
       cleanup_day=st.integers(0, 80))
def test_cleanup_never_breaks_the_latest_checkpoint(conn: psycopg.Connection, steps: list[tuple[str, int]],
                                                    cleanup_day: int) -> None:
    """Whatever the history and whenever cleanup runs, the latest checkpoint reads whole; expired ones are gone."""
    conn.execute("truncate memori.lg_threads cascade")
    versions: dict[str, str] = {}
    put_at: list[datetime] = []
    day = 0
    for n, (channel, gap) in enumerate(steps, start=1):
        day += gap
        versions = {**versions, channel: f"{n}"}
        put(conn, "t", n, versions, parent=n - 1 if n > 1 else None, blobs={channel: f"{n}"}, at=T0 + day * DAY)
        put_at.append(T0 + day * DAY)
    now = T0 + cleanup_day * DAY
    cleanup(conn, now)
    latest = get(conn, "t", at=now)
    assert latest is not None and latest["checkpoint_id"] == cid(len(steps))
    assert blob_values(latest) == {c: f"{c}@{v}".encode() for c, v in versions.items()}
    # oracle: checkpoint n is superseded when n + 1 is put, and expires KEEP later
    for n in range(1, len(steps)):
        alive = now < put_at[n] + KEEP
        found = get(conn, "t", n, at=now)
        assert (found is not None) == alive, (n, now)
        if found is not None:
            assert set(blob_values(found)) == set(found["checkpoint"]["channel_versions"])


@pytest.mark.parametrize("role", ["memori_app", "memori_cleaner"])
def test_roles(conn: psycopg.Connection, role: str) -> None:
    from datetime import UTC

    # the cleaner's row-level security reads the real clock: its rows expired for real
    t0 = datetime.now(UTC) - 100 * DAY
    put(conn, "t", 1, {"a": "1"}, blobs={"a": "1"}, at=t0)
    put(conn, "t", 2, {"a": "2"}, parent=1, blobs={"a": "2"}, at=t0)
    conn.execute(f"set role {role}")
    if role == "memori_app":
        conn.execute("set memori.user_id = 'alice'")  # row-level security: an app role acts for one user
        put(conn, "t", 3, {"a": "3"}, parent=2, blobs={"a": "3"}, at=t0)
        assert get(conn, "t", at=t0) is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select memori.lg_policy_set('x', '1 day')")
    else:
        assert cleanup(conn, t0 + KEEP) == {"lg_checkpoints": 1, "lg_blobs": 1}
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            put(conn, "t", 3, {"a": "3"}, at=t0)
        # an idle thread goes whole, its children by cascade
        conn.execute("reset role")
        conn.execute("select memori.lg_policy_set('short', '1 day', '7 days')")
        put(conn, "idle", 1, {"a": "1"}, blobs={"a": "1"}, policy="short", at=t0)
        conn.execute("select memori.lg_writes_put('idle', '', %s, 'task', '', '{0}', '{ch}', '{bytes}', "
                     "'{x}'::bytea[], p_policy => 'short', p_user_id => 'alice', p_now => %s)", (cid(1), t0))
        conn.execute(f"set role {role}")
        assert cleanup(conn, t0 + 7 * DAY) == {"lg_threads": 1}
        conn.execute("reset role")
        assert value(conn, "select count(*) from memori.lg_writes") == 0


def test_retention_cycle_under_row_level_security(conn: psycopg.Connection) -> None:
    """Under the installed RLS: memori_app sees its user's rows, memori_cleaner only expired rows."""
    from datetime import UTC

    forced = value(conn, "select count(*) from pg_class where relnamespace = 'memori'::regnamespace "
                         "and relname like 'lg\\_%' and relrowsecurity and relforcerowsecurity")
    assert forced == 4
    conn.execute("select memori.lg_policy_set('short', '1 day')")
    at = datetime.now(UTC) - 2 * DAY  # the cleaner's policies read the real clock
    conn.execute("set role memori_app")
    conn.execute("set memori.user_id = 'alice'")
    for n in (1, 2, 3):
        put(conn, "t", n, {"a": str(n), "b": "1"}, parent=n - 1 if n > 1 else None,
            blobs={"a": str(n), "b": "1"} if n == 1 else {"a": str(n)}, at=at, policy="short")
        conn.execute("select memori.lg_writes_put('t', '', %s, 'task', '', '{0}', '{ch}', '{bytes}', '{x}'::bytea[],"
                     " p_policy => 'short', p_now => %s)", (cid(n), at))
    conn.execute("reset memori.user_id")  # the cleaner acts for no user: its events are system events
    conn.execute("set role memori_cleaner")
    assert cleanup(conn, datetime.now(UTC)) == {"lg_checkpoints": 2, "lg_blobs": 2, "lg_writes": 2}
    conn.execute("set role memori_app")
    conn.execute("set memori.user_id = 'alice'")
    latest = get(conn, "t", at=datetime.now(UTC))
    assert latest is not None and latest["checkpoint_id"] == cid(3)
    assert blob_values(latest) == {"a": b"a@3", "b": b"b@1"} and len(latest["write_values"]) == 1
    conn.execute("reset role")
    assert value(conn, "select count(*) from memori.lg_writes") == 1



def test_bench_langgraph_small(dsn: str) -> None:
    """Issue 21: the headline get_tuple comes from a spawned process whose fresh savers wrote nothing,
    each thread read once; the cached reads stay beside it."""
    pytest.importorskip("langgraph.checkpoint.postgres")
    from pymemdb.bench import langgraph as bench

    threads = bench.COLD_WARMUP + 10
    result = bench.run(dsn, bench.STEPS * threads)
    cold = result["reads"]["cold"]
    assert cold["process"] == "second"
    assert cold["upstream"]["n"] == cold["pymemdb"]["n"] == threads - bench.COLD_WARMUP
    assert {"latest", "by_id"} <= set(result["reads"])
    for kind, reads in (("cold", threads - bench.COLD_WARMUP), ("copy", threads)):  # the async savers, for information
        timed = result["reads"]["async"][kind]
        assert timed["pymemdb"]["n"] == timed["upstream"]["n"] == reads
    for kind in ("latest", "by_id"):  # the round trip, the ceiling of a checked copy, timed in the same loop
        warm = result["reads"][kind]
        assert warm[bench.ROUND_TRIP]["n"] == warm["pymemdb"]["n"] == warm["upstream"]["n"]
        assert warm["ratio_ceiling_p95"] > 0
    # the ceilings, each timed in its goal's loop: a put keeping retention, a cold read of deltas, a checked copy
    writes = result["writes"]
    assert writes[bench.RETENTION_FLOOR]["put"]["n"] == writes["upstream"]["put"]["n"] == bench.STEPS * threads
    assert writes["put_ratio_retention_ceiling"] > 0
    assert cold[bench.CHAIN_FLOOR]["n"] == cold["pymemdb"]["n"] and cold["ratio_ceiling_p95"] > 0
    latest = result["reads"]["latest"]
    assert latest[bench.COPY_FLOOR]["n"] == latest["pymemdb"]["n"] and latest["ratio_copy_floor_p95"] > 0
    assert bench.COPY_FLOOR not in result["reads"]["by_id"]
    with psycopg.connect(dsn) as conn:  # the floor's tables were the bench's own
        assert conn.execute("select to_regclass('public.pymemdb_bench_retention_checkpoints')").fetchone() == (None,)
    delta = result["delta_history"]  # DeltaChannel history: ours, LangGraph's default walk, upstream, interleaved
    assert delta["pymemdb"]["n"] == delta["default_walk"]["n"] == delta["upstream"]["n"] == 5 * bench.DELTA_THREADS
    assert bench.render(result)
