"""Conversation compression through SQL (seed 04): budget, plan/apply and aging, never-compress rules, errors."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import T0, assert_sqlstate, one, rows, value

SEC = timedelta(seconds=1)


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
    row = one(conn, "select * from memori.compression_plan(%s, %s, %s, %s, %s)", (session, ctx, sys, force, at))
    assert row is not None
    return row


def apply(conn: psycopg.Connection, plan_id: Any, summary: str, aged: dict[str, Any] | None = None,
          tokens: int | None = None, at=T0) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    row = one(conn, "select * from memori.compression_apply(%s, %s, %s, %s, %s)",
              (plan_id, summary, Jsonb(aged or {}), tokens, at))
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
          {keys[2000]: {"summary": "cp two aged", "tokens": 1200}, keys[1500]: {"summary": "cp one aged", "tokens": 800}},
          tokens=1800)
    b = budget(conn, "s")
    assert (b["available_tokens"], b["trigger_tokens"]) == (2500, 2000)
    cps = rows(conn, "select level, current_tokens, compression_number from memori.compression_checkpoints"
                     " order by from_seq")
    assert [(c["level"], c["current_tokens"]) for c in cps] == [(1, 800), (2, 1200), (3, 1800)]
    assert [c["compression_number"] for c in cps] == [1, 2, 3]
