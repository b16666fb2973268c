"""The compression chapter of `pymemdb demo`: a long conversation on an 8K budget (seed 04)."""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.console import Console
from rich.table import Table

import pymemdb
from pymemdb.compression import ExtractiveSummarizer

TOPICS = ("the login endpoint", "JWT signing", "refresh tokens", "password hashing", "rate limits")


def compression_chapter(db: pymemdb.Database, out: Console, now: datetime) -> None:
    """120 turns on an 8K model: the budget, each compression, the goal block and reliability."""
    out.rule("8. Compression: a long conversation on an 8K context (seed 04)")
    session = "chat-1"
    db = db.as_user("alice")  # every call acts for alice (memori._acting_user: no user means memori.user_id)
    db.compression.message_add(session, "system", "You are a careful senior engineer. " * 57, user_id="alice",
                               context_size=8000, now=now)
    db.compression.message_add(session, "assistant", "[GOAL] Implement user authentication system - HIGH\n"
                               "[DECISION] Use JWT for authentication - LOCKED", now=now)
    table = Table(title="compressions (local extractive summarizer)")
    for column in ("turn", "messages", "source → summary", "aged", "merged", "checkpoints", "available"):
        table.add_column(column, justify="right")
    for turn in range(1, 121):
        at = now + timedelta(seconds=turn)
        topic = TOPICS[turn % len(TOPICS)]
        db.compression.message_add(session, "user", f"Turn {turn}: what about {topic}?", now=at)
        added = db.compression.message_add(
            session, "assistant",
            f"For turn {turn} I reviewed {topic}. The change keeps the API stable and adds tests. "
            f"Edge cases around expiry are covered. Next I will measure latency of {topic}. " * 3, now=at)
        if added.should_compress:
            run = db.compression.run(session, ExtractiveSummarizer(), now=at)
            if run.applied:
                a = run.applied
                budget = db.compression.budget(session)
                table.add_row(str(turn), str(a.message_count), f"{a.source_tokens:,} → {a.summary_tokens:,}",
                              str(a.aged), str(a.merged), f"{a.checkpoint_tokens:,}", f"{budget.available_tokens:,}")
    out.print(table)
    budget = db.compression.budget(session)
    context = db.compression.active_context(session)
    export = db.compression.session_export(session)
    assert export is not None, "the demo's session exists"
    out.print(f"  active context: {sum(i.tokens for i in context):,} of {budget.usable_tokens:,} usable tokens; "
              f"full history: {len(export['messages'])} messages")
    out.print("  goal block (never compressed):")
    out.print("    " + (db.goals.block(session) or "").replace("\n", "\n    "), markup=False)
    reliability = db.compression.session_reliability(session, 3)
    out.print(f"  reliability for a 3B model after {reliability.compression_count} compressions: "
              f"{reliability.icon} {reliability.percent}% ({reliability.level})", markup=False)
