"""The context store (seed 01, part 2): ``db.context``, ``db.business``, ``db.sessions``, ``db.projects``.

Every call acts for one user: the ``Scope``'s user, else the database's
(``pymemdb.connect(user_id=...)`` / ``db.as_user(...)``). The transaction sets
it as ``memori.user_id``, which row-level security keys on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pymemdb._sql import NOW, SESSION_ID, USER_ID, Room, given, jsonb, maybe, one, rows, scalar


# -- results ------------------------------------------------------------------------
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
    project_owner: str | None  # a project entry: its project's owner and members (who may read it)
    readers: list[str] | None


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
    member_ids: list[str]


@dataclass(frozen=True)
class ProjectMember:
    """A row of memori.project_members."""

    project_id: str
    user_id: str
    project_owner: str
    role: str
    added_at: datetime


# -- declarations -------------------------------------------------------------------

_REQUESTER = (USER_ID, ("p_project_id", "text"), SESSION_ID)

CONTEXT_SET = one(
    "context_set", ("p_key", "text"), ("p_value", "jsonb"), ("p_type", "text"), ("p_scope", "text"), *_REQUESTER,
    ("p_ttl_ms", "bigint"), NOW, result=ContextEntry,
)
CONTEXT_GET = maybe("context_get", ("p_key", "text"), *_REQUESTER, NOW, result=ContextValue)
CONTEXT_RESOLVE = rows("context_resolve", *_REQUESTER, ("p_prefix", "text"), NOW, result=ContextValue)
CONTEXT_DELETE = scalar("context_delete", ("p_key", "text"), ("p_scope", "text"), *_REQUESTER, result=bool)
CONTEXT_SEARCH = rows(
    "context_search", *_REQUESTER, ("p_key_pattern", "text"), ("p_value_contains", "jsonb"), ("p_scopes", "text[]"),
    ("p_types", "text[]"), ("p_limit", "integer"), NOW, result=ContextValue,
)
CONTEXT_EXPIRING_SOON = rows("context_expiring_soon", ("p_within", "interval"), *_REQUESTER, NOW, result=ContextValue)
CONTEXT_CLEANUP_BY_SCOPE = scalar(
    "context_cleanup_by_scope", ("p_scope", "text"), *_REQUESTER, ("p_expired_only", "boolean"), NOW, result=int,
)
CONTEXT_PRUNE_OLD = scalar("context_prune_old", ("p_older_than", "interval"), USER_ID, NOW, result=int)
CONTEXT_STATS = rows("context_stats", *_REQUESTER, ("p_within", "interval"), NOW, result=ContextStat)
BUSINESS_CONTEXT_GET = scalar("business_context_get", USER_ID, NOW, result=dict)
BUSINESS_CONTEXT_SET = scalar("business_context_set", ("p_context", "jsonb"), USER_ID, NOW, result=dict)
BUSINESS_CONTEXT_UPDATE = scalar("business_context_update", ("p_fields", "jsonb"), USER_ID, NOW, result=dict)
SESSION_CONTEXT_SET = one(
    "session_context_set", SESSION_ID, USER_ID, ("p_project_id", "text"), ("p_metadata", "jsonb"), NOW,
    result=SessionContext,
)
SESSION_CONTEXT_GET = maybe("session_context_get", SESSION_ID, USER_ID, NOW, result=SessionContext)
SESSION_CONTEXT_ADD_WINDOW = one(
    "session_context_add_window", SESSION_ID, ("p_window_type", "text"), ("p_content", "jsonb"),
    ("p_priority", "integer"), ("p_retention_policy", "text"), USER_ID, NOW, result=ContextWindow,
)
SESSION_CONTEXT_REMOVE_WINDOW = scalar(
    "session_context_remove_window", SESSION_ID, ("p_window_id", "uuid"), USER_ID, NOW, result=bool,
)
PROJECT_CREATE = one(
    "project_create", ("p_project_id", "text"), ("p_name", "text"), USER_ID, ("p_metadata", "jsonb"), NOW,
    result=Project,
)
PROJECT_MEMBER_ADD = one(
    "project_member_add", ("p_project_id", "text"), ("p_member_id", "text"), USER_ID, NOW, result=ProjectMember,
)
PROJECT_MEMBER_REMOVE = scalar(
    "project_member_remove", ("p_project_id", "text"), ("p_member_id", "text"), USER_ID, result=bool,
)
PROJECT_MEMBER_LIST = rows("project_member_list", ("p_project_id", "text"), USER_ID, result=ProjectMember)


@dataclass(frozen=True)
class Scope:
    """Who is asking: a user (None: the database's user), and optionally a project and a session.

    Reads see global entries, the user's, the project's (when the user is a
    member; the session's project when none is given) and the session's (when
    it is the user's).
    """

    user_id: str | None = None
    project_id: str | None = None
    session_id: str | None = None

    def args(self) -> dict[str, Any]:
        return given(p_user_id=self.user_id, p_project_id=self.project_id, p_session_id=self.session_id)


_ANYONE = Scope()


class Context(Room):
    """memori.context_*: scoped entries with resolution."""

    def set(
        self, key: str, value: Any, *, type: str, scope: str, who: Scope = _ANYONE, ttl_ms: int | None = None,
        now: datetime | None = None,
    ) -> ContextEntry:
        """memori.context_set: store ``value`` at ``scope`` (global|user|project|session); upsert."""
        return self._db.call(CONTEXT_SET, **who.args(), p_key=key, p_value=Jsonb(value), p_type=type, p_scope=scope,
                          **given(p_ttl_ms=ttl_ms, p_now=now))

    def get(self, key: str, who: Scope = _ANYONE, *, now: datetime | None = None) -> ContextValue | None:
        """memori.context_get: the most specific visible value of ``key`` and its scope, or None."""
        return self._db.call(CONTEXT_GET, **who.args(), p_key=key, **given(p_now=now))

    def resolve(
        self, who: Scope = _ANYONE, *, prefix: str | None = None, now: datetime | None = None
    ) -> list[ContextValue]:
        """memori.context_resolve: every visible key resolved (``{v.key: v.value for v in ...}`` merges them)."""
        return self._db.call(CONTEXT_RESOLVE, **who.args(), **given(p_prefix=prefix, p_now=now))

    def delete(self, key: str, *, scope: str, who: Scope = _ANYONE) -> bool:
        """memori.context_delete: remove the entry of ``key`` at one scope."""
        return bool(self._db.call(CONTEXT_DELETE, **who.args(), p_key=key, p_scope=scope))

    def search(
        self, who: Scope = _ANYONE, *, key_pattern: str | None = None, value_contains: Any = None,
        scopes: Sequence[str] | None = None, types: Sequence[str] | None = None, limit: int | None = None,
        now: datetime | None = None,
    ) -> list[ContextValue]:
        """memori.context_search: visible entries at every scope by LIKE pattern, contained JSON, scopes, types."""
        return self._db.call(
            CONTEXT_SEARCH, **who.args(),
            **given(p_key_pattern=key_pattern,
                    p_value_contains=jsonb(value_contains),
                    p_scopes=None if scopes is None else list(scopes),
                    p_types=None if types is None else list(types), p_limit=limit, p_now=now),
        )

    def expiring_soon(
        self, who: Scope = _ANYONE, *, within: timedelta | None = None, now: datetime | None = None
    ) -> list[ContextValue]:
        """memori.context_expiring_soon: visible entries expiring within ``within`` (default one hour)."""
        return self._db.call(CONTEXT_EXPIRING_SOON, **who.args(), **given(p_within=within, p_now=now))

    def cleanup_by_scope(
        self, scope: str, who: Scope = _ANYONE, *, expired_only: bool = False, now: datetime | None = None
    ) -> int:
        """memori.context_cleanup_by_scope: delete every (or every expired) entry of one scope owner."""
        return int(self._db.call(CONTEXT_CLEANUP_BY_SCOPE, **who.args(), p_scope=scope, p_expired_only=expired_only,
                              **given(p_now=now)))

    def prune_old(self, older_than: timedelta, *, user_id: str | None = None, now: datetime | None = None) -> int:
        """memori.context_prune_old: delete the user's entries not updated within ``older_than``."""
        return int(self._db.call(CONTEXT_PRUNE_OLD, p_older_than=older_than,
                                 **given(p_user_id=user_id, p_now=now)))

    def stats(
        self, who: Scope = _ANYONE, *, within: timedelta | None = None, now: datetime | None = None
    ) -> list[ContextStat]:
        """memori.context_stats: visible entries per scope and per type."""
        return self._db.call(CONTEXT_STATS, **who.args(), **given(p_within=within, p_now=now))


class Business(Room):
    """memori.business_context_*: the seed's business context of a user."""

    def get(self, user_id: str | None = None, *, now: datetime | None = None) -> dict[str, Any] | None:
        """memori.business_context_get."""
        return self._db.call(BUSINESS_CONTEXT_GET, **given(p_user_id=user_id, p_now=now))

    def set(
        self, context: dict[str, Any], user_id: str | None = None, *, now: datetime | None = None
    ) -> dict[str, Any]:
        """memori.business_context_set: replace it (validated against the seed's shape)."""
        return self._db.call(BUSINESS_CONTEXT_SET, p_context=Jsonb(context),
                             **given(p_user_id=user_id, p_now=now))

    def update(
        self, fields: dict[str, Any], user_id: str | None = None, *, now: datetime | None = None
    ) -> dict[str, Any]:
        """memori.business_context_update: merge top-level fields."""
        return self._db.call(BUSINESS_CONTEXT_UPDATE, p_fields=Jsonb(fields),
                             **given(p_user_id=user_id, p_now=now))


class Sessions(Room):
    """memori.session_context_*: sessions and their context windows."""

    def set(
        self, session_id: str, *, user_id: str | None = None, project_id: str | None = None,
        metadata: dict[str, Any] | None = None, now: datetime | None = None,
    ) -> SessionContext:
        """memori.session_context_set: create or update the user's session."""
        return self._db.call(
            SESSION_CONTEXT_SET, p_session_id=session_id,
            **given(p_user_id=user_id, p_project_id=project_id,
                    p_metadata=jsonb(metadata), p_now=now),
        )

    def get(self, session_id: str, *, user_id: str | None = None, now: datetime | None = None) -> SessionContext | None:
        """memori.session_context_get: the session with its live windows, or None."""
        return self._db.call(SESSION_CONTEXT_GET, p_session_id=session_id,
                             **given(p_user_id=user_id, p_now=now))

    def add_window(
        self, session_id: str, window_type: str, content: dict[str, Any], *, priority: int | None = None,
        retention_policy: str | None = None, user_id: str | None = None, now: datetime | None = None,
    ) -> ContextWindow:
        """memori.session_context_add_window: add one, removing the lowest priority beyond the limit."""
        return self._db.call(
            SESSION_CONTEXT_ADD_WINDOW, p_session_id=session_id, p_window_type=window_type, p_content=Jsonb(content),
            **given(p_priority=priority, p_retention_policy=retention_policy, p_user_id=user_id, p_now=now),
        )

    def remove_window(
        self, session_id: str, window_id: UUID, *, user_id: str | None = None, now: datetime | None = None
    ) -> bool:
        """memori.session_context_remove_window."""
        return bool(self._db.call(SESSION_CONTEXT_REMOVE_WINDOW, p_session_id=session_id, p_window_id=window_id,
                                  **given(p_user_id=user_id, p_now=now)))


class Projects(Room):
    """memori.project_*: projects and their members (who may see project entries)."""

    def create(
        self, project_id: str, name: str, *, user_id: str | None = None, metadata: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> Project:
        """memori.project_create: the acting user owns it and is its first member."""
        return self._db.call(
            PROJECT_CREATE, p_project_id=project_id, p_name=name,
            **given(p_user_id=user_id, p_metadata=jsonb(metadata), p_now=now),
        )

    def member_add(
        self, project_id: str, member_id: str, *, user_id: str | None = None, now: datetime | None = None
    ) -> ProjectMember:
        """memori.project_member_add (owner only)."""
        return self._db.call(PROJECT_MEMBER_ADD, p_project_id=project_id, p_member_id=member_id,
                             **given(p_user_id=user_id, p_now=now))

    def member_remove(self, project_id: str, member_id: str, *, user_id: str | None = None) -> bool:
        """memori.project_member_remove (owner only)."""
        return bool(self._db.call(PROJECT_MEMBER_REMOVE, p_project_id=project_id, p_member_id=member_id,
                                  **given(p_user_id=user_id)))

    def member_list(self, project_id: str, *, user_id: str | None = None) -> list[ProjectMember]:
        """memori.project_member_list (owner only)."""
        return self._db.call(PROJECT_MEMBER_LIST, p_project_id=project_id,
                             **given(p_user_id=user_id))
