"""The checkpoint tracker (seed 01, part 1): ``db.checkpoints``."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pymemdb._sql import NOW, SESSION_ID, USER_ID, Room, given, jsonb, maybe, one, rows, scalar


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

CHECKPOINT_CREATE = one(
    "checkpoint_create", SESSION_ID, USER_ID, ("p_type", "text"), ("p_title", "text"), ("p_data", "jsonb"),
    ("p_description", "text"), ("p_metadata", "jsonb"), ("p_tags", "text[]"), ("p_retention_days", "integer"), NOW,
    result=Checkpoint,
)
CHECKPOINT_CREATE_MANY = rows("checkpoint_create_many", ("p_checkpoints", "jsonb"), NOW, result=Checkpoint)
CHECKPOINT_GET = maybe("checkpoint_get", ("p_id", "uuid"), NOW, result=Checkpoint)
CHECKPOINT_QUERY = rows(
    "checkpoint_query", SESSION_ID, USER_ID, ("p_type", "text"), ("p_from", "timestamptz"), ("p_to", "timestamptz"),
    ("p_tags", "text[]"), ("p_include_expired", "boolean"), ("p_limit", "integer"), NOW, result=Checkpoint,
)
CHECKPOINT_DELETE = scalar("checkpoint_delete", ("p_id", "uuid"), result=bool)
CHECKPOINT_PRESERVE = one("checkpoint_preserve", ("p_id", "uuid"), ("p_preserve", "boolean"), result=Checkpoint)
CHECKPOINT_UPDATE = one("checkpoint_update", ("p_id", "uuid"), ("p_data", "jsonb"), NOW, result=Checkpoint)
CHECKPOINT_VERSIONS = rows("checkpoint_versions", ("p_id", "uuid"), result=CheckpointVersion)
CHECKPOINT_AT_VERSION = scalar("checkpoint_at_version", ("p_id", "uuid"), ("p_version", "integer"), result=dict)
CHECKPOINT_STATS = rows("checkpoint_stats", USER_ID, NOW, result=CheckpointStat)
CHECKPOINT_DETECT_MILESTONE = maybe(
    "checkpoint_detect_milestone", SESSION_ID, USER_ID, ("p_current", "jsonb"), NOW, result=Checkpoint,
)
CHECKPOINT_AUTO = one(
    "checkpoint_auto", SESSION_ID, USER_ID, ("p_trigger", "text"), ("p_data", "jsonb"), NOW,
    result=CheckpointAutoResult,
)


@dataclass(frozen=True)
class NewCheckpoint:
    """One checkpoint for ``create_many``: the arguments of memori.checkpoint_create."""

    session_id: str
    user_id: str
    type: str
    title: str
    data: dict[str, Any]
    description: str | None = None
    metadata: dict[str, Any] | None = None
    tags: Sequence[str] = field(default_factory=tuple)
    retention_days: int | None = None
    now: datetime | None = None


def _create_item(c: NewCheckpoint) -> dict[str, Any]:
    """One element of checkpoint_create_many's JSON array."""
    item: dict[str, Any] = {"session_id": c.session_id, "user_id": c.user_id, "type": c.type, "title": c.title,
                            "data": c.data}
    optional = {"description": c.description, "metadata": c.metadata, "tags": list(c.tags) or None,
                "retention_days": c.retention_days, "now": c.now.isoformat() if c.now else None}
    item.update({k: v for k, v in optional.items() if v is not None})
    return item


def _create_args(c: NewCheckpoint) -> dict[str, Any]:
    return given(
        p_session_id=c.session_id, p_user_id=c.user_id, p_type=c.type, p_title=c.title, p_data=Jsonb(c.data),
        p_description=c.description, p_metadata=jsonb(c.metadata),
        p_tags=list(c.tags) if c.tags else None, p_retention_days=c.retention_days, p_now=c.now,
    )


class Checkpoints(Room):
    def create(
        self,
        session_id: str,
        user_id: str,
        type: str,
        title: str,
        data: dict[str, Any],
        *,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: Sequence[str] = (),
        retention_days: int | None = None,
        now: datetime | None = None,
    ) -> Checkpoint:
        """memori.checkpoint_create: priority and retention from the type's policy unless overridden."""
        new = NewCheckpoint(session_id, user_id, type, title, data, description, metadata, tags, retention_days, now)
        return self._db.call(CHECKPOINT_CREATE, **_create_args(new))

    def create_many(
        self, checkpoints: Iterable[NewCheckpoint], *, now: datetime | None = None
    ) -> builtins.list[Checkpoint]:
        """memori.checkpoint_create_many: up to 10000 checkpoints in one statement, all or nothing, in order."""
        items = [_create_item(c) for c in checkpoints]
        return self._db.call(
            CHECKPOINT_CREATE_MANY, **given(p_checkpoints=Jsonb(items), p_now=now)
        )

    def get(self, checkpoint_id: UUID | str, *, now: datetime | None = None) -> Checkpoint | None:
        """memori.checkpoint_get: None when missing or expired."""
        return self._db.call(CHECKPOINT_GET, **given(p_id=checkpoint_id, p_now=now))

    def query(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        tags: Sequence[str] | None = None,
        include_expired: bool | None = None,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> builtins.list[Checkpoint]:
        """memori.checkpoint_query: newest first, unexpired unless include_expired."""
        return self._db.call(
            CHECKPOINT_QUERY,
            **given(p_session_id=session_id, p_user_id=user_id, p_type=type, p_from=since, p_to=until,
                    p_tags=None if tags is None else list(tags), p_include_expired=include_expired,
                    p_limit=limit, p_now=now),
        )

    def delete(self, checkpoint_id: UUID | str) -> bool:
        """memori.checkpoint_delete: False when there was none."""
        return self._db.call(CHECKPOINT_DELETE, p_id=checkpoint_id)

    def preserve(self, checkpoint_id: UUID | str, preserve: bool = True) -> Checkpoint:
        """memori.checkpoint_preserve: keep (or release) a manual/milestone checkpoint past expiry."""
        return self._db.call(CHECKPOINT_PRESERVE, p_id=checkpoint_id, p_preserve=preserve)

    def update(self, checkpoint_id: UUID | str, data: dict[str, Any], *, now: datetime | None = None) -> Checkpoint:
        """memori.checkpoint_update: new data as a new version; older versions kept as diffs."""
        return self._db.call(
            CHECKPOINT_UPDATE, **given(p_id=checkpoint_id, p_data=Jsonb(data), p_now=now)
        )

    def versions(self, checkpoint_id: UUID | str) -> builtins.list[CheckpointVersion]:
        """memori.checkpoint_versions: kept versions, current first."""
        return self._db.call(CHECKPOINT_VERSIONS, p_id=checkpoint_id)

    def at_version(self, checkpoint_id: UUID | str, version: int) -> dict[str, Any]:
        """memori.checkpoint_at_version: a kept version's data, rebuilt exactly."""
        return self._db.call(CHECKPOINT_AT_VERSION, p_id=checkpoint_id, p_version=version)

    def stats(self, *, user_id: str | None = None, now: datetime | None = None) -> builtins.list[CheckpointStat]:
        """memori.checkpoint_stats: per type counts by status, raw and stored bytes, next expiry."""
        return self._db.call(CHECKPOINT_STATS, **given(p_user_id=user_id, p_now=now))

    def detect_milestone(
        self, session_id: str, user_id: str, current: dict[str, Any], *, now: datetime | None = None
    ) -> Checkpoint | None:
        """memori.checkpoint_detect_milestone: the milestone created, or None when no criterion fired."""
        return self._db.call(
            CHECKPOINT_DETECT_MILESTONE,
            **given(p_session_id=session_id, p_user_id=user_id, p_current=Jsonb(current), p_now=now),
        )

    def auto(
        self, session_id: str, user_id: str, trigger: str, data: dict[str, Any], *, now: datetime | None = None
    ) -> CheckpointAutoResult:
        """memori.checkpoint_auto: an automatic checkpoint if the trigger is configured and the interval passed."""
        return self._db.call(
            CHECKPOINT_AUTO,
            **given(p_session_id=session_id, p_user_id=user_id, p_trigger=trigger, p_data=Jsonb(data), p_now=now),
        )

    def status(self, checkpoint_ids: Sequence[UUID | str] | None = None) -> builtins.list[CheckpointStatus]:
        """Rows of the memori.checkpoint_expiry_status view (all, or the given checkpoints)."""
        if checkpoint_ids is None:
            return self._db.rows("select * from memori.checkpoint_expiry_status order by expires_at", CheckpointStatus)
        return self._db.rows(
            "select * from memori.checkpoint_expiry_status where checkpoint_id = any(%(ids)s::uuid[])"
            " order by expires_at",
            CheckpointStatus,
            {"ids": [str(i) for i in checkpoint_ids]},
        )
