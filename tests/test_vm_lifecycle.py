"""AI virtual memory lifecycle through SQL (issue 7): claims, segments, pre-pass, prefetch, paging mode, metrics."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, rows, value

S = "sess_1"
RECALL = "As we decided earlier, what's our database_choice?"


def call(conn: psycopg.Connection, function: str, **kw: Any) -> list[dict[str, Any]]:
    named = ", ".join(f"{k} => %({k})s" for k in kw)
    return rows(conn, f"select * from memori.{function}({named})", kw)


def first(conn: psycopg.Connection, function: str, **kw: Any) -> dict[str, Any]:
    """The one row of a function returning a composite (vm_turn_start, vm_metrics)."""
    return call(conn, function, **kw)[0]


def scalar(conn: psycopg.Connection, function: str, **kw: Any) -> Any:
    named = ", ".join(f"{k} => %({k})s" for k in kw)
    return value(conn, f"select memori.{function}({named})", kw)


def page(conn: psycopg.Connection, page_id: str, content: str = "hello world", session: str = S,
         **kw: Any) -> dict[str, Any]:
    found = call(conn, "page_create", p_session_id=session, p_page_id=page_id, p_content=content,
                 p_user_id="alice", p_now=T0, **kw)
    return found[0]


def turn(conn: psycopg.Connection, session: str = S) -> int:
    return int(value(conn, "select memori.turn_begin(%s, 'alice', %s)", (session, T0)))


def configure(conn: psycopg.Connection, config: dict[str, Any], session: str = S) -> dict[str, Any]:
    return call(conn, "vm_session_configure", p_session_id=session, p_config=json.dumps(config),
                p_user_id="alice", p_now=T0)[0]


def metrics(conn: psycopg.Connection, session: str = S) -> dict[str, Any]:
    return first(conn, "vm_metrics", p_session_id=session, p_now=T0)


def tiers(conn: psycopg.Connection, session: str = S) -> dict[str, str]:
    return {r["page_id"]: r["tier"] for r in rows(conn, "select page_id, tier from memori.pages where session_id = %s",
                                                   (session,))}


def decide(conn: psycopg.Connection) -> dict[str, Any]:
    """Three turns deciding the database, recorded as a claim."""
    turn(conn)
    page(conn, "msg_001", "For database_choice, what should we use?", p_role="user")
    page(conn, "msg_002", "I recommend PostgreSQL for database_choice.", p_role="assistant")
    page(conn, "msg_003", "Agreed, let's go with PostgreSQL for database_choice.", p_role="user")
    return call(conn, "claim_create", p_session_id=S, p_content="Decision: use PostgreSQL for database_choice",
                p_provenance=["msg_001", "msg_003"], p_topic="database_choice", p_now=T0)[0]


# -- claims ------------------------------------------------------------------------------
def test_claim_is_a_cheap_mapped_high_importance_page_with_provenance(conn: psycopg.Connection) -> None:
    claim = decide(conn)
    assert claim["page_id"] == "claim_database_choice_001"
    assert claim["page_type"] == "claim" and claim["tier"] == "L0" and claim["hint"] == "database_choice"
    assert claim["importance"] == 0.95 and claim["tokens"] <= 12
    assert claim["provenance"] == ["msg_001", "msg_003"]
    assert claim["segment"] == "seg_0001"
    # a second claim on the topic is numbered on
    again = call(conn, "claim_create", p_session_id=S, p_content="Decision: PostgreSQL 18", p_provenance=["msg_002"],
                 p_topic="database_choice", p_now=T0)[0]
    assert again["page_id"] == "claim_database_choice_002"
    chain = call(conn, "page_provenance_chain", p_session_id=S, p_page_id="claim_database_choice_001", p_now=T0)
    assert [r["page_id"] for r in chain] == ["msg_001", "msg_003"]
    assert value(conn, "select count(*) from memori.events where event_type = 'claim.created'") == 2


def test_claim_refuses_missing_provenance_empty_content_and_long_text(conn: psycopg.Connection) -> None:
    decide(conn)
    err = assert_sqlstate(conn, "PM090",
                          "select memori.claim_create(%s, 'x', array['msg_001', 'msg_999', 'nope'])", (S,))
    assert "msg_999, nope" in str(err) and err.diag.message_detail == "missing: msg_999, nope"
    assert_sqlstate(conn, "PM001", "select memori.claim_create(%s, 'x', array[]::text[])", (S,))
    assert_sqlstate(conn, "PM001", "select memori.claim_create(%s, '  ', array['msg_001'])", (S,))
    assert_sqlstate(conn, "PM003", "select memori.claim_create(%s, repeat('x', 801), array['msg_001'])", (S,))
    # exactly at the limit (200 tokens = 800 bytes) is accepted
    conn.execute("select memori.claim_create(%s, repeat('x', 800), array['msg_001'], p_claim_id => 'claim_long')", (S,))
    # another session's page does not count as provenance
    page(conn, "other_msg", "elsewhere", session="sess_2")
    assert_sqlstate(conn, "PM090", "select memori.claim_create(%s, 'x', array['other_msg'])", (S,))
    assert_sqlstate(conn, "PM005",
                    "select memori.claim_create('no_such_session', 'x', array['m'], p_user_id => 'alice')")


def test_claims_are_evicted_last_whatever_their_score(conn: psycopg.Connection) -> None:
    configure(conn, {"max_l0_tokens": 1000, "pinned_last_turns": 0, "fault_protection_turns": 0})
    turn(conn)
    page(conn, "src", "source of the decision")
    # a low-importance claim, older than everything else
    call(conn, "claim_create", p_session_id=S, p_content="Decision: tabs", p_provenance=["src"], p_importance=0.0,
         p_claim_id="claim_old", p_now=T0)
    for t in range(5):
        turn(conn)
        page(conn, f"t{t}", "y" * 400, p_importance=1.0)
    order = [r["page_id"] for r in call(conn, "vm_eviction_candidates", p_session_id=S)]
    assert order[-1] == "claim_old"
    for policy in ("lru", "importance_weighted_lru", "modality_aware_lru"):
        ranked = call(conn, "vm_eviction_candidates", p_session_id=S, p_policy=policy)
        assert [r["page_id"] for r in ranked][-1] == "claim_old"
    # pressure: the claim stays while non-claim pages can go
    page(conn, "big", "z" * 1600)
    assert tiers(conn)["claim_old"] == "L0"
    assert tiers(conn)["t0"] != "L0"


# -- segments --------------------------------------------------------------------------------
def segment_of_three(conn: psycopg.Connection) -> None:
    for t in range(1, 4):
        turn(conn)
        label = scalar(conn, "segment_current", p_session_id=S)
        page(conn, f"u{t}", f"user message {t} " + "talk " * 30, p_role="user", p_segment=label)
        page(conn, f"a{t}", f"assistant reply {t} " + "answer " * 30, p_role="assistant", p_segment=label)


def test_segment_close_swaps_the_transcript_out_behind_a_summary(conn: psycopg.Connection) -> None:
    configure(conn, {"pinned_last_turns": 1})
    segment_of_three(conn)
    src = call(conn, "segment_pages", p_session_id=S, p_now=T0)
    assert [r["page_id"] for r in src] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert [r["pinned"] for r in src] == [False, False, False, False, True, True]
    seg = call(conn, "segment_close", p_session_id=S, p_summary="We talked about three things.", p_now=T0)[0]
    assert seg["segment"] == "seg_0001" and seg["seq"] == 1 and seg["first_turn"] == 0 and seg["last_turn"] == 3
    assert seg["summary_page_id"] == "summary_seg_0001" and seg["pages"] == 6 and seg["evicted"] == 4
    assert seg["source_tokens"] == sum(r["tokens"] for r in src) and seg["summary_tokens"] == 8
    t = tiers(conn)
    assert [t[p] for p in ("u1", "a1", "u2", "a2")] == ["L2"] * 4
    assert t["u3"] == t["a3"] == "L0"  # pinned: the last turn stays
    summary = one(conn, "select * from memori.pages where session_id = %s and page_id = 'summary_seg_0001'", (S,))
    assert summary is not None and summary["tier"] == "L0" and summary["page_type"] == "summary"
    assert summary["provenance"] == ["u1", "a1", "u2", "a2", "u3", "a3"] and summary["segment"] == "seg_0001"
    assert summary["hint"].startswith("summary of seg_0001 (turns 1-3)")
    evicts = rows(conn, "select page_id, tier_before, tier_after, cause from memori.page_mutations"
                        " where session_id = %s and mutation_type = 'evict' order by id", (S,))
    assert [(e["page_id"], e["tier_before"], e["tier_after"], e["cause"]) for e in evicts] == [
        (p, "L0", "L2", "segment_close") for p in ("u1", "a1", "u2", "a2")]
    # the next segment is open; the closed one is listed
    assert scalar(conn, "segment_current", p_session_id=S) == "seg_0002"
    assert call(conn, "segment_pages", p_session_id=S, p_now=T0) == []
    assert [r["segment"] for r in call(conn, "segment_list", p_session_id=S)] == ["seg_0001"]
    ctx = scalar(conn, "vm_context", p_session_id=S, p_now=T0)
    assert "summary_seg_0001" in ctx and "(u1)" not in ctx and "(u3)" in ctx


def test_segment_close_refuses_empty_segments_and_long_summaries(conn: psycopg.Connection) -> None:
    turn(conn)
    assert_sqlstate(conn, "PM091", "select memori.segment_close(%s, 'nothing')", (S,))
    assert_sqlstate(conn, "PM091", "select memori.segment_close(%s, '')", (S,))  # emptiness first
    page(conn, "u1", "short", p_role="user")  # unlabelled pages written since the segment opened count
    assert_sqlstate(conn, "PM092", "select memori.segment_close(%s, 'a summary longer than it')", (S,))
    assert_sqlstate(conn, "PM001", "select memori.segment_close(%s, '')", (S,))
    assert value(conn, "select count(*) from memori.vm_segments") == 0
    assert scalar(conn, "segment_current", p_session_id=S) == "seg_0001"
    conn.execute("select memori.segment_close(%s, 'x')", (S,))
    assert tiers(conn)["u1"] == "L0"  # pinned (last turns), so it stays mapped
    # unlabelled pages of the closed segment's turns are not in the next segment
    assert call(conn, "segment_pages", p_session_id=S, p_now=T0) == []


def test_a_page_faulted_back_from_a_closed_segment_shows_as_itself(conn: psycopg.Connection) -> None:
    configure(conn, {"pinned_last_turns": 1})
    segment_of_three(conn)
    conn.execute("select memori.segment_close(%s, 'Summary of the first segment.', p_now => %s)", (S, T0))
    turn(conn)
    env = scalar(conn, "page_fault", p_session_id=S, p_page_id="u1", p_target_level=0, p_now=T0)
    assert env["effects"]["promoted_to_working_set"] is True
    ctx = scalar(conn, "vm_context", p_session_id=S, p_now=T0)
    assert "U (u1): " in ctx and "summary_seg_0001" in ctx


# -- paging mode and the pre-pass ------------------------------------------------------------------
def test_paging_mode_is_configured_per_session(conn: psycopg.Connection) -> None:
    turn(conn)
    assert value(conn, "select paging_mode from memori.vm_sessions where session_id = %s", (S,)) == "hybrid"
    assert configure(conn, {"paging_mode": "runtime"})["paging_mode"] == "runtime"
    assert_sqlstate(conn, "PM004", "select memori.vm_session_configure(%s, '{\"paging_mode\": \"psychic\"}')", (S,))
    assert_sqlstate(conn, "PM004", "select memori.vm_session_configure(%s, '{\"paging_mode\": null}')", (S,))


def test_prepass_topics_drop_recall_phrasing(conn: psycopg.Connection) -> None:
    assert scalar(conn, "vm_prepass_topics", p_user_message="As we decided earlier, what's our database_choice?") == [
        "database_choice"]
    # a run of subject words is one topic; punctuation ends a run (issue 15: "deployment strategy" is one subject)
    assert scalar(conn, "vm_prepass_topics", p_user_message="Tell me about kestrel caching, kestrel again") == [
        "kestrel caching", "kestrel"]
    assert scalar(conn, "vm_prepass_topics", p_user_message="As we decided earlier, what's our deployment strategy?"
                  ) == ["deployment strategy"]
    assert scalar(conn, "vm_prepass_topics", p_user_message="kestrel rollout: kestrel rollout again, then quartz"
                  ) == ["kestrel rollout", "quartz"]
    assert scalar(conn, "vm_prepass_topics", p_user_message="ok") == []


def closed_decision(conn: psycopg.Connection) -> None:
    """A decided database, its discussion swapped out to L2 by a segment close, then filler turns."""
    configure(conn, {"pinned_last_turns": 1, "max_faults_per_turn": 2})
    decide(conn)
    turn(conn)
    page(conn, "msg_004", "Next, the caching layer uses Redis.", p_role="user")
    conn.execute("select memori.segment_close(%s, 'Chose PostgreSQL.', p_now => %s)", (S, T0))
    for _ in range(3):
        turn(conn)


def shrink_claim(conn: psycopg.Connection) -> None:
    """The decision page mapped as a line of topic tags (level 3): in L0, but not in context usefully."""
    conn.execute("select memori.vm_add_page(%s, 'claim_database_choice_001', 3, p_now => %s)", (S, T0))


def test_prepass_proposes_claims_topic_matches_and_the_last_summary(conn: psycopg.Connection) -> None:
    closed_decision(conn)
    # the topic's claim is in context: the topic needs nothing more (issue 15)
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message=RECALL, p_now=T0)
    assert [(i["page_id"], i["why"], i["reason"], i["outcome"]) for i in items] == [
        ("claim_database_choice_001", "topic:database_choice", "user_requested_recall", "in_context"),
        ("summary_seg_0001", "last_segment_summary", "user_requested_recall", "in_context"),
    ]
    shrink_claim(conn)
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message=RECALL, p_now=T0)
    assert [(i["page_id"], i["why"], i["reason"], i["outcome"]) for i in items] == [
        # on a recall: the claim itself, then where it was decided, newest first
        ("claim_database_choice_001", "topic:database_choice", "user_requested_recall", None),
        ("msg_003", "topic:database_choice", "user_requested_recall", None),
        ("msg_001", "topic:database_choice", "user_requested_recall", None),
        ("summary_seg_0001", "last_segment_summary", "user_requested_recall", "in_context"),
    ]
    assert not any(i["applied"] for i in items)
    # without a recall signal: the topic matches are speculative (equal ranks: the newer page first)
    plain = call(conn, "vm_prepass", p_session_id=S, p_user_message="Tell me about database_choice", p_now=T0)
    assert [(i["page_id"], i["reason"]) for i in plain][:2] == [("claim_database_choice_001", "speculative"),
                                                                ("msg_003", "speculative")]
    # nothing was faulted by a proposal
    assert value(conn, "select count(*) from memori.page_faults") == 0


def test_prepass_applies_one_fault_per_topic_within_the_budget(conn: psycopg.Connection) -> None:
    closed_decision(conn)
    shrink_claim(conn)
    now_turn = turn(conn)
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message=RECALL,
                 p_apply=True, p_now=T0)
    by_id = {i["page_id"]: i for i in items}
    c = "claim_database_choice_001"
    assert by_id[c]["outcome"] == "served" and by_id[c]["applied"] and by_id[c]["tier"] == "L0"
    assert by_id["msg_003"]["outcome"] == "skipped:topic_has_fault" and not by_id["msg_003"]["applied"]
    assert by_id["msg_001"]["outcome"] == "skipped:topic_has_fault" and not by_id["msg_001"]["applied"]
    faults = rows(conn, "select page_id, reason, outcome, turn from memori.page_faults")
    assert faults == [{"page_id": c, "reason": "user_requested_recall", "outcome": "served", "turn": now_turn}]
    pre = rows(conn, "select page_id, source, why, used_turn from memori.vm_prefetches")
    assert pre == [{"page_id": c, "source": "prepass", "why": "topic:database_choice", "used_turn": None}]
    # the next recall of the topic: the claim is in context now, no fault
    turn(conn)
    again = call(conn, "vm_prepass", p_session_id=S, p_user_message=RECALL, p_apply=True, p_now=T0)
    assert [i["outcome"] for i in again if i["page_id"] == c] == ["in_context"]
    assert value(conn, "select count(*) from memori.page_faults") == 1
    # the fault budget: one fault left this turn (max 2), asked for none
    again = call(conn, "vm_prepass", p_session_id=S, p_user_message="go back to Redis caching", p_apply=True,
                 p_max_faults=0, p_now=T0)
    skipped = {"skipped:fault_budget", "skipped:confidence_threshold"}
    assert {i["outcome"] for i in again if i["tier"] != "L0"} <= skipped


def test_prepass_respects_the_confidence_threshold_and_disabled_faults(conn: psycopg.Connection) -> None:
    closed_decision(conn)
    shrink_claim(conn)
    turn(conn)
    # no recall signal: speculative, refused by the default 'referenced' threshold, so not even tried
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message="Tell me about database_choice", p_apply=True,
                 p_now=T0)
    assert {i["outcome"] for i in items if i["tier"] != "L0"} == {"skipped:confidence_threshold"}
    configure(conn, {"fault_confidence_threshold": "speculative"})
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message="Tell me about database_choice", p_apply=True,
                 p_now=T0)
    assert [i["outcome"] for i in items if i["applied"]] == ["served"]
    configure(conn, {"faults_allowed": False})
    turn(conn)
    shrink_claim(conn)
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message="As we decided earlier, the database_choice?",
                 p_apply=True, p_now=T0)
    assert {i["outcome"] for i in items if i["outcome"] != "in_context"} == {"skipped:faults_disabled"}


def test_turn_start_runs_the_prepass_by_paging_mode(conn: psycopg.Connection) -> None:
    closed_decision(conn)
    configure(conn, {"paging_mode": "model"})
    out = first(conn, "vm_turn_start", p_session_id=S, p_user_message=RECALL,
                 p_now=T0)
    assert out["paging_mode"] == "model" and out["prefetch"] == [] and out["segment"] == "seg_0002"
    assert out["page_id"] == f"msg_{out['turn']:04d}_user"
    assert one(conn, "select role, segment, page_type from memori.pages where page_id = %s", (out["page_id"],)) == {
        "role": "user", "segment": "seg_0002", "page_type": "transcript"}
    configure(conn, {"paging_mode": "hybrid"})
    shrink_claim(conn)
    out = first(conn, "vm_turn_start", p_session_id=S, p_user_message=RECALL,
                 p_page_id="q2", p_now=T0)
    served = [i["page_id"] for i in out["prefetch"] if i["outcome"] == "served"]
    assert served == ["claim_database_choice_001"]
    # the model cites it: a prefetch hit
    assert scalar(conn, "vm_cite", p_session_id=S, p_page_ids=["msg_003", "claim_database_choice_001"], p_now=T0) == 1
    assert scalar(conn, "vm_cite", p_session_id=S, p_page_ids=["claim_database_choice_001"], p_now=T0) == 0
    m = metrics(conn)
    assert (m["prefetched"], m["prefetch_used"], m["prefetch_hit_rate"], m["prefetch_by_source"]) == (
        1, 1, 1.0, {"prepass": 1})


def test_recall_signals_are_data_and_validated(conn: psycopg.Connection) -> None:
    assert value(conn, "select count(*) from memori.vm_recall_signals where enabled") == 3
    assert_sqlstate(conn, "PM093", "insert into memori.vm_recall_signals (pattern) values ('(unclosed')")
    assert_sqlstate(conn, "PM093", "insert into memori.vm_recall_signals (pattern) values ('  ')")
    closed_decision(conn)
    msg = "Per our agreement, the database_choice?"
    proposed = call(conn, "vm_prepass", p_session_id=S, p_user_message=msg, p_now=T0)
    assert all(i["reason"] == "speculative" for i in proposed)
    conn.execute("insert into memori.vm_recall_signals (pattern, description)"
                 " values ('per our agreement', 'house style')")
    assert all(i["reason"] == "user_requested_recall"
               for i in call(conn, "vm_prepass", p_session_id=S, p_user_message=msg, p_now=T0))


# -- the simple prefetcher -------------------------------------------------------------------------------
def test_prefetch_summary_claims_and_tool_prerequisites(conn: psycopg.Connection) -> None:
    closed_decision(conn)
    page(conn, "claim_location_home", "User lives in Lisbon", p_page_type="claim", p_add_to_working_set=False)
    page(conn, "claim_timezone", "User is on WET", p_page_type="claim", p_add_to_working_set=False)
    page(conn, "proc_weather", "weather pattern", p_page_type="procedure", p_add_to_working_set=False,
         p_data=json.dumps({"tool": "weather_tool", "prereqs": ["claim_location_*"],
                            "typical_pages_read": ["claim_timezone", "missing_page"]}))
    turn(conn)
    page(conn, "tool_1", "sunny", p_role="tool", p_data=json.dumps({"tool": "weather_tool"}))
    items = call(conn, "vm_prefetch", p_session_id=S, p_claims=1, p_now=T0)
    assert [(i["page_id"], i["why"], i["reason"]) for i in items] == [
        ("summary_seg_0001", "last_segment_summary", "speculative"),
        ("claim_database_choice_001", "top_claim", "speculative"),
        ("claim_location_home", "procedure:weather_tool", "tool_prereq"),
        ("claim_timezone", "procedure:weather_tool", "tool_prereq"),
    ]
    # naming no likely tool: no prerequisites
    assert all(i["reason"] != "tool_prereq" for i in call(conn, "vm_prefetch", p_session_id=S, p_tools=[], p_now=T0))
    applied = call(conn, "vm_prefetch", p_session_id=S, p_claims=1, p_apply=True, p_now=T0)
    assert [(i["page_id"], i["outcome"]) for i in applied if i["applied"]] == [
        ("claim_location_home", "served"), ("claim_timezone", "served")]
    assert rows(conn, "select distinct reason, source from memori.vm_prefetches") == [
        {"reason": "tool_prereq", "source": "prefetch"}]


# -- metrics --------------------------------------------------------------------------------------------
def test_metrics_add_the_lifecycle_figures(conn: psycopg.Connection) -> None:
    closed_decision(conn)
    m = metrics(conn)
    assert m["paging_mode"] == "hybrid"
    assert m["tokens_available"] == m["max_l0_tokens"] - m["l0_tokens"]
    assert m["segments_closed"] == 1 and m["segment_open"] == "seg_0002"
    seg = one(conn, "select source_tokens, summary_tokens from memori.vm_segments")
    assert seg is not None
    assert m["compression_ratio"] == round(seg["source_tokens"] / seg["summary_tokens"], 2)
    assert m["evictions_to_l2"] >= 1 and m["evictions_by_cause"]["segment_close"] >= 1
    assert (m["claims"], m["claims_in_l0"]) == (1, 1)
    assert (m["faults_per_turn"], m["faults_max_per_turn"], m["faults_this_turn"]) == (0, 0, 0)
    assert m["thrash_index"] == 0 and m["prefetch_hit_rate"] is None


def test_thrash_index_is_the_seeds_formula(conn: psycopg.Connection) -> None:
    configure(conn, {"max_faults_per_turn": 5, "pinned_last_turns": 0, "fault_protection_turns": 0})
    turn(conn)
    for p in ("a1", "a2", "b1"):
        page(conn, p, f"content of {p}", p_add_to_working_set=False, p_hint=p[0] + "_topic")
    # turn 2: a1 (first of topic a), a2 (thrash), b1 (first of b); turn 3: a1 again after eviction (thrash)
    turn(conn)
    for p in ("a1", "a2", "b1"):
        scalar(conn, "page_fault", p_session_id=S, p_page_id=p, p_target_level=0, p_now=T0)
    turn(conn)
    conn.execute("delete from memori.working_set where session_id = %s and page_id = 'a1'", (S,))
    conn.execute("update memori.pages set tier = 'L1' where session_id = %s and page_id = 'a1'", (S,))
    scalar(conn, "page_fault", p_session_id=S, p_page_id="a1", p_target_level=0, p_now=T0)
    m = metrics(conn)
    # window of 5 turns ending at turn 3: 4 faults, 2 topics -> 2 / 5
    assert m["thrash_index"] == 0.4 and m["thrash_index_max"] == 0.4 and m["thrash_window_turns"] == 5
    assert (m["faults_per_turn"], m["faults_max_per_turn"], m["faults_this_turn"]) == (round(4 / 3, 3), 3, 1)
    for _ in range(5):
        turn(conn)
    m = metrics(conn)
    assert m["thrash_index"] == 0 and m["thrash_index_max"] == 0.4 and m["thrash_index_max_turn"] == 3


# -- isolation: the app role under row-level security --------------------------------------------------
SUBJECTS = {"deployment strategy": "Kubernetes", "testing approach": "Pytest", "frontend stack": "React",
            "database engine": "PostgreSQL", "message broker": "RabbitMQ"}


def decide_all(conn: psycopg.Connection) -> None:
    """Five decisions on two-word subjects, recorded as claims (in L0); their discussion swapped out to L2."""
    configure(conn, {"pinned_last_turns": 1, "max_faults_per_turn": 2, "paging_mode": "hybrid"})
    for subject, choice in SUBJECTS.items():
        asked = first(conn, "vm_turn_start", p_session_id=S, p_user_message=f"For {subject}, what should we use?",
                       p_user_id="alice", p_now=T0)["page_id"]
        page(conn, f"{asked}_a", f"I recommend {choice} for {subject}.", p_role="assistant")
        agreed = first(conn, "vm_turn_start", p_session_id=S, p_user_message=f"Agreed, let's go with {choice} for "
                        f"{subject}.", p_now=T0)["page_id"]
        call(conn, "claim_create", p_session_id=S, p_content=f"Decision: use {choice} for {subject}",
             p_provenance=[asked, f"{asked}_a", agreed], p_topic=subject.replace(" ", "_"), p_now=T0)
    conn.execute("select memori.segment_close(%s, 'Five stack decisions.', p_now => %s)", (S, T0))
    for k in range(5):
        first(conn, "vm_turn_start", p_session_id=S, p_user_message=f"Draft release note {k}.", p_now=T0)


def test_recall_turns_do_not_thrash_on_multi_word_subjects(conn: psycopg.Connection) -> None:
    # issue 15.2: every claim in L0; "what's our deployment strategy?" must not fault transcript pages, and a
    # two-word subject is one topic (today: one fault per word, two per turn, thrash index 1.0)
    decide_all(conn)
    assert all(r["tier"] == "L0" for r in call(conn, "pages_by_type", p_session_id=S, p_page_type="claim"))
    faults = []
    for subject in SUBJECTS:
        out = first(conn, "vm_turn_start", p_session_id=S,
                     p_user_message=f"As we decided earlier, what's our {subject}?", p_now=T0)
        faults.append([i["page_id"] for i in out["prefetch"] if i["outcome"] == "served"])
    assert faults == [[]] * 5
    m = metrics(conn)
    assert m["thrash_index"] < 0.5 and m["thrash_index"] == 0
    # a decision page shrunk to a line of topic tags is not in context: the claim is faulted, one fault, not its
    # transcript
    conn.execute("select memori.vm_add_page(%s, 'claim_testing_approach_001', 3, p_now => %s)", (S, T0))
    out = first(conn, "vm_turn_start", p_session_id=S, p_user_message="As we decided earlier, what's our testing "
                 "approach?", p_now=T0)
    assert [i["page_id"] for i in out["prefetch"] if i["outcome"] == "served"] == ["claim_testing_approach_001"]
    assert metrics(conn)["thrash_index"] == 0


def test_a_resident_summary_covers_its_topic_transcript(conn: psycopg.Connection) -> None:
    decide_all(conn)
    # the claim leaves L0; the segment's summary (which names the subject) is in context at level 0
    conn.execute("select memori.page_update(%s, 'summary_seg_0001', 'Decided the message broker and four more.',"
                 " p_now => %s)", (S, T0))
    conn.execute("select memori.vm_add_page(%s, 'claim_message_broker_001', 3, p_now => %s)", (S, T0))
    items = call(conn, "vm_prepass", p_session_id=S, p_user_message="As we decided earlier, what's our message broker?",
                 p_now=T0)
    proposed = [i["page_id"] for i in items if i["outcome"] is None]
    # the claim, and no transcript page of the topic
    assert proposed == ["claim_message_broker_001"]


def test_lifecycle_works_as_memori_app_and_stays_per_user(conn: psycopg.Connection) -> None:
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    closed_decision(conn)
    shrink_claim(conn)
    out = first(conn, "vm_turn_start", p_session_id=S, p_user_message=RECALL, p_now=T0)
    assert [i["page_id"] for i in out["prefetch"] if i["outcome"] == "served"] == ["claim_database_choice_001"]
    assert scalar(conn, "vm_cite", p_session_id=S, p_page_ids=["claim_database_choice_001"], p_now=T0) == 1
    assert metrics(conn)["prefetch_used"] == 1
    conn.execute("select set_config('memori.user_id', 'bob', false)")
    # bob sees none of alice's segments, prefetches or claims, and cannot act on her session
    assert value(conn, "select count(*) from memori.vm_segments") == 0
    assert value(conn, "select count(*) from memori.vm_prefetches") == 0
    assert call(conn, "segment_list", p_session_id=S) == []
    assert value(conn, "select count(*) from memori.vm_recall_signals") == 3  # configuration is shared
    assert_sqlstate(conn, "PM005", "select memori.segment_close(%s, 'x')", (S,))
    assert_sqlstate(conn, "PM005", "select * from memori.vm_prepass(%s, 'earlier?')", (S,))
    with conn.transaction(force_rollback=True):  # session ids are per user (revision 0028): bob's own S
        conn.execute("select memori.vm_turn_start(%s, 'hi')", (S,))
        assert value(conn, "select count(*) from memori.vm_sessions where session_id = %s", (S,)) == 1
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("insert into memori.vm_recall_signals (pattern) values ('mine')")
    conn.execute("reset role")
