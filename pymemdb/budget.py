"""The context window manager (seed 02): ``db.budget``.

Token estimates, priority boosts and the greedy budget selection all run in
SQL (sql/300-budget.sql); this module only shapes arguments and results.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict, Unpack
from uuid import UUID

from psycopg.types.json import Jsonb

from pymemdb._sql import NOW, SESSION_ID, USER_ID, Room, given, one, rows, scalar
from pymemdb.errors import InvalidArgument, from_diagnostics


# -- results ------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkAdded:
    """memori.chunk_added: a stored chunk's id, type, tokens (given or estimated) and expiry."""

    id: UUID
    chunk_type: str
    tokens: int
    expires_at: datetime | None


@dataclass(frozen=True)
class AllocatedChunk:
    """One chunk of an optimisation's ``optimized_chunks`` (content only for stored chunks)."""

    id: Any
    type: str
    tokens: int
    priority: float
    token_span: tuple[int, int]
    original_index: int
    content: str | None = None


@dataclass(frozen=True)
class BudgetConflict:
    """A drop after an allocation: chunk1 (the last allocated) was kept, chunk2 did not fit ``budget``."""

    chunk1: Any
    chunk2: Any
    conflict_type: str
    resolution: str
    budget: str | None


@dataclass(frozen=True)
class OptimizationMetrics:
    prioritization_score: float
    business_relevance_boost: float
    recency_boost: float


@dataclass(frozen=True)
class Optimization:
    """The result of memori.context_optimize / context_optimize_stored (seed 02's optimisation result)."""

    optimized_chunks: list[AllocatedChunk]
    dropped_chunk_ids: list[Any]  # the first max_dropped_ids (budget.max_dropped_ids, 1000) in walk order
    total_tokens_used: int
    tokens_remaining: int
    tokens_available: int
    reserved_tokens: int
    chunks_dropped: int
    conflicts: list[BudgetConflict]
    conflicts_count: int
    requires_summarization: list[Any]
    optimization_metrics: OptimizationMetrics
    optimization_id: UUID | None

    @classmethod
    def from_row(cls, row: OptimizationRow) -> Optimization:
        """The typed result of a memori.optimization_result row; a failure it reports is raised."""
        if row.error_sqlstate is not None:
            raise from_diagnostics(row.error_sqlstate, row.error_message or "optimisation failed",
                                   detail=row.error_detail, hint=row.error_hint)
        return cls.from_json({f.name: getattr(row, f.name) for f in fields(cls)})

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Optimization:
        return cls(
            optimized_chunks=[AllocatedChunk(c["id"], c["type"], c["tokens"], c["priority"],
                                             (c["token_span"][0], c["token_span"][1]), c["original_index"],
                                             c.get("content")) for c in doc["optimized_chunks"]],
            dropped_chunk_ids=list(doc["dropped_chunk_ids"]),
            total_tokens_used=doc["total_tokens_used"],
            tokens_remaining=doc["tokens_remaining"],
            tokens_available=doc["tokens_available"],
            reserved_tokens=doc["reserved_tokens"],
            chunks_dropped=doc["chunks_dropped"],
            conflicts=[BudgetConflict(c["chunk1"], c["chunk2"], c["conflict_type"], c["resolution"], c.get("budget"))
                       for c in doc["conflicts"]],
            conflicts_count=doc["conflicts_count"],
            requires_summarization=list(doc["requires_summarization"]),
            optimization_metrics=OptimizationMetrics(**doc["optimization_metrics"]),
            optimization_id=(doc["optimization_id"] if isinstance(doc.get("optimization_id"), UUID)
                             else UUID(doc["optimization_id"]) if doc.get("optimization_id") else None),
        )


@dataclass(frozen=True)
class OptimizationRow:
    """memori.optimization_result as it comes: lists and metrics as JSON; error_* only with on_error report."""

    optimized_chunks: list[dict[str, Any]] | None
    dropped_chunk_ids: list[Any] | None
    total_tokens_used: int | None
    tokens_remaining: int | None
    tokens_available: int | None
    reserved_tokens: int | None
    chunks_dropped: int | None
    conflicts: list[dict[str, Any]] | None
    conflicts_count: int | None
    requires_summarization: list[Any] | None
    optimization_metrics: dict[str, Any] | None
    optimization_id: UUID | None
    error_sqlstate: str | None
    error_message: str | None
    error_detail: str | None
    error_hint: str | None


# -- declarations -------------------------------------------------------------------
ESTIMATE_TOKENS = scalar("estimate_tokens", ("p_text", "text"), ("p_content_type", "text"), result=int)
BUSINESS_BOOST = scalar("business_boost", ("p_metadata", "jsonb"), result=float)
CHUNK_PRIORITY = scalar("chunk_priority", ("p_chunk", "jsonb"), NOW, ("p_options", "jsonb"), result=float)
CONTEXT_OPTIMIZE = one(
    "context_optimize", ("p_chunks", "jsonb"), ("p_available_tokens", "integer"), ("p_options", "jsonb"), NOW,
    result=OptimizationRow,
)
CONTEXT_OPTIMIZE_STORED = one(
    "context_optimize_stored", SESSION_ID, ("p_available_tokens", "integer"), ("p_options", "jsonb"), NOW,
    result=OptimizationRow,
)
CHUNK_ADD_MANY = rows(
    "chunk_add_many", SESSION_ID, ("p_chunks", "jsonb"), USER_ID, ("p_ttl", "interval"), NOW, result=ChunkAdded,
)
CHUNK_CLEAR = scalar("chunk_clear", SESSION_ID, result=int)

CHUNK_TYPES = (
    "system_prompt", "current_user_prompt", "critical_rag_document", "tool_output", "tool_input",
    "chat_history_user", "chat_history_assistant", "rag_memory_commit", "rag_document_chunk", "rag_ebook_chunk",
    "rag_generic_chunk",
)


@dataclass(frozen=True)
class Chunk:
    """One context chunk (seed 02's business_context_chunk): content, tokens, or both."""

    id: str | int | None
    type: str
    content: str | None = None
    tokens: int | None = None
    timestamp: datetime | None = None
    metadata: Mapping[str, Any] | None = None
    content_type: str | None = None  # general (default), business, code or auto, for the estimate

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"type": self.type}
        optional = {"id": self.id, "content": self.content, "tokens": self.tokens,
                    "timestamp": self.timestamp.isoformat() if self.timestamp else None,
                    "metadata": dict(self.metadata) if self.metadata is not None else None,
                    "content_type": self.content_type}
        item.update({k: v for k, v in optional.items() if v is not None})
        return item


ChunkLike = Chunk | Mapping[str, Any]


def _chunk_json(chunk: ChunkLike) -> dict[str, Any]:
    return chunk.to_json() if isinstance(chunk, Chunk) else dict(chunk)


def _check_tokens(available_tokens: object) -> int:
    if isinstance(available_tokens, bool) or not isinstance(available_tokens, int):
        raise InvalidArgument(f"available tokens must be a whole number, got {available_tokens!r}",
                              sqlstate="PM001", hint="Pass the tokens of the model's context window, e.g. 32000.")
    return available_tokens


def _options(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


class OptimizeOptions(TypedDict, total=False):
    """The options of optimize and optimize_stored (p_options; None or absent: the SQL default)."""

    reserve_tokens: int | None
    category_budgets: bool | None
    order: str | None
    recency_mode: str | None
    prefer_recent: bool | None
    persist: bool | None
    max_conflicts: int | None
    max_dropped_ids: int | Literal["all"] | None  # how many dropped ids to list (budget.max_dropped_ids, 1000)
    user_id: str | None


def _reported(options: OptimizeOptions, **more: Any) -> Jsonb:
    """p_options with on_error report: the SQL records context.optimization.failed and returns the error,
    which Optimization.from_row raises."""
    return Jsonb(_options(**options, **more, on_error="report"))


class Budget(Room):
    def estimate_tokens(self, text: str, content_type: str | None = None) -> int:
        """memori.estimate_tokens: ceil(length / chars per token) of general, business, code or auto text."""
        return self._db.call(
            ESTIMATE_TOKENS, **given(p_text=text, p_content_type=content_type)
        )

    def business_boost(self, metadata: Mapping[str, Any]) -> float:
        """memori.business_boost: revenue, urgency, client tier, deal status, relationship; at most 20."""
        return self._db.call(BUSINESS_BOOST, p_metadata=Jsonb(dict(metadata)))

    def chunk_priority(self, chunk: ChunkLike, *, now: datetime | None = None,
                       recency_mode: str | None = None, prefer_recent: bool | None = None) -> float:
        """memori.chunk_priority: base priority + recency + RAG + business boosts."""
        options = _options(recency_mode=recency_mode, prefer_recent=prefer_recent)
        return self._db.call(
            CHUNK_PRIORITY, **given(p_chunk=Jsonb(_chunk_json(chunk)), p_now=now, p_options=Jsonb(options))
        )

    def optimize(
        self,
        chunks: Iterable[ChunkLike],
        available_tokens: int,
        *,
        session_id: str | None = None,
        now: datetime | None = None,
        **options: Unpack[OptimizeOptions],
    ) -> Optimization:
        """memori.context_optimize: which chunks fit ``available_tokens`` minus the reserve, by priority."""
        row = self._db.call(CONTEXT_OPTIMIZE, **given(
            p_chunks=Jsonb([_chunk_json(c) for c in chunks]), p_available_tokens=_check_tokens(available_tokens),
            p_options=_reported(options, session_id=session_id), p_now=now))
        return Optimization.from_row(row)

    def optimize_stored(
        self,
        session_id: str,
        available_tokens: int,
        *,
        now: datetime | None = None,
        **options: Unpack[OptimizeOptions],
    ) -> Optimization:
        """memori.context_optimize_stored: the same over a session's stored chunks; winners carry their content."""
        row = self._db.call(CONTEXT_OPTIMIZE_STORED, **given(
            p_session_id=session_id, p_available_tokens=_check_tokens(available_tokens),
            p_options=_reported(options), p_now=now))
        return Optimization.from_row(row)

    def add_many(
        self,
        session_id: str,
        chunks: Iterable[ChunkLike],
        *,
        user_id: str | None = None,
        ttl: timedelta | None = None,
        now: datetime | None = None,
    ) -> builtins.list[ChunkAdded]:
        """memori.chunk_add_many: store chunks of a session (content required), in order."""
        items = [_chunk_json(c) for c in chunks]
        return self._db.call(
            CHUNK_ADD_MANY, **given(p_session_id=session_id, p_chunks=Jsonb(items), p_user_id=user_id, p_ttl=ttl,
                                    p_now=now)
        )

    def clear(self, session_id: str) -> int:
        """memori.chunk_clear: delete a session's stored chunks; returns how many."""
        return self._db.call(CHUNK_CLEAR, p_session_id=session_id)
