"""Typed results: one frozen dataclass per SQL result shape (filled by psycopg's class_row)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID


@dataclass(frozen=True)
class Memory:
    """A row of memori.memories (``user_id`` is the namespace, as in seed 05)."""

    id: int
    user_id: str
    content: str
    category: str
    metadata: dict[str, Any]
    created_at: datetime
    expires_at: datetime | None
    owner_id: str | None


@dataclass(frozen=True)
class SessionCheckpoint(Memory):
    """memori.session_checkpoint: a memory plus where it was found (current, legacy, previous)."""

    source: str


@dataclass(frozen=True)
class CleanupCandidate:
    """memori.cleanup_candidate: one row a cleanup would delete, in deletion order."""

    seq: int
    batch: int
    table_name: str
    row_id: str
    owner: str | None
    category: str | None
    kind: str | None
    priority: int
    expires_at: datetime
    reason: str


@dataclass(frozen=True)
class CleanupGroup:
    """A line of memori.cleanup_preview_summary."""

    table_name: str
    owner: str | None
    category: str | None
    rows: int
    oldest_expiry: datetime
    newest_expiry: datetime
    min_priority: int


@dataclass(frozen=True)
class CleanupRun:
    """A row of memori.cleanup_runs."""

    id: int
    trigger: str
    status: str
    as_of: datetime
    batch_size: int
    max_rows: int | None
    started_at: datetime
    finished_at: datetime | None
    planned: int
    next_seq: int
    deleted: int
    batches: int
    deleted_by_table: dict[str, int]
    error: str | None
    backend_pid: int
    session_lock: bool
    plan_done: bool
    cursor_priority: int | None
    cursor_expires: datetime | None
    cursor_table: str | None
    cursor_row_id: str | None
    skipped: int  # rows left to the next run: a writer held them at every attempt
    retried: int  # batches retried after a deadlock or lock timeout


@dataclass(frozen=True)
class CleanupBatch:
    """memori.cleanup_batch_result."""

    run_id: int
    batch: int
    deleted: int
    deleted_by_table: dict[str, int]
    remaining: int
    done: bool
    skipped: int  # rows of this batch a writer held: tried again at the end of the run


@dataclass(frozen=True)
class CleanupSummary:
    """memori.cleanup_summary: what a finished run did."""

    run_id: int
    status: str
    trigger: str
    as_of: datetime
    planned: int
    deleted: int
    batches: int
    deleted_by_table: dict[str, int]
    seconds: Decimal
    error: str | None
    skipped: int  # rows left to the next run: a writer held them at every attempt


@dataclass(frozen=True)
class CleanupJob:
    """The pg_cron job of memori.cleanup_job."""

    job_id: int
    job_name: str
    schedule: str
    command: str
    active: bool
    last_status: str | None
    last_start: datetime | None
    last_message: str | None
    next_run: datetime | None


@dataclass(frozen=True)
class CleanupStatus:
    """The single row of the memori.cleanup_status view."""

    expired_waiting: int
    expiring_soon: int
    last_success: datetime | None
    running: int
    failures_7d: int


@dataclass(frozen=True)
class Event:
    """A row of memori.events."""

    id: int
    event_type: str
    occurred_at: datetime
    payload: dict[str, Any]
    expires_at: datetime | None
    user_id: str | None  # the acting user; None for system events (cleanup)


@dataclass(frozen=True)
class TtlStatus:
    """A line of memori.ttl_status."""

    user_id: str
    permanent: int
    active_ttl: int
    expired: int
    is_session: bool


@dataclass(frozen=True)
class Checkpoint:
    """A row of memori.checkpoints."""

    id: UUID
    session_id: str
    user_id: str
    checkpoint_type: str
    title: str
    description: str | None
    data: dict[str, Any]
    metadata: dict[str, Any]
    tags: list[str]
    priority: int
    retention_days: int
    preserve_important: bool
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    pxyz: dict[str, Any]


@dataclass(frozen=True)
class CheckpointVersion:
    """memori.checkpoint_version: one kept version of a checkpoint."""

    version: int
    created_at: datetime
    is_current: bool
    bytes: int


@dataclass(frozen=True)
class CheckpointStat:
    """memori.checkpoint_stat: one checkpoint type's counts and sizes."""

    checkpoint_type: str
    total: int
    active: int
    expiring_soon: int
    expired: int
    preserved: int
    raw_bytes: int
    stored_bytes: int
    next_expiry: datetime | None


@dataclass(frozen=True)
class CheckpointAutoResult:
    """memori.checkpoint_auto_result: whether an automatic checkpoint was made, and why (not)."""

    created: bool
    reason: str
    next_allowed_at: datetime | None
    checkpoint_id: UUID | None


@dataclass(frozen=True)
class CheckpointStatus:
    """A row of the memori.checkpoint_expiry_status view."""

    checkpoint_id: UUID
    checkpoint_type: str
    expires_at: datetime | None
    status: str
    days_until_expiry: Decimal | None
    should_cleanup: bool


# -- the context store (seed 01, part 2) -----------------------------------------
from pymemdb.context import (  # noqa: E402, F401
    ContextEntry,
    ContextStat,
    ContextValue,
    ContextWindow,
    Project,
    ProjectMember,
    SessionContext,
)


# -- compression (seed 04) -------------------------------------------------------
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
class Goal:
    """A row of memori.goals."""

    id: UUID
    session_id: str
    user_id: str
    description: str
    priority: str
    status: str
    next_steps: list[str]
    created_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True)
class GoalMarkerResult:
    """memori.goal_marker_result: what goal_markers_apply changed, and the lines it did not understand."""

    goal_id: UUID | None
    goals_created: int
    checkpoints_updated: int
    decisions_added: int
    artifacts_recorded: int
    next_steps: list[str]
    unknown: list[str]


@dataclass(frozen=True)
class Snapshot:
    """A row of memori.snapshots."""

    id: UUID
    session_id: str
    user_id: str
    kind: str
    created_at: datetime
    token_count: int
    message_count: int
    checkpoint_count: int
    metadata: dict[str, Any]
    state: dict[str, Any]
    expires_at: datetime | None


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


# -- LangGraph checkpointer (issue 9) ---------------------------------------------


@dataclass(frozen=True)
class LangGraphTuple:
    """memori.lg_tuple: a stored LangGraph checkpoint with its blobs and pending writes (parallel arrays)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: UUID
    parent_id: UUID | None
    checkpoint: dict[str, Any] | None  # NULL (with metadata and blobs) when p_known_stamp was current
    metadata: dict[str, Any] | None
    blob_channels: list[str] | None
    blob_types: list[str] | None
    blob_values: list[bytes | None] | None
    write_task_ids: list[str] | None
    write_channels: list[str] | None
    write_types: list[str] | None
    write_values: list[bytes] | None
    write_task_paths: list[str] | None
    write_idx: list[int] | None
    stamp: str | None = None  # what a cached copy is checked against (lg_checkpoint_get only)
    writes_stamp: str | None = None  # the same for the pending writes


@dataclass(frozen=True)
class LangGraphStamp:
    """memori.lg_checkpoint_stamp: what a cached copy of a LangGraph checkpoint is checked against."""

    checkpoint_id: UUID
    stamp: str
    writes_stamp: str


@dataclass(frozen=True)
class LangGraphWritesPut:
    """memori.lg_writes_put: rows written, and the writes' new stamp when the caller's copy plus them is all."""

    written: int
    writes_stamp: str | None


@dataclass(frozen=True)
class LangGraphPruneResult:
    """memori.lg_prune_result: what lg_threads_prune deleted."""

    threads: int
    checkpoints: int
    blobs: int


# -- context window manager (seed 02) -------------------------------------------------------
from pymemdb.budget import (  # noqa: E402, F401
    AllocatedChunk,
    BudgetConflict,
    ChunkAdded,
    Optimization,
    OptimizationMetrics,
)

# -- AI virtual memory (seed 03) -------------------------------------------------


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
    search_tsv: str | None  # generated tsvector over hint and content (issue 7)
    gc_marked_at: datetime | None = None  # when memori.vm_gc found the page unreachable (issue 7)
    # a claim a newer one replaces (claim_supersede, issue 15): which, when, why; NULL while current
    superseded_by: str | None = None
    superseded_at: datetime | None = None
    supersede_reason: str | None = None


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


@dataclass(frozen=True)
class PageTableEntry:
    """memori.page_table_entry: what a page-table cache (TLB) keeps about a page."""

    page_id: str
    tier: str
    compression_level: int
    version: int
    dirty: bool
    last_flushed: datetime | None
    last_accessed: datetime
    access_count: int
    in_working_set: bool
    level: int | None
    pinned: bool
    expires_at: datetime | None = None  # a cache must not serve the entry at or after this instant


@dataclass(frozen=True)
class PageCompressItem:
    """memori.page_compress_item: a page and the level a Compressor should write for it."""

    page_id: str
    modality: str
    page_type: str
    level: int
    content: str | None
    data: Any
    tokens: int
    version: int


@dataclass(frozen=True)
class VmEviction:
    """memori.vm_eviction: one step of an eviction (compress: down a level in L0; evict: out to L1)."""

    page_id: str
    action: str
    level_after: int | None
    tier_after: str
    tokens_freed: int


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


@dataclass(frozen=True)
class PageSearchResult:
    """A row of memori.search_pages: a matching page's metadata (never its content)."""

    page_id: str
    session_id: str
    modality: str
    tier: str
    levels: list[int]
    hint: str
    relevance: float
    total_available: int
    mode: str  # 'hybrid' (full text + vectors) or 'full_text' (no query embedding)
    # True: total_available is the exact number of matches; False: a lower bound (user scope above
    # vm.search_exact_max pages without exact_total); None from a schema before issue 21
    total_exact: bool | None = None


@dataclass(frozen=True)
class PageIndexEntry:
    """A row of memori.pages_by_type, page_provenance_chain, pages_top_importance."""

    session_id: str
    page_id: str
    page_type: str
    modality: str
    tier: str
    importance: float
    tokens: int
    access_count: int
    last_accessed: datetime
    hint: str
    provenance: list[str]
    depth: int | None  # steps from the start page in a provenance chain, else None


# -- AI virtual memory fork, GC and shared regions (issue 7) ---------------------------


@dataclass(frozen=True)
class SessionForkResult:
    """memori.session_fork: the new session, its source, and what it shares and copied."""

    session_id: str
    source_session_id: str
    depth: int  # ancestors of the new session (1: a fork of an unforked session)
    shared_pages: int  # pages seen through ancestors, not copied
    working_set_pages: int  # mapped pages copied with the working set
    forked_at: datetime


@dataclass(frozen=True)
class VmForkLink:
    """A row of memori.vm_forks: one ancestor of a forked session."""

    session_id: str
    ancestor_session_id: str
    user_id: str
    depth: int  # 1 = the parent
    max_page_id: int  # the ancestor's page rows with id <= this are visible
    forked_at: datetime


@dataclass(frozen=True)
class VmStorage:
    """memori.vm_storage: one VM table's total size (table, indexes, TOAST)."""

    table_name: str
    bytes: int
    row_estimate: int


@dataclass(frozen=True)
class VmGcReachable:
    """memori.vm_gc_reachable: a page row reachable from a live session, with the first reason found."""

    id: int
    session_id: str  # the session that stores the row (a fork may see it)
    page_id: str
    via: str  # live_session, working_set or provenance


@dataclass(frozen=True)
class VmGcResult:
    """memori.vm_gc: what one mark pass did."""

    live_sessions: int
    reachable: int
    marked: int
    unmarked: int
    already_marked: int
    expires_at: datetime  # when this run's marks expire (the retention engine deletes them then)


@dataclass(frozen=True)
class VmRegion:
    """A row of memori.vm_regions: a shared region."""

    region_id: str
    user_id: str  # the owner
    scope: str  # 'pages' or 'session'
    description: str | None
    created_at: datetime


@dataclass(frozen=True)
class RegionPage:
    """memori.region_pages: a page shared through a region, with its content."""

    region_id: str
    owner: str
    session_id: str
    page_id: str
    page_type: str
    modality: str
    content: str | None
    data: Any
    tokens: int
    importance: float
    hint: str | None
    version: int
    updated_at: datetime


@dataclass(frozen=True)
class RegionListEntry:
    """memori.region_list: a region the acting user owns (members listed) or may read (members None)."""

    region_id: str
    owner: str
    scope: str
    description: str | None
    members: list[str] | None
    entries: int
    created_at: datetime
# -- AI virtual memory lifecycle (issue 7): segments, claims, pre-pass, prefetch ------


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
