"""Page faults, the mutation log and what the model sees, through SQL (seed 03)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, rows, value
from tests.test_pages import S, configure, page, ws


def fault(conn: psycopg.Connection, page_id: str | None, level: int | None = 2,
          reason: str | None = "resolve_reference") -> dict[str, Any]:
    return value(conn, "select memori.page_fault(%s, %s, %s, %s, p_now => %s)",  # type: ignore[no-any-return]
                 (S, page_id, level, reason, T0))


def turn(conn: psycopg.Connection) -> int:
    return value(conn, "select memori.turn_begin(%s, 'alice', %s)", (S, T0))  # type: ignore[no-any-return]


def test_fault_returns_the_canonical_envelope(conn: psycopg.Connection) -> None:
    page(conn, "msg_132", "the fault handler code lives in handler.py", p_add_to_working_set=False)
    conn.execute("select memori.page_representation_put(%s, 'msg_132', 2, 'fault handler summary', p_now => %s)",
                 (S, T0))
    env = fault(conn, "msg_132")
    assert env == {
        "page": {"page_id": "msg_132", "modality": "text", "level": 2, "tier": "L0",
                 "content": {"text": "fault handler summary"},
                 "meta": {"mime_type": "text/plain", "size_bytes": 42, "source_tier": "L2", "page_type": "transcript",
                          "version": 1, "word_count": 3}},
        "effects": {"promoted_to_working_set": True, "tokens_est": 6, "evictions": None}}
    assert ws(conn)["msg_132"][:2] == (2, 6)
    f = rows(conn, "select * from memori.page_fault_list(%s)", (S,))
    assert [(x["reason"], x["outcome"], x["served_level"], x["tokens"]) for x in f] == [
        ("resolve_reference", "served", 2, 6)]
    # a second fault for what is already mapped loads nothing
    env = fault(conn, "msg_132", 3)
    assert env["effects"]["promoted_to_working_set"] is False and env["page"]["level"] == 2


def test_fault_falls_back_to_the_most_detailed_level_written(conn: psycopg.Connection) -> None:
    page(conn, "m", "some words here", p_add_to_working_set=False)
    assert fault(conn, "m", 1)["page"]["level"] == 0  # no level 1 written: level 0
    assert fault(conn, "m", 0)["page"]["content"] == {"text": "some words here"}


def test_media_content_is_shaped_by_modality(conn: psycopg.Connection) -> None:
    page(conn, "img_045", "Architecture diagram showing L0-L4 tiers", p_modality="image",
         p_artifact_ref="https://artifacts.example.com/img_045.png", p_dimensions=[1200, 800],
         p_mime_type="image/png", p_size_bytes=245000, p_tokens=95, p_add_to_working_set=False)
    env = fault(conn, "img_045", 0)
    assert env["page"]["content"] == {"caption": "Architecture diagram showing L0-L4 tiers",
                                      "url": "https://artifacts.example.com/img_045.png"}
    assert env["page"]["meta"] == {"dimensions": [1200, 800], "mime_type": "image/png", "size_bytes": 245000,
                                   "source_tier": "L2", "page_type": "transcript", "version": 1}
    page(conn, "audio_012", "So the key insight is", p_modality="audio", p_duration_seconds=342,
         p_data={"timestamps": [{"time": 0, "text": "So"}]} and json.dumps({"timestamps": [{"time": 0, "text": "So"}]}),
         p_add_to_working_set=False)
    assert fault(conn, "audio_012", 0)["page"]["content"] == {
        "transcript": "So the key insight is", "duration_seconds": 342, "timestamps": [{"time": 0, "text": "So"}]}
    page(conn, "video_007", "walkthrough", p_modality="video",
         p_data=json.dumps({"scenes": [{"timestamp": 0, "description": "intro"}]}), p_add_to_working_set=False)
    assert fault(conn, "video_007", 0)["page"]["content"] == {
        "scenes": [{"timestamp": 0, "description": "intro"}], "transcript": "walkthrough"}
    turn(conn)  # three faults a turn
    page(conn, "calc_1", None, p_modality="structured", p_data=json.dumps({"expression": "2+2", "result": 4}),
         p_add_to_working_set=False)
    assert fault(conn, "calc_1", 0)["page"]["content"] == {"data": {"expression": "2+2", "result": 4}}


def test_bad_requests_are_envelopes_the_model_can_read(conn: psycopg.Connection) -> None:
    page(conn, "m", "x")
    for args, reason in [(("nope",), "unknown_page"), (("m", 7), "invalid_level"), (("m", None), "invalid_level"),
                         (("m", 2, "because"), "unknown_reason")]:
        env = fault(conn, *args)  # type: ignore[arg-type]
        assert env["page"] is None and env["error"]["reason"] == reason, env
        assert env["error"]["hint"]
        assert env["effects"] == {"promoted_to_working_set": False, "tokens_est": 0, "evictions": None}
    assert value(conn, "select count(*) from memori.page_faults where outcome = 'error'") == 4
    page(conn, "other", "x", p_session_id="sess_2")
    assert fault(conn, "other")["error"]["reason"] == "unknown_page"  # a page of another session
    assert_sqlstate(conn, "PM005", "select memori.page_fault('no_session', 'm')")


def test_fault_policy_refusals(conn: psycopg.Connection) -> None:
    for i in range(5):
        page(conn, f"p{i}", "word " * 40, p_add_to_working_set=False)
    assert fault(conn, "p0", 0, "speculative")["error"]["reason"] == "confidence_threshold"
    for i in range(3):
        assert fault(conn, f"p{i}", 0)["effects"]["promoted_to_working_set"] is True
    refused = fault(conn, "p3", 0)
    assert refused["error"]["reason"] == "max_faults_per_turn"
    turn(conn)
    assert fault(conn, "p3", 0)["page"]["page_id"] == "p3"  # a new turn, a new allowance
    configure(conn, '{"max_fault_tokens_per_turn": 60, "fault_confidence_threshold": "explicit"}')
    assert fault(conn, "p4", 0, "resolve_reference")["error"]["reason"] == "confidence_threshold"
    env = fault(conn, "p4", 0, "user_requested_recall")  # 50 + 50 > 60
    assert env["error"]["reason"] == "max_fault_tokens_per_turn"
    assert "target_level=3" in env["error"]["hint"]
    configure(conn, '{"faults_allowed": false}')
    assert fault(conn, "p4", 3, "user_requested_recall")["error"]["reason"] == "faults_disabled"


def test_fault_that_cannot_fit_is_refused_and_changes_nothing(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 60, "eviction_threshold": 1}')
    page(conn, "system_prompt", "s" * 160, p_role="system")  # 40 pinned
    page(conn, "msg_1", "m" * 40)  # 10, pinned (this turn)
    page(conn, "big", "b " * 40, p_add_to_working_set=False)  # 20
    before = ws(conn)
    env = fault(conn, "big", 0)
    assert env["error"]["reason"] == "working_set_full"
    assert ws(conn) == before


def test_faulted_pages_are_protected_then_evictable(conn: psycopg.Connection) -> None:
    configure(conn, '{"pinned_last_turns": 0}')
    page(conn, "m", "word " * 40, p_add_to_working_set=False)
    fault(conn, "m", 0)
    assert_sqlstate(conn, "PM060", "select memori.vm_evict('sess_1', 1)")
    turn(conn)
    assert_sqlstate(conn, "PM060", "select memori.vm_evict('sess_1', 1)")
    turn(conn)
    assert [r["page_id"] for r in rows(conn, "select * from memori.vm_evict('sess_1', 1)")] == ["m"]


def test_replay_equals_what_was_recorded(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 120, "eviction_threshold": 1, "pinned_last_turns": 1}')
    recorded: dict[int, dict[str, int]] = {}
    for t in range(1, 8):
        turn(conn)
        page(conn, f"msg_{t}", "word " * (8 * t), p_role="user")
        if t % 3 == 0:
            fault(conn, "msg_1", 3)
        recorded[t] = {k: v[0] for k, v in ws(conn).items()}
    for t, expected in recorded.items():
        got = {r["page_id"]: r["level"] for r in rows(conn, "select * from memori.vm_context_at_turn(%s, %s)", (S, t))}
        assert got == expected, t
    # the log is append-only by privileges (issue 20: no trigger on a distributed table): the app role cannot UPDATE
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("update memori.page_mutations set cause = 'x'")


def test_manifest_shape(conn: psycopg.Connection) -> None:
    page(conn, "msg_302", "it should be compatible with openai format", p_role="user", p_importance=0.7)
    page(conn, "summary_seg_02", "page fault definitions", p_page_type="summary", p_hint="page fault definitions",
         p_add_to_working_set=False)
    conn.execute("select memori.page_representation_put(%s, 'summary_seg_02', 2, 'abstract', p_now => %s)", (S, T0))
    m = value(conn, "select memori.vm_manifest(%s)", (S,))
    assert m == {
        "session_id": S, "turn": 0,
        "working_set": [{"page_id": "msg_302", "modality": "text", "level": 0, "tokens_est": 11, "importance": 0.7,
                         "pinned": True}],
        "available_pages": [{"page_id": "summary_seg_02", "modality": "text", "tier": "L2", "levels": [2, 0],
                             "hint": "page fault definitions"}],
        "total_available": 1,
        "policies": {"faults_allowed": True, "max_faults_per_turn": 3, "upgrade_budget_tokens": 8192,
                     "prefer_levels": [2, 1, 0], "fault_confidence_threshold": "referenced"}}
    # valid JSON text, the same on every call
    text = value(conn, "select memori.vm_manifest(%s)::text", (S,))
    assert json.loads(text) == m and text == value(conn, "select memori.vm_manifest(%s)::text", (S,))


def test_manifest_tiers_follow_the_seed_schema(conn: psycopg.Connection) -> None:
    # issue 15.4: the seed's manifest allows tier L2 | L3 | L4 for available pages; an evicted page sits in L1
    # (the cache), which the manifest reports as L2 (session storage, where the model's page_fault finds it)
    configure(conn, '{"pinned_last_turns": 0}')
    page(conn, "msg_1", "evicted recently, so in the L1 cache")
    page(conn, "msg_2", "never mapped", p_add_to_working_set=False)
    page(conn, "img_3", "archived diagram", p_modality="image", p_add_to_working_set=False)
    conn.execute("update memori.pages set tier = 'L4' where page_id = 'img_3'")
    rows(conn, "select * from memori.vm_evict(%s, (select sum(tokens)::integer from memori.working_set))", (S,))
    assert value(conn, "select tier from memori.pages where page_id = 'msg_1'") == "L1"
    m = value(conn, "select memori.vm_manifest(%s)", (S,))
    tiers = {a["page_id"]: a["tier"] for a in m["available_pages"]}
    assert tiers == {"msg_1": "L2", "msg_2": "L2", "img_3": "L4"}
    assert m["total_available"] == 3


def test_context_block_and_budget(conn: psycopg.Connection) -> None:
    page(conn, "msg_301", "User message text here", p_role="user")
    page(conn, "msg_302", "Assistant response here", p_role="assistant")
    page(conn, "tool_result_045", None, p_page_type="artifact", p_modality="structured",
         p_data=json.dumps({"calculator": {"expression": "2+2", "result": 4}}))
    page(conn, "img_045", "architecture diagram showing storage tiers", p_modality="image", p_dimensions=[1200, 800])
    page(conn, "audio_012", "So the key insight is...", p_modality="audio", p_duration_seconds=342)
    page(conn, "video_007", "system walkthrough", p_modality="video", p_duration_seconds=750,
         p_data=json.dumps({"scenes": [{}] * 8}), p_hint="system walkthrough")
    ctx = value(conn, "select memori.vm_context(%s)", (S,))
    assert ctx == "\n".join([
        "<VM:CONTEXT>",
        'U (msg_301): "User message text here"',
        'A (msg_302): "Assistant response here"',
        'T (tool_result_045): {"calculator": {"result": 4, "expression": "2+2"}}',
        "I (img_045): [IMAGE: architecture diagram showing storage tiers, 1200x800]",
        'D (audio_012): [AUDIO: 5:42 duration, transcript: "So the key insight is..."]',
        'V (video_007): [VIDEO: 12:30 duration, 8 scenes, topic: "system walkthrough"]',
        "</VM:CONTEXT>"])
    for budget in range(7, 120, 3):
        small = value(conn, "select memori.vm_context(%s, %s)", (S, budget))
        assert (len(small.encode()) + 3) // 4 <= budget
    # the newest pages win when the budget is short (smaller ones fill what is left); lines keep their order
    short = value(conn, "select memori.vm_context(%s, 40)", (S,)).splitlines()[1:-1]
    assert short[-1] == "V (video_007): [VIDEO: 12:30 duration, 8 scenes, topic: \"system walkthrough\"]"
    assert short == [line for line in ctx.splitlines() if line in short]
    assert_sqlstate(conn, "PM001", "select memori.vm_context('sess_1', 6)")


def test_older_segments_show_as_one_summary(conn: psycopg.Connection) -> None:
    configure(conn, '{"pinned_last_turns": 1}')
    for t in range(1, 4):
        turn(conn)
        page(conn, f"msg_{t}", f"message {t}", p_role="user", p_segment="seg_01" if t < 3 else "seg_02")
    page(conn, "summary_seg_01", "long summary", p_page_type="summary", p_segment="seg_01", p_add_to_working_set=False)
    conn.execute("select memori.page_representation_put(%s, 'summary_seg_01', 2, 'Key points', p_now => %s)", (S, T0))
    turn(conn)
    ctx = value(conn, "select memori.vm_context(%s)", (S,))
    assert ctx.splitlines()[1:-1] == ['U (msg_3): "message 3"', 'S (summary_seg_01): "Key points"']


def test_pack_cache_hits_and_invalidation(conn: psycopg.Connection) -> None:
    page(conn, "msg_1", "hello", p_role="user")
    first = value(conn, "select memori.vm_context(%s, 1000, 'gpt-4o')", (S,))
    assert value(conn, "select memori.vm_context(%s, 1000, 'gpt-4o')", (S,)) == first
    s = rows(conn, "select pack_hits, pack_misses from memori.vm_sessions")[0]
    assert (s["pack_hits"], s["pack_misses"]) == (1, 1)
    conn.execute("select memori.page_update(%s, 'msg_1', 'changed', p_now => %s)", (S, T0))
    assert "changed" in value(conn, "select memori.vm_context(%s, 1000, 'gpt-4o')", (S,))
    metrics = rows(conn, "select pack_hits, pack_misses, pack_hit_rate from memori.vm_metrics(%s)", (S,))
    assert metrics == [{"pack_hits": 1, "pack_misses": 2, "pack_hit_rate": 0.333}]


def test_tools_and_developer_message(conn: psycopg.Connection) -> None:
    tools = value(conn, "select memori.vm_tools()")
    assert [t["function"]["name"] for t in tools] == ["page_fault", "search_pages"]
    assert tools[0]["function"]["parameters"]["required"] == ["page_id"]
    page(conn, "msg_1", "hello", p_role="user")
    msg = value(conn, "select memori.vm_developer_message(%s, 'strict', 'You are a helpful assistant.')", (S,))
    assert msg.startswith("You are a helpful assistant.\n\n<VM:RULES>")
    manifest = msg.split("<VM:MANIFEST_JSON>\n")[1].split("\n</VM:MANIFEST_JSON>")[0]
    assert json.loads(manifest)["policies"]["faults_allowed"] is True
    assert msg.endswith('U (msg_1): "hello"\n</VM:CONTEXT>')
    passive = value(conn, "select memori.vm_developer_message(%s, 'passive')", (S,))
    assert '"faults_allowed": false' in passive
    assert_sqlstate(conn, "PM004", "select memori.vm_developer_message('sess_1', 'loud')")


def test_app_role_runs_the_vm_but_cannot_rewrite_its_log(conn: psycopg.Connection) -> None:
    conn.execute("set role memori_app")
    conn.execute("set memori.user_id = 'alice'")
    page(conn, "m", "hello world", p_add_to_working_set=False)
    assert fault(conn, "m", 0)["page"]["page_id"] == "m"
    assert value(conn, "select memori.vm_context(%s)", (S,)).startswith("<VM:CONTEXT>")
    for query in ("update memori.page_mutations set cause = 'x'", "delete from memori.page_mutations",
                  "update memori.page_faults set outcome = 'served'", "delete from memori.page_faults"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(query)


def test_cleaner_role_deletes_expired_pages_but_cannot_write_them(conn: psycopg.Connection) -> None:
    page(conn, "m", "hello world", p_expires_at=T0)
    conn.execute("set role memori_cleaner")
    deleted = rows(conn, "select * from memori.cleanup_execute(%s)", (T0,))
    assert sum(r["deleted"] for r in deleted) >= 1
    assert value(conn, "select count(*) from memori.pages") == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("select memori.page_create('sess_1', 'x', 'y', p_user_id => 'alice')")


def test_bench_vm_small(dsn: str) -> None:
    """Issue 21: the headline page_fault runs with an 8k-token L0 (faults evict); 32k is the second line."""
    from pymemdb.bench import vm as bench

    result = bench.run(dsn, 1000)
    faults = result["faults"]
    assert faults["l0_budget"] == 8000 and faults["large_l0"]["l0_budget"] == 32000
    assert faults["l0_tokens"] <= 8000
    assert bench.render(result)
