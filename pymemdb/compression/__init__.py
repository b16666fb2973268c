"""Conversation compression (seed 04): the client of the 4xx band of sql/.

One module per topic, named like its SQL file:

- ``messages`` (sql/430-compression-messages.sql): ``db.compression`` -- the
  full history, the budget, plan / prompt / apply / abort, the active context,
  the reliability score and the session export;
- ``goals`` (sql/410-compression-goals.sql): ``db.goals``;
- ``snapshots`` (sql/420-compression-snapshots.sql): ``db.snapshots``;
- ``summarizers``: who writes the text of a checkpoint (no SQL).

Each module holds its declarations and its result types; pymemdb.types
re-exports the types for older imports.
"""

from pymemdb.compression.goals import Goal, GoalMarkerResult, Goals
from pymemdb.compression.messages import (
    Compression,
    CompressionApplied,
    CompressionBudget,
    CompressionPlan,
    CompressionRequest,
    CompressionRun,
    ContextItem,
    MessageAdded,
    Reliability,
    SessionReliability,
)
from pymemdb.compression.snapshots import Snapshot, Snapshots
from pymemdb.compression.summarizers import (
    ExtractiveSummarizer,
    OpenAISummarizer,
    Summarizer,
    SummarizerError,
    estimate_tokens,
)

__all__ = [
    "Compression",
    "CompressionApplied",
    "CompressionBudget",
    "CompressionPlan",
    "CompressionRequest",
    "CompressionRun",
    "ContextItem",
    "ExtractiveSummarizer",
    "Goal",
    "GoalMarkerResult",
    "Goals",
    "MessageAdded",
    "OpenAISummarizer",
    "Reliability",
    "SessionReliability",
    "Snapshot",
    "Snapshots",
    "Summarizer",
    "SummarizerError",
    "estimate_tokens",
]
