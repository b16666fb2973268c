"""AI virtual memory through SQL: pages, versions, representations, working set, eviction (seed 03)."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, rows, value

S = "sess_1"


def page(conn: psycopg.Connection, page_id: str, content: str = "hello world", **kw: object) -> dict:
    args = {"p_session_id": S, "p_page_id": page_id, "p_content": content, "p_user_id": "alice", "p_now": T0, **kw}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    found = one(conn, f"select * from memori.page_create({named})", args)
    assert found is not None
    return found


def configure(conn: psycopg.Connection, config: str, session: str = S) -> None:
    conn.execute("select memori.vm_session_configure(%s, %s::jsonb, 'alice', %s)", (session, config, T0))


def ws(conn: psycopg.Connection, session: str = S) -> dict[str, tuple[int, int, bool]]:
    return {r["page_id"]: (r["level"], r["tokens"], r["pinned"])
            for r in rows(conn, "select * from memori.working_set_list(%s)", (session,))}


def test_session_starts_with_the_seed_defaults(conn: psycopg.Connection) -> None:
    assert value(conn, "select memori.turn_begin(%s, 'alice', %s)", (S, T0)) == 1
    s = one(conn, "select * from memori.vm_session_get(%s)", (S,))
    assert s is not None
    assert (s["max_l0_tokens"], s["max_l1_pages"], s["eviction_policy"], float(s["eviction_threshold"]),
            s["pinned_last_turns"], s["fault_protection_turns"], s["eviction_cooldown_turns"],
            s["max_faults_per_turn"], s["max_fault_tokens_per_turn"], s["fault_confidence_threshold"]) == (
        128000, 100, "importance_weighted_lru", 0.85, 3, 2, 3, 3, 8192, "referenced")
    assert value(conn, "select memori.turn_begin(%s, 'alice', %s)", (S, T0)) == 2


def test_create_registers_maps_and_logs(conn: psycopg.Connection) -> None:
    p = page(conn, "msg_001", "Let us use PostgreSQL for the database", p_role="user")
    assert (p["tier"], p["tokens"], p["version"], p["dirty"], p["user_id"]) == ("L0", 10, 1, True, "alice")
    assert ws(conn) == {"msg_001": (0, 10, True)}  # a page of the current turn is pinned
    ref = value(conn, "select content from memori.page_representations where page_id = 'msg_001' and level = 3")
    assert ref == "topics: database, postgresql"
    hist = rows(conn, "select * from memori.page_history(%s, 'msg_001')", (S,))
    assert [(h["mutation_type"], h["tier_before"], h["tier_after"], h["level_after"]) for h in hist] == [
        ("create", None, "L0", 0)]


def test_create_without_mapping_stays_in_l2(conn: psycopg.Connection) -> None:
    p = page(conn, "claim_db_choice_001", "Decision: Use PostgreSQL", p_page_type="claim", p_importance=0.95,
             p_provenance=["msg_042", "msg_043"], p_add_to_working_set=False)
    assert (p["tier"], p["provenance"]) == ("L2", ["msg_042", "msg_043"])
    assert ws(conn) == {}


@pytest.mark.parametrize(("code", "query"), [
    ("PM063", "select memori.page_create('sess_1', 'msg_001', 'x', p_user_id => 'alice')"),
    ("PM004", "select memori.page_create('sess_1', 'm2', 'x', p_page_type => 'note')"),
    ("PM004", "select memori.page_create('sess_1', 'm2', 'x', p_modality => 'smell')"),
    ("PM004", "select memori.page_create('sess_1', 'm2', 'x', p_role => 'robot')"),
    ("PM001", "select memori.page_create('sess_1', 'm2', 'x', p_importance => 2)"),
    ("PM001", "select memori.page_create('sess_2', 'm2', 'x')"),  # no user
    # (another user's session id is no error since revision 0028: session ids are per user, bob gets his own)
    ("PM003", "select memori.page_create('sess_1', 'm2', repeat('x', 2000000))"),
    ("PM005", "select memori.vm_add_page('sess_1', 'nope')"),
    ("PM001", "select memori.vm_add_page('sess_1', 'msg_001', 4)"),
    ("PM004", "select memori.vm_evict('sess_1', 10, 'fifo')"),
    ("PM005", "select memori.vm_manifest('no_such_session')"),
])
def test_bad_input_has_our_codes(conn: psycopg.Connection, code: str, query: str) -> None:
    page(conn, "msg_001")
    assert_sqlstate(conn, code, query)


def test_update_makes_a_version_and_drops_stale_levels(conn: psycopg.Connection) -> None:
    page(conn, "doc_1", "first version of the document", p_page_type="artifact")
    conn.execute("select memori.page_flush(%s, null, %s)", (S, T0))
    conn.execute("select memori.page_representation_put(%s, 'doc_1', 2, 'abstract', p_now => %s)", (S, T0))
    p = one(conn, "select * from memori.page_update(%s, 'doc_1', %s, p_now => %s)",
            (S, "second version, rather longer than the first", T0 + timedelta(seconds=1)))
    assert p is not None and (p["version"], p["dirty"]) == (2, True)
    assert value(conn, "select content from memori.page_versions where page_id = 'doc_1' and version = 1") == \
        "first version of the document"
    assert value(conn, "select count(*) from memori.page_representations where page_id = 'doc_1' and level = 2") == 0
    assert ws(conn)["doc_1"][1] == p["tokens"]
    assert_sqlstate(conn, "PM064", "select memori.page_representation_put('sess_1', 'doc_1', 2, 'x', p_version => 1)")
    assert value(conn, "select memori.page_flush('sess_1')") == 1


def test_eviction_compresses_before_evicting(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 100, "eviction_threshold": 1, "pinned_last_turns": 0, "eviction_policy": "lru"}')
    page(conn, "a", "a" * 160)  # 40 tokens
    conn.execute("select memori.page_representation_put(%s, 'a', 2, 'short a', p_tokens => 5, p_now => %s)", (S, T0))
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    page(conn, "b", "b" * 160)  # 40
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    page(conn, "c", "c" * 120)  # 30: 110 > 100, a (oldest) goes to level 2 first
    assert ws(conn) == {"a": (2, 5, False), "b": (0, 40, False), "c": (0, 30, False)}
    page(conn, "d", "d" * 120)  # 105 > 100: a has no cheaper level left... b is evicted? a (lru) first
    got = ws(conn)
    assert sum(t for _, t, _ in got.values()) <= 100
    assert "d" in got
    hist = [h["mutation_type"] for h in rows(conn, "select * from memori.page_history(%s, 'a')", (S,))]
    assert hist[:2] == ["create", "compress"]


def test_pinned_pages_are_never_evicted(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 50, "eviction_threshold": 1}')
    page(conn, "system_prompt", "s" * 160, p_role="system")  # 40, pinned (default set)
    assert ws(conn)["system_prompt"][2] is True
    err = assert_sqlstate(conn, "PM060", "select memori.page_create('sess_1', 'x', repeat('x', 80))")
    assert "pinned" in str(err)
    assert set(ws(conn)) == {"system_prompt"}
    assert_sqlstate(conn, "PM060", "select memori.vm_evict('sess_1', 10)")


def test_recent_turn_pins_age_out(conn: psycopg.Connection) -> None:
    page(conn, "msg_1", "hello", p_role="user")
    assert ws(conn)["msg_1"][2] is True
    for _ in range(2):
        conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    assert ws(conn)["msg_1"][2] is True
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    assert ws(conn)["msg_1"][2] is False
    assert [h["mutation_type"] for h in rows(conn, "select * from memori.page_history(%s, 'msg_1')", (S,))] == [
        "create", "unpin"]


def test_modality_aware_evicts_media_first(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 100, "eviction_threshold": 1, "pinned_last_turns": 0}')
    page(conn, "t1", "alpha beta gamma delta " * 7)
    page(conn, "img_1", "a diagram", p_modality="image", p_tokens=40)
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    out = rows(conn, "select * from memori.vm_evict(%s, 30, 'modality_aware_lru')", (S,))
    assert out[0]["page_id"] == "img_1"
    out = rows(conn, "select * from memori.vm_evict(%s, 30, 'lru')", (S,))
    assert out[0]["page_id"] == "t1"


def test_claims_have_low_eviction_priority(conn: psycopg.Connection) -> None:
    configure(conn, '{"pinned_last_turns": 0}')
    page(conn, "claim_1", "c" * 40, p_page_type="claim", p_importance=0.95)
    page(conn, "msg_1", "m" * 40)
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    out = rows(conn, "select * from memori.vm_evict(%s, 5)", (S,))
    assert [o["page_id"] for o in out] == ["msg_1"]


def test_l1_overflow_goes_to_l2(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l1_pages": 1, "pinned_last_turns": 0}')
    page(conn, "a", "aaaa")
    page(conn, "b", "bbbb", p_now=T0 + timedelta(seconds=1))
    rows(conn, "select * from memori.vm_evict(%s, 2, 'lru')", (S,))
    tiers = {r["page_id"]: r["tier"] for r in rows(conn, "select page_id, tier from memori.pages")}
    assert tiers == {"a": "L2", "b": "L1"}


def test_exactly_full_budget_and_ties(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 100, "eviction_threshold": 1, "pinned_last_turns": 0, "eviction_policy": "lru"}')
    page(conn, "b", "x", p_tokens=50)
    page(conn, "a", "x", p_tokens=50)  # exactly full: nothing goes
    assert set(ws(conn)) == {"a", "b"}
    page(conn, "c", "x", p_tokens=1)  # one over: of two equal candidates the lower page id goes first,
    got = ws(conn)                     # compressed to its reference rather than evicted
    assert (got["a"][0], got["b"][0], got["c"][0]) == (3, 0, 0)
    assert sum(t for _, t, _ in got.values()) <= 100


def test_threshold_evicts_down_to_it(conn: psycopg.Connection) -> None:
    configure(conn, '{"max_l0_tokens": 100, "pinned_last_turns": 0}')  # threshold 0.85: 85 tokens
    page(conn, "a", "x", p_tokens=40)
    page(conn, "b", "x", p_tokens=45)  # 85: at the threshold, nothing goes
    assert set(ws(conn)) == {"a", "b"}
    page(conn, "c", "x", p_tokens=10)  # 95 > 85: evict until at most 85
    assert sum(t for _, t, _ in ws(conn).values()) <= 85


def test_expired_pages_are_gone_at_the_second(conn: psycopg.Connection) -> None:
    page(conn, "m", "hello", p_add_to_working_set=False, p_expires_at=T0 + timedelta(seconds=1))
    at = T0 + timedelta(seconds=1) - timedelta(microseconds=1)
    assert value(conn, "select (memori.page_lookup(%s, 'm', %s)).page_id", (S, at)) == "m"
    assert value(conn, "select (memori.page_lookup(%s, 'm', %s)).page_id", (S, T0 + timedelta(seconds=1))) is None
    env = value(conn, "select memori.page_fault(%s, 'm', 0, p_now => %s)", (S, T0 + timedelta(seconds=1)))
    assert env["error"]["reason"] == "unknown_page"
    assert value(conn, "select memori.vm_manifest(%s, p_now => %s) -> 'total_available'",
                 (S, T0 + timedelta(seconds=1))) == 0


def test_eviction_candidates_show_each_policy_order(conn: psycopg.Connection) -> None:
    configure(conn, '{"pinned_last_turns": 0}')
    page(conn, "img", "a picture", p_modality="image", p_importance=0.9)
    page(conn, "claim", "Decision: PostgreSQL", p_page_type="claim", p_importance=0.9)
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    page(conn, "old", "older words", p_importance=0.1)
    page(conn, "pinned", "keep me", p_pin=True)

    def order(policy: str) -> list[str]:
        return [r["page_id"] for r in rows(conn, "select * from memori.vm_eviction_candidates(%s, %s)", (S, policy))]

    assert order("lru") == ["img", "old", "claim"]                   # least recent first; claims last
    assert order("importance_weighted_lru") == ["old", "img", "claim"]  # low importance first
    assert order("modality_aware_lru") == ["img", "old", "claim"]    # media first
    assert_sqlstate(conn, "PM004", "select * from memori.vm_eviction_candidates('sess_1', 'fifo')")


def test_lowering_the_budget_evicts_at_once(conn: psycopg.Connection) -> None:
    configure(conn, '{"pinned_last_turns": 0}')
    page(conn, "a", "x", p_tokens=60)
    page(conn, "b", "x", p_tokens=60, p_pin=True)
    configure(conn, '{"max_l0_tokens": 100, "eviction_threshold": 1}')
    assert sum(t for _, t, _ in ws(conn).values()) <= 100 and ws(conn)["b"] == (0, 60, True)
    assert_sqlstate(conn, "PM060", "select memori.vm_session_configure('sess_1', '{\"max_l0_tokens\": 50}')")
    assert value(conn, "select max_l0_tokens from memori.vm_sessions") == 100  # nothing changed
    assert_sqlstate(conn, "PM001", "select memori.vm_session_configure('sess_1', '{\"max_l0_tokens\": 0}')")
    assert_sqlstate(conn, "PM001", "select memori.vm_session_configure('sess_1', '{\"colour\": 1}')")
    assert_sqlstate(conn, "PM004", "select memori.vm_session_configure('sess_1', "
                                   "'{\"fault_confidence_threshold\": \"maybe\"}')")


def test_explicit_pin_over_a_recent_turn_pin_survives_turn_aging(conn: psycopg.Connection) -> None:
    # issue 15.1 (seed 2.3): an explicit pin becomes the pin reason; the recent-turn window is a separate default
    page(conn, "msg_1", "hello", p_role="user")
    page(conn, "msg_2", "world", p_role="user")
    pins = {r["page_id"]: r["pin_reason"] for r in rows(conn, "select * from memori.working_set_list(%s)", (S,))}
    assert pins == {"msg_1": "recent_turn", "msg_2": "recent_turn"}
    assert value(conn, "select memori.page_pin(%s, 'msg_1', true, p_now => %s)", (S, T0)) is True
    # unpinning a page the recent-turn window still covers keeps that protection
    assert value(conn, "select memori.page_pin(%s, 'msg_2', false, p_now => %s)", (S, T0)) is False
    pins = {r["page_id"]: (r["pinned"], r["pin_reason"])
            for r in rows(conn, "select * from memori.working_set_list(%s)", (S,))}
    assert pins == {"msg_1": (True, "explicit"), "msg_2": (True, "recent_turn")}
    for _ in range(4):
        conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    pins = {r["page_id"]: (r["pinned"], r["pin_reason"])
            for r in rows(conn, "select * from memori.working_set_list(%s)", (S,))}
    assert pins == {"msg_1": (True, "explicit"), "msg_2": (False, None)}
    # the explicit pin is never evicted; the aged-out page is
    evicted = [e["page_id"] for e in rows(conn, "select * from memori.vm_evict(%s, 1)", (S,))]
    assert evicted == ["msg_2"]
    assert set(ws(conn)) == {"msg_1"}
    hist = [(h["mutation_type"], h["cause"])
            for h in rows(conn, "select * from memori.page_history(%s, 'msg_1')", (S,))]
    assert hist == [("create", "page_create"), ("pin", "explicit")]


def test_explicit_unpin_falls_back_to_a_recent_turn_pin_that_still_applies(conn: psycopg.Connection) -> None:
    page(conn, "msg_1", "hello", p_role="user")
    assert value(conn, "select memori.page_pin(%s, 'msg_1', true, p_now => %s)", (S, T0)) is True
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    # turn 1: msg_1 (turn 0) is still one of the last 3 turns: the unpin drops the explicit pin only
    assert value(conn, "select memori.page_pin(%s, 'msg_1', false, p_now => %s)", (S, T0)) is True
    got = one(conn, "select pinned, pin_reason from memori.working_set where page_id = 'msg_1'")
    assert got == {"pinned": True, "pin_reason": "recent_turn"}
    for _ in range(3):
        conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    got = one(conn, "select pinned, pin_reason from memori.working_set where page_id = 'msg_1'")
    assert got == {"pinned": False, "pin_reason": None}
    # mapping a recent-turn page with p_pin => true also makes the pin explicit
    page(conn, "msg_9", "later", p_role="user")
    conn.execute("select memori.vm_add_page(%s, 'msg_9', 0, true, p_now => %s)", (S, T0))
    got = one(conn, "select pinned, pin_reason from memori.working_set where page_id = 'msg_9'")
    assert got == {"pinned": True, "pin_reason": "explicit"}
