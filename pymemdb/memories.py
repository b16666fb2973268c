"""Memories and TTL'd session checkpoints (seed 05): ``db.memories``."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymemdb._sql import NOW, USER_ID, Room, given, jsonb, maybe, one, rows, scalar


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
    owner_id: str  # the writing user (the namespace for rows written without one)


@dataclass(frozen=True)
class SessionCheckpoint(Memory):
    """memori.session_checkpoint: a memory plus where it was found (current, legacy, previous)."""

    source: str


@dataclass(frozen=True)
class TtlStatus:
    """A line of memori.ttl_status."""

    user_id: str
    permanent: int
    active_ttl: int
    expired: int
    is_session: bool

SESSION_CHECKPOINT_SAVE = one(
    "session_checkpoint_save", ("p_skill", "text"), USER_ID, ("p_content", "text"), ("p_metadata", "jsonb"), NOW,
    result=Memory,
)
SESSION_CHECKPOINT_LOAD_LATEST = maybe(
    "session_checkpoint_load_latest", ("p_skill", "text"), USER_ID, NOW, result=SessionCheckpoint,
)
SESSION_NAMESPACE = scalar("session_namespace", ("p_skill", "text"), NOW, result=str)
MEMORY_SAVE = one(
    "memory_save", ("p_namespace", "text"), ("p_content", "text"), ("p_category", "text"), ("p_metadata", "jsonb"),
    ("p_ttl", "interval"), ("p_owner_id", "text"), NOW, result=Memory,
)
MEMORY_LIST = rows("memory_list", ("p_namespace", "text"), ("p_limit", "integer"), NOW, result=Memory)


class Memories(Room):
    def save_session_checkpoint(
        self,
        skill: str,
        user_id: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        *,
        now: datetime | None = None,
    ) -> Memory:
        """memori.session_checkpoint_save: store a checkpoint with the skill's TTL."""
        return self._db.call(
            SESSION_CHECKPOINT_SAVE,
            **given(p_skill=skill, p_user_id=user_id, p_content=content,
                     p_metadata=jsonb(metadata), p_now=now),
        )

    def load_latest_checkpoint(
        self, skill: str, user_id: str, *, now: datetime | None = None
    ) -> SessionCheckpoint | None:
        """memori.session_checkpoint_load_latest: newest unexpired checkpoint, with legacy fallback."""
        return self._db.call(
            SESSION_CHECKPOINT_LOAD_LATEST, **given(p_skill=skill, p_user_id=user_id, p_now=now)
        )

    def session_namespace(self, skill: str, *, now: datetime | None = None) -> str:
        """memori.session_namespace: where the skill's checkpoints go."""
        return self._db.call(SESSION_NAMESPACE, **given(p_skill=skill, p_now=now))

    def save(
        self,
        namespace: str,
        content: str,
        *,
        category: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: timedelta | None = None,
        owner_id: str | None = None,
        now: datetime | None = None,
    ) -> Memory:
        """memori.memory_save: a memory in any namespace; ``ttl=None`` keeps it forever."""
        return self._db.call(
            MEMORY_SAVE,
            **given(p_namespace=namespace, p_content=content, p_category=category,
                     p_metadata=jsonb(metadata), p_ttl=ttl,
                     p_owner_id=owner_id, p_now=now),
        )

    def list(self, namespace: str, *, limit: int | None = None, now: datetime | None = None) -> list[Memory]:
        """memori.memory_list: newest unexpired memories of a namespace."""
        return self._db.call(
            MEMORY_LIST, **given(p_namespace=namespace, p_limit=limit, p_now=now)
        )

    def ttl_status(self) -> builtins.list[TtlStatus]:
        """Rows of the memori.ttl_status view."""
        return self._db.rows("select * from memori.ttl_status order by user_id", TtlStatus)
