"""context_optimize equals an independent reference of seed 02's algorithm on random inputs."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from tests import budget_oracle as oracle
from tests.helpers import T0

TYPES = sorted(oracle.BASE)
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")  # what PostgreSQL text holds
# few distinct timestamps make ties likely; some are in the future
OFFSETS_US = st.one_of(st.sampled_from([0, 1, 86_400_000_000, 5 * 86_400_000_000, -3_600_000_000]),
                       st.integers(-2 * 86_400_000_000, 40 * 86_400_000_000))
METADATA = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={
        "rag_match_metadata": st.fixed_dictionaries({"relevance": st.one_of(
            st.sampled_from([0, 0.5, 1, 0.25]), st.floats(0, 1, allow_subnormal=False))}),
        "revenueImpact": st.one_of(st.integers(0, 500_000), st.floats(0, 300_000, allow_subnormal=False), st.none()),
        "revenue_impact": st.integers(0, 500_000),
        "urgency": st.sampled_from(["critical", "high", "medium", "low", "unknown", "CRITICAL"]),
        "clientTier": st.sampled_from(["enterprise", "midMarket", "mid_market", "startup", "other"]),
        "client_tier": st.sampled_from(["smallBusiness", "enterprise"]),
        "dealStatus": st.sampled_from(["negotiation", "proposal", "qualified", "prospecting", "closed"]),
        "relationship_stage": st.sampled_from(["mature", "established", "developing", "initial"]),
    }),
)


@st.composite
def chunk_lists(draw: st.DrawFn, max_size: int = 25) -> list[dict[str, Any]]:
    n = draw(st.integers(0, max_size))
    chunks = []
    for i in range(n):
        chunk: dict[str, Any] = {"id": draw(st.sampled_from([f"c{i}", i])), "type": draw(st.sampled_from(TYPES))}
        mode = draw(st.sampled_from(["tokens", "content", "both"]))
        if mode in ("tokens", "both"):
            chunk["tokens"] = draw(st.one_of(st.integers(0, 40), st.integers(0, 3000),
                                             st.sampled_from([0, 500, 501])))
        if mode in ("content", "both"):
            chunk["content"] = draw(st.text(TEXT, max_size=120))
            if mode == "content" and draw(st.booleans()):
                chunk["content_type"] = draw(st.sampled_from(["general", "business", "code"]))
        if draw(st.booleans()):
            chunk["timestamp"] = (T0 - timedelta(microseconds=draw(OFFSETS_US))).isoformat()
        meta = draw(METADATA)
        if meta is not None:
            chunk["metadata"] = meta
        chunks.append(chunk)
    return chunks


def _tokens(chunks: list[dict[str, Any]]) -> list[int]:
    return [c["tokens"] if "tokens" in c else oracle.estimate(c["content"], c.get("content_type", "general"))
            for c in chunks]


@st.composite
def requests(draw: st.DrawFn, max_size: int = 25) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    chunks = draw(chunk_lists(max_size))
    options: dict[str, Any] = {"persist": False}
    if draw(st.booleans()):
        options["reserve_tokens"] = draw(st.sampled_from([0, 1, 100, 2000]))
    reserve = options.get("reserve_tokens", oracle.RESERVE)
    tokens = _tokens(chunks)
    # exact fits: the budget is the sum of a random subset (often a prefix in priority order)
    subset = draw(st.lists(st.sampled_from(tokens), max_size=len(tokens))) if tokens else []
    available = draw(st.one_of(st.just(reserve + sum(subset)), st.just(reserve), st.integers(0, 20_000),
                               st.just(reserve + sum(subset) - 1)))
    for key, strategy in (("category_budgets", st.booleans()), ("order", st.sampled_from(["priority", "original"])),
                          ("recency_mode", st.sampled_from(["linear", "exponential"])),
                          ("prefer_recent", st.booleans()), ("max_conflicts", st.integers(0, 5)),
                          ("max_dropped_ids", st.one_of(st.integers(0, 5), st.just("all")))):
        if draw(st.booleans()):
            options[key] = draw(strategy)
    return chunks, max(available, 0), options


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


def assert_same(got: dict[str, Any], want: dict[str, Any], exact_priorities: bool) -> None:
    strip = ("priority",)
    assert [{k: v for k, v in c.items() if k not in strip} for c in got["optimized_chunks"]] == \
        [{k: v for k, v in c.items() if k not in strip} for c in want["optimized_chunks"]]
    for g, w in zip(got["optimized_chunks"], want["optimized_chunks"], strict=True):
        assert g["priority"] == w["priority"] if exact_priorities else _close(g["priority"], w["priority"])
    for key in ("dropped_chunk_ids", "total_tokens_used", "tokens_remaining", "tokens_available", "reserved_tokens",
                "chunks_dropped", "conflicts", "conflicts_count", "requires_summarization"):
        assert got[key] == want[key], key
    for key, value in want["optimization_metrics"].items():
        assert _close(got["optimization_metrics"][key], value), key


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(request=requests())
def test_sql_equals_reference(conn: psycopg.Connection, request: tuple[list[dict[str, Any]], int, dict[str, Any]]) \
        -> None:
    check(conn, request)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests(max_size=300))
def test_sql_equals_reference_long_lists(conn: psycopg.Connection,
                                         request: tuple[list[dict[str, Any]], int, dict[str, Any]]) -> None:
    """Longer lists: long drop runs, many conflicts (beyond max_conflicts), the walk's early exit."""
    check(conn, request)


# an optimization_result as the seed's JSON document (the error_* columns are for on_error report)
NO_ERROR = "'{error_sqlstate,error_message,error_detail,error_hint}'::text[]"


def check(conn: psycopg.Connection, request: tuple[list[dict[str, Any]], int, dict[str, Any]]) -> None:
    chunks, available, options = request
    reserve = options.get("reserve_tokens", oracle.RESERVE)
    if reserve > available:
        try:
            conn.execute("select memori.context_optimize(%s, %s, %s, %s)",
                         (Jsonb(chunks), available, Jsonb(options), T0))
        except psycopg.Error as exc:
            assert exc.sqlstate == "PM001"
            return
        raise AssertionError("a reserve above the available tokens must fail")
    row = conn.execute("select to_jsonb(memori.context_optimize(%s, %s, %s, %s)) - " + NO_ERROR,
                       (Jsonb(chunks), available, Jsonb(options), T0)).fetchone()
    assert row is not None
    want = oracle.optimize(chunks, available, options, T0)
    assert_same(row[0], want, exact_priorities=options.get("recency_mode") != "exponential")
