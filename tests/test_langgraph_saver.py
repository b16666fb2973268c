"""MemoriSaver and AsyncMemoriSaver from LangGraph: a real graph, the cleanup CLI, concurrency, errors."""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from datetime import UTC, datetime, timedelta
from typing import Annotated, TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph
from typer.testing import CliRunner

import pymemdb
from pymemdb.cli.cleanup import app as cleanup_app
from pymemdb.errors import DeltaPruneRefused, InvalidArgument, UnknownValue
from pymemdb.integrations.langgraph import AsyncMemoriSaver, MemoriSaver, set_policy

runner = CliRunner()


class State(TypedDict):
    messages: Annotated[list[str], operator.add]
    turns: int


def _graph():  # type: ignore[no-untyped-def]
    def reply(state: State) -> dict[str, object]:
        return {"messages": [f"echo {state['messages'][-1]}"], "turns": state.get("turns", 0) + 1}

    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def test_quick_start_graph_then_cleanup_preview(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoriSaver(dsn, user_id="alice") as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "chat-1"}}
        graph.invoke({"messages": ["hi"]}, config)
        final = graph.invoke({"messages": ["again"]}, config)
        assert final["messages"] == ["hi", "echo hi", "again", "echo again"] and final["turns"] == 2
        history = list(saver.list(config))
        assert len(history) == 6  # input + loop + end, per invoke
        assert graph.get_state(config).values["turns"] == 2
        # time travel: a fork from the first run's end state
        first_end = history[3].config
        forked = graph.invoke({"messages": ["fork"]}, first_end)
        assert forked["messages"] == ["hi", "echo hi", "fork", "echo fork"]

    monkeypatch.setenv("PYMEMDB_DSN", dsn)
    later = (datetime.now(UTC) + timedelta(days=31)).strftime("%Y-%m-%dT%H:%M:%S%z")
    result = runner.invoke(cleanup_app, ["preview", "--json", "--now", later])
    assert result.exit_code == 0, result.output
    groups = {(g["table_name"], g["owner"], g["category"]) for g in json.loads(result.stdout)["groups"]}
    with psycopg.connect(dsn) as conn:  # the category of checkpoints and blobs is the thread's key
        key = str(conn.execute("select id from memori.lg_threads where thread_id = 'chat-1'").fetchone()[0])  # type: ignore[index]
    assert {("lg_checkpoints", "alice", key), ("lg_blobs", "alice", key)} <= groups
    result = runner.invoke(cleanup_app, ["execute", "--yes", "--json", "--now", later])
    assert result.exit_code == 0, result.output
    with MemoriSaver(dsn, user_id="alice") as saver:
        graph = _graph().compile(checkpointer=saver)
        # superseded history is gone; the thread's latest state is whole and the graph carries on
        assert len(list(saver.list({"configurable": {"thread_id": "chat-1"}}))) == 1
        assert graph.invoke({"messages": ["bye"]}, {"configurable": {"thread_id": "chat-1"}})["messages"][-1] == \
            "echo bye"


def test_async_saver_runs_a_graph(dsn: str) -> None:
    async def run() -> list[str]:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="bob") as saver:
            graph = _graph().compile(checkpointer=saver)
            config = {"configurable": {"thread_id": "chat-2"}}
            await graph.ainvoke({"messages": ["one"]}, config)
            out = await graph.ainvoke({"messages": ["two"]}, config)
            # the sync API works from another thread
            state = await asyncio.to_thread(graph.get_state, config)
            assert state.values["turns"] == 2
            return list(out["messages"])

    assert asyncio.run(run()) == ["one", "echo one", "two", "echo two"]


def test_threads_are_per_user(dsn: str) -> None:
    with MemoriSaver(dsn, user_id="alice") as alice, MemoriSaver(dsn, user_id="mallory") as mallory:
        _graph().compile(checkpointer=alice).invoke({"messages": ["secret"]}, {"configurable": {"thread_id": "t"}})
        assert mallory.get_tuple({"configurable": {"thread_id": "t"}}) is None
        assert list(mallory.list(None)) == []
        mallory.delete_thread("t")
        assert alice.get_tuple({"configurable": {"thread_id": "t"}}) is not None


def test_no_saver_wide_lock(dsn: str) -> None:
    """A put waiting on one thread's row does not hold up another thread's put or read."""
    with MemoriSaver(dsn, user_id="alice", max_size=4) as saver:
        graph = _graph().compile(checkpointer=saver)
        for thread in ("busy", "free"):
            graph.invoke({"messages": ["x"]}, {"configurable": {"thread_id": thread}})
        with psycopg.connect(dsn) as blocker:
            blocker.execute("select 1 from memori.lg_threads where thread_id = 'busy' for update")
            done = threading.Event()

            def busy() -> None:
                graph.invoke({"messages": ["y"]}, {"configurable": {"thread_id": "busy"}})
                done.set()

            worker = threading.Thread(target=busy)
            worker.start()
            out = graph.invoke({"messages": ["z"]}, {"configurable": {"thread_id": "free"}})
            assert out["turns"] == 2 and not done.is_set()
            blocker.rollback()
            worker.join(timeout=30)
            assert done.is_set()


def test_errors(dsn: str) -> None:
    with pytest.raises(InvalidArgument):
        MemoriSaver(dsn, user_id="")
    with MemoriSaver(dsn, user_id="alice", policy="nope") as saver, pytest.raises(UnknownValue) as info:
        _graph().compile(checkpointer=saver).invoke({"messages": ["x"]}, {"configurable": {"thread_id": "t"}})
    assert "lg_policy_set" in (info.value.hint or "")
    with MemoriSaver(dsn, user_id="alice") as saver:
        with pytest.raises(TypeError):
            saver.prune("t")
        with pytest.raises(InvalidArgument):
            saver.prune(["t"], strategy="oldest")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("insert into memori.lg_threads (user_id, thread_id, policy, uses_delta, created_at,"
                         " updated_at) values ('alice', 'd', 'default', true, now(), now())")
        with pytest.raises(NotImplementedError) as refused:
            saver.prune(["d"])
        assert isinstance(refused.value, DeltaPruneRefused)


def test_versions_sort_as_strings(dsn: str) -> None:
    with MemoriSaver(dsn, user_id="alice") as saver:
        versions = [saver.get_next_version(None, None)]
        for _ in range(12):
            versions.append(saver.get_next_version(versions[-1], None))
        assert sorted(versions) == versions and len(versions[0]) == 19
        assert saver.get_next_version(7, None).startswith("0000000008.")  # type: ignore[arg-type]


def test_connections_carry_the_user_and_durability(dsn: str) -> None:
    """memori.user_id is set on the saver's sessions (row-level security keys on it)."""
    with MemoriSaver(dsn, user_id="ann o\\brien", durable=False) as saver, saver.pool.connection() as conn:
        assert conn.execute("select current_setting('memori.user_id')").fetchone() == ("ann o\\brien",)
        assert conn.execute("show synchronous_commit").fetchone() == ("off",)
    with MemoriSaver(dsn, user_id="bob") as saver, saver.pool.connection() as conn:
        assert conn.execute("show synchronous_commit").fetchone() == ("on",)
        # psql users get the same user from the setting: no p_user_id needed
        assert conn.execute("select count(*) from memori.lg_checkpoint_list()").fetchone() == (0,)


def test_set_policy_then_a_saver_uses_it(db: pymemdb.Database, dsn: str) -> None:
    set_policy(db, "short", timedelta(days=1), timedelta(days=7))
    with MemoriSaver(db, user_id="alice", policy="short") as saver:
        _graph().compile(checkpointer=saver).invoke({"messages": ["x"]}, {"configurable": {"thread_id": "t"}})
    with psycopg.connect(dsn) as conn:
        superseded, idle = conn.execute(
            "select max(c.expires_at - now()), max(t.expires_at - t.updated_at) from memori.lg_checkpoints c"
            " join memori.lg_threads t on t.id = c.thread").fetchone()  # type: ignore[misc]
    assert timedelta(hours=23) < superseded <= timedelta(days=1) and idle == timedelta(days=7)


def test_async_saver_has_no_saver_wide_lock(dsn: str) -> None:
    """LangGraph's async Postgres saver serialises a saver's calls on one lock; ours does not."""

    async def run() -> None:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="alice", max_size=4) as saver:
            graph = _graph().compile(checkpointer=saver)
            for thread in ("busy", "free"):
                await graph.ainvoke({"messages": ["x"]}, {"configurable": {"thread_id": thread}})
            with psycopg.connect(dsn) as blocker:
                blocker.execute("select 1 from memori.lg_threads where thread_id = 'busy' for update")
                busy = asyncio.create_task(graph.ainvoke({"messages": ["y"]}, {"configurable": {"thread_id": "busy"}}))
                out = await asyncio.wait_for(
                    graph.ainvoke({"messages": ["z"]}, {"configurable": {"thread_id": "free"}}), timeout=30)
                assert out["turns"] == 2 and not busy.done()
                blocker.rollback()
            assert (await asyncio.wait_for(busy, timeout=30))["turns"] == 2

    asyncio.run(run())


def test_works_under_row_level_security(dsn: str) -> None:
    """As the lead's RLS will run it: a memori_app login, policies keyed on memori.user_id, FORCE."""
    import uuid

    from langgraph.checkpoint.conformance import checkpointer_test, validate

    role = f"lg_agent_{uuid.uuid4().hex[:8]}"
    tables = ("lg_threads", "lg_checkpoints", "lg_blobs", "lg_writes")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"create role {role} login in role memori_app")
        for table in tables:
            admin.execute(f"alter table memori.{table} enable row level security")
            admin.execute(f"alter table memori.{table} force row level security")
            admin.execute(f"create policy own_rows on memori.{table} "
                          "using (user_id = current_setting('memori.user_id', true))")
    try:
        as_role = psycopg.conninfo.make_conninfo(dsn, user=role)

        @checkpointer_test(name="MemoriSaver under RLS")
        async def saver_under_rls() -> object:
            saver = MemoriSaver(as_role, user_id="rls-user")
            try:
                yield saver
            finally:
                saver.close()

        report = asyncio.run(validate(saver_under_rls))
        assert report.passed_all(), {n: r.failures for n, r in report.results.items() if not r.passed}
        with MemoriSaver(as_role, user_id="alice") as alice, MemoriSaver(as_role, user_id="eve") as eve:
            _graph().compile(checkpointer=alice).invoke({"messages": ["x"]}, {"configurable": {"thread_id": "t"}})
            assert eve.get_tuple({"configurable": {"thread_id": "t"}}) is None
            # eve's own thread of the same name is hers: alice's rows stay invisible to her
            _graph().compile(checkpointer=eve).invoke({"messages": ["y"]}, {"configurable": {"thread_id": "t"}})
            assert alice.get_tuple({"configurable": {"thread_id": "t"}}).checkpoint["channel_values"]["messages"] \
                == ["x", "echo x"]
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"drop owned by {role}")
            admin.execute(f"drop role {role}")


def test_unreachable_database_fails_fast(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pymemdb.errors import ServerError

    with pytest.raises(ServerError):
        MemoriSaver(f"host={tmp_path} dbname=nothing", user_id="alice")


def test_the_savers_raise_the_clients_exception_classes(db: pymemdb.Database, dsn: str) -> None:
    """A PM code raised in SQL reaches a LangGraph user as the class the client raises, sync or async."""
    from pymemdb.integrations.langgraph import LG_THREADS_PRUNE

    with pytest.raises(InvalidArgument) as client:
        db.call(LG_THREADS_PRUNE, p_thread_ids=["t"], p_strategy="oldest", p_user_id="alice")
    with MemoriSaver(dsn, user_id="alice") as saver:
        with pytest.raises(InvalidArgument) as sync:
            saver.prune(["t"], strategy="oldest")
        with pytest.raises(InvalidArgument) as in_thread:
            asyncio.run(saver.aprune(["t"], strategy="oldest"))

    async def from_the_async_saver() -> tuple[BaseException, BaseException]:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="alice", policy="nope") as saver:
            with pytest.raises(InvalidArgument) as pruned:
                await saver.aprune(["t"], strategy="oldest")
            with pytest.raises(UnknownValue) as put:
                await _graph().compile(checkpointer=saver).ainvoke({"messages": ["x"]},
                                                                  {"configurable": {"thread_id": "t"}})
            return pruned.value, put.value

    pruned, put = asyncio.run(from_the_async_saver())
    assert {type(e) for e in (client.value, sync.value, in_thread.value, pruned)} == {InvalidArgument}
    assert isinstance(put, UnknownValue) and put.sqlstate == "PM004"
