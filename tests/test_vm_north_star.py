"""The seed's North Star acceptance test (issue 7): 200+ turns, five decisions recalled with citations."""

from __future__ import annotations

import pytest

import pymemdb
from pymemdb.cli.demo.vm import DECISIONS, run_north_star


@pytest.mark.parametrize("spoken", [False, True], ids=["seed_identifiers", "multi_word_subjects"])
def test_north_star_acceptance_run(db: pymemdb.Database, spoken: bool) -> None:
    result = run_north_star(db, spoken=spoken)
    assert result.turns >= 200
    # the seed's timing: the five recall turns are 201-205 and the figures are read right after them
    assert [r.turn for r in result.recalls] == [201, 202, 203, 204, 205]
    # every decision is in context (claims are evicted last): the pre-pass faults nothing for its topic (issue 15)
    assert all(r.answer.source == "context" for r in result.recalls)
    assert [r.faults for r in result.recalls] == [0, 0, 0, 0, 0]
    # 5/5 decisions recalled, each citing its claim or one of the claim's source pages
    for recall in result.recalls:
        assert recall.answer.value == DECISIONS[recall.topic], recall
        assert set(recall.answer.citations) & ({recall.claim_id} | set(recall.provenance)), recall
        assert f"[ref: {recall.answer.citations[0]}]" in recall.answer.text
    assert result.recalled == 5
    assert result.max_recall_faults <= 2
    assert result.max_l0_tokens <= 32_000
    m = result.metrics
    # anti-thrash (seed: same topics don't repeatedly fault): at most one fault per topic, none for a topic whose
    # claim is in context at a useful level
    assert m["thrash_index"] < 0.5 and m["thrash_index_max"] < 0.5, (m["thrash_index"],
                                                                     [r.faults for r in result.recalls])
    assert m["l0_tokens"] <= 32_000
    assert result.passed


def test_the_scripted_model_faults_a_claim_that_is_not_in_context(db: pymemdb.Database) -> None:
    from pymemdb.cli.demo.vm import ScriptedModel, context_lines
    from tests.helpers import T0

    db.pages.session_configure("ns2", {"paging_mode": "model", "pinned_last_turns": 0}, user_id="demo", now=T0)
    started = db.vm.turn_start("ns2", "Agreed, let's go with FastAPI for api_framework.", user_id="demo", now=T0)
    db.vm.claim_create("ns2", "Decision: use FastAPI for api_framework", [started.page_id], topic="api_framework",
                       now=T0)
    db.vm.turn_start("ns2", "Something else entirely.", user_id="demo", now=T0)
    mapped = sum(w.tokens for w in db.pages.working_set("ns2") if not w.pinned)
    db.pages.evict("ns2", mapped, now=T0)  # everything unpinned leaves L0, the claim last
    assert "claim_api_framework_001" not in context_lines(db.pages.context("ns2", now=T0))
    answer = ScriptedModel(db, "ns2").recall("api_framework", T0)
    assert answer.source == "fault" and answer.value == "FastAPI"
    assert answer.citations == ("claim_api_framework_001",)
    assert [f.reason for f in db.pages.fault_list("ns2") if f.outcome == "served"] == ["user_requested_recall"]
    # and nothing in memory: the model says so instead of guessing
    assert ScriptedModel(db, "ns2").recall("frontend_stack", T0).value is None
