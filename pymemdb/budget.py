"""The context window manager (seed 02): ``db.budget``.

Token estimates, priority boosts and the greedy budget selection all run in
SQL (sql/300-budget.sql); this module only shapes arguments and results.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from pymemdb._sql import fn, given
from pymemdb.errors import InvalidArgument, PymemdbError
from pymemdb.types import ChunkAdded, Optimization

if TYPE_CHECKING:
    from pymemdb.db import Database

ESTIMATE_TOKENS = fn("estimate_tokens", ("p_text", "text"), ("p_content_type", "text"), returns="scalar")
BUSINESS_BOOST = fn("business_boost", ("p_metadata", "jsonb"), returns="scalar")
CHUNK_PRIORITY = fn(
    "chunk_priority", ("p_chunk", "jsonb"), ("p_now", "timestamptz"), ("p_options", "jsonb"), returns="scalar"
)
CONTEXT_OPTIMIZE = fn(
    "context_optimize",
    ("p_chunks", "jsonb"), ("p_available_tokens", "integer"), ("p_options", "jsonb"), ("p_now", "timestamptz"),
    returns="scalar",
)
CONTEXT_OPTIMIZE_STORED = fn(
    "context_optimize_stored",
    ("p_session_id", "text"), ("p_available_tokens", "integer"), ("p_options", "jsonb"), ("p_now", "timestamptz"),
    returns="scalar",
)
CHUNK_ADD_MANY = fn(
    "chunk_add_many",
    ("p_session_id", "text"), ("p_chunks", "jsonb"), ("p_user_id", "text"), ("p_ttl", "interval"),
    ("p_now", "timestamptz"),
    result=ChunkAdded, returns="many",
)
CHUNK_CLEAR = fn("chunk_clear", ("p_session_id", "text"), returns="scalar")
# private: the failed event, in a transaction of its own (the failed call's rolled back with it)
BUDGET_FAILED = fn("_budget_failed", ("p_payload", "jsonb"), ("p_now", "timestamptz"), returns="scalar")

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


class Budget:
    def __init__(self, db: Database) -> None:
        self._db = db

    def estimate_tokens(self, text: str, content_type: str | None = None) -> int:
        """memori.estimate_tokens: ceil(length / chars per token) of general, business, code or auto text."""
        return self._db.call(  # type: ignore[no-any-return]
            ESTIMATE_TOKENS, **given(p_text=text, p_content_type=content_type)
        )

    def business_boost(self, metadata: Mapping[str, Any]) -> float:
        """memori.business_boost: revenue, urgency, client tier, deal status, relationship; at most 20."""
        return self._db.call(BUSINESS_BOOST, p_metadata=Jsonb(dict(metadata)))  # type: ignore[no-any-return]

    def chunk_priority(self, chunk: ChunkLike, *, now: datetime | None = None,
                       recency_mode: str | None = None, prefer_recent: bool | None = None) -> float:
        """memori.chunk_priority: base priority + recency + RAG + business boosts."""
        options = _options(recency_mode=recency_mode, prefer_recent=prefer_recent)
        return self._db.call(  # type: ignore[no-any-return]
            CHUNK_PRIORITY, **given(p_chunk=Jsonb(_chunk_json(chunk)), p_now=now, p_options=Jsonb(options))
        )

    def optimize(
        self,
        chunks: Iterable[ChunkLike],
        available_tokens: int,
        *,
        reserve_tokens: int | None = None,
        category_budgets: bool | None = None,
        order: str | None = None,
        recency_mode: str | None = None,
        prefer_recent: bool | None = None,
        persist: bool | None = None,
        max_conflicts: int | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        now: datetime | None = None,
    ) -> Optimization:
        """memori.context_optimize: which chunks fit ``available_tokens`` minus the reserve, by priority."""
        options = _options(reserve_tokens=reserve_tokens, category_budgets=category_budgets, order=order,
                           recency_mode=recency_mode, prefer_recent=prefer_recent, persist=persist,
                           max_conflicts=max_conflicts, user_id=user_id, session_id=session_id)
        items = [_chunk_json(c) for c in chunks]
        args = given(p_chunks=Jsonb(items), p_available_tokens=_check_tokens(available_tokens),
                     p_options=Jsonb(options), p_now=now)
        return self._run(CONTEXT_OPTIMIZE, args, {"source": "request", "chunks_count": len(items),
                                                  "session_id": session_id, "user_id": user_id}, persist, now)

    def optimize_stored(
        self,
        session_id: str,
        available_tokens: int,
        *,
        reserve_tokens: int | None = None,
        category_budgets: bool | None = None,
        order: str | None = None,
        recency_mode: str | None = None,
        prefer_recent: bool | None = None,
        persist: bool | None = None,
        max_conflicts: int | None = None,
        user_id: str | None = None,
        now: datetime | None = None,
    ) -> Optimization:
        """memori.context_optimize_stored: the same over a session's stored chunks; winners carry their content."""
        options = _options(reserve_tokens=reserve_tokens, category_budgets=category_budgets, order=order,
                           recency_mode=recency_mode, prefer_recent=prefer_recent, persist=persist,
                           max_conflicts=max_conflicts, user_id=user_id)
        args = given(p_session_id=session_id, p_available_tokens=_check_tokens(available_tokens),
                     p_options=Jsonb(options), p_now=now)
        return self._run(CONTEXT_OPTIMIZE_STORED, args, {"source": "stored", "session_id": session_id,
                                                         "user_id": user_id}, persist, now)

    def _run(self, function: Any, args: dict[str, Any], about: dict[str, Any], persist: bool | None,
             now: datetime | None) -> Optimization:
        try:
            doc = self._db.call(function, **args)
        except PymemdbError as exc:
            if persist is not False:
                self._failed(about | {"error": exc.message, "sqlstate": exc.sqlstate}, now)
            raise
        return Optimization.from_json(doc)

    def _failed(self, payload: dict[str, Any], now: datetime | None) -> None:
        """context.optimization.failed, best effort: a failure to record it must not hide the real error."""
        try:
            self._db.call(BUDGET_FAILED, **given(p_payload=Jsonb({k: v for k, v in payload.items() if v is not None}),
                                                 p_now=now))
        except PymemdbError:
            pass

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
        return self._db.call(  # type: ignore[no-any-return]
            CHUNK_ADD_MANY, **given(p_session_id=session_id, p_chunks=Jsonb(items), p_user_id=user_id, p_ttl=ttl,
                                    p_now=now)
        )

    def clear(self, session_id: str) -> int:
        """memori.chunk_clear: delete a session's stored chunks; returns how many."""
        return self._db.call(CHUNK_CLEAR, p_session_id=session_id)  # type: ignore[no-any-return]
