"""Typed results: one frozen dataclass per SQL result shape (filled by psycopg's class_row)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

# The core rooms' result types live in their modules (pymemdb.memories, retention, events,
# checkpoints); re-exported here so old imports keep working.
from pymemdb.checkpoints import Checkpoint as Checkpoint
from pymemdb.checkpoints import CheckpointAutoResult as CheckpointAutoResult
from pymemdb.checkpoints import CheckpointStat as CheckpointStat
from pymemdb.checkpoints import CheckpointStatus as CheckpointStatus
from pymemdb.checkpoints import CheckpointVersion as CheckpointVersion

# -- compression (seed 04) -------------------------------------------------------
from pymemdb.compression.goals import Goal, GoalMarkerResult  # noqa: F401
from pymemdb.compression.messages import (  # noqa: F401
    CompressionApplied,
    CompressionBudget,
    CompressionPlan,
    CompressionRequest,
    ContextItem,
    MessageAdded,
    Reliability,
    SessionReliability,
)
from pymemdb.compression.snapshots import Snapshot  # noqa: F401

# -- the context store (seed 01, part 2) -----------------------------------------
from pymemdb.context import (  # noqa: F401
    ContextEntry,
    ContextStat,
    ContextValue,
    ContextWindow,
    Project,
    ProjectMember,
    SessionContext,
)
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
class LangGraphDeltaHistory:
    """memori.lg_delta_history: one channel's pending writes up the parent chain, and its seed if one was found."""

    channel: str
    seeded: bool  # an ancestor stores a value of the channel (a blob, else an inline value)
    seed_version: str | None
    seed_type: str | None  # the seed blob's serde type; NULL for an inline seed or none
    seed_value: bytes | None  # the seed blob's whole value (a delta joined to its chain)
    seed_inline: Any  # the inline seed (JSON, null included) when seeded without a blob
    write_task_ids: list[str]
    write_types: list[str]
    write_values: list[bytes]


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
from pymemdb.vm.lifecycle import ClaimConflict, SegmentPage, VmPrefetchItem, VmSegment, VmTurn  # noqa: E402, F401
from pymemdb.vm.page_cache import PageTableEntry  # noqa: E402, F401
from pymemdb.vm.pages import (  # noqa: E402, F401
    Page,
    PageFault,
    PageMutation,
    PageRepresentation,
    VmEviction,
    VmEvictionCandidate,
    VmMetrics,
    VmPageState,
    VmSession,
    WorkingSetEntry,
)
from pymemdb.vm.search import PageIndexEntry, PageSearchResult  # noqa: E402, F401
