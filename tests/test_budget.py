"""The context window manager (seed 02) through SQL: config, estimates, boosts, selection, errors, persistence."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from psycopg.types.json import Jsonb

from tests import budget_oracle as oracle
from tests.helpers import T0, assert_sqlstate, one, rows, value
from tests.test_budget_property import NO_ERROR, assert_same, chunk_lists

DAY = timedelta(days=1)
QUIET = {"persist": False}


def optimize(conn: psycopg.Connection, chunks: Any, available: int, options: dict[str, Any] | None = None,
             now: Any = T0) -> dict[str, Any]:
    return value(conn, "select to_jsonb(memori.context_optimize(%s, %s, %s, %s)) - " + NO_ERROR,  # type: ignore[no-any-return]
                 (Jsonb(chunks), available, Jsonb(QUIET | (options or {})), now))


def ids(result: dict[str, Any]) -> list[Any]:
    return [c["id"] for c in result["optimized_chunks"]]


# -- configuration -----------------------------------------------------------------
def test_config_is_seeded_from_the_seed(conn: psycopg.Connection) -> None:
    types = {r["chunk_type"]: r["base_priority"] for r in rows(conn, "select * from memori.chunk_types")}
    assert types == oracle.BASE
    budgets = {r["name"]: r["tokens"] for r in rows(conn, "select * from memori.token_budgets")}
    assert budgets == {"maxOverall": 32000, "maxHistory": 8000, "maxBusinessData": 8000, "maxClientData": 6000,
                       "maxRagResults": 4000, "maxSystemPrompt": 2000}
    assert value(conn, "select count(*) from memori.priority_boosts") == 17


def test_config_is_data(conn: psycopg.Connection) -> None:
    conn.execute("update memori.chunk_types set base_priority = 300 where chunk_type = 'rag_generic_chunk'")
    assert value(conn, "select memori.chunk_priority('{\"type\": \"rag_generic_chunk\"}')") == 300
    conn.execute("update memori.settings set value = '4' where key = 'budget.density_general'")
    assert value(conn, "select memori.estimate_tokens(repeat('x', 8))") == 2


# -- estimate_tokens ----------------------------------------------------------------
@pytest.mark.parametrize(("text", "kind", "tokens"), [
    ("", "general", 0), ("x" * 19, "general", 5), ("x" * 20, "general", 6), ("x" * 38, "general", 10),
    ("x" * 42, "business", 10), ("x" * 43, "business", 11), ("x" * 7, "code", 2), ("x" * 8, "code", 3),
])
def test_estimate_tokens_is_an_exact_ceiling(conn: psycopg.Connection, text: str, kind: str, tokens: int) -> None:
    assert value(conn, "select memori.estimate_tokens(%s, %s)", (text, kind)) == tokens
    assert oracle.estimate(text, kind) == tokens


def test_estimate_tokens_auto(conn: psycopg.Connection) -> None:
    code = "def f(x):\n    return {'a': [x, (x + 1)]}\n"
    business = "The client signed the renewal: revenue of $120k this quarter"
    general = "The cat sat on the mat and looked at the garden for a while"
    for text, kind in ((code, "code"), (business, "business"), (general, "general")):
        assert value(conn, "select memori.estimate_tokens(%s, 'auto')", (text,)) == oracle.estimate(text, kind)
    err = assert_sqlstate(conn, "PM004", "select memori.estimate_tokens('x', 'poetry')")
    assert "business" in (err.diag.message_hint or "")


# -- boosts and priority -------------------------------------------------------------
@pytest.mark.parametrize(("metadata", "boost"), [
    ({}, 0), ({"revenueImpact": 50000}, 5), ({"revenue_impact": 50000}, 5), ({"revenueImpact": 10**7}, 20),
    ({"urgency": "medium", "clientTier": "startup"}, 7), ({"client_tier": "mid_market"}, 8),
    ({"dealStatus": "proposal", "relationship": "initial"}, 15), ({"deal_status": "closed"}, 1),
    ({"relationship_stage": "developing", "urgency": "HIGH"}, 20), ({"urgency": "critical"}, 20),
    ({"revenueImpact": "50000", "urgency": "unknown"}, 0),
])
def test_business_boost(conn: psycopg.Connection, metadata: dict[str, Any], boost: float) -> None:
    assert value(conn, "select memori.business_boost(%s)", (Jsonb(metadata),)) == boost
    assert oracle.business_boost(metadata) == boost


def test_chunk_priority_parts(conn: psycopg.Connection) -> None:
    def priority(chunk: dict[str, Any], options: dict[str, Any] | None = None) -> float:
        return value(conn, "select memori.chunk_priority(%s, %s, %s)",  # type: ignore[no-any-return]
                     (Jsonb(chunk), T0, Jsonb(options or {})))

    assert priority({"type": "system_prompt"}) == 200
    two_days = (T0 - 2 * DAY).isoformat()
    assert priority({"type": "system_prompt", "timestamp": two_days}) == 218
    assert priority({"type": "system_prompt", "timestamp": (T0 - 30 * DAY).isoformat()}) == 200
    assert priority({"type": "system_prompt", "timestamp": (T0 + DAY).isoformat()}) == 220  # future: age 0
    assert priority({"type": "system_prompt", "timestamp": two_days}, {"prefer_recent": False}) == 200
    assert priority({"type": "rag_document_chunk", "metadata": {"rag_match_metadata": {"relevance": 0.5}}}) == 130
    assert priority({"type": "tool_input", "metadata": {"revenueImpact": 30000}}) == 163
    expo = priority({"type": "system_prompt", "timestamp": two_days}, {"recency_mode": "exponential"})
    assert expo == pytest.approx(200 + 15 * 0.9048374180359595)
    slow = priority({"type": "system_prompt", "timestamp": two_days, "metadata": {"urgency": "low"}},
                    {"recency_mode": "exponential"})
    assert slow == pytest.approx(200 + 15 * 0.9607894391523232)
    assert_sqlstate(conn, "PM004", "select memori.chunk_priority('{\"type\": \"novel\"}')")


# -- context_optimize ---------------------------------------------------------------
SEED_EXAMPLE = [
    {"id": "sys", "type": "system_prompt", "content": "You are a sales assistant." * 10},
    {"id": "q", "type": "current_user_prompt", "content": "Which deals need attention?", "timestamp": T0.isoformat()},
    {"id": "h1", "type": "chat_history_user", "tokens": 900, "timestamp": (T0 - 3 * DAY).isoformat()},
    {"id": "h2", "type": "chat_history_assistant", "tokens": 2400, "timestamp": (T0 - 3 * DAY).isoformat()},
    {"id": "crm", "type": "rag_document_chunk", "tokens": 700,
     "metadata": {"revenueImpact": 120000, "dealStatus": "negotiation"}},
    {"id": "ebook", "type": "rag_ebook_chunk", "tokens": 600,
     "metadata": {"rag_match_metadata": {"relevance": 0.9}, "revenue_impact": 50000}},
]


def test_seed_example(conn: psycopg.Connection) -> None:
    # priorities: q 190 + 20 (now), sys 200, h1 150 + 17 (3 days), h2 140 + 17, crm 120 + min(12 + 18, 20),
    # ebook 110 + 18 (RAG) + 5 (revenue); budget 6000 - 2000 reserved = 4000
    result = optimize(conn, SEED_EXAMPLE, 6000)
    assert [c["priority"] for c in result["optimized_chunks"]] == [210, 200, 167, 157, 133]
    assert ids(result) == ["q", "sys", "h1", "h2", "ebook"]
    assert result["dropped_chunk_ids"] == ["crm"]  # 3377 + 700 > 4000, but the smaller ebook still fits
    assert result["total_tokens_used"] == 8 + 69 + 900 + 2400 + 600
    assert result["tokens_remaining"] == 23
    assert result["reserved_tokens"] == 2000 and result["chunks_dropped"] == 1
    assert result["conflicts"] == [{"chunk1": "h2", "chunk2": "crm", "conflict_type": "budget_exceeded",
                                    "resolution": "keep_chunk1", "budget": "available"}]
    spans = [c["token_span"] for c in result["optimized_chunks"]]
    assert spans == [[0, 8], [8, 77], [77, 977], [977, 3377], [3377, 3977]]
    assert result["requires_summarization"] == ["h1", "h2", "ebook"]
    assert result["optimization_metrics"]["business_relevance_boost"] == 1.0
    assert result["optimization_metrics"]["prioritization_score"] == (210 + 200 + 167 + 157 + 133) / 5
    assert_same(result, oracle.optimize(SEED_EXAMPLE, 6000, QUIET, T0), exact_priorities=True)


def test_exact_fit_and_one_token_short(conn: psycopg.Connection) -> None:
    chunks = [{"id": "a", "type": "tool_output", "tokens": 600}, {"id": "b", "type": "tool_input", "tokens": 400}]
    exact = optimize(conn, chunks, 1000, {"reserve_tokens": 0})
    assert ids(exact) == ["a", "b"] and exact["tokens_remaining"] == 0 and exact["conflicts"] == []
    short = optimize(conn, chunks, 999, {"reserve_tokens": 0})
    assert ids(short) == ["a"] and short["dropped_chunk_ids"] == ["b"] and short["tokens_remaining"] == 399


def test_a_later_smaller_chunk_still_fits(conn: psycopg.Connection) -> None:
    chunks = [{"id": "big", "type": "tool_output", "tokens": 900}, {"id": "huge", "type": "tool_input", "tokens": 5000},
              {"id": "small", "type": "rag_generic_chunk", "tokens": 100}]
    result = optimize(conn, chunks, 1000, {"reserve_tokens": 0})
    assert ids(result) == ["big", "small"] and result["dropped_chunk_ids"] == ["huge"]
    assert result["conflicts"][0]["chunk1"] == "big" and result["conflicts"][0]["chunk2"] == "huge"


def test_zero_budget_and_empty_input(conn: psycopg.Connection) -> None:
    chunks = [{"id": 1, "type": "tool_output", "tokens": 0}, {"id": 2, "type": "tool_output", "tokens": 1}]
    result = optimize(conn, chunks, 0, {"reserve_tokens": 0})
    assert ids(result) == [1] and result["dropped_chunk_ids"] == [2]
    assert result["conflicts"][0]["chunk1"] == 1
    empty = optimize(conn, [], 2000)
    assert empty["optimized_chunks"] == [] and empty["tokens_remaining"] == 0
    assert empty["optimization_metrics"] == {"prioritization_score": 0, "business_relevance_boost": 0,
                                             "recency_boost": 0}
    # the first chunk dropped before any allocation records no conflict
    nothing = optimize(conn, chunks[1:], 0, {"reserve_tokens": 0})
    assert nothing["conflicts"] == [] and nothing["chunks_dropped"] == 1


def test_ties_break_by_timestamp_then_input_order(conn: psycopg.Connection) -> None:
    old, new = (T0 - 30 * DAY).isoformat(), (T0 - 25 * DAY).isoformat()  # both beyond the 20-day boost
    chunks = [{"id": "no_ts", "type": "tool_output", "tokens": 1}, {"id": "old", "type": "tool_output", "tokens": 1,
                                                                     "timestamp": old},
              {"id": "new", "type": "tool_output", "tokens": 1, "timestamp": new},
              {"id": "no_ts2", "type": "tool_output", "tokens": 1}]
    assert ids(optimize(conn, chunks, 10, {"reserve_tokens": 0})) == ["new", "old", "no_ts", "no_ts2"]
    original = optimize(conn, chunks, 10, {"reserve_tokens": 0, "order": "original"})
    assert ids(original) == ["no_ts", "old", "new", "no_ts2"]
    assert [c["token_span"] for c in original["optimized_chunks"]] == [[0, 1], [1, 2], [2, 3], [3, 4]]


def test_category_budgets(conn: psycopg.Connection) -> None:
    chunks = [{"id": f"h{i}", "type": "chat_history_user", "tokens": 3000} for i in range(4)] + \
             [{"id": "r", "type": "rag_generic_chunk", "tokens": 4001},
              {"id": "t", "type": "tool_output", "tokens": 10}]
    capped = optimize(conn, chunks, 30000, {"category_budgets": True})
    assert ids(capped) == ["t", "h0", "h1"]
    assert {c["chunk2"]: c["budget"] for c in capped["conflicts"]} == {"h2": "maxHistory", "h3": "maxHistory",
                                                                      "r": "maxRagResults"}
    assert ids(optimize(conn, chunks, 30000)) == ["t", "h0", "h1", "h2", "h3", "r"]


# -- bad input ----------------------------------------------------------------------
@pytest.mark.parametrize(("chunks", "available", "code", "words"), [
    ({"id": 1}, 100, "PM001", "array"),
    ([{"id": "a", "type": "novel", "tokens": 1}], 100, "PM004", "system_prompt"),
    ([{"id": "a", "type": "tool_output", "tokens": -1}], 100, "PM001", "estimated"),
    ([{"id": "a", "type": "tool_output", "tokens": 1.5}], 100, "PM001", "estimated"),
    ([{"id": "a", "type": "tool_output"}], 100, "PM001", "content"),
    ([{"id": "a", "type": "tool_output", "tokens": 1}, {"id": "a", "type": "tool_input", "tokens": 1}], 100,
     "PM001", "unique"),
    ([{"type": "tool_output", "tokens": 1}], 100, "PM001", "unique id"),
    ([{"id": "a", "type": "tool_output", "tokens": 1, "metadata": [1]}], 100, "PM001", "metadata"),
    ([{"id": "a", "type": "tool_output", "tokens": 1}], -1, "PM001", "context window"),
    ([{"id": "a", "type": "tool_output", "tokens": 1}], 1999, "PM001", "reserve_tokens"),
])
def test_bad_input(conn: psycopg.Connection, chunks: Any, available: int, code: str, words: str) -> None:
    err = assert_sqlstate(conn, code, "select memori.context_optimize(%s, %s, '{\"persist\": false}')",
                          (Jsonb(chunks), available))
    assert words in f"{err.diag.message_primary} {err.diag.message_hint}"


def test_bad_options_and_too_many_chunks(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM001", "select memori.context_optimize('[]', 10, '{\"reserve\": 0}')")
    assert_sqlstate(conn, "PM001", "select memori.context_optimize('[]', 10, '{\"order\": \"random\"}')")
    assert_sqlstate(conn, "PM001", "select memori.context_optimize('[]', 10, '{\"reserve_tokens\": -1}')")
    conn.execute("update memori.settings set value = '3' where key = 'budget.max_chunks'")
    chunks = [{"id": i, "type": "tool_output", "tokens": 1} for i in range(4)]
    err = assert_sqlstate(conn, "PM003", "select memori.context_optimize(%s, 10)", (Jsonb(chunks),))
    assert "context_optimize_stored" in (err.diag.message_hint or "")


def test_error_names_the_chunk(conn: psycopg.Connection) -> None:
    chunks = [{"id": "a", "type": "tool_output", "tokens": 1}, {"id": "b", "type": "tool_output", "tokens": -5}]
    err = assert_sqlstate(conn, "PM001", "select memori.context_optimize(%s, 10)", (Jsonb(chunks),))
    assert "chunks[1]" in str(err)


# -- persistence and events ---------------------------------------------------------------
def test_persisted_with_events(conn: psycopg.Connection) -> None:
    result = value(conn, "select to_jsonb(memori.context_optimize(%s, 6000, %s, %s)) - " + NO_ERROR,
                   (Jsonb(SEED_EXAMPLE), Jsonb({"user_id": "alice", "session_id": "s1"}), T0))
    record = rows(conn, "select * from memori.context_optimizations")
    assert len(record) == 1 and str(record[0]["id"]) == result["optimization_id"]
    assert (record[0]["user_id"], record[0]["session_id"], record[0]["chunks_count"], record[0]["optimized_count"],
            record[0]["tokens_used"], record[0]["tokens_available"]) == ("alice", "s1", 6, 5, 3977, 6000)
    assert record[0]["expires_at"] == T0 + 90 * DAY
    kinds = [r["event_type"] for r in rows(conn, "select event_type from memori.events order by id")]
    assert kinds == ["context.optimization.started", "context.budget.resolved", "context.chunks_dropped",
                     "context.conflict_detected", "context.optimization.success"]


def test_persist_needs_a_user_and_can_be_off(conn: psycopg.Connection) -> None:
    err = assert_sqlstate(conn, "PM001", "select memori.context_optimize('[]', 2000)")
    assert "persist" in (err.diag.message_hint or "")
    conn.execute("set memori.user_id = 'bob'")
    value(conn, "select to_jsonb(memori.context_optimize('[]', 2000)) - " + NO_ERROR)
    assert value(conn, "select user_id from memori.context_optimizations") == "bob"
    conn.execute("reset memori.user_id")
    assert optimize(conn, [], 2000)["optimization_id"] is None
    assert value(conn, "select count(*) from memori.context_optimizations") == 1


# -- stored chunks --------------------------------------------------------------------------
def add(conn: psycopg.Connection, session: str, chunks: list[dict[str, Any]], ttl: str | None = None,
        now: Any = T0) -> list[dict[str, Any]]:
    return rows(conn, "select * from memori.chunk_add_many(%s, %s, 'alice', %s::interval, %s)",
                (session, Jsonb(chunks), ttl, now))


def stored(conn: psycopg.Connection, session: str, available: int, options: dict[str, Any] | None = None,
           now: Any = T0) -> dict[str, Any]:
    return value(conn, "select to_jsonb(memori.context_optimize_stored(%s, %s, %s, %s)) - " + NO_ERROR,  # type: ignore[no-any-return]
                 (session, available, Jsonb(QUIET | (options or {})), now))


def test_stored_chunks_with_content_for_winners(conn: psycopg.Connection) -> None:
    chunks = [{k: v for k, v in c.items() if k != "id"} | {"content": c.get("content", "x" * 4 * c.get("tokens", 1))}
              for c in SEED_EXAMPLE]
    added = add(conn, "s1", chunks)
    assert [a["chunk_type"] for a in added] == [c["type"] for c in chunks]
    result = stored(conn, "s1", 6000)
    by_id = {str(a["id"]): i for i, a in enumerate(added)}
    assert [by_id[c["id"]] for c in result["optimized_chunks"]] == [1, 0, 2, 3, 5]
    assert result["optimized_chunks"][1]["content"] == chunks[0]["content"]
    assert all("content" in c for c in result["optimized_chunks"])


def test_stored_excludes_expired_and_other_sessions(conn: psycopg.Connection) -> None:
    add(conn, "s1", [{"type": "tool_output", "content": "keep", "tokens": 1}])
    add(conn, "s1", [{"type": "tool_output", "content": "gone", "tokens": 1}], ttl="1 hour")
    add(conn, "s2", [{"type": "tool_output", "content": "other", "tokens": 1}])
    at = T0 + timedelta(hours=1)
    assert [c["content"] for c in stored(conn, "s1", 10, {"reserve_tokens": 0}, now=at - timedelta(seconds=1))
            ["optimized_chunks"]] == ["keep", "gone"]
    assert [c["content"] for c in stored(conn, "s1", 10, {"reserve_tokens": 0}, now=at)["optimized_chunks"]] \
        == ["keep"]
    assert value(conn, "select expires_at from memori.context_chunks where content = 'keep'") == T0 + 30 * DAY
    assert value(conn, "select memori.chunk_clear('s1')") == 2
    assert stored(conn, "s1", 10, {"reserve_tokens": 0})["optimized_chunks"] == []


def test_stored_bad_input(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM001", "select memori.chunk_add_many('s', '[{\"type\": \"tool_output\", \"tokens\": 1}]',"
                                   " 'alice')")
    assert_sqlstate(conn, "PM001", "select memori.chunk_add_many('s', '[]')")
    assert_sqlstate(conn, "PM001", "select memori.chunk_add_many('s', '[{\"id\": \"x\", \"type\": \"tool_output\","
                                   " \"content\": \"c\"}]', 'alice')")
    conn.execute("update memori.settings set value = '10' where key = 'budget.max_content_bytes'")
    assert_sqlstate(conn, "PM003", "select memori.chunk_add_many('s', '[{\"type\": \"tool_output\","
                                   " \"content\": \"01234567890\"}]', 'alice')")
    conn.execute("update memori.settings set value = '1' where key = 'budget.max_stored_chunks'")
    add(conn, "s", [{"type": "tool_output", "content": "a"}, {"type": "tool_output", "content": "b"}])
    assert_sqlstate(conn, "PM003", "select memori.context_optimize_stored('s', 10, p_now => %s)", (T0,))


def test_stored_persists_for_the_chunks_owner(conn: psycopg.Connection) -> None:
    add(conn, "s1", [{"type": "tool_output", "content": "x"}])
    result = value(conn, "select to_jsonb(memori.context_optimize_stored('s1', 2000, '{}', %s)) - " + NO_ERROR, (T0,))
    assert value(conn, "select user_id || '/' || session_id || '/' || source from memori.context_optimizations"
                       " where id = %s", (result["optimization_id"],)) == "alice/s1/stored"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(chunks=chunk_lists())
def test_stored_equals_request(conn: psycopg.Connection, chunks: list[dict[str, Any]]) -> None:
    conn.execute("delete from memori.context_chunks")
    for c in chunks:
        c.setdefault("content", "")
        c.pop("id")
    added = add(conn, "p", chunks)
    for c, a in zip(chunks, added, strict=True):
        c["id"] = str(a["id"])
    for options in ({"reserve_tokens": 0}, {"category_budgets": True, "reserve_tokens": 100},
                    {"recency_mode": "exponential", "order": "original", "reserve_tokens": 50}):
        available = sum(a["tokens"] for a in added[::2]) + options["reserve_tokens"]
        got = stored(conn, "p", available, options)
        for c in got["optimized_chunks"]:
            c.pop("content")
        assert_same(got, optimize(conn, chunks, available, options), exact_priorities=True)


def test_conflicts_are_capped_but_counted(conn: psycopg.Connection) -> None:
    chunks = [{"id": i, "type": "tool_output", "tokens": 10} for i in range(30)]
    result = optimize(conn, chunks, 25, {"reserve_tokens": 0, "max_conflicts": 5})
    assert ids(result) == [0, 1] and result["chunks_dropped"] == 28
    assert result["conflicts_count"] == 28 and [c["chunk2"] for c in result["conflicts"]] == [2, 3, 4, 5, 6]
    assert optimize(conn, chunks, 25, {"reserve_tokens": 0})["conflicts_count"] == 28
    assert len(optimize(conn, chunks, 25, {"reserve_tokens": 0, "max_conflicts": 0})["conflicts"]) == 0


# -- one acting-user rule (issue 19) and the failure event emitted by the SQL -------------
def test_acting_user_rule(conn: psycopg.Connection) -> None:
    """An owner or superuser passing another user's id gets PM040; no user given means memori.user_id."""
    chunk = [{"type": "tool_output", "content": "x" * 38}]
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    try:
        assert_sqlstate(conn, "PM040", "select * from memori.chunk_add_many('s1', %s, 'bob')", (Jsonb(chunk),))
        assert_sqlstate(conn, "PM040", "select * from memori.context_optimize('[]', 100, %s)",
                        (Jsonb({"user_id": "bob", "reserve_tokens": 0}),))
        added = rows(conn, "select * from memori.chunk_add_many('s1', %s)", (Jsonb(chunk),))
        assert value(conn, "select user_id from memori.context_chunks where id = %s", (added[0]["id"],)) == "alice"
        optimization = value(conn, "select optimization_id from memori.context_optimize('[]', 100, %s)",
                             (Jsonb({"reserve_tokens": 0}),))
        assert value(conn, "select user_id from memori.context_optimizations where id = %s", (optimization,)) == "alice"
    finally:
        conn.execute("select set_config('memori.user_id', '', false)")
    assert_sqlstate(conn, "PM001", "select * from memori.chunk_add_many('s2', %s)", (Jsonb(chunk),))


def test_on_error_report_records_the_failure(conn: psycopg.Connection) -> None:
    """{"on_error": "report"}: the function records context.optimization.failed and returns the error."""
    before = value(conn, "select count(*) from memori.events where event_type = 'context.optimization.failed'")
    row = one(conn, "select * from memori.context_optimize(%s, 10, %s)",
              (Jsonb([{"id": "a", "type": "novel", "tokens": 1}]), Jsonb({"on_error": "report", "user_id": "alice"})))
    assert row is not None and row["error_sqlstate"] == "PM004" and row["optimized_chunks"] is None
    payload = value(conn, "select payload from memori.events where event_type = 'context.optimization.failed' "
                          "order by id desc limit 1")
    assert payload == {"source": "request", "chunks_count": 1, "user_id": "alice", "error": row["error_message"],
                       "sqlstate": "PM004"}
    row = one(conn, "select * from memori.context_optimize_stored('s', 10, %s)",
              (Jsonb({"on_error": "report", "persist": False}),))  # reserve > available; persist off: no event
    assert row is not None and row["error_sqlstate"] == "PM001"
    assert value(conn, "select count(*) from memori.events where event_type = 'context.optimization.failed'") \
        == before + 1
    assert_sqlstate(conn, "PM004", "select * from memori.context_optimize(%s, 10, '{\"persist\": false}')",
                    (Jsonb([{"id": "a", "type": "novel", "tokens": 1}]),))  # on_error raise (the default)
    assert_sqlstate(conn, "PM001", "select * from memori.context_optimize('[]', 10, '{\"on_error\": \"ignore\"}')")
