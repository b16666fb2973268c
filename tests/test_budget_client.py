"""db.budget: typed chunks in, typed optimisations out; errors as our exceptions; the failed event."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pymemdb
from pymemdb.budget import CHUNK_TYPES, Chunk
from pymemdb.errors import InvalidArgument, UnknownValue
from tests.helpers import T0


def test_optimize_typed(db: pymemdb.Database) -> None:
    chunks = [Chunk("sys", "system_prompt", content="You are terse."),
              Chunk("h", "chat_history_user", tokens=50, timestamp=T0 - timedelta(days=1)),
              {"id": "big", "type": "rag_generic_chunk", "tokens": 5000}]
    result = db.budget.optimize(chunks, 2100, user_id="alice", session_id="s1", now=T0)
    assert [c.id for c in result.optimized_chunks] == ["sys", "h"]
    assert result.optimized_chunks[1].token_span == (4, 54) and result.optimized_chunks[1].priority == 169
    assert result.dropped_chunk_ids == ["big"] and result.conflicts[0].chunk1 == "h"
    assert result.optimization_id is not None and result.reserved_tokens == 2000
    assert result.optimization_metrics.prioritization_score == (200 + 169) / 2
    quiet = db.budget.optimize(chunks, 2100, persist=False, reserve_tokens=0, order="original", now=T0)
    assert quiet.optimization_id is None and [c.id for c in quiet.optimized_chunks] == ["sys", "h"]


def test_stored(db: pymemdb.Database) -> None:
    added = db.budget.add_many("s1", [Chunk(None, "tool_output", content="x" * 38),
                                      Chunk(None, "rag_generic_chunk", content="y" * 380)],
                               user_id="alice", ttl=timedelta(hours=1), now=T0)
    assert [a.tokens for a in added] == [10, 100] and added[0].expires_at == T0 + timedelta(hours=1)
    result = db.budget.optimize_stored("s1", 50, reserve_tokens=0, now=T0)
    assert [c.content for c in result.optimized_chunks] == ["x" * 38]
    assert result.dropped_chunk_ids == [str(added[1].id)]
    capped = db.budget.optimize_stored("s1", 50, reserve_tokens=0, max_dropped_ids=0, persist=False, now=T0)
    assert capped.dropped_chunk_ids == [] and capped.chunks_dropped == 1
    every = db.budget.optimize_stored("s1", 50, reserve_tokens=0, max_dropped_ids="all", persist=False, now=T0)
    assert every.dropped_chunk_ids == [str(added[1].id)]
    assert db.budget.clear("s1") == 2


def test_helpers(db: pymemdb.Database) -> None:
    assert db.budget.estimate_tokens("x" * 20) == 6 and db.budget.estimate_tokens("x" * 21, "business") == 5
    assert db.budget.business_boost({"revenueImpact": 50000, "clientTier": "startup"}) == 7
    assert db.budget.chunk_priority(Chunk(None, "tool_input", tokens=1)) == 160
    assert len(CHUNK_TYPES) == 11


def test_errors_and_failed_event(db: pymemdb.Database) -> None:
    with pytest.raises(InvalidArgument):
        db.budget.optimize([], 10.5)  # type: ignore[arg-type]
    with pytest.raises(UnknownValue) as info:
        db.budget.optimize([Chunk("a", "novel", tokens=1)], 5000, user_id="alice")
    assert "system_prompt" in (info.value.hint or "")
    failed = db.events.list("context.optimization.failed")
    assert len(failed) == 1 and failed[0].payload["sqlstate"] == "PM004"
    with pytest.raises(InvalidArgument):
        db.budget.optimize([Chunk("a", "tool_output", tokens=1)], 100, persist=False)  # reserve > available
    assert len(db.events.list("context.optimization.failed")) == 1  # persist off: no event


def test_bench_budget_small(dsn: str) -> None:
    """Issue 21: the lean client (metadata, ranked in Python, then the winners' content) is the headline
    baseline; it, the naive client and context_optimize_stored select the same chunks with the same content."""
    from pymemdb.bench import budget as bench

    result = bench.run(dsn, 300)
    for size in result["sizes"].values():
        timing = size["timing"]
        assert timing["same_selection"] is True
        assert {"stored", "lean", "naive"} <= set(timing)
        assert size["speedup_p50"] is not None and size["speedup_naive_p50"] is not None
    assert bench.render(result)
