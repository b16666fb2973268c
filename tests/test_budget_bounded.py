"""Issue 21: dropped ids listed up to budget.max_dropped_ids, and context_optimize_stored ranking only the
prefix of the order that decides the result (a top-N sort in rounds) — the same result as ranking all."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from tests import budget_oracle as oracle
from tests.helpers import T0, assert_sqlstate, value
from tests.test_budget import add, optimize, stored
from tests.test_budget_property import NO_ERROR, assert_same

TYPES = sorted(oracle.BASE)


def _chunks(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "type": "tool_output", "tokens": 10} for i in range(n)]


def _raw(conn: psycopg.Connection, chunks: list[dict[str, Any]], available: int, options: dict[str, Any]) -> str:
    """The result as PostgreSQL prints it: byte for byte."""
    return value(conn, "select (to_jsonb(memori.context_optimize(%s, %s, %s, %s)) - " + NO_ERROR + ")::text",  # type: ignore[no-any-return]
                 (Jsonb(chunks), available, Jsonb(options), T0))


def test_small_results_are_unchanged(conn: psycopg.Connection) -> None:
    """Below the cap a result is byte for byte what listing every dropped id gives."""
    chunks = _chunks(1001)  # 2 allocated, 999 dropped
    quiet = {"persist": False, "reserve_tokens": 0}
    capped = _raw(conn, chunks, 25, quiet)
    assert capped == _raw(conn, chunks, 25, quiet | {"max_dropped_ids": "all"})
    assert len(optimize(conn, chunks, 25, {"reserve_tokens": 0})["dropped_chunk_ids"]) == 999


@pytest.mark.parametrize(("n", "listed"), [(1002, 1000), (1003, 1000), (1001, 999)])
def test_default_cap_boundary(conn: psycopg.Connection, n: int, listed: int) -> None:
    """budget.max_dropped_ids (1000): exactly the cap, and one over it; chunks_dropped is always the total."""
    result = optimize(conn, _chunks(n), 25, {"reserve_tokens": 0})
    assert result["chunks_dropped"] == n - 2
    assert result["dropped_chunk_ids"] == list(range(2, 2 + listed))
    assert result["conflicts_count"] == n - 2


def test_cap_option_and_setting(conn: psycopg.Connection) -> None:
    chunks = _chunks(10)
    every = list(range(2, 10))
    for cap, listed in ((0, []), (3, [2, 3, 4]), (8, every), (9, every), ("all", every)):
        result = optimize(conn, chunks, 25, {"reserve_tokens": 0, "max_dropped_ids": cap})
        assert result["dropped_chunk_ids"] == listed and result["chunks_dropped"] == 8
    conn.execute("update memori.settings set value = '2' where key = 'budget.max_dropped_ids'")
    assert optimize(conn, chunks, 25, {"reserve_tokens": 0})["dropped_chunk_ids"] == [2, 3]
    assert optimize(conn, chunks, 25, {"reserve_tokens": 0, "max_dropped_ids": 4})["dropped_chunk_ids"] == [2, 3, 4, 5]
    add(conn, "s", [{"type": "tool_output", "content": "", "tokens": 10} for _ in range(10)])
    result = stored(conn, "s", 25, {"reserve_tokens": 0})
    assert len(result["dropped_chunk_ids"]) == 2 and result["chunks_dropped"] == 8
    conn.execute("update memori.settings set value = '\"all\"' where key = 'budget.max_dropped_ids'")
    assert len(stored(conn, "s", 25, {"reserve_tokens": 0})["dropped_chunk_ids"]) == 8


@pytest.mark.parametrize("bad", [-1, 1.5, "x", "ALL", True, [], {}, 2147483648])
def test_bad_max_dropped_ids(conn: psycopg.Connection, bad: Any) -> None:
    for sql in ("select memori.context_optimize('[]', 10, %s)", "select memori.context_optimize_stored('s', 10, %s)"):
        assert_sqlstate(conn, "PM001", sql, (Jsonb({"max_dropped_ids": bad}),))
    with pytest.raises(psycopg.Error) as info:
        conn.execute("select memori.context_optimize('[]', 10, %s)", (Jsonb({"max_dropped_ids": bad}),))
    assert info.value.diag.message_hint is not None and "max_dropped_ids" in info.value.diag.message_hint


# -- the bounded ranking: stored chunks (> the first round's prefix) equal context_optimize's full ranking -----
def _tokens(rnd: random.Random, sizes: str) -> int:
    if sizes == "uniform":
        return rnd.randint(50, 500)
    if sizes == "wide":  # some of 0 tokens: the walk is never decided early
        return rnd.choice([rnd.randint(0, 40), rnd.randint(0, 3000)])
    if sizes == "big_rare_small":  # the smallest chunk is rare: the walk goes far
        return rnd.randint(400, 900) if rnd.random() > 0.002 else rnd.randint(1, 20)
    return 100


def _session(seed: int, n: int, sizes: str) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    chunks = []
    for i in range(n):
        tokens = _tokens(rnd, sizes)
        chunk: dict[str, Any] = {"type": rnd.choice(TYPES), "content": "", "tokens": tokens}
        if rnd.random() < 0.9:
            chunk["timestamp"] = (T0 - timedelta(seconds=rnd.randint(-3600, 40 * 86400) if rnd.random() < 0.8
                                                 else rnd.choice([0, 86400]))).isoformat()
        if i % 3 == 0:
            chunk["metadata"] = {"rag_match_metadata": {"relevance": rnd.choice([0, 0.5, rnd.random()])}}
        chunks.append(chunk)
    return chunks


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), n=st.integers(1150, 3000),
       sizes=st.sampled_from(["uniform", "wide", "big_rare_small", "equal"]),
       budget=st.one_of(st.integers(0, 60_000), st.sampled_from([0, 99, 100, 30_000, 400_000])),
       max_dropped=st.one_of(st.sampled_from([0, 1, 5, 1000, "all"]), st.integers(0, 3000)),
       max_conflicts=st.sampled_from([0, 3, 100]), caps=st.booleans(),
       order=st.sampled_from(["priority", "original"]))
def test_bounded_ranking_equals_full(conn: psycopg.Connection, seed: int, n: int, sizes: str, budget: int,
                                     max_dropped: Any, max_conflicts: int, caps: bool, order: str) -> None:
    conn.execute("delete from memori.context_chunks")
    chunks = _session(seed, n, sizes)
    added = add(conn, "p", chunks)
    for c, a in zip(chunks, added, strict=True):
        c["id"] = str(a["id"])
    options = {"reserve_tokens": 0, "max_dropped_ids": max_dropped, "max_conflicts": max_conflicts,
               "category_budgets": caps, "order": order}
    got = stored(conn, "p", budget, options)
    contents = [c.pop("content") for c in got["optimized_chunks"]]
    assert contents == [""] * len(contents)
    assert_same(got, optimize(conn, chunks, budget, options), exact_priorities=True)
    assert_same(got, oracle.optimize(chunks, budget, options, T0), exact_priorities=True)
