"""Typed results: one frozen dataclass per SQL result shape (filled by psycopg's class_row)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

# The core rooms' result types live in their modules (pymemdb.memories, retention, events,
# checkpoints); re-exported here so old imports keep working.
from pymemdb.checkpoints import Checkpoint as Checkpoint
from pymemdb.checkpoints import CheckpointAutoResult as CheckpointAutoResult
from pymemdb.checkpoints import CheckpointStat as CheckpointStat
from pymemdb.checkpoints import CheckpointStatus as CheckpointStatus
from pymemdb.checkpoints import CheckpointVersion as CheckpointVersion
from pymemdb.events import Event as Event
from pymemdb.memories import Memory as Memory
from pymemdb.memories import SessionCheckpoint as SessionCheckpoint
from pymemdb.memories import TtlStatus as TtlStatus
from pymemdb.retention import CleanupBatch as CleanupBatch
from pymemdb.retention import CleanupCandidate as CleanupCandidate
from pymemdb.retention import CleanupGroup as CleanupGroup
from pymemdb.retention import CleanupJob as CleanupJob
from pymemdb.retention import CleanupRun as CleanupRun
from pymemdb.retention import CleanupStatus as CleanupStatus
from pymemdb.retention import CleanupSummary as CleanupSummary


# -- the context store (seed 01, part 2) -----------------------------------------
@dataclass(frozen=True)
class ContextEntry:
    """A row of memori.context_entries (``ttl`` in milliseconds, as in the seed)."""

    id: UUID
    key: str
    value: Any
    type: str
    scope: str
    user_id: str
    project_id: str | None
    session_id: str | None
    ttl: int | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    pxyz: dict[str, Any]
    scope_owner: str


@dataclass(frozen=True)
class ContextValue:
    """memori.context_value: a key's value and the scope it was resolved from."""

    key: str
    value: Any
    scope: str
    type: str
    entry_id: UUID
    user_id: str
    project_id: str | None
    session_id: str | None
    expires_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class ContextStat:
    """memori.context_stat: visible entries of one scope or type."""

    dimension: str  # 'scope' | 'type'
    name: str
    total: int
    active: int
    expiring_soon: int
    expired: int
    value_bytes: int


@dataclass(frozen=True)
class SessionContext:
    """memori.session_context: a session and its live windows (highest priority first)."""

    session_id: str
    user_id: str
    project_id: str | None
    start_time: datetime
    last_activity: datetime
    metadata: dict[str, Any]
    context_windows: list[dict[str, Any]]


@dataclass(frozen=True)
class ContextWindow:
    """A row of memori.context_windows."""

    window_id: UUID
    session_id: str
    user_id: str
    window_type: str
    content: dict[str, Any]
    priority: int
    retention_policy: str
    created_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True)
class Project:
    """A row of memori.projects."""

    project_id: str
    name: str
    owner_id: str
    metadata: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class ProjectMember:
    """A row of memori.project_members."""

    project_id: str
    user_id: str
    project_owner: str
    role: str
    added_at: datetime


# -- compression (seed 04) -------------------------------------------------------
from pymemdb.compression.goals import Goal, GoalMarkerResult  # noqa: F401, E402
from pymemdb.compression.messages import (  # noqa: F401, E402
    CompressionApplied,
    CompressionBudget,
    CompressionPlan,
    CompressionRequest,
    ContextItem,
    MessageAdded,
    Reliability,
    SessionReliability,
)
from pymemdb.compression.snapshots import Snapshot  # noqa: F401, E402

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
    dropped_chunk_ids: list[Any]
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
            optimization_id=UUID(doc["optimization_id"]) if doc.get("optimization_id") else None,
        )


# -- AI virtual memory (seed 03, issue 7): the result types live with their wrappers in pymemdb/vm/ --------
from pymemdb.vm.compressors import PageCompressItem  # noqa: E402, F401
from pymemdb.vm.fork import (  # noqa: E402, F401
    RegionListEntry,
    RegionPage,
    SessionForkResult,
    VmForkLink,
    VmGcReachable,
    VmGcResult,
    VmRegion,
    VmStorage,
)
from pymemdb.vm.lifecycle import ClaimConflict, SegmentPage, VmPrefetchItem, VmSegment  # noqa: E402, F401
from pymemdb.vm.page_cache import PageTableEntry  # noqa: E402, F401
from pymemdb.vm.pages import (  # noqa: E402, F401
    Page,
    PageFault,
    PageMutation,
    PageRepresentation,
    VmEviction,
    VmEvictionCandidate,
    VmPageState,
    VmSession,
    WorkingSetEntry,
)
from pymemdb.vm.search import PageIndexEntry, PageSearchResult  # noqa: E402, F401
