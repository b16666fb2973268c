"""Snapshots (seed 04): ``db.snapshots`` -- immutable copies of a session's active state."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pymemdb._sql import fn, given
from pymemdb.types import Snapshot

if TYPE_CHECKING:
    from pymemdb.db import Database

SNAPSHOT_CREATE = fn(
    "snapshot_create", ("p_session_id", "text"), ("p_metadata", "jsonb"), ("p_now", "timestamptz"), result=Snapshot
)
SNAPSHOT_LIST = fn("snapshot_list", ("p_session_id", "text"), ("p_now", "timestamptz"), result=Snapshot,
                   returns="many")
SNAPSHOT_RESTORE = fn("snapshot_restore", ("p_snapshot_id", "uuid"), ("p_now", "timestamptz"), result=Snapshot)


class Snapshots:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(
        self, session_id: str, metadata: dict[str, Any] | None = None, *, now: datetime | None = None
    ) -> Snapshot:
        """memori.snapshot_create: snapshot the session's active state (immutable, retention-managed)."""
        return self._db.call(  # type: ignore[no-any-return]
            SNAPSHOT_CREATE,
            **given(p_session_id=session_id, p_metadata=None if metadata is None else Jsonb(metadata), p_now=now),
        )

    def list(self, session_id: str, *, now: datetime | None = None) -> builtins.list[Snapshot]:
        """memori.snapshot_list: unexpired snapshots, newest first."""
        return self._db.call(SNAPSHOT_LIST, **given(p_session_id=session_id, p_now=now))  # type: ignore[no-any-return]

    def restore(self, snapshot_id: UUID | str, *, now: datetime | None = None) -> Snapshot:
        """memori.snapshot_restore: bring the state back; returns the snapshot of the state it replaced."""
        return self._db.call(  # type: ignore[no-any-return]
            SNAPSHOT_RESTORE, **given(p_snapshot_id=snapshot_id, p_now=now)
        )
