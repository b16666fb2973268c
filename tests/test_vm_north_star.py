"""The seed's North Star acceptance test (issue 7): 200+ turns, five decisions recalled with citations."""

from __future__ import annotations

import pymemdb
from pymemdb.demo_vm import DECISIONS, run_north_star


def test_north_star_acceptance_run(db: pymemdb.Database) -> None:
    result = run_north_star(db)
    assert result.turns >= 200
    # 5/5 decisions recalled, each citing its claim or one of the claim's source pages
    for recall in result.recalls:
        assert recall.answer.value == DECISIONS[recall.topic], recall
        assert set(recall.answer.citations) & ({recall.claim_id} | set(recall.provenance)), recall
        assert f"[ref: {recall.answer.citations[0]}]" in recall.answer.text
    assert result.recalled == 5
    assert result.max_recall_faults <= 2
    assert result.max_l0_tokens <= 32_000
    m = result.metrics
    assert m["thrash_index"] < 0.5 and m["thrash_index_max"] < 0.5
    assert m["l0_tokens"] <= 32_000
    assert result.passed
