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
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pymemdb._sql import given, one, rows, scalar
from pymemdb.compression import CompressionRequest, ExtractiveSummarizer, Summarizer, estimate_tokens
from pymemdb.vm.pages import Page

if TYPE_CHECKING:
    from pymemdb.db import Database


@dataclass(frozen=True)
class ClaimConflict:
    """memori.claim_conflict: two current claims on one topic that say different things (issue 15)."""

    session_id: str
    topic: str
    claim_id: str
    content: str | None
    created_at: datetime
    other_claim_id: str
    other_content: str | None
    other_created_at: datetime


@dataclass(frozen=True)
class VmSegment:
    """A row of memori.vm_segments: a closed segment, its summary page and the compression it achieved."""

    session_id: str
    seq: int
    user_id: str
    segment: str
    first_turn: int
    last_turn: int
    summary_page_id: str
    pages: int
    evicted: int
    source_tokens: int
    summary_tokens: int
    closed_at: datetime


@dataclass(frozen=True)
class SegmentPage:
    """A row of memori.segment_pages: a transcript page of the open segment (what a Summarizer reads)."""

    page_id: str
    role: str | None
    turn: int
    tokens: int
    tier: str
    pinned: bool
    content: str | None


@dataclass(frozen=True)
class VmPrefetchItem:
    """A page vm_prepass or vm_prefetch proposes: why, with which fault reason, and what applying it did."""

    page_id: str
    page_type: str
    tier: str
    reason: str  # the fault reason: user_requested_recall, speculative, tool_prereq
    why: str  # recall_signal, topic:<word>, last_segment_summary, top_claim, procedure:<tool>
    applied: bool
    outcome: str | None  # served, already_mapped, in_context, refused:<reason>, skipped:<why>; None: proposed only
    tokens: int


@dataclass(frozen=True)
class VmTurn:
    """memori.vm_turn_result: the turn vm_turn_start began, the user's page, and what the pre-pass faulted in."""

    turn: int
    page_id: str  # the user's message as a transcript page
    segment: str  # the open segment
    paging_mode: str
    prefetch: list[VmPrefetchItem]  # the pre-pass's items (runtime and hybrid sessions; else empty)

    def __post_init__(self) -> None:
        # the column is memori.vm_prefetch_item rows as a JSON list (psycopg reads no composite arrays)
        items = [i if isinstance(i, VmPrefetchItem) else VmPrefetchItem(**i) for i in self.prefetch]
        object.__setattr__(self, "prefetch", items)


CLAIM_CREATE = one(
    "claim_create", ("p_session_id", "text"), ("p_content", "text"), ("p_provenance", "text[]"),
    ("p_importance", "double precision"), ("p_topic", "text"), ("p_claim_id", "text"), ("p_pin", "boolean"),
    ("p_actor", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"), result=Page,
)
CLAIM_SUPERSEDE = one(
    "claim_supersede", ("p_session_id", "text"), ("p_claim_id", "text"), ("p_content", "text"),
    ("p_provenance", "text[]"), ("p_reason", "text"), ("p_importance", "double precision"),
    ("p_new_claim_id", "text"), ("p_pin", "boolean"), ("p_actor", "text"), ("p_now", "timestamptz"), result=Page,
)
CLAIM_HISTORY = rows("claim_history", ("p_session_id", "text"), ("p_topic", "text"), ("p_now", "timestamptz"),
                     result=Page)
CLAIM_CONFLICTS = rows("claim_conflicts", ("p_session_id", "text"), ("p_now", "timestamptz"), result=ClaimConflict)
SEGMENT_CURRENT = scalar("segment_current", ("p_session_id", "text"), result=str)
SEGMENT_PAGES = rows("segment_pages", ("p_session_id", "text"), ("p_now", "timestamptz"), result=SegmentPage)
SEGMENT_PROMPT = one("segment_prompt", ("p_session_id", "text"), ("p_target_tokens", "integer"),
                     ("p_now", "timestamptz"), result=CompressionRequest)
SEGMENT_CLOSE = one(
    "segment_close", ("p_session_id", "text"), ("p_summary", "text"), ("p_summary_page_id", "text"),
    ("p_importance", "double precision"), ("p_actor", "text"), ("p_now", "timestamptz"), result=VmSegment,
)
SEGMENT_LIST = rows("segment_list", ("p_session_id", "text"), result=VmSegment)
VM_PREPASS_TOPICS = scalar("vm_prepass_topics", ("p_user_message", "text"), ("p_limit", "integer"), result=list)
VM_PREPASS = rows(
    "vm_prepass", ("p_session_id", "text"), ("p_user_message", "text"), ("p_apply", "boolean"),
    ("p_per_topic", "integer"), ("p_max_faults", "integer"), ("p_target_level", "integer"), ("p_now", "timestamptz"),
    result=VmPrefetchItem,
)
VM_PREFETCH = rows(
    "vm_prefetch", ("p_session_id", "text"), ("p_apply", "boolean"), ("p_claims", "integer"), ("p_tools", "text[]"),
    ("p_recent_turns", "integer"), ("p_max_faults", "integer"), ("p_target_level", "integer"),
    ("p_now", "timestamptz"), result=VmPrefetchItem,
)
VM_TURN_START = one(
    "vm_turn_start", ("p_session_id", "text"), ("p_user_message", "text"), ("p_page_id", "text"),
    ("p_user_id", "text"), ("p_now", "timestamptz"), result=VmTurn,
)
VM_CITE = scalar("vm_cite", ("p_session_id", "text"), ("p_page_ids", "text[]"), ("p_now", "timestamptz"),
                 result=int)


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
        return self._db.call(
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
        return self._db.call(
            CLAIM_SUPERSEDE, p_session_id=session_id, p_claim_id=claim_id, p_content=content,
            p_provenance=list(provenance), p_reason=reason, **given(
                p_importance=importance, p_new_claim_id=new_claim_id, p_pin=pin, p_actor=actor, p_now=now))

    def claim_history(self, session_id: str, topic: str, *, now: datetime | None = None) -> builtins.list[Page]:
        """memori.claim_history: the claims of a topic, current first, then superseded ones newest first."""
        return self._db.call(
            CLAIM_HISTORY, p_session_id=session_id, p_topic=topic, **given(p_now=now))

    def claim_conflicts(self, session_id: str, *, now: datetime | None = None) -> builtins.list[ClaimConflict]:
        """memori.claim_conflicts: pairs of current claims on one topic that disagree (resolve with claim_supersede)."""
        return self._db.call(
            CLAIM_CONFLICTS, p_session_id=session_id, **given(p_now=now))

    # -- segments ------------------------------------------------------------------------
    def segment_current(self, session_id: str) -> str:
        """memori.segment_current: the open segment's label (pass it as ``segment=`` to db.pages.create)."""
        return str(self._db.call(SEGMENT_CURRENT, p_session_id=session_id))

    def segment_pages(self, session_id: str, *, now: datetime | None = None) -> builtins.list[SegmentPage]:
        """memori.segment_pages: the open segment's transcript, what the Summarizer reads."""
        return self._db.call(SEGMENT_PAGES, p_session_id=session_id, **given(p_now=now))

    def segment_prompt(
        self, session_id: str, *, target_tokens: int | None = None, now: datetime | None = None,
    ) -> CompressionRequest:
        """memori.segment_prompt: the open segment's summary request (transcript, 10:1 target, prompt)."""
        return self._db.call(SEGMENT_PROMPT, p_session_id=session_id, **given(p_target_tokens=target_tokens, p_now=now))

    def segment_close(
        self, session_id: str, summary: str | None = None, *, summarizer: Summarizer | None = None,
        target_tokens: int | None = None, summary_page_id: str | None = None, importance: float | None = None,
        actor: str | None = None, now: datetime | None = None,
    ) -> VmSegment:
        """memori.segment_close, with the summary written by a Summarizer unless given.

        The Summarizer gets memori.segment_prompt's request (the transcript, the
        10:1 target and the prompt, all built in SQL); the SQL then swaps the
        segment's unpinned transcript out to L2 behind the summary page.
        """
        if summary is None:
            request = self.segment_prompt(session_id, target_tokens=target_tokens, now=now)
            summary = (summarizer or self.summarizer).summarize(request) if request.source else ""
            if request.source and estimate_tokens(summary) >= request.source_tokens:
                summary = ExtractiveSummarizer().extract(summary, request.target_tokens)
        self._invalidate(session_id)
        return self._db.call(
            SEGMENT_CLOSE, p_session_id=session_id, p_summary=summary, **given(
                p_summary_page_id=summary_page_id, p_importance=importance, p_actor=actor, p_now=now))

    def segment_list(self, session_id: str) -> builtins.list[VmSegment]:
        """memori.segment_list: the closed segments, oldest first."""
        return self._db.call(SEGMENT_LIST, p_session_id=session_id)

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
        return self._db.call(
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
        return self._db.call(
            VM_PREFETCH, p_session_id=session_id, **given(
                p_apply=apply, p_claims=claims, p_tools=None if tools is None else list(tools),
                p_recent_turns=recent_turns, p_max_faults=max_faults, p_target_level=target_level, p_now=now))

    def turn_start(
        self, session_id: str, user_message: str, *, page_id: str | None = None, user_id: str | None = None,
        now: datetime | None = None,
    ) -> VmTurn:
        """memori.vm_turn_start: next turn + the user's message; runtime/hybrid sessions run the pre-pass."""
        self._invalidate(session_id)
        return self._db.call(
            VM_TURN_START, p_session_id=session_id, p_user_message=user_message, **given(
                p_page_id=page_id, p_user_id=user_id, p_now=now))

    def cite(self, session_id: str, page_ids: Sequence[str], *, now: datetime | None = None) -> int:
        """memori.vm_cite: the pages this turn's answer cited; returns the prefetches that became hits."""
        return int(self._db.call(VM_CITE, p_session_id=session_id, p_page_ids=list(page_ids), **given(p_now=now)))
