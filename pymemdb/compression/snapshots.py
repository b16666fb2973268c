"""Snapshots (seed 04, sql/420-compression-snapshots.sql): ``db.snapshots``, copies of a session's active state."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from pymemdb._sql import NOW, SESSION_ID, Room, given, jsonb, one, rows


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


SNAPSHOT_CREATE = one("snapshot_create", SESSION_ID, ("p_metadata", "jsonb"), NOW, result=Snapshot)
SNAPSHOT_LIST = rows("snapshot_list", SESSION_ID, NOW, result=Snapshot)
SNAPSHOT_RESTORE = one("snapshot_restore", ("p_snapshot_id", "uuid"), NOW, result=Snapshot)


class Snapshots(Room):
    def create(
        self, session_id: str, metadata: dict[str, Any] | None = None, *, now: datetime | None = None
    ) -> Snapshot:
        """memori.snapshot_create: snapshot the session's active state (immutable, retention-managed)."""
        return self._db.call(
            SNAPSHOT_CREATE,
            **given(p_session_id=session_id, p_metadata=jsonb(metadata), p_now=now),
        )

    def list(self, session_id: str, *, now: datetime | None = None) -> builtins.list[Snapshot]:
        """memori.snapshot_list: unexpired snapshots, newest first."""
        return self._db.call(SNAPSHOT_LIST, **given(p_session_id=session_id, p_now=now))

    def restore(self, snapshot_id: UUID | str, *, now: datetime | None = None) -> Snapshot:
        """memori.snapshot_restore: bring the state back; returns the snapshot of the state it replaced."""
        return self._db.call(SNAPSHOT_RESTORE, **given(p_snapshot_id=snapshot_id, p_now=now))
