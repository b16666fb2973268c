"""Invariants of the VM lifecycle under random inputs (hypothesis), checked against small Python oracles.

1. Claims are never evicted while a non-claim page could have gone instead.
2. The pre-pass never exceeds the turn's fault budget, faults at most one page per
   topic, and only unmapped pages with a reason the confidence threshold allows.
"""

from __future__ import annotations

import itertools
import json

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import T0, rows, value

_ids = itertools.count()

PAGE = st.tuples(
    st.sampled_from(["transcript", "transcript", "summary", "claim", "procedure"]),
    st.floats(min_value=0, max_value=1, allow_nan=False),
    st.integers(min_value=10, max_value=400),  # tokens
    st.booleans(),  # pinned
)


def _session(conn: psycopg.Connection, config: dict[str, object]) -> str:
    session = f"prop_{next(_ids)}"
    conn.execute("select memori.vm_session_configure(%s, %s::jsonb, 'alice', %s)", (session, json.dumps(config), T0))
    return session


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pages=st.lists(PAGE, min_size=2, max_size=12), required=st.integers(min_value=1, max_value=3000),
       policy=st.sampled_from(["lru", "importance_weighted_lru", "modality_aware_lru"]))
def test_claims_are_never_evicted_while_other_candidates_remain(
    conn: psycopg.Connection, pages: list[tuple[str, float, int, bool]], required: int, policy: str,
) -> None:
    session = _session(conn, {"max_l0_tokens": 100000, "pinned_last_turns": 0, "fault_protection_turns": 0})
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (session, T0))
    conn.execute("select memori.page_create(%s, 'src', 'source', p_now => %s)", (session, T0))
    for i, (page_type, importance, tokens, pinned) in enumerate(pages):
        conn.execute("select memori.turn_begin(%s, 'alice', %s)", (session, T0))
        if page_type == "claim":
            conn.execute("select memori.claim_create(%s, 'Decision ' || %s, array['src'], p_importance => %s,"
                         " p_claim_id => %s, p_pin => %s, p_now => %s)",
                         (session, i, importance, f"p{i}", pinned or None, T0))
        else:
            conn.execute("select memori.page_create(%s, %s, repeat('w', %s), p_page_type => %s, p_importance => %s,"
                         " p_tokens => %s, p_pin => %s, p_now => %s)",
                         (session, f"p{i}", tokens * 4, page_type, importance, tokens, pinned or None, T0))
    types = {r["page_id"]: r["page_type"] for r in rows(conn, "select page_id, page_type from memori.pages"
                                                              " where session_id = %s", (session,))}
    # the oracle: in the policy's order, every evictable non-claim page comes before every claim
    order = [r["page_id"] for r in rows(conn, "select * from memori.vm_eviction_candidates(%s, %s)", (session, policy))]
    kinds = [types[p] == "claim" for p in order]
    assert kinds == sorted(kinds)
    try:
        with conn.transaction():
            done = rows(conn, "select * from memori.vm_evict(%s, %s, %s, p_now => %s)", (session, required, policy, T0))
    except psycopg.Error as exc:
        assert exc.sqlstate == "PM060"  # could not free that much: nothing was done
        return
    evicted = [d["page_id"] for d in done if d["action"] == "evict"]
    seen_claim = False
    for page_id in evicted:
        seen_claim = seen_claim or types[page_id] == "claim"
        assert not (seen_claim and types[page_id] != "claim"), f"{page_id} evicted after a claim: {evicted}"
    if seen_claim:
        left = [r["page_id"] for r in rows(conn, "select * from memori.vm_eviction_candidates(%s, %s)",
                                           (session, policy))]
        assert all(types[p] == "claim" for p in left), f"a claim went while {left} could have"


TOPICS = ["kestrel", "juniper", "marlin", "quartz"]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(max_per_turn=st.integers(min_value=0, max_value=4), earlier=st.integers(min_value=0, max_value=3),
       max_faults=st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
       threshold=st.sampled_from(["explicit", "referenced", "speculative"]),
       signal=st.booleans(), topics=st.lists(st.sampled_from(TOPICS), min_size=0, max_size=3, unique=True),
       per_topic=st.integers(min_value=1, max_value=3))
def test_prepass_never_exceeds_the_turn_fault_budget(
    conn: psycopg.Connection, max_per_turn: int, earlier: int, max_faults: int | None, threshold: str,
    signal: bool, topics: list[str], per_topic: int,
) -> None:
    session = _session(conn, {"max_faults_per_turn": max_per_turn, "fault_confidence_threshold": "speculative",
                              "pinned_last_turns": 0})
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (session, T0))
    for topic in TOPICS:
        for k in range(3):
            conn.execute("select memori.page_create(%s, %s, %s, p_add_to_working_set => false, p_now => %s)",
                         (session, f"{topic}_{k}", f"Notes on the {topic} service, part {k}.", T0))
    conn.execute("select memori.claim_create(%s, 'Decision: kestrel first', array['kestrel_0', 'kestrel_2'],"
                 " p_topic => 'kestrel', p_pin => false, p_now => %s)", (session, T0))
    conn.execute("select memori.vm_evict(%s, 1, p_now => %s)", (session, T0))  # the claim out of L0 too
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (session, T0))
    # faults the model already made this turn
    for k in range(earlier):
        conn.execute("select memori.page_fault(%s, %s, 0, 'resolve_reference', p_now => %s)",
                     (session, f"marlin_{k}", T0))
    conn.execute("select memori.vm_session_configure(%s, %s::jsonb, p_now => %s)",
                 (session, json.dumps({"fault_confidence_threshold": threshold}), T0))
    served_before = value(conn, "select count(*) from memori.page_faults where session_id = %s and outcome = 'served'",
                          (session,))
    message = ("As we decided earlier, " if signal else "Tell me about ") + " and ".join(topics or ["nothing"])
    items = rows(conn, "select * from memori.vm_prepass(%s, %s, true, %s, %s, p_now => %s)",
                 (session, message, per_topic, max_faults, T0))
    served = [i for i in items if i["outcome"] == "served"]
    served_now = value(conn, "select count(*) from memori.page_faults where session_id = %s and outcome = 'served'",
                       (session,))
    # the oracle
    assert served_now - served_before == len(served)
    assert served_now <= max(max_per_turn, served_before)
    assert len(served) <= (2 if max_faults is None else max_faults)
    topic_groups = [i["why"] for i in served if i["why"].startswith("topic:")]
    assert len(topic_groups) == len(set(topic_groups))
    for i in items:
        assert i["applied"] == (i["outcome"] is not None and not i["outcome"].startswith(("skipped", "in_context")))
        if i["applied"]:
            assert threshold == "speculative" or i["reason"] != "speculative"
            assert threshold != "explicit" or i["reason"] == "user_requested_recall"
    assert all(i["reason"] == ("user_requested_recall" if signal else "speculative")
               for i in items if i["why"].startswith("topic:"))
    # every served page is in L0 now, recorded as a prefetch of this turn
    assert {i["page_id"] for i in served} == {r["page_id"] for r in rows(
        conn, "select page_id from memori.vm_prefetches where session_id = %s", (session,))}
