"""Conversation compression (seed 04, sql/430-compression-messages.sql): ``db.compression``.

The SQL keeps the full history, computes the budget, plans what to compress
and applies summaries atomically; ``run`` drives one compression end to end
with a pluggable ``Summarizer`` (pymemdb.compression.summarizers).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pymemdb._sql import NOW, SESSION_ID, USER_ID, Room, given, jsonb, one, rows, scalar
from pymemdb.compression.summarizers import ExtractiveSummarizer, Summarizer, SummarizerError


@dataclass(frozen=True)
class CompressionBudget:
    """memori.compression_budget_state: the seed's dynamic budget of a session."""

    session_id: str
    context_size: int
    usable_tokens: int
    system_prompt_tokens: int
    checkpoint_tokens: int
    available_tokens: int
    trigger_tokens: int
    used_tokens: int
    free_tokens: int
    should_compress: bool
    checkpoint_count: int
    compression_count: int


@dataclass(frozen=True)
class MessageAdded:
    """memori.message_added: the appended message and the session's budget state after it."""

    message_id: int
    session_id: str
    seq: int
    role: str
    tokens: int
    created_at: datetime
    context_size: int
    usable_tokens: int
    system_prompt_tokens: int
    checkpoint_tokens: int
    available_tokens: int
    trigger_tokens: int
    used_tokens: int
    should_compress: bool
    auto_snapshot_id: UUID | None


@dataclass(frozen=True)
class CompressionPlan:
    """A row of memori.compression_plans."""

    id: UUID
    session_id: str
    user_id: str
    status: str
    reason: str | None
    state_version: int
    context_size: int
    system_prompt_tokens: int
    budget: dict[str, Any]
    from_seq: int | None
    to_seq: int | None
    message_count: int
    source_tokens: int
    target_tokens: int
    aging: list[dict[str, Any]]
    key_decisions: list[str]
    files_modified: list[str]
    next_steps: list[str]
    checkpoint_id: UUID | None
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    expires_at: datetime | None


@dataclass(frozen=True)
class CompressionRequest:
    """memori.compression_request: one summary a plan needs (new, age or merge)."""

    key: str
    action: str
    level: int
    source_tokens: int
    target_tokens: int
    source: str
    prompt: str


@dataclass(frozen=True)
class CompressionApplied:
    """memori.compression_applied: what compression_apply did."""

    plan_id: UUID
    checkpoint_id: UUID
    compression_number: int
    message_count: int
    source_tokens: int
    summary_tokens: int
    aged: int
    merged: int
    checkpoint_tokens: int
    used_tokens: int


@dataclass(frozen=True)
class ContextItem:
    """memori.context_item: one entry of the active context, in sending order."""

    position: int
    kind: str
    role: str
    ref: str
    content: str
    tokens: int

@dataclass(frozen=True)
class Reliability:
    """memori.reliability: the seed's score with its level and icon."""

    score: Decimal
    percent: int
    level: str
    icon: str
    model_factor: Decimal
    compression_penalty: Decimal


@dataclass(frozen=True)
class SessionReliability:
    """memori.session_reliability_state: a session's reliability and the warning when low."""

    session_id: str
    model_size_b: Decimal
    compression_count: int
    score: Decimal
    percent: int
    level: str
    icon: str
    warning: str | None


MESSAGE_ADD = one(
    "message_add", SESSION_ID, ("p_role", "text"), ("p_content", "text"), ("p_tokens", "integer"),
    ("p_tool_calls", "jsonb"), NOW, USER_ID, ("p_context_size", "integer"), ("p_system_prompt_tokens", "integer"),
    result=MessageAdded,
)
COMPRESSION_BUDGET = one(
    "compression_budget", SESSION_ID, ("p_context_size", "integer"), ("p_system_prompt_tokens", "integer"),
    result=CompressionBudget,
)
COMPRESSION_PLAN = one(
    "compression_plan", SESSION_ID, ("p_context_size", "integer"), ("p_system_prompt_tokens", "integer"), NOW,
    ("p_force", "boolean"), result=CompressionPlan,
)
COMPRESSION_PROMPT = rows("compression_prompt", ("p_plan_id", "uuid"), result=CompressionRequest)
COMPRESSION_APPLY = one(
    "compression_apply", ("p_plan_id", "uuid"), ("p_new_summary", "text"), ("p_aged", "jsonb"), NOW,
    ("p_new_tokens", "integer"), result=CompressionApplied,
)
COMPRESSION_ABORT = one("compression_abort", ("p_plan_id", "uuid"), ("p_error", "text"), NOW, result=CompressionPlan)
ACTIVE_CONTEXT = rows("active_context", SESSION_ID, result=ContextItem)
RELIABILITY_SCORE = one(
    "reliability_score", ("p_model_size_b", "numeric"), ("p_compression_count", "integer"),
    ("p_context_confidence", "numeric"), result=Reliability,
)
SESSION_RELIABILITY = one("session_reliability", SESSION_ID, ("p_model_size_b", "numeric"), result=SessionReliability)
# a document (the seed's session file), not a fixed shape: jsonb stays; NULL for an unknown session
SESSION_EXPORT = scalar("session_export", SESSION_ID, ("p_model", "text"), ("p_provider", "text"), result=dict)


@dataclass(frozen=True)
class CompressionRun:
    """What ``db.compression.run`` did: the plan, and the result when it was applied."""

    plan: CompressionPlan
    applied: CompressionApplied | None

    @property
    def compressed(self) -> bool:
        return self.applied is not None


class Compression(Room):
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
        return self._db.call(
            MESSAGE_ADD,
            **given(p_session_id=session_id, p_role=role, p_content=content, p_tokens=tokens,
                    p_tool_calls=jsonb(tool_calls), p_user_id=user_id,
                    p_context_size=context_size, p_system_prompt_tokens=system_prompt_tokens, p_now=now),
        )

    def budget(
        self, session_id: str, *, context_size: int | None = None, system_prompt_tokens: int | None = None
    ) -> CompressionBudget:
        """memori.compression_budget: usable, available, trigger, used, should_compress."""
        return self._db.call(
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
        return self._db.call(
            COMPRESSION_PLAN,
            **given(p_session_id=session_id, p_context_size=context_size,
                    p_system_prompt_tokens=system_prompt_tokens, p_force=force, p_now=now),
        )

    def prompt(self, plan_id: UUID | str) -> builtins.list[CompressionRequest]:
        """memori.compression_prompt: the summaries a plan needs, with source text and goal-aware prompt."""
        return self._db.call(COMPRESSION_PROMPT, p_plan_id=plan_id)

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
        return self._db.call(
            COMPRESSION_APPLY,
            **given(p_plan_id=plan_id, p_new_summary=new_summary, p_aged=Jsonb(aged or {}), p_new_tokens=new_tokens,
                    p_now=now),
        )

    def abort(self, plan_id: UUID | str, error: str, *, now: datetime | None = None) -> CompressionPlan:
        """memori.compression_abort: mark a plan failed and emit compression.error."""
        return self._db.call(
            COMPRESSION_ABORT, **given(p_plan_id=plan_id, p_error=error, p_now=now)
        )

    def active_context(self, session_id: str) -> builtins.list[ContextItem]:
        """memori.active_context: what is sent to the LLM, in order."""
        return self._db.call(ACTIVE_CONTEXT, p_session_id=session_id)

    def reliability_score(
        self, model_size_b: float, compression_count: int, context_confidence: float | None = None
    ) -> Reliability:
        """memori.reliability_score: the seed's score, level and icon."""
        return self._db.call(
            RELIABILITY_SCORE,
            **given(p_model_size_b=model_size_b, p_compression_count=compression_count,
                    p_context_confidence=context_confidence),
        )

    def session_reliability(self, session_id: str, model_size_b: float) -> SessionReliability:
        """memori.session_reliability: the session's score with the warning text when low."""
        return self._db.call(
            SESSION_RELIABILITY, p_session_id=session_id, p_model_size_b=model_size_b
        )

    def session_export(
        self, session_id: str, *, model: str | None = None, provider: str | None = None
    ) -> dict[str, Any] | None:
        """memori.session_export: the seed's session file (every message, uncompressed)."""
        return self._db.call(
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
