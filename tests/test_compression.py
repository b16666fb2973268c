"""Conversation compression through SQL (seed 04): budget, plan/apply and aging, never-compress rules, errors."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from tests.helpers import T0, assert_sqlstate, one, rows, value

SEC = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _acting_user(conn: psycopg.Connection) -> None:
    """Session ids are unique per user (issue 20): the session-keyed calls act for memori.user_id."""
    conn.execute("set memori.user_id = 'alice'")


def add(conn: psycopg.Connection, session: str, role: str, content: str, tokens: int | None = None,
        at=T0, user: str = "alice", **kw: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    extra = "".join(f", {k} => %({k})s" for k in kw)
    row = one(conn, "select * from memori.message_add(%(s)s, %(r)s, %(c)s, p_tokens => %(t)s, p_user_id => %(u)s,"
                    f" p_now => %(at)s{extra})",
              {"s": session, "r": role, "c": content, "t": tokens, "u": user, "at": at, **kw})
    assert row is not None
    return row


def budget(conn: psycopg.Connection, session: str, ctx: int = 8000, sys: int | None = 500) -> dict[str, Any]:
    row = one(conn, "select * from memori.compression_budget(%s, %s, %s)", (session, ctx, sys))
    assert row is not None
    return row


def plan(conn: psycopg.Connection, session: str, ctx: int = 8000, sys: int | None = 500, force: bool = False,
         at=T0) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    row = one(conn, "select * from memori.compression_plan(%s, %s, %s, %s, %s)", (session, ctx, sys, at, force))
    assert row is not None
    return row


def apply(conn: psycopg.Connection, plan_id: Any, summary: str, aged: dict[str, Any] | None = None,
          tokens: int | None = None, at=T0) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    row = one(conn, "select * from memori.compression_apply(%s, %s, %s, %s, %s)",
              (plan_id, summary, Jsonb(aged or {}), at, tokens))
    assert row is not None
    return row


def conversation(conn: psycopg.Connection, session: str, turns: int, user_tokens: int = 50,
                 assistant_tokens: int = 450) -> None:
    for i in range(turns):
        add(conn, session, "user", f"question {i}", user_tokens)
        add(conn, session, "assistant", f"answer {i}", assistant_tokens)


def test_seed_8k_walkthrough(conn: psycopg.Connection) -> None:
    """Seed 04's 8K example: 6800 usable, 500 system; available 6300 -> 2900 -> 2800 -> 2500."""
    # the seed's checkpoint sizes assume the whole history is compressed: keep no recent tokens
    conn.execute("update memori.settings set value = '0' where key = 'compression.preserve_recent_tokens'")
    conversation(conn, "s", 10)  # 5000 tokens: just under the trigger
    b = budget(conn, "s")
    assert (b["usable_tokens"], b["available_tokens"], b["trigger_tokens"]) == (6800, 6300, 5040)
    assert b["used_tokens"] == 5000 and b["should_compress"] is False
    add(conn, "s", "user", "one more", 40)  # exactly at the trigger
    b = budget(conn, "s")
    assert b["used_tokens"] == 5040 and b["should_compress"] is True

    p1 = plan(conn, "s")
    assert p1["status"] == "planned" and p1["aging"] == []
    apply(conn, p1["id"], "checkpoint one", tokens=3400)
    b = budget(conn, "s")
    assert (b["available_tokens"], b["trigger_tokens"]) == (2900, 2320)

    conversation(conn, "s", 6)
    p2 = plan(conn, "s", force=True)
    [age] = p2["aging"]
    assert age["action"] == "age" and age["source_tokens"] == 3400 and age["target_tokens"] == 2040  # 60 %
    apply(conn, p2["id"], "checkpoint two", {age["key"]: {"summary": "cp one aged", "tokens": 1500}}, tokens=2000)
    b = budget(conn, "s")
    assert (b["available_tokens"], b["trigger_tokens"]) == (2800, 2240)

    conversation(conn, "s", 6)
    p3 = plan(conn, "s", force=True)
    targets = {a["source_tokens"]: a["target_tokens"] for a in p3["aging"]}
    assert targets == {2000: 1200, 1500: 750}  # newest existing 60 %, next 50 %
    keys = {a["source_tokens"]: a["key"] for a in p3["aging"]}
    apply(conn, p3["id"], "checkpoint three",
          {keys[2000]: {"summary": "cp two aged", "tokens": 1200},
           keys[1500]: {"summary": "cp one aged", "tokens": 800}},
          tokens=1800)
    b = budget(conn, "s")
    assert (b["available_tokens"], b["trigger_tokens"]) == (2500, 2000)
    cps = rows(conn, "select level, current_tokens, compression_number from memori.compression_checkpoints"
                     " order by from_seq")
    assert [(c["level"], c["current_tokens"]) for c in cps] == [(1, 800), (2, 1200), (3, 1800)]
    assert [c["compression_number"] for c in cps] == [1, 2, 3]


def test_message_add_returns_budget_and_estimates_tokens(conn: psycopg.Connection) -> None:
    row = add(conn, "s", "user", "x" * 41, p_context_size=8000, p_system_prompt_tokens=500)
    assert (row["seq"], row["tokens"]) == (1, 11)  # ceil(41 / 4)
    assert (row["usable_tokens"], row["available_tokens"], row["trigger_tokens"]) == (6800, 6300, 5040)
    assert row["used_tokens"] == 11 and row["should_compress"] is False
    sys = add(conn, "s", "system", "s" * 400)
    assert sys["seq"] == 2 and sys["used_tokens"] == 11
    # the session remembers the context size; the system prompt defaults to its system messages
    assert sys["context_size"] == 8000 and sys["system_prompt_tokens"] == 100
    tool = add(conn, "s", "tool", "{}", 7, p_tool_calls=Jsonb([{"id": "call_1", "name": "read_file"}]))
    assert tool["used_tokens"] == 18
    assert value(conn, "select user_id from memori.messages where seq = 3") == "alice"


def test_bad_input_is_refused_with_our_codes(conn: psycopg.Connection) -> None:
    conn.execute("reset memori.user_id")
    assert_sqlstate(conn, "PM004", "select memori.message_add('s', 'robot', 'x', p_user_id => 'u')")
    assert_sqlstate(conn, "PM001", "select memori.message_add('s', 'user', 'x', -1, p_user_id => 'u')")
    assert_sqlstate(conn, "PM001", "select memori.message_add('s', 'user', 'x')")  # no user for a new session
    assert_sqlstate(conn, "PM001", "select memori.message_add('', 'user', 'x', p_user_id => 'u')")
    add(conn, "s", "user", "hello", 10)
    # session ids are per user (revision 0025): mallory's 's' is her own session, u's is untouched
    conn.execute("select memori.message_add('s', 'user', 'x', p_user_id => 'mallory')")
    assert value(conn, "select count(distinct user_id) from memori.messages where session_id = 's'") == 2
    conn.execute("set memori.user_id = 'alice'")
    assert_sqlstate(conn, "PM070", "select memori.compression_budget('s', 500, 500)")  # 425 usable < 500
    assert_sqlstate(conn, "PM070", "select memori.compression_plan('s', 1000, 850)")  # exactly full: 850 usable
    assert budget(conn, "s", 1000, 849)["available_tokens"] == 1
    assert_sqlstate(conn, "PM001", "select memori.compression_budget('s', 0, 0)")
    assert_sqlstate(conn, "PM005", "select memori.compression_budget('nope', 8000, 0)")
    assert value(conn, "select count(*) from memori.messages") == 2, "nothing half-applied (u's and mallory's)"


def test_user_from_the_session_setting(conn: psycopg.Connection) -> None:
    conn.execute("set memori.user_id = 'carol'")
    conn.execute("select memori.message_add('c', 'user', 'hi')")
    assert value(conn, "select user_id from memori.compression_state where session_id = 'c'") == "carol"



# every compression function that takes a user applies memori._acting_user (issue 19 item 8)
ACTING_USER_CALLS = {
    "message_add": "select memori.message_add('c', 'user', 'hi'{user})",
    "goal_create": "select memori.goal_create('c', 'Ship it'{user})",
    "goal_markers_apply": "select memori.goal_markers_apply('c', '[GOAL] Ship it'{user})",
}


@pytest.mark.parametrize("call", sorted(ACTING_USER_CALLS))
def test_acting_user_rule(conn: psycopg.Connection, call: str) -> None:
    """PM040 when p_user_id is not memori.user_id; no user means memori.user_id; PM001 without either."""
    sql = ACTING_USER_CALLS[call]
    conn.execute("reset memori.user_id")
    assert_sqlstate(conn, "PM001", sql.format(user=""))  # neither an argument nor memori.user_id
    conn.execute("set memori.user_id = 'carol'")
    assert_sqlstate(conn, "PM040", sql.format(user=", p_user_id => 'dave'"))  # even for a superuser
    assert value(conn, "select count(*) from memori.compression_state") == 0, "nothing created for dave"
    conn.execute(sql.format(user=""))  # the default: memori.user_id
    conn.execute(sql.format(user=", p_user_id => 'carol'"))  # the same user, given
    assert value(conn, "select user_id from memori.compression_state where session_id = 'c'") == "carol"
    assert value(conn, "select user_id from memori.sessions where session_id = 'c'") == "carol"
    conn.execute("reset memori.user_id")
    conn.execute(sql.format(user=", p_user_id => 'dave'"))  # dave's own 'c' (session ids are per user)
    assert value(conn, "select count(distinct user_id) from memori.sessions where session_id = 'c'") == 2

def test_plan_never_takes_user_system_or_recent_messages(conn: psycopg.Connection) -> None:
    add(conn, "s", "system", "rules", 100)
    conversation(conn, "s", 20, user_tokens=30, assistant_tokens=270)  # 6000 used
    p = plan(conn, "s")
    kept = value(conn, "select sum(tokens) from memori.messages where seq > %s and role <> 'system'", (p["to_seq"],))
    assert p["budget"]["preserve_recent_tokens"] == 2048 and 2048 - 300 < kept <= 2048
    roles = [r["role"] for r in rows(conn, "select role from memori.messages where seq between %s and %s",
                                     (p["from_seq"], p["to_seq"]))]
    assert p["message_count"] == roles.count("assistant")
    assert p["source_tokens"] == 270 * roles.count("assistant")
    assert p["target_tokens"] == min(1024, -(-p["source_tokens"] // 2))
    apply(conn, p["id"], "summary")
    ctx = rows(conn, "select * from memori.active_context('s')")
    assert [c["kind"] for c in ctx][:2] == ["system", "checkpoint"]
    assert [c["content"] for c in ctx if c["kind"] == "user"] == [f"question {i}" for i in range(20)]
    assert all(int(c["ref"]) > p["to_seq"] for c in ctx if c["kind"] == "assistant")
    b = budget(conn, "s", sys=None)
    assert sum(c["tokens"] for c in ctx) == b["system_prompt_tokens"] + b["checkpoint_tokens"] + b["used_tokens"]
    assert value(conn, "select count(*) from memori.messages") == 41, "the full history stays"


def test_skipped_plans_and_events(conn: psycopg.Connection) -> None:
    conversation(conn, "s", 2)
    p = plan(conn, "s")
    assert p["status"] == "skipped" and "under the trigger" in p["reason"]
    p = plan(conn, "s", force=True)
    assert p["status"] == "skipped" and "no assistant output" in p["reason"]  # all within the recent 2048
    assert value(conn, "select count(*) from memori.events where event_type = 'compression.skipped'") == 2
    assert_sqlstate(conn, "PM072", "select memori.compression_apply(%s, 'x')", (p["id"],))


def test_apply_twice_stale_and_bad_summaries(conn: psycopg.Connection) -> None:
    conversation(conn, "s", 20)
    p1, p2 = plan(conn, "s"), plan(conn, "s")
    too_long = "x" * (4 * p1["source_tokens"] + 1)
    assert_sqlstate(conn, "PM073", "select memori.compression_apply(%s, %s)", (p1["id"], too_long))
    assert_sqlstate(conn, "PM001", "select memori.compression_apply(%s, '  ')", (p1["id"],))
    apply(conn, p1["id"], "summary one", tokens=400)
    err = assert_sqlstate(conn, "PM072", "select memori.compression_apply(%s, 'again')", (p1["id"],))
    assert "applied" in str(err)
    assert_sqlstate(conn, "PM071", "select memori.compression_apply(%s, 'stale')", (p2["id"],))
    conversation(conn, "s", 20)
    p3 = plan(conn, "s")
    [item] = p3["aging"]
    assert_sqlstate(conn, "PM073", "select memori.compression_apply(%s, 'new', '{}')", (p3["id"],))
    assert_sqlstate(conn, "PM073", "select memori.compression_apply(%s, 'new', %s)",
                    (p3["id"], Jsonb({item["key"]: "y" * (4 * item["source_tokens"] + 4)})))
    assert value(conn, "select count(*) from memori.compression_checkpoints") == 1, "nothing half-applied"
    assert value(conn, "select count(*) from memori.events where event_type = 'compression.compressed'") == 1


def test_stale_plan_refused_under_concurrency(conn: psycopg.Connection, dsn: str) -> None:
    conversation(conn, "s", 20)
    p1, p2 = plan(conn, "s"), plan(conn, "s")
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        for c in (a, b):
            c.execute("select set_config('memori.user_id', 'alice', false)")
        a.execute("select memori.compression_apply(%s, 'from a')", (p1["id"],))  # holds the session row
        result: dict[str, Any] = {}

        def other() -> None:
            try:
                b.execute("select memori.compression_apply(%s, 'from b')", (p2["id"],))
                b.commit()
                result["ok"] = True
            except psycopg.Error as exc:
                result["sqlstate"] = exc.sqlstate
                b.rollback()

        import threading
        t = threading.Thread(target=other)
        t.start()
        t.join(0.5)
        assert t.is_alive(), "the second apply waits for the first"
        a.commit()
        t.join(10)
    assert result == {"sqlstate": "PM071"}
    assert [r["summary"] for r in rows(conn, "select summary from memori.compression_checkpoints")] == ["from a"]


def test_aging_merges_the_oldest_into_an_ultra_checkpoint(conn: psycopg.Connection) -> None:
    conn.execute("update memori.settings set value = '0' where key = 'compression.preserve_recent_tokens'")
    for n in range(6):
        conversation(conn, "s", 4, assistant_tokens=500)
        p = plan(conn, "s", force=True)
        assert p["target_tokens"] == 1000  # half of 4 x 500 assistant tokens
        aged = {a["key"]: {"summary": f"aged {a['key']}", "tokens": a["target_tokens"]} for a in p["aging"]}
        if n == 4:  # the fifth checkpoint would exceed compression.max_checkpoints (4)
            merge = [a for a in p["aging"] if a["action"] == "merge"]
            assert len(merge) == 1 and len(merge[0]["checkpoint_ids"]) == 2 and merge[0]["target_tokens"] == 400
        apply(conn, p["id"], f"summary {n}", aged, tokens=p["target_tokens"])
        cps = rows(conn, "select level, current_tokens from memori.compression_checkpoints order by from_seq")
        assert len(cps) == min(n + 1, 4)
        assert [c["level"] for c in cps] == [0, 1, 2, 3][-len(cps):]
    cps = rows(conn, "select * from memori.compression_checkpoints order by from_seq")
    assert cps[0]["level"] == 0 and cps[0]["current_tokens"] == 400 and cps[0]["from_seq"] == 1
    assert [c["to_seq"] + 1 for c in cps[:-1]] == [c["from_seq"] for c in cps[1:]], "ranges stay contiguous"
    assert value(conn, "select compression_count from memori.compression_state") == 6


def test_prompt_is_goal_aware_and_keeps_markers_out(conn: psycopg.Connection) -> None:
    conn.execute("select memori.goal_create('s', 'Implement user authentication system', 'high', 'alice', %s)", (T0,))
    add(conn, "s", "assistant", "I chose JWT.\n[DECISION] Use JWT for authentication - LOCKED\n"
                                "[CHECKPOINT] Design authentication flow - COMPLETED\n"
                                "[ARTIFACT] Created src/auth/jwt.ts", 300)
    conversation(conn, "s", 20)
    p = plan(conn, "s")
    assert p["key_decisions"] == ["Use JWT for authentication - LOCKED"]
    assert p["files_modified"] == ["Created src/auth/jwt.ts"]
    [new] = rows(conn, "select * from memori.compression_prompt(%s)", (p["id"],))
    assert new["key"] == "new" and new["target_tokens"] == p["target_tokens"]
    assert new["prompt"].startswith("ACTIVE GOAL: Implement user authentication system\nPriority: high")
    assert "✅ Design authentication flow" in new["prompt"] and "🔒 Use JWT for authentication" in new["prompt"]
    assert "[DECISION]" not in new["source"] and "I chose JWT." in new["source"]
    assert "[DECISION]" not in new["prompt"]


def test_goal_markers(conn: psycopg.Connection) -> None:
    text = """Working on it.
[GOAL] Implement user authentication system
[CHECKPOINT] Design authentication flow - COMPLETED
[CHECKPOINT] Implement login endpoint - COMPLETED
[CHECKPOINT] Add JWT token generation - IN PROGRESS
[CHECKPOINT] Create user registration - PENDING
[DECISION] Use JWT for authentication - LOCKED
[DECISION] Store tokens in httpOnly cookies - LOCKED
[DECISION] Use bcrypt for password hashing
[ARTIFACT] Created src/auth/login.ts
[ARTIFACT] Created src/auth/jwt.ts
[ARTIFACT] Modified src/routes/api.ts
[NEXT] Complete JWT token generation, then move to user registration
[CHECKPOINT] No status here
[ARTIFACT] Deleted src/old.ts
[TODO] guess me"""
    r = one(conn, "select * from memori.goal_markers_apply('s', %s, 'alice', %s)", (text, T0))
    assert r is not None
    assert (r["goals_created"], r["checkpoints_updated"], r["decisions_added"], r["artifacts_recorded"]) == (1, 4, 3, 3)
    assert r["unknown"] == ["[CHECKPOINT] No status here", "[ARTIFACT] Deleted src/old.ts", "[TODO] guess me"]
    block = value(conn, "select memori.goal_block('s')")
    assert block == """ACTIVE GOAL: Implement user authentication system
Priority: medium
Status: active
Checkpoints:
✅ Design authentication flow
✅ Implement login endpoint
🔄 Add JWT token generation (IN PROGRESS)
⏳ Create user registration
Decisions:
🔒 Use JWT for authentication (locked)
🔒 Store tokens in httpOnly cookies (locked)
- Use bcrypt for password hashing
Artifacts:
- Created: src/auth/login.ts
- Created: src/auth/jwt.ts
- Modified: src/routes/api.ts
Next steps:
- Complete JWT token generation, then move to user registration"""
    # a locked decision stays locked; checkpoint status moves; no active goal -> reported
    r = one(conn, "select * from memori.goal_markers_apply('s', %s, 'alice')",
            ("[DECISION] Use JWT for authentication\n[CHECKPOINT] Add JWT token generation - COMPLETED",))
    assert r is not None and r["unknown"] == []
    assert "🔒 Use JWT for authentication (locked)" in value(conn, "select memori.goal_block('s')")
    assert "✅ Add JWT token generation" in value(conn, "select memori.goal_block('s')")
    one(conn, "select * from memori.goal_markers_apply('s', %s, 'alice')",
        ("[GOAL] Implement user authentication system - COMPLETED",))
    assert value(conn, "select memori.goal_block('s')") is None
    r = one(conn, "select * from memori.goal_markers_apply('s', '[DECISION] orphan', 'alice')")
    assert r is not None and r["unknown"] == ["[DECISION] orphan"]
    assert value(conn, "select goal_tokens from memori.compression_state") == 0


def test_assistant_markers_apply_automatically(conn: psycopg.Connection) -> None:
    add(conn, "s", "assistant", "[GOAL] Ship it - HIGH\n[DECISION] Postgres only - LOCKED", 20)
    add(conn, "s", "user", "[DECISION] users cannot lock decisions - LOCKED", 20)
    assert "🔒 Postgres only (locked)" in value(conn, "select memori.goal_block('s')")
    assert "users cannot" not in value(conn, "select memori.goal_block('s')")
    st = one(conn, "select * from memori.compression_state")
    assert st is not None and st["goal_tokens"] == -(-len(value(conn, "select memori.goal_block('s')")) // 4)
    assert budget(conn, "s", sys=None)["system_prompt_tokens"] == st["goal_tokens"]


def test_snapshot_restore_round_trip(conn: psycopg.Connection) -> None:
    add(conn, "s", "system", "rules", 50)
    add(conn, "s", "assistant", "[GOAL] First goal\n[DECISION] Keep A - LOCKED", 20)
    conversation(conn, "s", 20)
    apply(conn, plan(conn, "s")["id"], "summary one")
    ctx_a = rows(conn, "select * from memori.active_context('s')")
    budget_a = budget(conn, "s", sys=None)
    snap = one(conn, "select * from memori.snapshot_create('s', '{\"model\": \"llama3.2:3b\"}', %s)", (T0,))
    assert snap is not None and snap["kind"] == "manual" and snap["checkpoint_count"] == 1
    assert snap["expires_at"] == T0 + timedelta(days=90)

    add(conn, "s", "assistant", "[GOAL] Second goal", 20)
    conversation(conn, "s", 20)
    p = plan(conn, "s")
    apply(conn, p["id"], "summary two", {a["key"]: "aged one" for a in p["aging"]})
    ctx_b = rows(conn, "select * from memori.active_context('s')")
    assert ctx_b != ctx_a

    pre = one(conn, "select * from memori.snapshot_restore(%s, %s)", (snap["id"], T0 + SEC))
    assert pre is not None and pre["kind"] == "pre_restore"
    assert rows(conn, "select * from memori.active_context('s')") == ctx_a
    assert budget(conn, "s", sys=None) == budget_a
    assert value(conn, "select count(*) from memori.messages") == 83, "history stays"
    # new messages after a restore continue the sequence and are active
    row = add(conn, "s", "user", "after restore", 5)
    assert row["seq"] == 84
    assert rows(conn, "select * from memori.active_context('s')")[-1]["content"] == "after restore"
    # undo: restoring the pre-restore snapshot brings state B back; the message added
    # after it is now the rolled-back one (still in the history)
    one(conn, "select * from memori.snapshot_restore(%s, %s)", (pre["id"], T0 + 2 * SEC))
    assert rows(conn, "select * from memori.active_context('s')") == ctx_b
    assert value(conn, "select count(*) from memori.messages") == 84
    kinds = [r["kind"] for r in rows(conn, "select kind from memori.snapshot_list('s', %s) where kind <> 'auto'",
                                     (T0 + 3 * SEC,))]
    assert sorted(kinds) == ["manual", "pre_restore", "pre_restore"]
    assert value(conn, "select count(*) from memori.events where event_type = 'snapshot.restored'") == 2


def test_restore_makes_open_plans_stale(conn: psycopg.Connection) -> None:
    conversation(conn, "s", 20)
    snap = one(conn, "select * from memori.snapshot_create('s')")
    p = plan(conn, "s")
    conn.execute("select memori.snapshot_restore(%s)", (snap["id"],))  # type: ignore[index]
    assert_sqlstate(conn, "PM071", "select memori.compression_apply(%s, 'x')", (p["id"],))
    assert_sqlstate(conn, "PM005", "select memori.snapshot_restore(gen_random_uuid())")


def test_auto_snapshot_once_per_state(conn: psycopg.Connection) -> None:
    conversation(conn, "s", 10)  # 5000 < 0.8 x 6300
    assert value(conn, "select count(*) from memori.snapshots") == 0
    a = add(conn, "s", "user", "x", 40, p_context_size=8000, p_system_prompt_tokens=500)
    b = add(conn, "s", "user", "y", 40)
    assert a["auto_snapshot_id"] is not None and b["auto_snapshot_id"] is None
    assert value(conn, "select kind from memori.snapshots") == "auto"
    conn.execute("update memori.settings set value = 'false' where key = 'snapshots.auto_create'")
    apply(conn, plan(conn, "s")["id"], "s")
    conversation(conn, "s", 10)
    assert value(conn, "select count(*) from memori.snapshots") == 1


def test_snapshots_and_plans_are_retention_managed(conn: psycopg.Connection) -> None:
    conversation(conn, "s", 3)
    conn.execute("select memori.snapshot_create('s', p_now => %s)", (T0,))
    plan(conn, "s", at=T0)
    got = {(r["table_name"], r["reason"]) for r in rows(
        conn, "select * from memori.cleanup_preview(%s)", (T0 + timedelta(days=91),))}
    assert {t for t, _ in got} >= {"snapshots", "compression_plans"}
    assert rows(conn, "select * from memori.snapshot_list('s', %s)", (T0 + timedelta(days=90),)) == []
    assert len(rows(conn, "select * from memori.snapshot_list('s', %s)", (T0 + timedelta(days=90) - SEC,))) == 1


@pytest.mark.parametrize(("size", "count", "conf", "score", "level"), [
    (70, 0, 1, 0.95, "high"), (70, 1, 1, 0.8075, "medium"), (30, 0, 1, 0.85, "high"),
    (13, 0, 1, 0.70, "medium"), (7, 0, 1, 0.50, "low"), (3, 0, 1, 0.30, "critical"),
    (70, 10, 1, 0.285, "critical"), (70, 5, 1, 0.285, "critical"), (13, 2, 0.5, 0.245, "critical"),
    (6.9, 0, 1, 0.30, "critical"),
])
def test_reliability_score(conn: psycopg.Connection, size: float, count: int, conf: float, score: float,
                           level: str) -> None:
    r = one(conn, "select * from memori.reliability_score(%s::numeric, %s::integer, %s::numeric)", (size, count, conf))
    assert r is not None and float(r["score"]) == pytest.approx(score) and r["level"] == level


def test_session_reliability_warns_when_low(conn: psycopg.Connection) -> None:
    conversation(conn, "s", 20)
    apply(conn, plan(conn, "s")["id"], "s")
    high = one(conn, "select * from memori.session_reliability('s', 70)")
    assert high is not None and high["level"] == "medium" and high["warning"] is None
    low = one(conn, "select * from memori.session_reliability('s', 3)")
    assert low is not None and low["level"] == "critical" and "compressed the conversation 1 times" in low["warning"]
    assert_sqlstate(conn, "PM001", "select memori.reliability_score(-1, 0)")
    assert_sqlstate(conn, "PM001", "select memori.reliability_score(7, 0, 1.5)")


def test_app_role_runs_the_api_and_history_is_append_only(conn: psycopg.Connection) -> None:
    conn.execute("set role memori_app")
    conn.execute("set memori.user_id = 'alice'")
    conversation(conn, "s", 20)
    apply(conn, plan(conn, "s")["id"], "summary")
    snap = one(conn, "select * from memori.snapshot_create('s')")
    assert snap is not None
    conn.execute("select memori.snapshot_restore(%s)", (snap["id"],))
    conn.execute("select memori.goal_markers_apply('s', '[GOAL] g')")
    assert rows(conn, "select * from memori.active_context('s')")
    for query in ("update memori.messages set content = 'x'", "delete from memori.messages",
                  "update memori.snapshots set metadata = '{}'"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(query)
    conn.execute("reset role")
    conn.execute("set role memori_cleaner")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("select memori.message_add('s', 'user', 'x')")
    assert value(conn, "select count(*) from memori.cleanup_preview(%s)", (T0 + timedelta(days=400),)) > 0


def _oracle(messages: list[tuple[str, int]], ctx: int, sys: int) -> tuple[int | None, int, int]:
    """(cutoff seq, source messages, source tokens) of a first plan, computed in Python."""
    available = ctx * 85 // 100 - sys
    preserve = min(2048, available * 40 // 100)
    running, cutoff = 0, None
    for seq in range(len(messages), 0, -1):
        role, tokens = messages[seq - 1]
        if role == "system":
            continue
        running += tokens
        if running > preserve and cutoff is None:
            cutoff = seq
    source = [t for seq, (r, t) in enumerate(messages, 1) if cutoff and seq <= cutoff and r in ("assistant", "tool")]
    return cutoff, len(source), sum(source)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]),
                                   st.integers(0, 900)), min_size=1, max_size=40),
       ctx=st.sampled_from([2048, 4096, 8000, 32768]))
def test_plan_matches_the_oracle(conn: psycopg.Connection, messages: list[tuple[str, int]], ctx: int) -> None:
    session = f"h{value(conn, 'select gen_random_uuid()')}"
    for role, tokens in messages:
        add(conn, session, role, "m", tokens)
    p = plan(conn, session, ctx=ctx, sys=100, force=True)
    cutoff, n, tokens = _oracle(messages, ctx, 100)
    if n and tokens:
        assert (p["status"], p["to_seq"], p["message_count"], p["source_tokens"]) == ("planned", cutoff, n, tokens)
        apply(conn, p["id"], "s", tokens=min(1, tokens))
        users = [t for r, t in messages if r == "user"]
        assert budget(conn, session, ctx, 100)["used_tokens"] == sum(users) + sum(
            t for seq, (r, t) in enumerate(messages, 1) if r in ("assistant", "tool") and seq > cutoff)
    else:
        assert p["status"] == "skipped"


def test_the_issues_positional_signatures(conn: psycopg.Connection) -> None:
    conn.execute("set memori.user_id = 'alice'")
    row = one(conn, "select * from memori.message_add('p', 'user', 'hi', 5, null, %s)", (T0,))
    assert row is not None and row["created_at"] == T0
    conversation(conn, "p", 20)
    p = one(conn, "select * from memori.compression_plan('p', 8000, 500, %s)", (T0,))
    assert p is not None and p["created_at"] == T0 and p["status"] == "planned"
    done = one(conn, "select * from memori.compression_apply(%s, 'summary', '{}', %s)", (p["id"], T0))
    assert done is not None and done["compression_number"] == 1


USER_TABLES = ("messages", "compression_state", "compression_checkpoints", "compression_plans", "goals",
               "goal_checkpoints", "goal_decisions", "goal_artifacts", "snapshots")


def test_works_under_row_level_security(conn: psycopg.Connection) -> None:
    """What issue 4 will add (a policy on user_id per table): the API sees only the acting user's rows."""
    for table in USER_TABLES:
        conn.execute(f"alter table memori.{table} enable row level security")
        conn.execute(f"alter table memori.{table} force row level security")
        conn.execute(f"create policy own on memori.{table} using (user_id = current_setting('memori.user_id', true))")
    conn.execute("set role memori_app")
    conn.execute("set memori.user_id = 'alice'")
    add(conn, "s", "assistant", "[GOAL] Alice's goal\n[DECISION] Keep it - LOCKED", 20, user=None)  # type: ignore[arg-type]
    conversation(conn, "s", 20)
    snap = one(conn, "select * from memori.snapshot_create('s')")
    p = plan(conn, "s")
    apply(conn, p["id"], "summary", {a["key"]: "aged" for a in p["aging"]})
    conn.execute("select memori.snapshot_restore(%s)", (snap["id"],))  # type: ignore[index]
    assert len(rows(conn, "select * from memori.active_context('s')")) == 42  # goal + 41 messages
    conn.execute("set memori.user_id = 'bob'")
    assert rows(conn, "select * from memori.active_context('s')") == []
    assert value(conn, "select memori.goal_block('s')") is None
    assert_sqlstate(conn, "PM005", "select memori.compression_budget('s')")
    conn.execute("select memori.message_add('s', 'user', 'x')")  # bob's own 's' (session ids are per user)
    assert value(conn, "select count(*) from memori.messages") == 1  # bob sees only his message
    assert_sqlstate(conn, "PM005", "select memori.snapshot_restore(%s)", (snap["id"],))  # type: ignore[index]


def test_snapshot_restores_pages_and_the_working_set(conn: psycopg.Connection) -> None:
    """With the virtual memory in use, a snapshot keeps each page's version and the working set; restore brings
    back the content (as a new version: nothing is lost) and the mapping."""
    add(conn, "vm-1", "user", "We chose PostgreSQL.")
    conn.execute("select memori.page_create('vm-1', 'claim_db', 'Decision: PostgreSQL', p_page_type => 'claim', "
                 "p_user_id => 'alice', p_now => %s)", (T0,))
    conn.execute("select memori.page_create('vm-1', 'note', 'a note', p_user_id => 'alice', p_now => %s)", (T0,))
    snap = one(conn, "select * from memori.snapshot_create('vm-1', p_now => %s)", (T0,))
    assert snap is not None and {p["page_id"] for p in snap["state"]["vm"]["pages"]} == {"claim_db", "note"}
    mapped_before = {w["page_id"] for w in snap["state"]["vm"]["working_set"]}

    conn.execute("select memori.page_update('vm-1', 'claim_db', 'Decision: MySQL', p_now => %s)", (T0,))
    conn.execute("select memori.page_create('vm-1', 'later', 'added after the snapshot', p_user_id => 'alice', "
                 "p_now => %s)", (T0,))
    conn.execute("select memori.snapshot_restore(%s, %s)", (snap["id"], T0))

    assert value(conn, "select content from memori.pages where page_id = 'claim_db'") == "Decision: PostgreSQL"
    assert value(conn, "select version from memori.pages where page_id = 'claim_db'") == 3  # a new version
    assert value(conn, "select count(*) from memori.page_versions where page_id = 'claim_db'") == 2  # history kept
    mapped_after = {r["page_id"] for r in rows(conn, "select page_id from memori.working_set")}
    assert mapped_after == mapped_before and "later" not in mapped_after
    event = one(conn, "select payload from memori.events where event_type = 'snapshot.restored'")
    assert event is not None and event["payload"]["vm"]["pages_restored"] == 1
