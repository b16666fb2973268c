"""Conversation compression (seed 04): ``db.compression``.

The SQL keeps the full history, computes the budget, plans what to compress
and applies summaries atomically; ``run`` drives one compression end to end
with a pluggable ``Summarizer`` (pymemdb.summarizers).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pymemdb._sql import fn, given
from pymemdb.summarizers import ExtractiveSummarizer, Summarizer, SummarizerError
from pymemdb.types import (
    CompressionApplied,
    CompressionBudget,
    CompressionPlan,
    CompressionRequest,
    ContextItem,
    MessageAdded,
    Reliability,
    SessionReliability,
)

if TYPE_CHECKING:
    from pymemdb.db import Database

MESSAGE_ADD = fn(
    "message_add",
    ("p_session_id", "text"), ("p_role", "text"), ("p_content", "text"), ("p_tokens", "integer"),
    ("p_tool_calls", "jsonb"), ("p_now", "timestamptz"), ("p_user_id", "text"), ("p_context_size", "integer"),
    ("p_system_prompt_tokens", "integer"),
    result=MessageAdded,
)
COMPRESSION_BUDGET = fn(
    "compression_budget", ("p_session_id", "text"), ("p_context_size", "integer"),
    ("p_system_prompt_tokens", "integer"), result=CompressionBudget,
)
COMPRESSION_PLAN = fn(
    "compression_plan", ("p_session_id", "text"), ("p_context_size", "integer"),
    ("p_system_prompt_tokens", "integer"), ("p_now", "timestamptz"), ("p_force", "boolean"),
    result=CompressionPlan,
)
COMPRESSION_PROMPT = fn("compression_prompt", ("p_plan_id", "uuid"), result=CompressionRequest, returns="many")
COMPRESSION_APPLY = fn(
    "compression_apply", ("p_plan_id", "uuid"), ("p_new_summary", "text"), ("p_aged", "jsonb"),
    ("p_now", "timestamptz"), ("p_new_tokens", "integer"),
    result=CompressionApplied,
)
COMPRESSION_ABORT = fn(
    "compression_abort", ("p_plan_id", "uuid"), ("p_error", "text"), ("p_now", "timestamptz"), result=CompressionPlan
)
ACTIVE_CONTEXT = fn("active_context", ("p_session_id", "text"), result=ContextItem, returns="many")
RELIABILITY_SCORE = fn(
    "reliability_score", ("p_model_size_b", "numeric"), ("p_compression_count", "integer"),
    ("p_context_confidence", "numeric"), result=Reliability,
)
SESSION_RELIABILITY = fn(
    "session_reliability", ("p_session_id", "text"), ("p_model_size_b", "numeric"), result=SessionReliability
)
SESSION_EXPORT = fn(
    "session_export", ("p_session_id", "text"), ("p_model", "text"), ("p_provider", "text"), returns="scalar"
)


@dataclass(frozen=True)
class CompressionRun:
    """What ``db.compression.run`` did: the plan, and the result when it was applied."""

    plan: CompressionPlan
    applied: CompressionApplied | None

    @property
    def compressed(self) -> bool:
        return self.applied is not None


class Compression:
    def __init__(self, db: Database) -> None:
        self._db = db

    def message_add(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        tokens: int | None = None,
        tool_calls: Any = None,
        user_id: str | None = None,
        context_size: int | None = None,
        system_prompt_tokens: int | None = None,
        now: datetime | None = None,
    ) -> MessageAdded:
        """memori.message_add: append to the full history; the answer carries the budget (should_compress)."""
        return self._db.call(  # type: ignore[no-any-return]
            MESSAGE_ADD,
            **given(p_session_id=session_id, p_role=role, p_content=content, p_tokens=tokens,
                    p_tool_calls=None if tool_calls is None else Jsonb(tool_calls), p_user_id=user_id,
                    p_context_size=context_size, p_system_prompt_tokens=system_prompt_tokens, p_now=now),
        )

    def budget(
        self, session_id: str, *, context_size: int | None = None, system_prompt_tokens: int | None = None
    ) -> CompressionBudget:
        """memori.compression_budget: usable, available, trigger, used, should_compress."""
        return self._db.call(  # type: ignore[no-any-return]
            COMPRESSION_BUDGET,
            **given(p_session_id=session_id, p_context_size=context_size,
                    p_system_prompt_tokens=system_prompt_tokens),
        )

    def plan(
        self,
        session_id: str,
        *,
        context_size: int | None = None,
        system_prompt_tokens: int | None = None,
        force: bool | None = None,
        now: datetime | None = None,
    ) -> CompressionPlan:
        """memori.compression_plan: a persisted plan (status planned or skipped)."""
        return self._db.call(  # type: ignore[no-any-return]
            COMPRESSION_PLAN,
            **given(p_session_id=session_id, p_context_size=context_size,
                    p_system_prompt_tokens=system_prompt_tokens, p_force=force, p_now=now),
        )

    def prompt(self, plan_id: UUID | str) -> builtins.list[CompressionRequest]:
        """memori.compression_prompt: the summaries a plan needs, with source text and goal-aware prompt."""
        return self._db.call(COMPRESSION_PROMPT, p_plan_id=plan_id)  # type: ignore[no-any-return]

    def apply(
        self,
        plan_id: UUID | str,
        new_summary: str,
        aged: dict[str, Any] | None = None,
        *,
        new_tokens: int | None = None,
        now: datetime | None = None,
    ) -> CompressionApplied:
        """memori.compression_apply: store the summaries atomically (stale or repeated plans are refused)."""
        return self._db.call(  # type: ignore[no-any-return]
            COMPRESSION_APPLY,
            **given(p_plan_id=plan_id, p_new_summary=new_summary, p_aged=Jsonb(aged or {}), p_new_tokens=new_tokens,
                    p_now=now),
        )

    def abort(self, plan_id: UUID | str, error: str, *, now: datetime | None = None) -> CompressionPlan:
        """memori.compression_abort: mark a plan failed and emit compression.error."""
        return self._db.call(  # type: ignore[no-any-return]
            COMPRESSION_ABORT, **given(p_plan_id=plan_id, p_error=error, p_now=now)
        )

    def active_context(self, session_id: str) -> builtins.list[ContextItem]:
        """memori.active_context: what is sent to the LLM, in order."""
        return self._db.call(ACTIVE_CONTEXT, p_session_id=session_id)  # type: ignore[no-any-return]

    def reliability_score(
        self, model_size_b: float, compression_count: int, context_confidence: float | None = None
    ) -> Reliability:
        """memori.reliability_score: the seed's score, level and icon."""
        return self._db.call(  # type: ignore[no-any-return]
            RELIABILITY_SCORE,
            **given(p_model_size_b=model_size_b, p_compression_count=compression_count,
                    p_context_confidence=context_confidence),
        )

    def session_reliability(self, session_id: str, model_size_b: float) -> SessionReliability:
        """memori.session_reliability: the session's score with the warning text when low."""
        return self._db.call(  # type: ignore[no-any-return]
            SESSION_RELIABILITY, p_session_id=session_id, p_model_size_b=model_size_b
        )

    def session_export(
        self, session_id: str, *, model: str | None = None, provider: str | None = None
    ) -> dict[str, Any] | None:
        """memori.session_export: the seed's session file (every message, uncompressed)."""
        return self._db.call(  # type: ignore[no-any-return]
            SESSION_EXPORT, **given(p_session_id=session_id, p_model=model, p_provider=provider)
        )

    def run(
        self,
        session_id: str,
        summarizer: Summarizer | None = None,
        *,
        context_size: int | None = None,
        system_prompt_tokens: int | None = None,
        force: bool = False,
        now: datetime | None = None,
    ) -> CompressionRun:
        """Plan, summarize (outside any transaction), apply.

        A skipped plan returns without calling the summarizer. When the
        summarizer fails the plan is aborted (compression.error) and the
        error re-raised as SummarizerError: nothing else changes. A plan that
        became stale while summarizing raises CompressionPlanStale.
        """
        writer = summarizer or ExtractiveSummarizer()
        plan = self.plan(session_id, context_size=context_size, system_prompt_tokens=system_prompt_tokens,
                         force=force or None, now=now)
        if plan.status != "planned":
            return CompressionRun(plan, None)
        summaries: dict[str, str] = {}
        try:
            for request in self.prompt(plan.id):
                summaries[request.key] = writer.summarize(request)
        except Exception as exc:
            self.abort(plan.id, f"{type(exc).__name__}: {exc}", now=now)
            if isinstance(exc, SummarizerError):
                raise
            raise SummarizerError(f"summarizer failed: {exc}", hint="The plan was aborted; nothing changed.") from exc
        new = summaries.pop("new")
        applied = self.apply(plan.id, new, summaries, now=now)
        return CompressionRun(plan, applied)
