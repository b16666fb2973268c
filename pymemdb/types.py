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


@dataclass(frozen=True)
class CleanupBatch:
    """memori.cleanup_batch_result."""

    run_id: int
    batch: int
    deleted: int
    deleted_by_table: dict[str, int]
    remaining: int
    done: bool


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
