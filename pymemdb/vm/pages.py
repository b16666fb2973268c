"""AI virtual memory (seed 03): ``db.pages``, one method per SQL function, plus the page-table cache.

The SQL keeps the page table, working set, mutation log and packing; this
module calls it, keeps a client-side TLB of page-table entries (invalidated
through LISTEN memori_pages) and runs Compressors for levels 1 and 2.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg.types.json import Jsonb

from pymemdb._sql import given, one, rows, scalar
from pymemdb.vm.compressors import CompressorRegistry, PageCompressItem
from pymemdb.vm.embedders import Embedder, to_pgvector
from pymemdb.vm.page_cache import PageTableEntry, PageTLB
from pymemdb.vm.search import (
    PAGE_EMBEDDING_SET,
    PAGE_PROVENANCE_CHAIN,
    PAGES_BY_TYPE,
    PAGES_TOP_IMPORTANCE,
    SEARCH_PAGES,
    VM_EMBEDDING_DIM,
    VM_EMBEDDING_DIM_SET,
    PageIndexEntry,
    PageSearchResult,
)

if TYPE_CHECKING:
    from pymemdb.db import Database


@dataclass(frozen=True)
class VmSession:
    """A row of memori.vm_sessions: turn counter, L0 budget, eviction and fault policies, pack cache counters."""

    session_id: str
    user_id: str
    turn: int
    max_l0_tokens: int
    max_l1_pages: int
    eviction_policy: str
    eviction_threshold: Decimal
    pinned_last_turns: int
    fault_protection_turns: int
    eviction_cooldown_turns: int
    faults_allowed: bool
    max_faults_per_turn: int
    max_fault_tokens_per_turn: int
    fault_confidence_threshold: str
    pack_hits: int
    pack_misses: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    paging_mode: str  # model | runtime | hybrid (issue 7: who initiates paging)
    segment_seq: int  # the open segment's number (seg_0001 is 1)
    segment_first_turn: int  # the turn the open segment started at


@dataclass(frozen=True)
class Page:
    """A row of memori.pages: one page of a session, its level-0 content and place in the hierarchy."""

    id: int
    session_id: str
    user_id: str
    page_id: str
    page_type: str
    modality: str
    role: str | None
    tier: str
    compression_level: int
    content: str | None
    data: Any
    artifact_ref: str | None
    mime_type: str | None
    size_bytes: int
    tokens: int
    importance: float
    provenance: list[str]
    represents: str | None
    segment: str | None
    turn: int
    version: int
    dirty: bool
    last_flushed: datetime | None
    created_at: datetime
    updated_at: datetime
    last_accessed: datetime
    access_count: int
    last_fault_turn: int | None
    last_evict_turn: int | None
    hint: str | None
    dimensions: list[int] | None
    duration_seconds: Decimal | None
    expires_at: datetime | None
    embedding: str | None  # pgvector text form '[0.1,...]' (issue 7); NULL: full-text search only
    search_tsv: str | None  # tsvector over hint and content, memori.page_search_vector (issue 7)
    gc_marked_at: datetime | None = None  # when memori.vm_gc found the page unreachable (issue 7)
    # a claim a newer one replaces (claim_supersede, issue 15): which, when, why; NULL while current
    superseded_by: str | None = None
    superseded_at: datetime | None = None
    supersede_reason: str | None = None


@dataclass(frozen=True)
class PageRepresentation:
    """A row of memori.page_representations: a page at level 1 (reduced), 2 (abstract) or 3 (reference)."""

    session_id: str
    page_id: str
    user_id: str
    level: int
    content: str | None
    data: Any
    tokens: int
    version: int
    created_at: datetime


@dataclass(frozen=True)
class WorkingSetEntry:
    """A row of memori.working_set: a page mapped into L0 at a level."""

    session_id: str
    page_id: str
    user_id: str
    level: int
    tokens: int
    turn_added: int
    last_access_turn: int
    pinned: bool
    pin_reason: str | None
    added_at: datetime
    # the page's columns the eviction order reads, copied when it is mapped (migration 0031)
    page_type: str | None
    modality: str | None
    importance: float | None
    superseded: bool
    last_evict_turn: int | None
    last_fault_turn: int | None


@dataclass(frozen=True)
class VmEviction:
    """memori.vm_eviction: one step of an eviction (compress: down a level in L0; evict: out to L1)."""

    page_id: str
    action: str
    level_after: int | None
    tier_after: str
    tokens_freed: int


@dataclass(frozen=True)
class VmMetrics:
    """memori.vm_metrics_result: a session's L0 use, faults, evictions, segments, thrash index, prefetch, pack cache.

    The ``*_by_*`` columns and ``mutations`` are counts keyed by a value (``{"L0": 3, "L2": 5}``).
    The client's page-table cache (the seed's TLB) is not here: ``db.pages.tlb.stats()``.
    """

    session_id: str
    turn: int
    paging_mode: str
    l0_tokens: int
    max_l0_tokens: int
    tokens_available: int
    l0_utilization: float
    l0_tokens_by_modality: dict[str, int]
    working_set_pages: int
    pinned_pages: int
    pages_by_tier: dict[str, int]
    dirty_pages: int
    faults: int
    faults_served: int
    faults_already_mapped: int
    faults_refused: int
    faults_errors: int
    fault_tokens: int
    faults_by_reason: dict[str, int]
    faults_per_turn: float  # served faults per turn
    faults_max_per_turn: int
    faults_this_turn: int
    mutations: dict[str, int]
    evictions_from_l0: int
    evictions_to_l2: int
    evictions_by_cause: dict[str, int]
    segments_closed: int
    segment_open: str
    segment_source_tokens: int
    segment_summary_tokens: int
    compression_ratio: float | None  # None until a segment is closed
    claims: int
    claims_in_l0: int
    thrash_index: float
    thrash_index_max: float
    thrash_index_max_turn: int | None
    thrash_window_turns: int
    prefetched: int
    prefetch_used: int
    prefetch_by_source: dict[str, int]
    prefetch_hit_rate: float | None  # None when nothing was prefetched
    pack_hits: int
    pack_misses: int
    pack_hit_rate: float | None  # None before the first pack


@dataclass(frozen=True)
class VmPageState:
    """memori.vm_page_state: a page in L0 at a turn, replayed from the mutation log."""

    page_id: str
    level: int
    tokens: int


@dataclass(frozen=True)
class PageFault:
    """A row of memori.page_faults: one fault asked for, with its reason and outcome."""

    id: int
    session_id: str
    user_id: str
    page_id: str
    turn: int
    reason: str
    target_level: int | None
    served_level: int | None
    outcome: str
    tokens: int
    source_tier: str | None
    evictions: list[str]
    at: datetime
    expires_at: datetime | None


@dataclass(frozen=True)
class PageMutation:
    """A row of memori.page_mutations (append-only)."""

    id: int
    session_id: str
    user_id: str
    page_id: str
    at: datetime
    turn: int
    mutation_type: str
    tier_before: str | None
    tier_after: str
    level_before: int | None
    level_after: int | None
    tokens_after: int | None
    actor: str
    cause: str | None
    expires_at: datetime | None


@dataclass(frozen=True)
class VmEvictionCandidate:
    """memori.vm_eviction_candidates: an evictable page, its place in a policy's order and its keep score."""

    rank: int
    page_id: str
    level: int
    tokens: int
    page_type: str
    modality: str
    keep_score: float


# -- AI virtual memory search and page index (issue 7) -------------------------------


TURN_BEGIN = scalar("turn_begin", ("p_session_id", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"),
                    result=int)
VM_SESSION_CONFIGURE = one(
    "vm_session_configure", ("p_session_id", "text"), ("p_config", "jsonb"), ("p_user_id", "text"),
    ("p_now", "timestamptz"), result=VmSession,
)
VM_SESSION_GET = one("vm_session_get", ("p_session_id", "text"), result=VmSession)
PAGE_CREATE = one(
    "page_create",
    ("p_session_id", "text"), ("p_page_id", "text"), ("p_content", "text"), ("p_page_type", "text"),
    ("p_modality", "text"), ("p_role", "text"), ("p_data", "jsonb"), ("p_importance", "double precision"),
    ("p_provenance", "text[]"), ("p_represents", "text"), ("p_hint", "text"), ("p_segment", "text"),
    ("p_mime_type", "text"), ("p_artifact_ref", "text"), ("p_tokens", "integer"), ("p_size_bytes", "bigint"),
    ("p_dimensions", "integer[]"), ("p_duration_seconds", "numeric"), ("p_add_to_working_set", "boolean"),
    ("p_pin", "boolean"), ("p_actor", "text"), ("p_user_id", "text"), ("p_expires_at", "timestamptz"),
    ("p_now", "timestamptz"),
    result=Page,
)
PAGE_UPDATE = one(
    "page_update", ("p_session_id", "text"), ("p_page_id", "text"), ("p_content", "text"), ("p_data", "jsonb"),
    ("p_tokens", "integer"), ("p_actor", "text"), ("p_now", "timestamptz"), ("p_provenance", "text[]"), result=Page,
)
PAGE_FLUSH = scalar("page_flush", ("p_session_id", "text"), ("p_page_ids", "text[]"), ("p_now", "timestamptz"),
                    result=int)
PAGE_LOOKUP = one("page_lookup", ("p_session_id", "text"), ("p_page_id", "text"), ("p_now", "timestamptz"),
                  result=PageTableEntry)
PAGE_REPRESENTATION_PUT = one(
    "page_representation_put", ("p_session_id", "text"), ("p_page_id", "text"), ("p_level", "integer"),
    ("p_content", "text"), ("p_data", "jsonb"), ("p_tokens", "integer"), ("p_version", "integer"),
    ("p_now", "timestamptz"), result=PageRepresentation,
)
PAGE_COMPRESS_TODO = rows(
    "page_compress_todo", ("p_session_id", "text"), ("p_limit", "integer"), ("p_now", "timestamptz"),
    result=PageCompressItem,
)
PAGE_PIN = scalar("page_pin", ("p_session_id", "text"), ("p_page_id", "text"), ("p_pinned", "boolean"),
                  ("p_actor", "text"), ("p_now", "timestamptz"), result=bool)
VM_ADD_PAGE = scalar("vm_add_page", ("p_session_id", "text"), ("p_page_id", "text"), ("p_level", "integer"),
                     ("p_pin", "boolean"), ("p_actor", "text"), ("p_now", "timestamptz"), result=list)
VM_EVICT = rows("vm_evict", ("p_session_id", "text"), ("p_required_tokens", "integer"), ("p_policy", "text"),
                ("p_actor", "text"), ("p_now", "timestamptz"), result=VmEviction)
VM_EVICTION_CANDIDATES = rows("vm_eviction_candidates", ("p_session_id", "text"), ("p_policy", "text"),
                              result=VmEvictionCandidate)
WORKING_SET_LIST = rows("working_set_list", ("p_session_id", "text"), result=WorkingSetEntry)
PAGE_FAULT = scalar(
    "page_fault", ("p_session_id", "text"), ("p_page_id", "text"), ("p_target_level", "integer"),
    ("p_reason", "text"), ("p_actor", "text"), ("p_now", "timestamptz"), result=dict,
)
PAGE_FAULT_LIST = rows("page_fault_list", ("p_session_id", "text"), ("p_turn", "integer"), ("p_limit", "integer"),
                       result=PageFault)
VM_CONTEXT_AT_TURN = rows("vm_context_at_turn", ("p_session_id", "text"), ("p_turn", "integer"),
                          result=VmPageState)
PAGE_HISTORY = rows("page_history", ("p_session_id", "text"), ("p_page_id", "text"), result=PageMutation)
VM_MANIFEST = scalar("vm_manifest", ("p_session_id", "text"), ("p_available_limit", "integer"),
                     ("p_faults_allowed", "boolean"), ("p_now", "timestamptz"), result=dict)
VM_CONTEXT = scalar("vm_context", ("p_session_id", "text"), ("p_token_budget", "integer"), ("p_model", "text"),
                    ("p_now", "timestamptz"), result=str)
VM_TOOLS = scalar("vm_tools", result=list)
VM_DEVELOPER_MESSAGE = scalar(
    "vm_developer_message", ("p_session_id", "text"), ("p_mode", "text"), ("p_system_prompt", "text"),
    ("p_token_budget", "integer"), ("p_model", "text"), ("p_now", "timestamptz"), result=str,
)
VM_METRICS = one("vm_metrics", ("p_session_id", "text"), ("p_now", "timestamptz"), result=VmMetrics)


_Row = TypeVar("_Row")


def _one_or_none(row: _Row, key: str) -> _Row | None:
    """SQL functions returning one composite give a row of NULLs for "none"."""
    return None if row is None or getattr(row, key) is None else row


class Pages:
    """``db.pages``: pages, the working set, faults, the mutation log and what the model sees."""

    def __init__(self, db: Database, *, tlb_entries: int = 512, embedder: Embedder | None = None) -> None:
        self._db = db
        self.tlb = PageTLB(tlb_entries)
        # when set, create() embeds each new page's hint and content and search() embeds the query
        self.embedder = embedder

    # -- sessions ----------------------------------------------------------------
    def turn_begin(self, session_id: str, *, user_id: str | None = None, now: datetime | None = None) -> int:
        """memori.turn_begin: the next turn (the session is created with the seed's defaults if new)."""
        self.tlb.invalidate_session(session_id)  # recent-turn pins age out
        return int(self._db.call(TURN_BEGIN, **given(p_session_id=session_id, p_user_id=user_id, p_now=now)))

    def session_configure(
        self, session_id: str, config: dict[str, Any], *, user_id: str | None = None, now: datetime | None = None
    ) -> VmSession:
        """memori.vm_session_configure: budget and policies (max_l0_tokens, eviction_policy, ...)."""
        self.tlb.invalidate_session(session_id)
        return self._db.call(
            VM_SESSION_CONFIGURE, **given(p_session_id=session_id, p_config=Jsonb(config), p_user_id=user_id,
                                          p_now=now))

    def session_get(self, session_id: str) -> VmSession | None:
        """memori.vm_session_get: None when the session does not exist."""
        return _one_or_none(self._db.call(VM_SESSION_GET, p_session_id=session_id), "session_id")

    # -- pages -------------------------------------------------------------------
    def create(
        self,
        session_id: str,
        page_id: str,
        content: str | None = None,
        *,
        page_type: str | None = None,
        modality: str | None = None,
        role: str | None = None,
        data: Any = None,
        importance: float | None = None,
        provenance: Sequence[str] | None = None,
        represents: str | None = None,
        hint: str | None = None,
        segment: str | None = None,
        mime_type: str | None = None,
        artifact_ref: str | None = None,
        tokens: int | None = None,
        size_bytes: int | None = None,
        dimensions: tuple[int, int] | None = None,
        duration_seconds: float | None = None,
        add_to_working_set: bool | None = None,
        pin: bool | None = None,
        actor: str | None = None,
        user_id: str | None = None,
        expires_at: datetime | None = None,
        now: datetime | None = None,
    ) -> Page:
        """memori.page_create: register a page and (by default) map it into L0 at level 0.

        With ``self.embedder`` set, the page's hint and content are embedded and
        stored in the same transaction (the returned Page carries the embedding).
        """
        args = given(
            p_session_id=session_id, p_page_id=page_id, p_content=content, p_page_type=page_type,
            p_modality=modality, p_role=role, p_data=None if data is None else Jsonb(data),
            p_importance=importance, p_provenance=None if provenance is None else list(provenance),
            p_represents=represents, p_hint=hint, p_segment=segment, p_mime_type=mime_type,
            p_artifact_ref=artifact_ref, p_tokens=tokens, p_size_bytes=size_bytes,
            p_dimensions=None if dimensions is None else list(dimensions), p_duration_seconds=duration_seconds,
            p_add_to_working_set=add_to_working_set, p_pin=pin, p_actor=actor, p_user_id=user_id,
            p_expires_at=expires_at, p_now=now)
        text = " ".join(t for t in (hint, content) if t)
        values = self.embedder.embed([text])[0] if self.embedder is not None and text else None
        if not values or not any(values):  # no embedder, or nothing to embed (cosine of a zero vector is NaN)
            return self._db.call(PAGE_CREATE, **args)
        vector = to_pgvector(values)
        with self._db.transaction(user_id) as cur:
            page: Page = self._db.call(PAGE_CREATE, cur, **args)
            self._db.call(PAGE_EMBEDDING_SET, cur, p_session_id=session_id, p_page_id=page_id, p_embedding=vector,
                          **given(p_now=now))
        return dataclasses.replace(page, embedding=vector)

    def update(
        self, session_id: str, page_id: str, content: str | None = None, *, data: Any = None,
        tokens: int | None = None, actor: str | None = None, now: datetime | None = None,
        provenance: Sequence[str] | None = None,
    ) -> Page:
        """memori.page_update: a new version (with ``provenance``, new sources too); dirty until flushed."""
        self.tlb.invalidate_session(session_id)  # re-mapping may evict others
        return self._db.call(
            PAGE_UPDATE, **given(p_session_id=session_id, p_page_id=page_id, p_content=content,
                                 p_data=None if data is None else Jsonb(data), p_tokens=tokens, p_actor=actor,
                                 p_now=now, p_provenance=None if provenance is None else list(provenance)))

    def flush(self, session_id: str, page_ids: Sequence[str] | None = None, *, now: datetime | None = None) -> int:
        """memori.page_flush: clear dirty bits; returns how many pages."""
        self.tlb.invalidate_session(session_id)
        return int(self._db.call(PAGE_FLUSH, **given(p_session_id=session_id,
                                                     p_page_ids=None if page_ids is None else list(page_ids),
                                                     p_now=now)))

    def lookup(self, session_id: str, page_id: str, *, now: datetime | None = None) -> PageTableEntry | None:
        """memori.page_lookup through the TLB: cached entries are hits, others are read and cached.

        A cached entry is served only before its page's ``expires_at`` (checked
        against ``now``, default the current time): at or after it, the lookup
        is a miss and reads the database, which returns None for an expired page.
        """
        entry = self.tlb.lookup(session_id, page_id, now)
        if entry is not None:
            return entry
        found = _one_or_none(self._db.call(PAGE_LOOKUP, **given(p_session_id=session_id, p_page_id=page_id,
                                                                 p_now=now)), "page_id")
        if found is not None:
            self.tlb.insert(session_id, found)
        return found

    def representation_put(
        self, session_id: str, page_id: str, level: int, content: str | None = None, *, data: Any = None,
        tokens: int | None = None, version: int | None = None, now: datetime | None = None,
    ) -> PageRepresentation:
        """memori.page_representation_put: store a level 1, 2 (or 3) representation."""
        self.tlb.invalidate_session(session_id)
        return self._db.call(
            PAGE_REPRESENTATION_PUT, **given(
                p_session_id=session_id, p_page_id=page_id, p_level=level, p_content=content,
                p_data=None if data is None else Jsonb(data), p_tokens=tokens, p_version=version, p_now=now))

    def compress_todo(
        self, session_id: str, *, limit: int | None = None, now: datetime | None = None
    ) -> builtins.list[PageCompressItem]:
        """memori.page_compress_todo: missing level 1 and 2 representations, mapped pages first."""
        return self._db.call(
            PAGE_COMPRESS_TODO, **given(p_session_id=session_id, p_limit=limit, p_now=now))

    def compress(self, session_id: str, registry: CompressorRegistry | None = None, *, limit: int = 100) -> int:
        """Write the missing levels with Compressors (default: local extractive text); returns how many."""
        registry = registry or CompressorRegistry()
        written = 0
        for item in self.compress_todo(session_id, limit=limit):
            rep = registry.compress(item, item.level)
            if rep is None:
                continue
            self.representation_put(session_id, item.page_id, item.level, rep.content, data=rep.data,
                                    tokens=rep.tokens, version=item.version)
            written += 1
        return written

    def pin(self, session_id: str, page_id: str, pinned: bool = True, *, actor: str | None = None,
            now: datetime | None = None) -> bool:
        """memori.page_pin: pin (never evicted) or unpin; True when something changed."""
        self.tlb.invalidate_session(session_id)
        return bool(self._db.call(PAGE_PIN, **given(p_session_id=session_id, p_page_id=page_id, p_pinned=pinned,
                                                    p_actor=actor, p_now=now)))

    # -- the working set -----------------------------------------------------------
    def add_page(self, session_id: str, page_id: str, level: int | None = None, *, pin: bool | None = None,
                 actor: str | None = None, now: datetime | None = None) -> builtins.list[str]:
        """memori.vm_add_page: map a page into L0; returns the pages evicted or compressed to make room."""
        self.tlb.invalidate_session(session_id)
        return list(self._db.call(VM_ADD_PAGE, **given(p_session_id=session_id, p_page_id=page_id, p_level=level,
                                                       p_pin=pin, p_actor=actor, p_now=now)) or [])

    def evict(self, session_id: str, required_tokens: int, policy: str | None = None, *,
              actor: str | None = None, now: datetime | None = None) -> builtins.list[VmEviction]:
        """memori.vm_evict: free at least required_tokens of L0 (compress first); WorkingSetFull if impossible."""
        self.tlb.invalidate_session(session_id)
        return self._db.call(
            VM_EVICT, **given(p_session_id=session_id, p_required_tokens=required_tokens, p_policy=policy,
                              p_actor=actor, p_now=now))

    def eviction_candidates(self, session_id: str, policy: str | None = None) -> builtins.list[VmEvictionCandidate]:
        """memori.vm_eviction_candidates: what a policy would evict first, with keep scores."""
        return self._db.call(
            VM_EVICTION_CANDIDATES, **given(p_session_id=session_id, p_policy=policy))

    def working_set(self, session_id: str) -> builtins.list[WorkingSetEntry]:
        """memori.working_set_list: the pages in L0, in creation order."""
        return self._db.call(WORKING_SET_LIST, p_session_id=session_id)

    # -- faults --------------------------------------------------------------------
    def fault(self, session_id: str, page_id: str, target_level: int | None = None, reason: str | None = None, *,
              actor: str | None = None, now: datetime | None = None) -> dict[str, Any]:
        """memori.page_fault: the seed's tool-result envelope (a refusal is an envelope with ``error``)."""
        self.tlb.invalidate_session(session_id)
        return self._db.call(
            PAGE_FAULT, **given(p_session_id=session_id, p_page_id=page_id, p_target_level=target_level,
                                p_reason=reason, p_actor=actor, p_now=now))

    def fault_list(self, session_id: str, *, turn: int | None = None,
                   limit: int | None = None) -> builtins.list[PageFault]:
        """memori.page_fault_list: recorded faults, newest first."""
        return self._db.call(
            PAGE_FAULT_LIST, **given(p_session_id=session_id, p_turn=turn, p_limit=limit))

    # -- the mutation log ------------------------------------------------------------
    def context_at_turn(self, session_id: str, turn: int) -> builtins.list[VmPageState]:
        """memori.vm_context_at_turn: the pages in L0 at the end of a turn, replayed from the log."""
        return self._db.call(VM_CONTEXT_AT_TURN, p_session_id=session_id, p_turn=turn)

    def history(self, session_id: str, page_id: str) -> builtins.list[PageMutation]:
        """memori.page_history: every mutation of a page, oldest first."""
        return self._db.call(PAGE_HISTORY, p_session_id=session_id, p_page_id=page_id)

    # -- what the model sees -----------------------------------------------------------
    def manifest(self, session_id: str, *, available_limit: int | None = None, faults_allowed: bool | None = None,
                 now: datetime | None = None) -> dict[str, Any]:
        """memori.vm_manifest: VM:MANIFEST_JSON as a dict."""
        return self._db.call(
            VM_MANIFEST, **given(p_session_id=session_id, p_available_limit=available_limit,
                                 p_faults_allowed=faults_allowed, p_now=now))

    def context(self, session_id: str, token_budget: int | None = None, *, model: str | None = None,
                now: datetime | None = None) -> str:
        """memori.vm_context: the VM:CONTEXT block within a token budget."""
        return str(self._db.call(VM_CONTEXT, **given(p_session_id=session_id, p_token_budget=token_budget,
                                                     p_model=model, p_now=now)))

    def tools(self) -> builtins.list[dict[str, Any]]:
        """memori.vm_tools: page_fault and search_pages in Chat Completions ``tools`` format."""
        return self._db.call(VM_TOOLS)

    def developer_message(self, session_id: str, mode: str | None = None, *, system_prompt: str | None = None,
                          token_budget: int | None = None, model: str | None = None,
                          now: datetime | None = None) -> str:
        """memori.vm_developer_message: rules (strict, relaxed, passive), manifest and context in one text."""
        return str(self._db.call(VM_DEVELOPER_MESSAGE, **given(
            p_session_id=session_id, p_mode=mode, p_system_prompt=system_prompt, p_token_budget=token_budget,
            p_model=model, p_now=now)))

    def metrics(self, session_id: str, *, now: datetime | None = None) -> VmMetrics:
        """memori.vm_metrics (this client's TLB counters are ``self.tlb.stats()``)."""
        return self._db.call(VM_METRICS, p_session_id=session_id, **given(p_now=now))

    # -- search and the page index (issue 7) ---------------------------------------------
    def embedding_set(self, session_id: str, page_id: str, embedding: Sequence[float] | None, *,
                      now: datetime | None = None) -> bool:
        """memori.page_embedding_set: store (or clear with None) a page's embedding."""
        # p_embedding is passed even when None: NULL clears the embedding
        return bool(self._db.call(PAGE_EMBEDDING_SET, p_session_id=session_id, p_page_id=page_id,
                                  p_embedding=None if embedding is None else to_pgvector(embedding),
                                  **given(p_now=now)))

    def embedding_dim(self) -> int:
        """memori.vm_embedding_dim: the dimension page and query embeddings must have."""
        return int(self._db.call(VM_EMBEDDING_DIM))

    def embedding_dim_set(self, dim: int) -> int:
        """memori.vm_embedding_dim_set (schema owner only): choose the dimension; returns the previous one.

        Raises EmbeddingsPresent (PM099) while pages have embeddings of another dimension.
        """
        return int(self._db.call(VM_EMBEDDING_DIM_SET, p_dim=dim))

    def embed(self, session_id: str, page_id: str, text: str, embedder: Embedder, *,
              now: datetime | None = None) -> bool:
        """Embed ``text`` (usually the page's content or hint) with ``embedder`` and store it."""
        return self.embedding_set(session_id, page_id, embedder.embed([text])[0], now=now)

    def search(
        self,
        session_id: str | None,
        query: str | None,
        *,
        query_embedding: Sequence[float] | None = None,
        embedder: Embedder | None = None,
        modality: str | None = None,
        page_types: Sequence[str] | None = None,
        limit: int | None = None,
        scope: str | None = None,
        user_id: str | None = None,
        now: datetime | None = None,
        exact_total: bool | None = None,
    ) -> builtins.list[PageSearchResult]:
        """memori.search_pages: hybrid when given an embedding or an embedder (which embeds the query),
        else full text only (``mode == 'full_text'`` on every row). In user scope ``total_available``
        is a lower bound (``total_exact`` False) above ``vm.search_exact_max`` unless ``exact_total``."""
        embedder = embedder or self.embedder
        if query_embedding is None and embedder is not None and query:
            query_embedding = embedder.embed([query])[0]
            if not any(query_embedding):  # nothing the embedder could use: full text only
                query_embedding = None
        return self._db.call(
            SEARCH_PAGES, p_session_id=session_id, p_query=query, **given(
                p_query_embedding=None if query_embedding is None else to_pgvector(query_embedding),
                p_modality=modality, p_page_types=None if page_types is None else list(page_types),
                p_limit=limit, p_scope=scope, p_user_id=user_id, p_now=now, p_exact_total=exact_total))

    def by_type(self, session_id: str, page_type: str, *, limit: int | None = None,
                now: datetime | None = None) -> builtins.list[PageIndexEntry]:
        """memori.pages_by_type: a session's pages of one type, in creation order."""
        return self._db.call(
            PAGES_BY_TYPE, **given(p_session_id=session_id, p_page_type=page_type, p_limit=limit, p_now=now))

    def provenance_chain(self, session_id: str, page_id: str, direction: str | None = None, *,
                         max_depth: int | None = None, now: datetime | None = None) -> builtins.list[PageIndexEntry]:
        """memori.page_provenance_chain: 'up' the pages it derives from, 'down' the pages derived from it."""
        return self._db.call(
            PAGE_PROVENANCE_CHAIN, **given(p_session_id=session_id, p_page_id=page_id, p_direction=direction,
                                           p_max_depth=max_depth, p_now=now))

    def top_importance(self, session_id: str, n: int | None = None, page_type: str | None = None, *,
                       now: datetime | None = None) -> builtins.list[PageIndexEntry]:
        """memori.pages_top_importance: the most important pages, optionally of one type."""
        return self._db.call(
            PAGES_TOP_IMPORTANCE, **given(p_session_id=session_id, p_n=n, p_type=page_type, p_now=now))

    def listen(self) -> None:
        """Invalidate the TLB from every worker's page changes (LISTEN memori_pages on an extra connection)."""
        self.tlb.listen(self._db.dsn)
