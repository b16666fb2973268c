"""AI virtual memory lifecycle (seed 03 phase 10): ``db.vm_fork``, one method per SQL function.

Copy-on-write forks (memori.session_fork), garbage collection (memori.vm_gc,
swept by the retention engine) and shared regions, the one way pages cross
users (memori.region_*). The rules are in sql/560-vm-fork.sql,
sql/565-vm-gc.sql and sql/570-vm-regions.sql.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pymemdb._sql import given, one, rows, scalar

if TYPE_CHECKING:
    from pymemdb.db import Database


@dataclass(frozen=True)
class SessionForkResult:
    """memori.session_fork: the new session, its source, and what it shares and copied."""

    session_id: str
    source_session_id: str
    depth: int  # ancestors of the new session (1: a fork of an unforked session)
    shared_pages: int  # pages seen through ancestors, not copied
    working_set_pages: int  # mapped pages copied with the working set
    forked_at: datetime


@dataclass(frozen=True)
class VmForkLink:
    """A row of memori.vm_forks: one ancestor of a forked session."""

    session_id: str
    ancestor_session_id: str
    user_id: str
    depth: int  # 1 = the parent
    max_page_id: int  # the ancestor's page rows with id <= this are visible
    forked_at: datetime


@dataclass(frozen=True)
class VmStorage:
    """memori.vm_storage: one VM table's total size (table, indexes, TOAST)."""

    table_name: str
    bytes: int
    row_estimate: int


@dataclass(frozen=True)
class VmGcReachable:
    """memori.vm_gc_reachable: a page row reachable from a live session, with the first reason found."""

    id: int
    session_id: str  # the session that stores the row (a fork may see it)
    page_id: str
    via: str  # live_session, working_set or provenance


@dataclass(frozen=True)
class VmGcResult:
    """memori.vm_gc: what one mark pass did."""

    live_sessions: int
    reachable: int
    marked: int
    unmarked: int
    already_marked: int
    expires_at: datetime  # when this run's marks expire (the retention engine deletes them then)


@dataclass(frozen=True)
class VmRegion:
    """A row of memori.vm_regions: a shared region."""

    region_id: str
    user_id: str  # the owner
    scope: str  # 'pages' or 'session'
    description: str | None
    created_at: datetime


@dataclass(frozen=True)
class RegionPage:
    """memori.region_pages: a page shared through a region, with its content."""

    region_id: str
    owner: str
    session_id: str
    page_id: str
    page_type: str
    modality: str
    content: str | None
    data: Any
    tokens: int
    importance: float
    hint: str | None
    version: int
    updated_at: datetime


@dataclass(frozen=True)
class RegionListEntry:
    """memori.region_list: a region the acting user owns (members listed) or may read (members None)."""

    region_id: str
    owner: str
    scope: str
    description: str | None
    members: list[str] | None
    entries: int
    created_at: datetime
# -- AI virtual memory lifecycle (issue 7): segments, claims, pre-pass, prefetch ------


SESSION_FORK = one("session_fork", ("p_source_session_id", "text"), ("p_new_session_id", "text"),
                   ("p_now", "timestamptz"), result=SessionForkResult)
SESSION_FORK_CHAIN = rows("session_fork_chain", ("p_session_id", "text"), result=VmForkLink)
VM_STORAGE = rows("vm_storage", result=VmStorage)
VM_GC = one("vm_gc", ("p_now", "timestamptz"), result=VmGcResult)
VM_GC_REACHABLE = rows("vm_gc_reachable", ("p_now", "timestamptz"), result=VmGcReachable)
REGION_CREATE = one("region_create", ("p_region_id", "text"), ("p_scope", "text"), ("p_description", "text"),
                    ("p_user_id", "text"), ("p_now", "timestamptz"), result=VmRegion)
REGION_GRANT = scalar("region_grant", ("p_region_id", "text"), ("p_member_id", "text"), ("p_user_id", "text"),
                      ("p_now", "timestamptz"), result=bool)
REGION_REVOKE = scalar("region_revoke", ("p_region_id", "text"), ("p_member_id", "text"), ("p_user_id", "text"),
                       ("p_now", "timestamptz"), result=bool)
REGION_PAGE_PUT = scalar("region_page_put", ("p_region_id", "text"), ("p_session_id", "text"), ("p_page_id", "text"),
                         ("p_user_id", "text"), ("p_now", "timestamptz"), result=bool)
REGION_PAGE_REMOVE = scalar("region_page_remove", ("p_region_id", "text"), ("p_session_id", "text"),
                            ("p_page_id", "text"), ("p_user_id", "text"), result=bool)
REGION_PAGES = rows("region_pages", ("p_region_id", "text"), ("p_user_id", "text"), ("p_limit", "integer"),
                    ("p_now", "timestamptz"), result=RegionPage)
REGION_LIST = rows("region_list", ("p_user_id", "text"), result=RegionListEntry)
REGION_DROP = scalar("region_drop", ("p_region_id", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"),
                     result=bool)


class VmFork:
    """``db.vm_fork``: copy-on-write forks, garbage collection and shared regions of VM pages."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- copy-on-write -----------------------------------------------------------
    def fork(self, source_session_id: str, new_session_id: str, *, now: datetime | None = None) -> SessionForkResult:
        """memori.session_fork: a new session that sees every page of the source as of now, copying none."""
        self._db.pages.tlb.invalidate_session(source_session_id)  # the source's rows may be copied down later
        return self._db.call(
            SESSION_FORK, **given(p_source_session_id=source_session_id, p_new_session_id=new_session_id, p_now=now))

    def fork_chain(self, session_id: str) -> builtins.list[VmForkLink]:
        """memori.session_fork_chain: the ancestors of a forked session, parent first."""
        return self._db.call(SESSION_FORK_CHAIN, p_session_id=session_id)

    def storage(self) -> builtins.list[VmStorage]:
        """memori.vm_storage: bytes on disk of every VM table."""
        return self._db.call(VM_STORAGE)

    # -- garbage collection ------------------------------------------------------
    def gc(self, *, now: datetime | None = None) -> VmGcResult:
        """memori.vm_gc: mark unreachable pages to expire after vm.gc_grace; unmark reachable ones."""
        return self._db.call(VM_GC, **given(p_now=now))

    def gc_reachable(self, *, now: datetime | None = None) -> builtins.list[VmGcReachable]:
        """memori.vm_gc_reachable: the page rows a live session reaches, and how."""
        return self._db.call(VM_GC_REACHABLE, **given(p_now=now))

    # -- shared regions ------------------------------------------------------------
    def region_create(self, region_id: str, scope: str | None = None, description: str | None = None, *,
                      user_id: str | None = None, now: datetime | None = None) -> VmRegion:
        """memori.region_create: a region of scope 'pages' (default) or 'session'."""
        return self._db.call(
            REGION_CREATE, **given(p_region_id=region_id, p_scope=scope, p_description=description,
                                   p_user_id=user_id, p_now=now))

    def region_grant(self, region_id: str, member_id: str, *, user_id: str | None = None,
                     now: datetime | None = None) -> bool:
        """memori.region_grant: let a user read the region; False when already listed."""
        return bool(self._db.call(REGION_GRANT, **given(p_region_id=region_id, p_member_id=member_id,
                                                        p_user_id=user_id, p_now=now)))

    def region_revoke(self, region_id: str, member_id: str, *, user_id: str | None = None,
                      now: datetime | None = None) -> bool:
        """memori.region_revoke: take a user off the access list; False when not listed."""
        return bool(self._db.call(REGION_REVOKE, **given(p_region_id=region_id, p_member_id=member_id,
                                                         p_user_id=user_id, p_now=now)))

    def region_page_put(self, region_id: str, session_id: str, page_id: str | None = None, *,
                        user_id: str | None = None, now: datetime | None = None) -> bool:
        """memori.region_page_put: share a page (scope pages) or a whole session (scope session, no page id)."""
        return bool(self._db.call(REGION_PAGE_PUT, **given(p_region_id=region_id, p_session_id=session_id,
                                                           p_page_id=page_id, p_user_id=user_id, p_now=now)))

    def region_page_remove(self, region_id: str, session_id: str, page_id: str | None = None, *,
                           user_id: str | None = None) -> bool:
        """memori.region_page_remove: stop sharing a page or session."""
        return bool(self._db.call(REGION_PAGE_REMOVE, **given(p_region_id=region_id, p_session_id=session_id,
                                                              p_page_id=page_id, p_user_id=user_id)))

    def region_pages(self, region_id: str, *, user_id: str | None = None, limit: int | None = None,
                     now: datetime | None = None) -> builtins.list[RegionPage]:
        """memori.region_pages: the pages of a region, for its owner or a listed user (PM095 otherwise)."""
        return self._db.call(
            REGION_PAGES, **given(p_region_id=region_id, p_user_id=user_id, p_limit=limit, p_now=now))

    def region_list(self, *, user_id: str | None = None) -> builtins.list[RegionListEntry]:
        """memori.region_list: regions the acting user owns or may read."""
        return self._db.call(REGION_LIST, **given(p_user_id=user_id))

    def region_drop(self, region_id: str, *, user_id: str | None = None, now: datetime | None = None) -> bool:
        """memori.region_drop: delete a region, its access list and entries."""
        return bool(self._db.call(REGION_DROP, **given(p_region_id=region_id, p_user_id=user_id, p_now=now)))
