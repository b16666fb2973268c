"""AI virtual memory lifecycle (issue 7): ``db.vm``, one method per SQL function of sql/150 and sql/155.

Claims, segments (the infinite-conversation hook), the runtime pre-pass, the
simple prefetcher, turns that run the pre-pass by paging mode, and citations
(which make the prefetch hit rate measurable). ``segment_close`` is the one
method that does more than call SQL: it asks a ``Summarizer`` for the text of
the open segment's summary first (the local extractive one by default).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pymemdb._sql import fn, given
from pymemdb.compression import CompressionRequest, ExtractiveSummarizer, Summarizer, estimate_tokens
from pymemdb.types import ClaimConflict, Page, SegmentPage, VmPrefetchItem, VmSegment

if TYPE_CHECKING:
    from pymemdb.db import Database

CLAIM_CREATE = fn(
    "claim_create", ("p_session_id", "text"), ("p_content", "text"), ("p_provenance", "text[]"),
    ("p_importance", "double precision"), ("p_topic", "text"), ("p_claim_id", "text"), ("p_pin", "boolean"),
    ("p_actor", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"), result=Page,
)
CLAIM_SUPERSEDE = fn(
    "claim_supersede", ("p_session_id", "text"), ("p_claim_id", "text"), ("p_content", "text"),
    ("p_provenance", "text[]"), ("p_reason", "text"), ("p_importance", "double precision"),
    ("p_new_claim_id", "text"), ("p_pin", "boolean"), ("p_actor", "text"), ("p_now", "timestamptz"), result=Page,
)
CLAIM_HISTORY = fn("claim_history", ("p_session_id", "text"), ("p_topic", "text"), ("p_now", "timestamptz"),
                   result=Page, returns="many")
CLAIM_CONFLICTS = fn("claim_conflicts", ("p_session_id", "text"), ("p_now", "timestamptz"), result=ClaimConflict,
                     returns="many")
SEGMENT_CURRENT = fn("segment_current", ("p_session_id", "text"), returns="scalar")
SEGMENT_PAGES = fn("segment_pages", ("p_session_id", "text"), ("p_now", "timestamptz"), result=SegmentPage,
                   returns="many")
SEGMENT_CLOSE = fn(
    "segment_close", ("p_session_id", "text"), ("p_summary", "text"), ("p_summary_page_id", "text"),
    ("p_importance", "double precision"), ("p_actor", "text"), ("p_now", "timestamptz"), result=VmSegment,
)
SEGMENT_LIST = fn("segment_list", ("p_session_id", "text"), result=VmSegment, returns="many")
VM_PREPASS_TOPICS = fn("vm_prepass_topics", ("p_user_message", "text"), ("p_limit", "integer"), returns="scalar")
VM_PREPASS = fn(
    "vm_prepass", ("p_session_id", "text"), ("p_user_message", "text"), ("p_apply", "boolean"),
    ("p_per_topic", "integer"), ("p_max_faults", "integer"), ("p_target_level", "integer"), ("p_now", "timestamptz"),
    result=VmPrefetchItem, returns="many",
)
VM_PREFETCH = fn(
    "vm_prefetch", ("p_session_id", "text"), ("p_apply", "boolean"), ("p_claims", "integer"), ("p_tools", "text[]"),
    ("p_recent_turns", "integer"), ("p_max_faults", "integer"), ("p_target_level", "integer"),
    ("p_now", "timestamptz"), result=VmPrefetchItem, returns="many",
)
VM_TURN_START = fn(
    "vm_turn_start", ("p_session_id", "text"), ("p_user_message", "text"), ("p_page_id", "text"),
    ("p_user_id", "text"), ("p_now", "timestamptz"), returns="scalar",
)
VM_CITE = fn("vm_cite", ("p_session_id", "text"), ("p_page_ids", "text[]"), ("p_now", "timestamptz"),
             returns="scalar")


def summary_target(source_tokens: int) -> int:
    """Tokens a segment summary may use: a tenth of the segment (the seed's 10:1), at least 8, below the source."""
    return max(1, min(max(8, source_tokens // 10), source_tokens - 1))


class VmLifecycle:
    """``db.vm``: claims, segments, the runtime pre-pass, the prefetcher, turns and citations."""

    def __init__(self, db: Database, *, summarizer: Summarizer | None = None) -> None:
        self._db = db
        # writes segment summaries; the local extractive one needs no model and no network
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()

    def _invalidate(self, session_id: str) -> None:
        # these calls map and evict pages: the page-table cache of db.pages is stale for the session
        self._db.pages.tlb.invalidate_session(session_id)

    # -- claims ------------------------------------------------------------------------
    def claim_create(
        self, session_id: str, content: str, provenance: Sequence[str], *, importance: float | None = None,
        topic: str | None = None, claim_id: str | None = None, pin: bool | None = None, actor: str | None = None,
        user_id: str | None = None, now: datetime | None = None,
    ) -> Page:
        """memori.claim_create: a token-cheap decision page citing pages of the session (ProvenanceNotFound)."""
        self._invalidate(session_id)
        return self._db.call(  # type: ignore[no-any-return]
            CLAIM_CREATE, p_session_id=session_id, p_content=content, p_provenance=list(provenance), **given(
                p_importance=importance, p_topic=topic, p_claim_id=claim_id, p_pin=pin, p_actor=actor,
                p_user_id=user_id, p_now=now))

    def claim_supersede(
        self, session_id: str, claim_id: str, content: str, provenance: Sequence[str], reason: str, *,
        importance: float | None = None, new_claim_id: str | None = None, pin: bool | None = None,
        actor: str | None = None, now: datetime | None = None,
    ) -> Page:
        """memori.claim_supersede: a new claim replaces ``claim_id`` on its topic; returns the new claim.

        The old claim stays (provenance, superseded_by/at/reason) and ranks after current pages
        (ClaimNotCurrent when it is not a current claim, ProvenanceNotFound for a missing source).
        """
        self._invalidate(session_id)
        return self._db.call(  # type: ignore[no-any-return]
            CLAIM_SUPERSEDE, p_session_id=session_id, p_claim_id=claim_id, p_content=content,
            p_provenance=list(provenance), p_reason=reason, **given(
                p_importance=importance, p_new_claim_id=new_claim_id, p_pin=pin, p_actor=actor, p_now=now))

    def claim_history(self, session_id: str, topic: str, *, now: datetime | None = None) -> builtins.list[Page]:
        """memori.claim_history: the claims of a topic, current first, then superseded ones newest first."""
        return self._db.call(  # type: ignore[no-any-return]
            CLAIM_HISTORY, p_session_id=session_id, p_topic=topic, **given(p_now=now))

    def claim_conflicts(self, session_id: str, *, now: datetime | None = None) -> builtins.list[ClaimConflict]:
        """memori.claim_conflicts: pairs of current claims on one topic that disagree (resolve with claim_supersede)."""
        return self._db.call(  # type: ignore[no-any-return]
            CLAIM_CONFLICTS, p_session_id=session_id, **given(p_now=now))

    # -- segments ------------------------------------------------------------------------
    def segment_current(self, session_id: str) -> str:
        """memori.segment_current: the open segment's label (pass it as ``segment=`` to db.pages.create)."""
        return str(self._db.call(SEGMENT_CURRENT, p_session_id=session_id))

    def segment_pages(self, session_id: str, *, now: datetime | None = None) -> builtins.list[SegmentPage]:
        """memori.segment_pages: the open segment's transcript, what the Summarizer reads."""
        return self._db.call(SEGMENT_PAGES, p_session_id=session_id, **given(p_now=now))  # type: ignore[no-any-return]

    def segment_close(
        self, session_id: str, summary: str | None = None, *, summarizer: Summarizer | None = None,
        target_tokens: int | None = None, summary_page_id: str | None = None, importance: float | None = None,
        actor: str | None = None, now: datetime | None = None,
    ) -> VmSegment:
        """memori.segment_close, with the summary written by a Summarizer unless given.

        The Summarizer gets the open segment's transcript ("role: text" lines)
        and a target of a tenth of its tokens; the SQL then swaps the
        segment's unpinned transcript out to L2 behind the summary page.
        """
        if summary is None:
            pages = self.segment_pages(session_id, now=now)
            source = "\n".join(f"{p.role or 'system'}: {p.content or ''}" for p in pages)
            source_tokens = sum(p.tokens for p in pages)
            target = target_tokens or summary_target(source_tokens)
            request = CompressionRequest(
                key=f"{session_id}:{self.segment_current(session_id)}", action="new", level=1,
                source_tokens=source_tokens, target_tokens=target, source=source,
                prompt=f"Summarize this conversation segment in at most {target} tokens. "
                       f"Keep decisions, names and figures.\n\n{source}")
            summary = (summarizer or self.summarizer).summarize(request) if pages else ""
            if pages and estimate_tokens(summary) >= source_tokens:
                summary = ExtractiveSummarizer().extract(summary, target)
        self._invalidate(session_id)
        return self._db.call(  # type: ignore[no-any-return]
            SEGMENT_CLOSE, p_session_id=session_id, p_summary=summary, **given(
                p_summary_page_id=summary_page_id, p_importance=importance, p_actor=actor, p_now=now))

    def segment_list(self, session_id: str) -> builtins.list[VmSegment]:
        """memori.segment_list: the closed segments, oldest first."""
        return self._db.call(SEGMENT_LIST, p_session_id=session_id)  # type: ignore[no-any-return]

    # -- demand paging and prefetch ------------------------------------------------------------
    def prepass_topics(self, user_message: str, *, limit: int | None = None) -> builtins.list[str]:
        """memori.vm_prepass_topics: the topics the pre-pass takes from a message."""
        return list(self._db.call(VM_PREPASS_TOPICS, p_user_message=user_message, **given(p_limit=limit)) or [])

    def prepass(
        self, session_id: str, user_message: str, *, apply: bool | None = None, per_topic: int | None = None,
        max_faults: int | None = None, target_level: int | None = None, now: datetime | None = None,
    ) -> builtins.list[VmPrefetchItem]:
        """memori.vm_prepass: pages to prefetch for a user message; ``apply=True`` faults them in."""
        if apply:
            self._invalidate(session_id)
        return self._db.call(  # type: ignore[no-any-return]
            VM_PREPASS, p_session_id=session_id, p_user_message=user_message, **given(
                p_apply=apply, p_per_topic=per_topic, p_max_faults=max_faults, p_target_level=target_level,
                p_now=now))

    def prefetch(
        self, session_id: str, *, apply: bool | None = None, claims: int | None = None,
        tools: Sequence[str] | None = None, recent_turns: int | None = None, max_faults: int | None = None,
        target_level: int | None = None, now: datetime | None = None,
    ) -> builtins.list[VmPrefetchItem]:
        """memori.vm_prefetch: last segment summary, top claims, tool prerequisites; ``apply=True`` faults them in."""
        if apply:
            self._invalidate(session_id)
        return self._db.call(  # type: ignore[no-any-return]
            VM_PREFETCH, p_session_id=session_id, **given(
                p_apply=apply, p_claims=claims, p_tools=None if tools is None else list(tools),
                p_recent_turns=recent_turns, p_max_faults=max_faults, p_target_level=target_level, p_now=now))

    def turn_start(
        self, session_id: str, user_message: str, *, page_id: str | None = None, user_id: str | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """memori.vm_turn_start: next turn + the user's message; runtime/hybrid sessions run the pre-pass."""
        self._invalidate(session_id)
        return self._db.call(  # type: ignore[no-any-return]
            VM_TURN_START, p_session_id=session_id, p_user_message=user_message, **given(
                p_page_id=page_id, p_user_id=user_id, p_now=now))

    def cite(self, session_id: str, page_ids: Sequence[str], *, now: datetime | None = None) -> int:
        """memori.vm_cite: the pages this turn's answer cited; returns the prefetches that became hits."""
        return int(self._db.call(VM_CITE, p_session_id=session_id, p_page_ids=list(page_ids), **given(p_now=now)))
