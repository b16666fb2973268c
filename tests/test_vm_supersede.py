"""Decisions that change (issue 15.3, seed 03 8.3): claim supersession, conflicts, and a pre-pass that follows them."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.helpers import T0, assert_sqlstate, rows, value
from tests.test_vm_lifecycle import S, call, configure, first, metrics, scalar

# eight decisions, each reversed later
REVERSALS = {
    "cache_layer": ("Redis", "Memcached"), "queue_system": ("RabbitMQ", "Kafka"),
    "auth_provider": ("Auth0", "Keycloak"), "object_store": ("S3", "MinIO"),
    "search_engine": ("Elasticsearch", "Meilisearch"), "ci_runner": ("Jenkins", "Buildkite"),
    "log_pipeline": ("Fluentd", "Vector"), "feature_flags": ("LaunchDarkly", "Unleash"),
}


def say(conn: psycopg.Connection, text: str) -> str:
    return str(first(conn, "vm_turn_start", p_session_id=S, p_user_message=text, p_user_id="alice",
                     p_now=T0)["page_id"])


def run_with_reversals(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    """Decide eight things, reverse each, swap everything out of L0; returns per topic the old and new ids."""
    configure(conn, {"pinned_last_turns": 0, "max_faults_per_turn": 2, "paging_mode": "hybrid"})
    out: dict[str, dict[str, Any]] = {}
    for topic, (old, _) in REVERSALS.items():
        asked = say(conn, f"For {topic}, what should we use?")
        agreed = say(conn, f"Agreed, let's go with {old} for {topic}.")
        claim = call(conn, "claim_create", p_session_id=S, p_content=f"Decision: use {old} for {topic}",
                     p_provenance=[asked, agreed], p_topic=topic, p_now=T0)[0]
        out[topic] = {"old": claim["page_id"], "old_discussion": {asked, agreed}}
    for k in range(3):
        say(conn, f"Filler question {k} about release notes.")
    for topic, (old, new) in REVERSALS.items():
        switch = say(conn, f"Load tests changed my mind: switch {topic} from {old} to {new}.")
        claim = call(conn, "claim_supersede", p_session_id=S, p_claim_id=out[topic]["old"],
                     p_content=f"Decision: use {new} for {topic}", p_provenance=[switch],
                     p_reason=f"load tests: {new} fits better", p_now=T0)[0]
        out[topic].update(new=claim["page_id"], new_discussion={switch})
    conn.execute("select memori.segment_close(%s, 'Eight decisions, all revised.', p_now => %s)", (S, T0))
    # everything out of L0 (claims go last, but they go): each recall must page its decision back in
    used = value(conn, "select coalesce(sum(tokens), 0)::integer from memori.working_set where session_id = %s", (S,))
    rows(conn, "select * from memori.vm_evict(%s, %s)", (S, used))
    assert value(conn, "select count(*) from memori.working_set where session_id = %s", (S,)) == 0
    return out


def test_the_prepass_follows_reversed_decisions_and_never_faults_the_old_discussion(conn: psycopg.Connection) -> None:
    ids = run_with_reversals(conn)
    old_pages = set().union(*({t["old"]} | t["old_discussion"] for t in ids.values()))
    for topic in REVERSALS:
        started = first(conn, "vm_turn_start", p_session_id=S,
                        p_user_message=f"As we decided earlier, what's our {topic}?", p_now=T0)
        served = [i["page_id"] for i in started["prefetch"] if i["outcome"] == "served"]
        # the topic's current claim is in context after the pre-pass (faulted now, or by an earlier recall's top
        # claims), at most one fault for the topic, and never the old decision or its discussion
        resident = value(conn, "select memori._vm_resident('alice', %s, %s)", (S, ids[topic]["new"]))
        assert resident is True, (topic, served)
        assert not set(served) & old_pages, (topic, served)
        assert len(served) <= 2 and len({value(conn, "select memori._vm_page_topic('alice', %s, %s)", (S, p))
                                         for p in served}) == len(served)
    faulted = [r["page_id"] for r in rows(conn, "select page_id from memori.page_faults where outcome = 'served'")]
    assert not set(faulted) & old_pages
    assert {t["new"] for t in ids.values()} <= set(faulted)
    assert metrics(conn)["thrash_index"] == 0


def test_current_claim_ranks_first_and_the_old_one_stays_in_history(conn: psycopg.Connection) -> None:
    ids = run_with_reversals(conn)
    for topic, t in ids.items():
        # search: the current claim first (the old one shares its topic and wording)
        hits = call(conn, "search_pages", p_session_id=S, p_query=topic.replace("_", " "), p_page_types=["claim"],
                    p_limit=2, p_now=T0)
        assert [h["page_id"] for h in hits] == [t["new"], t["old"]], topic
        # history: both claims, current first, the old one with its provenance, successor and reason
        history = call(conn, "claim_history", p_session_id=S, p_topic=topic, p_now=T0)
        assert [h["page_id"] for h in history] == [t["new"], t["old"]]
        new, old = history
        assert new["superseded_by"] is None and set(new["provenance"]) == t["new_discussion"]
        assert old["superseded_by"] == t["new"] and old["superseded_at"] == T0
        assert old["supersede_reason"].startswith("load tests") and set(old["provenance"]) == t["old_discussion"]
        assert old["hint"] == new["hint"] == topic
        log = [(m["mutation_type"], m["cause"]) for m in call(conn, "page_history", p_session_id=S,
                                                               p_page_id=t["old"])]
        assert log[-1][0] == "supersede" and log[-1][1].startswith(f"superseded_by {t['new']}: load tests")
    # top importance and the manifest: current claims before every superseded one
    top = [r["page_id"] for r in call(conn, "pages_top_importance", p_session_id=S, p_n=16, p_type="claim", p_now=T0)]
    assert set(top[:8]) == {t["new"] for t in ids.values()} and set(top[8:]) == {t["old"] for t in ids.values()}
    manifest = scalar(conn, "vm_manifest", p_session_id=S, p_now=T0)
    listed = [a["page_id"] for a in manifest["available_pages"]]
    for t in ids.values():
        assert listed.index(t["new"]) < listed.index(t["old"])
    old_entry = next(a for a in manifest["available_pages"] if a["page_id"] == ids["cache_layer"]["old"])
    assert old_entry["hint"] == f"superseded by {ids['cache_layer']['new']}: cache_layer"
    # the prefetcher's top claims are current ones
    items = call(conn, "vm_prefetch", p_session_id=S, p_claims=8, p_tools=[], p_now=T0)
    assert {i["page_id"] for i in items if i["why"] == "top_claim"} == {t["new"] for t in ids.values()}


def redis_decided(conn: psycopg.Connection, then: str) -> tuple[str, str, dict[str, Any]]:
    """'Use Redis for cache_layer.' recorded as a claim, and a second message (``then``): their page ids, the claim."""
    configure(conn, {"pinned_last_turns": 0})
    a = say(conn, "Use Redis for cache_layer.")
    b = say(conn, then)
    claim = call(conn, "claim_create", p_session_id=S, p_content="Decision: use Redis for cache_layer",
                 p_provenance=[a], p_topic="cache_layer", p_now=T0)[0]
    return a, b, claim


def test_conflicting_current_claims_are_reported_until_resolved(conn: psycopg.Connection) -> None:
    a, b, first = redis_decided(conn, "Actually, Memcached for cache_layer?")
    assert call(conn, "claim_conflicts", p_session_id=S, p_now=T0) == []
    # the same decision recorded twice is no conflict; a different one is
    call(conn, "claim_create", p_session_id=S, p_content="Decision:  use Redis for cache_layer ",
         p_provenance=[a], p_topic="cache_layer", p_now=T0)
    assert call(conn, "claim_conflicts", p_session_id=S, p_now=T0) == []
    second = call(conn, "claim_create", p_session_id=S, p_content="Decision: use Memcached for cache_layer",
                  p_provenance=[b], p_topic="cache_layer", p_now=T0)[0]
    conflicts = call(conn, "claim_conflicts", p_session_id=S, p_now=T0)
    assert [(c["topic"], c["claim_id"], c["other_claim_id"]) for c in conflicts] == [
        ("cache_layer", first["page_id"], second["page_id"]),
        ("cache_layer", "claim_cache_layer_002", second["page_id"])]
    # equal search scores: the newer claim first (last write wins)
    hits = call(conn, "search_pages", p_session_id=S, p_query="cache layer", p_page_types=["claim"], p_now=T0)
    assert hits[0]["page_id"] == second["page_id"]
    # the user resolves it: Memcached supersedes both Redis claims
    call(conn, "claim_supersede", p_session_id=S, p_claim_id=first["page_id"],
         p_content="Decision: use Memcached for cache_layer", p_provenance=[b], p_reason="user chose Memcached",
         p_new_claim_id="claim_cache_final", p_now=T0)
    for stale in ("claim_cache_layer_002", second["page_id"]):
        call(conn, "claim_supersede", p_session_id=S, p_claim_id=stale,
             p_content="Decision: use Memcached for cache_layer", p_provenance=[b],
             p_reason="duplicate of claim_cache_final", p_now=T0)
    remaining = {c["claim_id"] for c in call(conn, "claim_conflicts", p_session_id=S, p_now=T0)} | {
        c["other_claim_id"] for c in call(conn, "claim_conflicts", p_session_id=S, p_now=T0)}
    assert remaining <= {"claim_cache_final", "claim_cache_layer_004", "claim_cache_layer_005"}
    assert all(c["content"] == c["other_content"] for c in call(conn, "claim_conflicts", p_session_id=S, p_now=T0))


def test_supersede_refusals_and_page_update_provenance(conn: psycopg.Connection) -> None:
    a, b, claim = redis_decided(conn, "No wait, Memcached.")
    assert_sqlstate(conn, "PM100", "select memori.claim_supersede(%s, %s, 'x', array[%s], 'why', p_now => %s)",
                    (S, a, b, T0))
    assert_sqlstate(conn, "PM001", "select memori.claim_supersede(%s, %s, 'x', array[%s], ' ', p_now => %s)",
                    (S, claim["page_id"], b, T0))
    assert_sqlstate(conn, "PM090", "select memori.claim_supersede(%s, %s, 'x', array['nope'], 'why', p_now => %s)",
                    (S, claim["page_id"], T0))
    conn.execute("select memori.claim_supersede(%s, %s, 'Decision: use Memcached for cache_layer', array[%s],"
                 " 'changed', p_now => %s)", (S, claim["page_id"], b, T0))
    err = assert_sqlstate(conn, "PM100", "select memori.claim_supersede(%s, %s, 'y', array[%s], 'again', p_now => %s)",
                          (S, claim["page_id"], b, T0))
    assert "claim_cache_layer_002" in (err.diag.message_hint or "")
    # page_update takes new provenance (a claim corrected in place), checked like a claim's
    updated = call(conn, "page_update", p_session_id=S, p_page_id="claim_cache_layer_002",
                   p_content="Decision: use Memcached 1.6 for cache_layer", p_provenance=[b, a, b], p_now=T0)[0]
    assert updated["provenance"] == [b, a] and updated["version"] == 2
    assert_sqlstate(conn, "PM090", "select memori.page_update(%s, %s, 'z', p_provenance => array['gone'])",
                    (S, "claim_cache_layer_002"))
    kept = call(conn, "page_update", p_session_id=S, p_page_id="claim_cache_layer_002", p_content="same sources",
                p_now=T0)[0]
    assert kept["provenance"] == [b, a]


def test_a_superseded_claim_is_not_kept_like_a_decision(conn: psycopg.Connection) -> None:
    configure(conn, {"pinned_last_turns": 0, "fault_protection_turns": 0})
    a = say(conn, "Use Redis for cache_layer.")
    b = say(conn, "Switch cache_layer to Memcached.")
    old = call(conn, "claim_create", p_session_id=S, p_content="Decision: use Redis for cache_layer",
               p_provenance=[a], p_topic="cache_layer", p_now=T0)[0]["page_id"]
    new = call(conn, "claim_supersede", p_session_id=S, p_claim_id=old, p_content="Decision: use Memcached for "
               "cache_layer", p_provenance=[b], p_reason="changed", p_now=T0)[0]["page_id"]
    assert value(conn, "select tier from memori.pages where page_id = %s", (old,)) == "L2"
    # the model faults the old decision back in (history is readable): it goes like any page, current claims last
    conn.execute("select memori.page_fault(%s, %s, 0, 'user_requested_recall', p_now => %s)", (S, old, T0))
    order = [r["page_id"] for r in call(conn, "vm_eviction_candidates", p_session_id=S)]
    assert order.index(old) < order.index(new) and order[-1] == new
