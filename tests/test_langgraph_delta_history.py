"""LangGraph's DeltaChannel history (get_delta_channel_history) in one call: memori.lg_delta_history.

The oracle is LangGraph's own default implementation (BaseCheckpointSaver's,
one get_tuple per ancestor) run on the same saver: both must give the same
writes, in the same order, and the same seed, for any tree of checkpoints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph

from pymemdb.integrations.langgraph import AsyncMemoriSaver, MemoriSaver

CHANNELS = ("a", "b")
# task paths whose order differs between code points (LangGraph's writes_sort_key) and a linguistic collation
PATHS = ("", "~__pregel_pull, n", "a", "B", "é", "_x", "a b")


def _id(n: int) -> str:
    """Checkpoint ids in put order (LangGraph's uuid6 sort by time)."""
    return str(UUID(int=n + 1))


# a channel's value at a checkpoint: absent (a DeltaChannel between snapshots), inline, a blob, or a snapshot
VALUES = st.one_of(
    st.just(("absent", None)),
    st.tuples(st.just("inline"), st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3), st.booleans())),
    st.tuples(st.just("blob"), st.lists(st.integers(0, 9), max_size=4)),
    st.tuples(st.just("snapshot"), st.lists(st.integers(0, 9), max_size=4)),
)
WRITES = st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(("t1", "t2", "T", "é")),
                            st.sampled_from((*CHANNELS, "other")), st.integers(0, 99)), max_size=4)
CHECKPOINTS = st.lists(st.tuples(st.integers(0, 100), st.fixed_dictionaries({c: VALUES for c in CHANNELS}), WRITES),
                       min_size=1, max_size=8)


def _store(saver: MemoriSaver, thread: str, checkpoints: list[tuple[int, dict[str, Any], list[Any]]]) -> None:
    """Put a tree of checkpoints: each one's parent is chosen by its first number (0: none, k: the (k-1) % n-th)."""
    versions: dict[str, int] = {}
    for n, (parent_pick, values, writes) in enumerate(checkpoints):
        parent = None if n == 0 or parent_pick == 0 else (parent_pick - 1) % n
        checkpoint = empty_checkpoint()
        checkpoint["id"] = _id(n)
        new_versions: dict[str, str | int | float] = {}
        for channel, (kind, value) in values.items():
            versions[channel] = versions.get(channel, 0) + 1
            version = f"{versions[channel]:032}.{n}"
            checkpoint["channel_versions"][channel] = version
            new_versions[channel] = version
            if kind == "inline" or kind == "blob":
                checkpoint["channel_values"][channel] = value
            elif kind == "snapshot":
                checkpoint["channel_values"][channel] = _DeltaSnapshot(value)
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = _id(parent)
        stored = saver.put(config, checkpoint, {"source": "loop", "step": n}, new_versions)  # type: ignore[arg-type]
        by_task: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        for path, task, channel, item in writes:
            by_task.setdefault((path, task), []).append((channel, [item]))
        for (path, task), task_writes in by_task.items():
            saver.put_writes(stored, task_writes, task, path)


def _both(saver: MemoriSaver, thread: str, target: int | None, channels: Sequence[str]) -> tuple[Any, Any]:
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if target is not None:
        config["configurable"]["checkpoint_id"] = _id(target)
    ours = saver.get_delta_channel_history(config=config, channels=channels)  # type: ignore[arg-type]
    oracle = BaseCheckpointSaver.get_delta_channel_history(saver, config=config, channels=channels)  # type: ignore[arg-type]
    return ours, oracle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(checkpoints=CHECKPOINTS, target=st.integers(-1, 7),
       channels=st.lists(st.sampled_from((*CHANNELS, "other", "never")), max_size=4))
def test_one_call_agrees_with_langgraphs_ancestor_walk(dsn: str, checkpoints: list[Any], target: int,
                                                       channels: list[str]) -> None:
    """Any tree (forks, inline and blob seeds, snapshots, absent values, writes of several tasks and paths)."""
    with MemoriSaver(dsn, user_id="alice", max_size=2, cache_bytes=0) as saver:
        thread = f"t{abs(hash((repr(checkpoints), target, tuple(channels))))}"
        _store(saver, thread, checkpoints)
        wanted = None if target < 0 else target % len(checkpoints)
        ours, oracle = _both(saver, thread, wanted, channels)
        assert ours == oracle
        assert list(ours) == list(dict.fromkeys(channels))  # a channel once, in the order asked


def test_the_seed_is_the_whole_value_of_a_delta_blob(dsn: str) -> None:
    """A list stored as deltas on its base version comes back whole (memori.lg_blob_value's join)."""
    with MemoriSaver(dsn, user_id="alice", max_size=2) as saver:  # the copy on: puts send deltas
        _store(saver, "deltas", [(n, {"a": ("blob", list(range(n + 1))), "b": ("absent", None)},
                                  [("", "t1", "a", 100 + n)]) for n in range(5)])
        with psycopg.connect(dsn) as conn:
            assert conn.execute("select count(*) from memori.lg_blobs where base is not null").fetchone() != (0,)
        ours, oracle = _both(saver, "deltas", None, ["a", "b"])
        assert ours == oracle
        assert ours["a"] == {"writes": [("t1", "a", [103])], "seed": [0, 1, 2, 3]}  # the parent's value and writes
        assert ours["b"] == {"writes": []}  # no ancestor stores b: start empty


def test_absent_thread_and_bad_input(dsn: str) -> None:
    with MemoriSaver(dsn, user_id="alice", max_size=2) as saver:
        missing: Any = {"configurable": {"thread_id": "missing", "checkpoint_ns": ""}}
        assert saver.get_delta_channel_history(config=missing, channels=["a", "b"]) == \
            {"a": {"writes": []}, "b": {"writes": []}}
        assert saver.get_delta_channel_history(config=missing, channels=[]) == {}
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("select * from memori.lg_delta_history('t', null, p_user_id => 'alice')")
    assert err.value.sqlstate == "PM001"


def _extend(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    """A DeltaChannel reducer: every write's items appended (batching-invariant, as LangGraph requires)."""
    return [*state, *(item for write in writes for item in write)]


class _DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]


def test_a_deltachannel_graph_resumes_with_its_state(dsn: str) -> None:
    """A graph with a DeltaChannel (its value rebuilt from history) runs turn after turn on the saver."""
    def step(state: _DeltaState) -> dict[str, list[str]]:
        return {"items": [f"n{len(state['items'])}"]}

    graph = StateGraph(_DeltaState)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    expected = graph.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "delta-graph"}}
    with MemoriSaver(dsn, user_id="alice", max_size=2) as saver:
        app = graph.compile(checkpointer=saver)
        for turn in range(7):
            result = app.invoke({"items": [f"in{turn}"]}, config)
            assert result == expected.invoke({"items": [f"in{turn}"]}, config)
        assert len(result["items"]) == 14 and result["items"][-2:] == ["in6", "n13"]
        assert app.get_state(config).values == result
    with MemoriSaver(dsn, user_id="alice", max_size=2, cache_bytes=0) as cold:  # another process's saver
        assert graph.compile(checkpointer=cold).get_state(config).values == result
    with psycopg.connect(dsn) as conn:  # snapshots every third update, the steps between store no value
        assert conn.execute("select count(*) filter (where type <> 'empty'), count(*) from memori.lg_blobs"
                            " where channel = 'items'").fetchone() == (4, 4)


def test_the_async_saver_gives_the_same_history(dsn: str) -> None:
    with MemoriSaver(dsn, user_id="alice", max_size=2) as saver:
        _store(saver, "async", [(0, {"a": ("snapshot", [1]), "b": ("inline", "x")}, [("", "t1", "a", 2)]),
                                (1, {"a": ("absent", None), "b": ("absent", None)}, [("a", "t2", "b", 3)]),
                                (2, {"a": ("absent", None), "b": ("absent", None)}, [])])
        sync = saver.get_delta_channel_history(config={"configurable": {"thread_id": "async"}}, channels=["a", "b"])

    async def run() -> Any:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="alice") as saver:
            return await saver.aget_delta_channel_history(config={"configurable": {"thread_id": "async"}},
                                                          channels=["a", "b"])

    assert asyncio.run(run()) == sync == {"a": {"writes": [("t1", "a", [2])], "seed": _DeltaSnapshot([1])},
                                          "b": {"writes": [("t2", "b", [3])], "seed": "x"}}
