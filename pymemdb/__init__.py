"""pymemdb: the memory layer for AI agents that lives inside PostgreSQL.

The rules live in SQL (schema ``memori``); this package is a thin door:

    import pymemdb
    with pymemdb.connect() as db:          # embedded server unless a DSN is given
        db.memories.save_session_checkpoint("skill:api-builder", "alice", "state ...")
        db.cleanup.preview()
"""

from pymemdb.context import Scope
from pymemdb.db import Database, connect
from pymemdb.errors import (
    AccessDenied,
    CleanupAlreadyRunning,
    CleanupError,
    CleanupLockTimeout,
    CleanupRunNotActive,
    CompressionError,
    CompressionPlanFinished,
    CompressionPlanStale,
    ContextTooSmall,
    DatabaseError,
    ExtensionMissing,
    InvalidArgument,
    InvalidSummary,
    NotFound,
    PayloadTooLarge,
    PgCronElsewhere,
    PgCronMissing,
    PymemdbError,
    SchemaNotInstalled,
    ServerError,
    UnknownSkill,
    UnknownValue,
    WrongUser,
)

__all__ = [
    "AccessDenied",
    "CleanupAlreadyRunning",
    "CleanupError",
    "CleanupLockTimeout",
    "CleanupRunNotActive",
    "CompressionError",
    "CompressionPlanFinished",
    "CompressionPlanStale",
    "ContextTooSmall",
    "Database",
    "DatabaseError",
    "ExtensionMissing",
    "InvalidArgument",
    "InvalidSummary",
    "NotFound",
    "PayloadTooLarge",
    "PgCronElsewhere",
    "PgCronMissing",
    "PymemdbError",
    "SchemaNotInstalled",
    "Scope",
    "ServerError",
    "UnknownSkill",
    "UnknownValue",
    "WrongUser",
    "connect",
]
