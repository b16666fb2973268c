"""AI virtual memory lifecycle (seed 03 phase 10): ``db.vm_fork``, one method per SQL function.

Copy-on-write forks (memori.session_fork), garbage collection (memori.vm_gc,
swept by the retention engine) and shared regions, the one way pages cross
users (memori.region_*). The rules are in sql/560-vm-fork.sql,
sql/565-vm-gc.sql and sql/570-vm-regions.sql.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING

from pymemdb._sql import fn, given
from pymemdb.types import (
    RegionListEntry,
    RegionPage,
    SessionForkResult,
    VmForkLink,
    VmGcReachable,
    VmGcResult,
    VmRegion,
    VmStorage,
)

if TYPE_CHECKING:
    from pymemdb.db import Database

SESSION_FORK = fn("session_fork", ("p_source_session_id", "text"), ("p_new_session_id", "text"),
                  ("p_now", "timestamptz"), result=SessionForkResult)
SESSION_FORK_CHAIN = fn("session_fork_chain", ("p_session_id", "text"), result=VmForkLink, returns="many")
VM_STORAGE = fn("vm_storage", result=VmStorage, returns="many")
VM_GC = fn("vm_gc", ("p_now", "timestamptz"), result=VmGcResult)
VM_GC_REACHABLE = fn("vm_gc_reachable", ("p_now", "timestamptz"), result=VmGcReachable, returns="many")
REGION_CREATE = fn("region_create", ("p_region_id", "text"), ("p_scope", "text"), ("p_description", "text"),
                   ("p_user_id", "text"), ("p_now", "timestamptz"), result=VmRegion)
REGION_GRANT = fn("region_grant", ("p_region_id", "text"), ("p_member_id", "text"), ("p_user_id", "text"),
                  ("p_now", "timestamptz"), returns="scalar")
REGION_REVOKE = fn("region_revoke", ("p_region_id", "text"), ("p_member_id", "text"), ("p_user_id", "text"),
                   ("p_now", "timestamptz"), returns="scalar")
REGION_PAGE_PUT = fn("region_page_put", ("p_region_id", "text"), ("p_session_id", "text"), ("p_page_id", "text"),
                     ("p_user_id", "text"), ("p_now", "timestamptz"), returns="scalar")
REGION_PAGE_REMOVE = fn("region_page_remove", ("p_region_id", "text"), ("p_session_id", "text"),
                        ("p_page_id", "text"), ("p_user_id", "text"), returns="scalar")
REGION_PAGES = fn("region_pages", ("p_region_id", "text"), ("p_user_id", "text"), ("p_limit", "integer"),
                  ("p_now", "timestamptz"), result=RegionPage, returns="many")
REGION_LIST = fn("region_list", ("p_user_id", "text"), result=RegionListEntry, returns="many")
REGION_DROP = fn("region_drop", ("p_region_id", "text"), ("p_user_id", "text"), ("p_now", "timestamptz"),
                 returns="scalar")


class VmFork:
    """``db.vm_fork``: copy-on-write forks, garbage collection and shared regions of VM pages."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- copy-on-write -----------------------------------------------------------
    def fork(self, source_session_id: str, new_session_id: str, *, now: datetime | None = None) -> SessionForkResult:
        """memori.session_fork: a new session that sees every page of the source as of now, copying none."""
        self._db.pages.tlb.invalidate_session(source_session_id)  # the source's rows may be copied down later
        return self._db.call(  # type: ignore[no-any-return]
            SESSION_FORK, **given(p_source_session_id=source_session_id, p_new_session_id=new_session_id, p_now=now))

    def fork_chain(self, session_id: str) -> builtins.list[VmForkLink]:
        """memori.session_fork_chain: the ancestors of a forked session, parent first."""
        return self._db.call(SESSION_FORK_CHAIN, p_session_id=session_id)  # type: ignore[no-any-return]

    def storage(self) -> builtins.list[VmStorage]:
        """memori.vm_storage: bytes on disk of every VM table."""
        return self._db.call(VM_STORAGE)  # type: ignore[no-any-return]

    # -- garbage collection ------------------------------------------------------
    def gc(self, *, now: datetime | None = None) -> VmGcResult:
        """memori.vm_gc: mark unreachable pages to expire after vm.gc_grace; unmark reachable ones."""
        return self._db.call(VM_GC, **given(p_now=now))  # type: ignore[no-any-return]

    def gc_reachable(self, *, now: datetime | None = None) -> builtins.list[VmGcReachable]:
        """memori.vm_gc_reachable: the page rows a live session reaches, and how."""
        return self._db.call(VM_GC_REACHABLE, **given(p_now=now))  # type: ignore[no-any-return]

    # -- shared regions ------------------------------------------------------------
    def region_create(self, region_id: str, scope: str | None = None, description: str | None = None, *,
                      user_id: str | None = None, now: datetime | None = None) -> VmRegion:
        """memori.region_create: a region of scope 'pages' (default) or 'session'."""
        return self._db.call(  # type: ignore[no-any-return]
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
        return self._db.call(  # type: ignore[no-any-return]
            REGION_PAGES, **given(p_region_id=region_id, p_user_id=user_id, p_limit=limit, p_now=now))

    def region_list(self, *, user_id: str | None = None) -> builtins.list[RegionListEntry]:
        """memori.region_list: regions the acting user owns or may read."""
        return self._db.call(REGION_LIST, **given(p_user_id=user_id))  # type: ignore[no-any-return]

    def region_drop(self, region_id: str, *, user_id: str | None = None, now: datetime | None = None) -> bool:
        """memori.region_drop: delete a region, its access list and entries."""
        return bool(self._db.call(REGION_DROP, **given(p_region_id=region_id, p_user_id=user_id, p_now=now)))
