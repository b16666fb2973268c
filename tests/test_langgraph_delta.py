"""LangGraph storage, issue 9 follow-up: delta-encoded list blobs, their retention, the stamped cache."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any
from uuid import UUID

import ormsgpack
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from pymemdb.integrations.langgraph import AsyncMemoriSaver, MemoriSaver
from tests.helpers import T0, assert_sqlstate, one, rows, run_threads, value

# dsn_of_each_read_form: the dsn fixture, each test on both forms of the saver's reads
from tests.test_langgraph import DAY, KEEP, cid, cleanup, dsn_of_each_read_form, get  # noqa: F401

SEC = DAY / 86400


def body(items: list[Any]) -> bytes:
    """The msgpack encodings of ``items`` back to back (an array's items, without its header)."""
    return b"".join(ormsgpack.packb(i) for i in items)


def put_list(conn: psycopg.Connection, n: int, version: str, items: list[Any], *, base: str | None = None,
             appended: list[Any] | None = None, parent: int | None = None, at: datetime = T0,
             thread: str = "t", extra: dict[str, str] | None = None) -> Any:
    """Checkpoint n whose channel m is at ``version``: the full list, or ``appended`` on ``base``."""
    versions = {"m": version, **(extra or {})}
    data = body(appended or []) if base is not None else ormsgpack.packb(items)
    return value(
        conn,
        "select memori.lg_checkpoint_put(%s, '', %s, %s, %s, %s, '{m}', %s, '{msgpack}', %s::bytea[], 'default',"
        " 'alice', %s, %s, %s)",
        (thread, cid(n), cid(parent) if parent is not None else None,
         Jsonb({"v": 4, "channel_values": {}, "channel_versions": versions, "versions_seen": {}}),
         Jsonb({"step": n}), [version], [data], at, [base] if base is not None else None,
         [len(appended or [])] if base is not None else None))


def read_list(conn: psycopg.Connection, n: int | None = None, *, at: datetime = T0, thread: str = "t") -> Any:
    found = get(conn, thread, n, at=at)
    assert found is not None, n
    return ormsgpack.unpackb(blob_of(found))


def blob_expiries(conn: psycopg.Connection) -> dict[str, Any]:
    return {r["version"]: r["expires_at"] for r in rows(conn, "select version, expires_at from memori.lg_blobs")}


# the three reads that join a delta blob to its chain (each writes the join out: the hot read inlines it,
# Citus cannot call a SQL function over the user's rows); the tests hold them to the same bytes
READS = ("get", "list", "blob_value")


def each_read_of(conn: psycopg.Connection, n: int, version: str, *, thread: str = "t") -> dict[str, bytes]:
    """Checkpoint n's list (channel m at ``version``) as each of READS gives it."""
    listed = one(conn, "select * from memori.lg_checkpoint_list(%s, '', %s, p_user_id => 'alice', p_now => %s)",
                 (thread, cid(n), T0))
    assert listed is not None, n
    return {
        "get": blob_of(get(conn, thread, n)),
        "list": blob_of(listed),
        "blob_value": bytes(value(conn, "select memori.lg_blob_value(%s, 'm', %s, '', 'alice', %s)",
                                  (thread, version, T0))),
    }


def blob_of(row: dict[str, Any] | None) -> bytes:
    assert row is not None
    return bytes(dict(zip(row["blob_channels"], row["blob_values"], strict=True))["m"])


# -- encoding ------------------------------------------------------------------------------
def test_a_delta_reads_as_the_full_list_across_msgpack_header_sizes(conn: psycopg.Connection) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(20)]
    put_list(conn, 1, "1", items[:14])
    put_list(conn, 2, "2", items[:15], base="1", appended=items[14:15], parent=1)
    put_list(conn, 3, "3", items[:20], base="2", appended=items[15:20], parent=2)  # fixarray -> array 16
    assert read_list(conn) == items
    assert read_list(conn, 2) == items[:15]
    # psql: the documented decoder gives the bytes LangGraph's serde wrote for the whole list
    assert bytes(value(conn, "select memori.lg_blob_value('t', 'm', '3', p_user_id => 'alice')")) == \
        ormsgpack.packb(items)
    assert value(conn, "select memori.lg_blob_value('t', 'm', 'nope', p_user_id => 'alice')") is None
    chain = one(conn, "select base, items, length(blob) as n from memori.lg_blobs where version = '3'")
    assert chain == {"base": ["1", "2"], "items": 5, "n": len(body(items[15:20]))}


def test_big_lists_use_array_32_headers(conn: psycopg.Connection) -> None:
    items = list(range(70_000))
    put_list(conn, 1, "1", items[:65_530])
    put_list(conn, 2, "2", items, base="1", appended=items[65_530:], parent=1)
    assert read_list(conn) == items
    assert each_read_of(conn, 2, "2") == dict.fromkeys(READS, ormsgpack.packb(items))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.integers(0, 20), st.booleans()), min_size=1, max_size=6))
def test_the_three_reads_of_a_delta_chain_agree(conn: psycopg.Connection, steps: list[tuple[int, bool]]) -> None:
    """Any chain of appends and full values (across the fixarray / array 16 headers): get, list and
    lg_blob_value give every checkpoint's list as LangGraph's serde wrote it."""
    conn.execute("truncate memori.lg_threads cascade")
    items: list[int] = []
    lists: list[list[int]] = []
    for n, (grow, full) in enumerate(steps, start=1):
        appended = list(range(len(items), len(items) + grow))
        items = items + appended
        delta = n > 1 and not full
        put_list(conn, n, str(n), items, base=str(n - 1) if delta else None, appended=appended if delta else None,
                 parent=n - 1 if n > 1 else None)
        lists.append(items)
    assert blob_of(get(conn, "t")) == ormsgpack.packb(items)  # the latest, as the savers read it
    for n, expected in enumerate(lists, start=1):
        assert each_read_of(conn, n, str(n)) == dict.fromkeys(READS, ormsgpack.packb(expected))


def test_a_delta_without_its_base_is_refused(conn: psycopg.Connection) -> None:
    put_list(conn, 1, "1", [1])
    call = ("select memori.lg_checkpoint_put('t', '', %s, null, '{\"channel_versions\": {}}', '{}', '{m}', '{2}',"
            " %s, array['\\x02'::bytea], 'default', 'alice', %s, %s, '{1}')")
    assert_sqlstate(conn, "PM081", call, (cid(2), ["msgpack"], T0, ["missing"]))
    assert_sqlstate(conn, "PM081", call, (cid(2), ["json"], T0, ["1"]))  # another type is no base
    assert_sqlstate(conn, "PM001", call.replace("'{1}')", "null)"), (cid(2), ["msgpack"], T0, ["1"]))
    assert value(conn, "select count(*) from memori.lg_checkpoints") == 1  # nothing of the refused put


# -- retention -----------------------------------------------------------------------------
def test_a_chain_stays_while_in_use_and_expires_with_its_last_user(conn: psycopg.Connection) -> None:
    put_list(conn, 1, "1", [1], at=T0)
    put_list(conn, 2, "2", [1, 2], base="1", appended=[2], parent=1, at=T0 + DAY)
    put_list(conn, 3, "3", [1, 2, 3], base="2", appended=[3], parent=2, at=T0 + 2 * DAY)
    assert blob_expiries(conn) == {"1": None, "2": None, "3": None}  # 3 is built on 1 and 2
    assert cleanup(conn, T0 + 2 * DAY + KEEP) == {"lg_checkpoints": 2}
    assert read_list(conn, at=T0 + 2 * DAY + KEEP) == [1, 2, 3]
    # a full value cuts the chain: 1, 2 and 3 go with the checkpoint that last used them
    put_list(conn, 4, "4", [1, 2, 3, 4], parent=3, at=T0 + 3 * DAY)
    assert blob_expiries(conn) == {"1": T0 + 3 * DAY + KEEP, "2": T0 + 3 * DAY + KEEP,
                                   "3": T0 + 3 * DAY + KEEP, "4": None}
    assert get(conn, "t", 3, at=T0 + 3 * DAY + KEEP - SEC) is not None
    assert read_list(conn, 3, at=T0 + 3 * DAY + KEEP - SEC) == [1, 2, 3]
    assert cleanup(conn, T0 + 3 * DAY + KEEP) == {"lg_checkpoints": 1, "lg_blobs": 3}
    assert read_list(conn, at=T0 + 3 * DAY + KEEP) == [1, 2, 3, 4]


def test_forking_from_a_delta_revives_its_chain(conn: psycopg.Connection) -> None:
    put_list(conn, 1, "1", [1])
    put_list(conn, 2, "2", [1, 2], base="1", appended=[2], parent=1)
    put_list(conn, 3, "3", [9], parent=2, at=T0 + DAY)  # a full value: 1 and 2 start expiring
    assert blob_expiries(conn)["1"] is not None
    put_list(conn, 4, "4", [1, 2, 5], base="2", appended=[5], parent=2, at=T0 + 2 * DAY)  # a fork from 2
    assert blob_expiries(conn) == {"1": None, "2": None, "3": T0 + 2 * DAY + KEEP, "4": None}
    cleanup(conn, T0 + 100 * DAY)
    assert read_list(conn, at=T0 + 100 * DAY) == [1, 2, 5]


def test_prune_runs_delete_and_copy_keep_chains(conn: psycopg.Connection) -> None:
    put_list(conn, 1, "1", [1])
    put_list(conn, 2, "2", [1, 2], base="1", appended=[2], parent=1)
    put_list(conn, 3, "3", [1, 2, 3], base="2", appended=[3], parent=2, extra={"x": "3"})
    assert value(conn, "select memori.lg_thread_copy('t', 'copy', p_user_id => 'alice', p_now => %s)", (T0,)) == 3
    assert read_list(conn, thread="copy") == [1, 2, 3]
    pruned = one(conn, "select * from memori.lg_threads_prune('{t}', 'keep_latest', 'alice', %s)", (T0,))
    assert pruned == {"threads": 0, "checkpoints": 2, "blobs": 0}  # 1 and 2 are the latest's chain
    assert read_list(conn) == [1, 2, 3]
    conn.execute("update memori.lg_checkpoints set metadata = '{\"run_id\": \"r\"}' where checkpoint_id = %s",
                 (cid(3),))
    put_list(conn, 4, "4", [7], parent=3, thread="copy")
    conn.execute("update memori.lg_checkpoints c set metadata = '{\"run_id\": \"r2\"}' from memori.lg_threads t"
                 " where t.id = c.thread and t.thread_id = 'copy' and c.checkpoint_id = %s", (cid(4),))
    assert value(conn, "select memori.lg_runs_delete('{r2}', 'alice', %s)", (T0,)) == 1
    assert read_list(conn, thread="copy") == [1, 2, 3]  # the copy's latest is 3 again, chain whole


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 40)), min_size=1, max_size=10),
       cleanup_day=st.integers(0, 90))
def test_cleanup_never_breaks_a_delta_chain(conn: psycopg.Connection, steps: list[tuple[int, bool, int]],
                                            cleanup_day: int) -> None:
    """Appends and full values in any order, cleanup any day: every unexpired checkpoint reads its whole list."""
    conn.execute("truncate memori.lg_threads cascade")
    items: list[int] = []
    lists: list[list[int]] = []
    put_at: list[datetime] = []
    day = 0
    for n, (grow, full, gap) in enumerate(steps, start=1):
        day += gap
        appended = list(range(len(items), len(items) + grow))
        items = items + appended
        delta = n > 1 and not full
        put_list(conn, n, str(n), items, base=str(n - 1) if delta else None, appended=appended if delta else None,
                 parent=n - 1 if n > 1 else None, at=T0 + day * DAY)
        lists.append(items)
        put_at.append(T0 + day * DAY)
    now = T0 + cleanup_day * DAY
    cleanup(conn, now)
    assert read_list(conn, at=now) == lists[-1]
    for n in range(1, len(steps)):
        if now < put_at[n] + KEEP:  # superseded when n + 1 was put, kept KEEP after
            assert read_list(conn, n, at=now) == lists[n - 1]


# -- the saver -------------------------------------------------------------------------------
def _checkpoint(n: int, messages: list[str], versions: dict[str, str]) -> dict[str, Any]:
    return {"v": 4, "id": str(UUID(int=n)), "ts": "2026-11-15T12:00:00+00:00",
            "channel_values": {"messages": messages, "turns": n}, "channel_versions": versions,
            "versions_seen": {}, "updated_channels": ["messages"]}


def _put(saver: Any, thread: str, n: int, messages: list[str], state: dict[str, Any]) -> dict[str, Any]:
    version = saver.get_next_version(state.get("version"), None)
    state["version"] = version
    config = state.get("config") or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    state["config"] = saver.put(config, _checkpoint(n, messages, {"messages": version}), {"step": n},
                                {"messages": version})
    return state


def test_the_saver_stores_a_growing_list_as_deltas_and_reads_it_anywhere(dsn: str) -> None:
    state: dict[str, Any] = {}
    messages: list[str] = []
    with MemoriSaver(dsn, user_id="alice") as saver:
        for n in range(1, 21):
            messages = [*messages, f"message {n} " + "x" * 200]
            _put(saver, "chat", n, messages, state)
        assert saver.get_tuple({"configurable": {"thread_id": "chat"}}).checkpoint["channel_values"]["messages"] \
            == messages  # type: ignore[union-attr]
    with psycopg.connect(dsn, autocommit=True) as conn:
        chains = [r["depth"] for r in rows(conn, "select coalesce(cardinality(base), 0) as depth"
                                                 " from memori.lg_blobs order by version")]
        assert chains == [*range(17), *range(3)]  # a full value every 17th version bounds a cold read
        stored = value(conn, "select sum(length(blob)) from memori.lg_blobs")
        assert stored < len(ormsgpack.packb(messages)) * 3  # the 20 versions would be ~10x
        data = value(conn, "select memori.lg_blob_value('chat', 'messages', %s, p_user_id => 'alice')",
                     (state["version"],))
        assert ormsgpack.unpackb(bytes(data)) == messages
    with MemoriSaver(dsn, user_id="alice") as cold:  # another process: no cache, no bases
        found = cold.get_tuple({"configurable": {"thread_id": "chat"}})
        assert found is not None and found.checkpoint["channel_values"]["messages"] == messages
        old = list(cold.list({"configurable": {"thread_id": "chat"}}, limit=20))
        assert [len(t.checkpoint["channel_values"]["messages"]) for t in old] == list(range(20, 0, -1))


def test_a_lost_base_makes_the_saver_send_the_full_value(dsn: str) -> None:
    state: dict[str, Any] = {}
    with MemoriSaver(dsn, user_id="alice") as saver, psycopg.connect(dsn, autocommit=True) as conn:
        _put(saver, "chat", 1, ["a"], state)
        conn.execute("delete from memori.lg_blobs")  # as if another process pruned it
        _put(saver, "chat", 2, ["a", "b"], state)
        assert value(conn, "select count(*) from memori.lg_blobs where base is null") == 1
        found = saver.get_tuple({"configurable": {"thread_id": "chat"}})
        assert found is not None and found.checkpoint["channel_values"]["messages"] == ["a", "b"]


def test_a_cached_copy_never_hides_another_process_write(dsn: str) -> None:
    latest = {"configurable": {"thread_id": "chat"}}
    a_state: dict[str, Any] = {}
    b_state: dict[str, Any] = {}

    def messages(saver: MemoriSaver, config: dict[str, Any] = latest) -> Any:
        found = saver.get_tuple(config)  # type: ignore[arg-type]
        return None if found is None else found.checkpoint["channel_values"]["messages"]

    with MemoriSaver(dsn, user_id="alice") as a, MemoriSaver(dsn, user_id="alice") as b:
        _put(a, "chat", 1, ["a1"], a_state)
        assert messages(a) == ["a1"] and len(a._memory) == 2  # a delta base and a stamped copy
        # another process puts a newer checkpoint
        _put(b, "chat", 2, ["a1", "b2"], {"config": a_state["config"]})
        assert messages(a) == ["a1", "b2"]
        # ... adds pending writes to the latest
        b.put_writes({"configurable": {"thread_id": "chat", "checkpoint_ns": "", "checkpoint_id": str(UUID(int=2))}},
                     [("messages", ["w"])], "task-1")
        found = a.get_tuple(latest)
        assert found is not None and [w[2] for w in found.pending_writes] == [["w"]]  # type: ignore[union-attr]
        # ... replaces a special write (an upsert of the same row) after a cached both
        two = {"configurable": {"thread_id": "chat", "checkpoint_ns": "", "checkpoint_id": str(UUID(int=2))}}
        b.put_writes(two, [("__error__", "first")], "task-2")  # type: ignore[arg-type]
        assert [w[2] for w in a.get_tuple(latest).pending_writes] == [["w"], "first"]  # type: ignore[union-attr]
        b.put_writes(two, [("__error__", "second")], "task-2")  # type: ignore[arg-type]
        assert [w[2] for w in a.get_tuple(latest).pending_writes] == [["w"], "second"]  # type: ignore[union-attr]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("delete from memori.lg_writes where task_id = 'task-2'")
        assert [w[2] for w in a.get_tuple(latest).pending_writes] == [["w"]]  # type: ignore[union-attr]
        # ... rewrites the same checkpoint id with other values
        _put(b, "chat", 2, ["rewritten"], b_state | {"config": {"configurable": {"thread_id": "chat",
                                                                                "checkpoint_ns": ""}}})
        assert messages(a) == ["rewritten"]
        by_id = {"configurable": {"thread_id": "chat", "checkpoint_ns": "", "checkpoint_id": str(UUID(int=2))}}
        assert messages(a, by_id) == ["rewritten"]
        # ... deletes the thread, then starts it again with the same ids
        b.delete_thread("chat")
        assert messages(a) is None
        _put(b, "chat", 2, ["again"], {})
        assert messages(a) == ["again"]
        # a put by a itself is read back from its copy, and still checked
        _put(a, "chat", 3, ["again", "a3"], {"config": {"configurable": {"thread_id": "chat", "checkpoint_ns": "",
                                                                          "checkpoint_id": str(UUID(int=2))}}})
        assert messages(a) == ["again", "a3"] == messages(b)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("update memori.lg_checkpoints set checkpoint = checkpoint where checkpoint_id = %s",
                         (cid(3),))  # any change of the row (here by hand in psql) is a new stamp
        assert messages(a) == ["again", "a3"]


def test_async_saver_deltas_and_cache(dsn: str) -> None:
    async def run() -> Any:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="bob") as saver:
            state: dict[str, Any] = {}
            for n, msgs in enumerate((["x"], ["x", "y"], ["x", "y", "z"]), start=1):
                version = saver.get_next_version(state.get("version"), None)
                state["version"] = version
                config = state.get("config") or {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
                state["config"] = await saver.aput(config, _checkpoint(n, msgs, {"messages": version}), {},
                                                   {"messages": version})
            first = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
            second = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
            assert first is not None and second is not None
            assert first.checkpoint is not second.checkpoint  # fresh objects: LangGraph mutates them
            return second.checkpoint["channel_values"]["messages"]

    assert asyncio.run(run()) == ["x", "y", "z"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert value(conn, "select count(*) from memori.lg_blobs where base is not null") == 2


def test_cache_off(dsn: str) -> None:
    with MemoriSaver(dsn, user_id="alice", cache_bytes=0) as saver:
        state: dict[str, Any] = {}
        _put(saver, "chat", 1, ["a"], state)
        _put(saver, "chat", 2, ["a", "b"], state)
        assert len(saver._memory) == 0
        found = saver.get_tuple({"configurable": {"thread_id": "chat"}})
        assert found is not None and found.checkpoint["channel_values"]["messages"] == ["a", "b"]


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xdc\x00", b"\xc0"])
def test_non_arrays_are_no_delta_base(raw: bytes) -> None:
    from pymemdb.integrations._langgraph_cache import msgpack_array

    assert msgpack_array(raw) is None
    assert msgpack_array(ormsgpack.packb(list(range(16)))) == (16, 3)
    assert msgpack_array(ormsgpack.packb(list(range(70_000)))) == (70_000, 5)


# -- reads from the copy: one stamp probe ------------------------------------------------
def _full_reads(saver: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The calls of lg_checkpoint_get the saver makes from now on (a read its copy could not answer)."""
    from pymemdb.integrations import langgraph as lg

    seen: list[Any] = []
    original = saver._call

    def call(c: Any) -> Any:
        if c[0] is lg.LG_CHECKPOINT_GET:
            seen.append(c)
        return original(c)

    monkeypatch.setattr(saver, "_call", call)
    return seen


def test_own_writes_keep_the_copy_current(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    latest = {"configurable": {"thread_id": "chat"}}
    state: dict[str, Any] = {}
    with MemoriSaver(dsn, user_id="alice") as a, MemoriSaver(dsn, user_id="alice") as b:
        _put(a, "chat", 1, ["a1"], state)
        a.put_writes(state["config"], [("messages", ["w1"])], "task-1")
        a.put_writes(state["config"], [("messages", ["w2"]), ("__error__", "boom")], "task-2")
        full = _full_reads(a, monkeypatch)
        found = a.get_tuple(latest)  # type: ignore[arg-type]
        assert found is not None and full == []  # the stamps alone: the copy holds the writes
        assert sorted(str(w[2]) for w in found.pending_writes) == ["['w1']", "['w2']", "boom"]
        a.put_writes(state["config"], [("messages", ["w1"])], "task-1")  # a retry changes nothing
        assert len(a.get_tuple(latest).pending_writes) == 3 and full == []  # type: ignore[union-attr]
        # another process's write: a's copy misses it, so a's next write gets no stamp
        b.put_writes(state["config"], [("messages", ["b"])], "task-3")
        a.put_writes(state["config"], [("messages", ["w4"])], "task-4")
        found = a.get_tuple(latest)  # type: ignore[arg-type]
        assert found is not None and len(full) == 1
        assert sorted(w[0] for w in found.pending_writes) == ["task-1", "task-2", "task-2", "task-3", "task-4"]
        a.get_tuple(latest)  # type: ignore[arg-type]
        assert len(full) == 1  # the full read refreshed the copy


def test_the_stamp_statement_survives_deallocate(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    latest = {"configurable": {"thread_id": "chat"}}
    with MemoriSaver(dsn, user_id="alice", max_size=1) as saver:
        _put(saver, "chat", 1, ["a1"], {})
        assert saver.get_tuple(latest) is not None  # type: ignore[arg-type]
        with saver.pool.connection() as conn:
            conn.execute("deallocate all")  # what psycopg or a pooler's reset may do
        assert saver._reader is not None  # the reads' own connection (see MemoriSaver._call)
        saver._reader.execute("deallocate all")
        full = _full_reads(saver, monkeypatch)
        found = saver.get_tuple(latest)  # type: ignore[arg-type]
        assert found is not None and found.checkpoint["channel_values"]["messages"] == ["a1"] and full == []


def test_prepared_raises_the_servers_error(dsn: str) -> None:
    from pymemdb.errors import InvalidArgument, wrap_exceptions
    from pymemdb.integrations._libpq import Prepared

    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            Prepared("pymemdb_test_div", "select 1 / $1::int").rows(conn, ["0"])
        assert Prepared("pymemdb_test_div", "select 1 / $1::int").rows(conn, ["1"]) == [(1,)]
        with pytest.raises(InvalidArgument) as err, wrap_exceptions():
            Prepared("pymemdb_test_stamp", "select * from memori.lg_checkpoint_stamp($1)").rows(conn, ["t"])
        assert err.value.sqlstate == "PM001"  # no user: our code and hint, as from any other call


def test_prepared_rows_are_a_cursors_rows(dsn: str) -> None:
    """The values and types a psycopg cursor gives, for every type of lg_checkpoint_get's row, NULLs included."""
    from pymemdb.integrations._libpq import Prepared

    query = ("select $1::text, null::text, gen_random_uuid(), null::uuid,"
             " '{\"big\": 123456789012345678901234567890, \"f\": 1.5, \"s\": \"\u00e9\"}'::jsonb, null::jsonb,"
             " array['a', null, '\u00e9']::text[], '{}'::text[], array['\\x00ff'::bytea, null], null::bytea[],"
             " array[1, -2, null]::integer[], array[]::integer[]")
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = Prepared("pymemdb_test_types", query).rows(conn, ["x"])
        expected = conn.execute(query.replace("$1", "%s").replace("gen_random_uuid()", "%s::uuid"),
                                ["x", str(found[0][2])], binary=True).fetchall()
    assert found == expected and [type(v) for v in found[0]] == [type(v) for v in expected[0]]
    assert found[0][4]["big"] == 123456789012345678901234567890  # an integer, as json reads it (not a float)


def test_prepared_on_an_async_connection(dsn: str) -> None:
    """Prepared.arows: the same rows and errors as rows, prepared again after DEALLOCATE ALL, the loop not blocked."""
    from pymemdb.integrations._libpq import Prepared

    async def run() -> None:
        statement = Prepared("pymemdb_test_sleep", "select $1::text, pg_sleep($2::float8)::text")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert await statement.arows(conn, ["a", "0"]) == [("a", "")]
            await conn.execute("deallocate all")
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            assert await statement.arows(conn, [None, "0.3"]) == [(None, "")]  # re-prepared
            ticker.cancel()
            assert ticks >= 10  # the event loop ran while the statement waited for the server
            with pytest.raises(psycopg.errors.DivisionByZero):
                await Prepared("pymemdb_test_div", "select 1 / $1::int").arows(conn, ["0"])
            assert await Prepared("pymemdb_test_div", "select 1 / $1::int").arows(conn, ["2"]) == [(0,)]

    asyncio.run(run())


def test_prepared_beside_runs_while_the_server_works(dsn: str) -> None:
    """rows_beside / arows_beside: the caller's work runs after the statement is sent and before its result is
    read; its result comes back beside the rows; a failing one leaves the connection usable; errors and
    re-preparing as rows."""
    from pymemdb.integrations._libpq import Prepared

    statement = Prepared("pymemdb_test_beside", "select $1::text, pg_sleep($2::float8)::text")
    div = Prepared("pymemdb_test_beside_div", "select 1 / $1::int")

    def in_flight(conn: Any) -> str:
        # the server has the statement: libpq reports the connection busy until its result is read
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.ACTIVE
        return "built"

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert statement.rows_beside(conn, ["a", "0.05"], lambda: in_flight(conn)) == ([("a", "")], "built")
        conn.execute("deallocate all")
        calls: list[int] = []
        assert statement.rows_beside(conn, [None, "0"], lambda: calls.append(1)) == ([(None, "")], None)
        assert calls == [1]  # run once, though the statement was prepared and sent again
        with pytest.raises(ZeroDivisionError):
            statement.rows_beside(conn, ["b", "0.05"], lambda: 1 // 0)
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert statement.rows(conn, ["c", "0"]) == [("c", "")]
        with pytest.raises(psycopg.errors.DivisionByZero):
            div.rows_beside(conn, ["0"], lambda: None)
        assert div.rows_beside(conn, ["1"], lambda: "x") == ([(1,)], "x")

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert await statement.arows_beside(conn, ["a", "0.05"], lambda: in_flight(conn)) == ([("a", "")], "built")
            await conn.execute("deallocate all")
            assert await statement.arows_beside(conn, ["b", "0"], lambda: 2) == ([("b", "")], 2)
            with pytest.raises(ZeroDivisionError):
                await statement.arows_beside(conn, ["b", "0.05"], lambda: 1 // 0)
            assert await statement.arows(conn, ["c", "0"]) == [("c", "")]
            with pytest.raises(psycopg.errors.DivisionByZero):
                await div.arows_beside(conn, ["0"], lambda: None)

    asyncio.run(run())


def test_a_read_from_the_copy_is_built_beside_the_stamp_check(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy's tuple is built while the server checks the stamps, and thrown away when they no longer match.
    (Every libpq read goes through rows_beside: a cold one with nothing beside it.)"""
    from pymemdb.integrations._libpq import Prepared

    beside: list[str] = []
    original = Prepared.rows_beside

    def spy(self: Prepared, conn: Any, params: Any, work: Any) -> Any:
        beside.append(self.name.decode())
        return original(self, conn, params, work)

    monkeypatch.setattr(Prepared, "rows_beside", spy)
    state: dict[str, Any] = {}
    with MemoriSaver(dsn, user_id="alice") as saver, MemoriSaver(dsn, user_id="alice") as other:
        _put(saver, "chat", 1, ["a"], state)
        latest = {"configurable": {"thread_id": "chat"}}
        first = saver.get_tuple(latest)  # type: ignore[arg-type]  # (the put left a copy: read from it too)
        assert saver.get_tuple(latest) == first and beside == ["memori_lg_checkpoint_stamp"] * 2  # type: ignore[arg-type]
        _put(other, "chat", 2, ["a", "b"], dict(state))  # another saver moves the thread on
        found = saver.get_tuple(latest)  # type: ignore[arg-type]
        assert found is not None and found.checkpoint["channel_values"]["messages"] == ["a", "b"]
        # the stale copy's tuple was built, then dropped for the read of the new checkpoint
        assert beside == ["memori_lg_checkpoint_stamp"] * 3 + ["memori_lg_checkpoint_get"]


def test_async_reads_are_the_sync_reads(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """AsyncMemoriSaver reads on libpq as MemoriSaver does: the same tuples, cold and from its copy."""
    state: dict[str, Any] = {}
    with MemoriSaver(dsn, user_id="alice") as saver:
        for n in range(1, 4):  # deltas after the first
            _put(saver, "chat", n, [f"m{i}" for i in range(n)], state)
        saver.put_writes(state["config"], [("messages", ["w1"]), ("__error__", "boom")], "task-1")
        by_id = {"configurable": {"thread_id": "chat", "checkpoint_id": str(UUID(int=2))}}
        wanted = [saver.get_tuple(c) for c in ({"configurable": {"thread_id": "chat"}}, by_id)]  # type: ignore[arg-type]

    async def run() -> list[Any]:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="alice", max_size=1) as asaver:
            latest = {"configurable": {"thread_id": "chat"}}
            found = [await asaver.aget_tuple(latest), await asaver.aget_tuple(by_id)]  # type: ignore[arg-type]
            full = _full_reads(asaver, monkeypatch)
            assert await asaver.aget_tuple(latest) == found[0] and full == []  # type: ignore[arg-type]  # the copy
            monkeypatch.undo()
            assert await asaver.aget_tuple({"configurable": {"thread_id": "nobody"}}) is None
            async with asaver.pool.connection() as conn:  # the reads were prepared on libpq, not by psycopg
                names = {r[0] for r in await (await conn.execute("select name from pg_prepared_statements")).fetchall()}
            assert {"memori_lg_checkpoint_stamp", "memori_lg_checkpoint_get"} <= names
            return found

    assert asyncio.run(run()) == wanted


def test_the_cold_read_decoded_from_libpq_is_the_cursors_row(dsn: str) -> None:
    """MemoriSaver decodes lg_checkpoint_get's binary row itself: the same LangGraphTuple as through a cursor."""
    from pymemdb.integrations import langgraph as lg

    state: dict[str, Any] = {}
    with MemoriSaver(dsn, user_id="alice") as saver:
        for n in range(1, 4):  # deltas after the first
            _put(saver, "chat", n, [f"m{i}" for i in range(n)], state)
        saver.put_writes(state["config"], [("messages", ["w1"]), ("__error__", "boom")], "task-1")
        saver.put_writes(state["config"], [("messages", ["w2"])], "task-2", "path/ü")
        version = saver.get_next_version(None, None)
        saver.put({"configurable": {"thread_id": "other", "checkpoint_ns": "sub"}},
                  _checkpoint(7, [], {"messages": version}), {"big": 2**70, "text": "é", "none": None, "f": 0.1},
                  {"messages": version})
        saver._memory.drop_thread()
        latest = saver._call(saver._get_call({"configurable": {"thread_id": "chat"}})[0])
        checks = [
            {"p_thread_id": "chat", "p_checkpoint_ns": "", "p_checkpoint_id": None},
            {"p_thread_id": "chat", "p_checkpoint_ns": "", "p_checkpoint_id": str(UUID(int=2))},
            {"p_thread_id": "chat", "p_checkpoint_ns": "", "p_checkpoint_id": None, "p_known_stamp": latest.stamp},
            {"p_thread_id": "chat", "p_checkpoint_ns": "", "p_checkpoint_id": None, "p_known_stamp": latest.stamp,
             "p_known_writes": latest.writes_stamp},
            {"p_thread_id": "other", "p_checkpoint_ns": "sub", "p_checkpoint_id": None},
            {"p_thread_id": "nobody", "p_checkpoint_ns": "", "p_checkpoint_id": None},
        ]
        for args in checks:
            args["p_user_id"] = "alice"
            statement = saver._statement(lg.LG_CHECKPOINT_GET, args)
            with saver.pool.connection() as conn, conn.cursor(binary=True, row_factory=statement.row_factory) as cur:
                expected = statement.shape(cur.execute(statement.text, args).fetchall())
            assert saver._call((lg.LG_CHECKPOINT_GET, args)) == expected, args
        assert expected is None and latest.write_idx == [-1, 0, 0]  # type: ignore[comparison-overlap]
        found = saver.get_tuple({"configurable": {"thread_id": "other", "checkpoint_ns": "sub"}})
        assert found is not None and found.metadata["big"] == 2**70  # an int, as psycopg reads it
        assert isinstance(found.metadata["big"], int)
        again = saver.get_tuple({"configurable": {"thread_id": "other", "checkpoint_ns": "sub"}})
        assert again is not None and again.metadata == found.metadata  # from the copy: still an int
        assert isinstance(again.metadata["big"], int)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-(2**200), 2**200)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(alphabet="0123456789.-e \u0661\u00e9\"\\x"),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12)


@given(value=_JSON)
@settings(max_examples=300, deadline=None)
def test_a_copys_json_reads_back_as_json_would_read_it(value: Any) -> None:
    """The copy's parser (orjson unless a run of 19 digits may be an integer beyond 64 bits) against json's:
    equal values, an integer never made a float, whatever digits the strings hold."""
    import json

    from pymemdb.integrations.langgraph import _copy_loads

    text = json.dumps(value)
    expected = json.loads(text)
    got = _copy_loads(text)

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
        return type(a) is type(b) and a == b

    assert same(expected, got), (text, got)


def test_reads_take_a_pooled_connection_while_the_reader_is_busy(dsn: str) -> None:
    from pymemdb.errors import PymemdbError

    latest = {"configurable": {"thread_id": "chat"}}
    with MemoriSaver(dsn, user_id="alice", cache_bytes=0) as saver:
        _put(saver, "chat", 1, ["a1"], {})
        assert saver.get_tuple(latest) is not None  # type: ignore[arg-type]
        reader = saver._reader
        assert reader is not None
        with saver._reader_lock:  # another thread's read holds it
            found = saver.get_tuple(latest)  # type: ignore[arg-type]
        assert found is not None and found.checkpoint["channel_values"]["messages"] == ["a1"]
        assert saver._reader is reader
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("select pg_terminate_backend(%s)", (reader.info.backend_pid,))
        with pytest.raises(PymemdbError):  # as a pooled connection's read would
            saver.get_tuple(latest)  # type: ignore[arg-type]
        assert saver._reader is None and reader.closed
        found = saver.get_tuple(latest)  # type: ignore[arg-type]  # another reader
        assert found is not None and saver._reader is not None and saver._reader is not reader
    assert saver._reader is None  # closed with the saver


def test_async_reads_from_the_copy(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> Any:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="bob") as saver:
            version = saver.get_next_version(None, None)
            config = await saver.aput({"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                                      _checkpoint(1, ["x"], {"messages": version}), {}, {"messages": version})
            await saver.aput_writes(config, [("messages", ["w"])], "task-1")
            full = _full_reads(saver, monkeypatch)
            found = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
            assert found is not None and full == []
            return [w[2] for w in found.pending_writes]

    assert asyncio.run(run()) == [["w"]]


def test_threads_of_one_saver_at_once_read_what_was_written(dsn: str) -> None:
    """Four threads share one saver (its pool, copies and prepared statements), each with its own graphs and
    with tasks writing to a shared one; a saver without a copy then reads the same state."""
    shared = {"configurable": {"thread_id": "shared", "checkpoint_ns": "", "checkpoint_id": str(UUID(int=1))}}
    with MemoriSaver(dsn, user_id="alice", max_size=3) as saver:
        _put(saver, "shared", 1, ["s"], {})

        def work(worker: int) -> None:
            state: dict[str, Any] = {}
            messages: list[str] = []
            for n in range(1, 16):
                messages = [*messages, f"{worker}-{n}"]
                _put(saver, f"own-{worker}", n, messages, state)
                saver.put_writes(state["config"], [("messages", [f"w{n}"])], f"task-{n}")
                saver.put_writes(shared, [("messages", [f"{worker}-{n}"])], f"task-{worker}-{n}")  # type: ignore[arg-type]
                found = saver.get_tuple({"configurable": {"thread_id": f"own-{worker}"}})
                assert found is not None and found.checkpoint["channel_values"]["messages"] == messages
                assert [w[0] for w in found.pending_writes] == [f"task-{n}"]

        assert run_threads(work, 4) == []
        hot = saver.get_tuple({"configurable": {"thread_id": "shared"}})
    with MemoriSaver(dsn, user_id="alice", cache_bytes=0) as cold:
        found = cold.get_tuple({"configurable": {"thread_id": "shared"}})
    assert hot is not None and found is not None
    assert sorted(w[0] for w in hot.pending_writes) == sorted(w[0] for w in found.pending_writes)
    assert len(found.pending_writes) == 60
