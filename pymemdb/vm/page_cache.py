"""The page-table cache (the seed's TLB): recent page lookups kept client-side.

512 entries, least recently used out first, with hit and miss counters. A
``LISTEN memori_pages`` connection tells it which pages changed anywhere
(the trigger on memori.pages notifies on every update and delete); the cache
drains those notifications before each lookup. Notifications arrive after the
writer commits, so a worker's own writes invalidate its cache directly.

Expiry sends no notification (nothing is written when a page's
``expires_at`` passes), so each entry carries the page's ``expires_at`` and a
lookup at or after it is a miss that drops the entry: like the database's
reads, the cache never serves an expired page. The clock is the lookup's
``now`` (tests inject it), else this machine's UTC time.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg


@dataclass(frozen=True)
class PageTableEntry:
    """memori.page_table_entry: what a page-table cache (TLB) keeps about a page."""

    page_id: str
    tier: str
    compression_level: int
    version: int
    dirty: bool
    last_flushed: datetime | None
    last_accessed: datetime
    access_count: int
    in_working_set: bool
    level: int | None
    pinned: bool
    expires_at: datetime | None = None  # a cache must not serve the entry at or after this instant


CHANNEL = "memori_pages"
Key = tuple[str, str]  # (session_id, page_id)


def page_tag(session_id: str, page_id: str) -> str:
    """The opaque tag memori._pages_notify sends for a page (LISTEN would show ids to every user)."""
    return hashlib.md5(f"{session_id}\x01{page_id}".encode(), usedforsecurity=False).hexdigest()


class PageTLB:
    """An LRU map of (session_id, page_id) -> PageTableEntry with hit/miss counters."""

    def __init__(self, max_entries: int = 512, *, clock: Callable[[], datetime] | None = None) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.entries: OrderedDict[Key, PageTableEntry] = OrderedDict()
        self._by_tag: dict[str, Key] = {}
        self.hits = 0
        self.misses = 0
        self._listener: psycopg.Connection[Any] | None = None

    # -- the cache -------------------------------------------------------------
    def lookup(self, session_id: str, page_id: str, now: datetime | None = None) -> PageTableEntry | None:
        """The cached entry (counted as a hit, moved to most recent) or None (a miss).

        An entry whose page expires at or before ``now`` (default: the clock) is
        dropped and counted as a miss.
        """
        self.poll()
        entry = self.entries.get((session_id, page_id))
        if entry is not None and entry.expires_at is not None and (now or self.clock()) >= entry.expires_at:
            self.invalidate(session_id, page_id)
            entry = None
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self.entries.move_to_end((session_id, page_id))
        return entry

    def insert(self, session_id: str, entry: PageTableEntry) -> None:
        key = (session_id, entry.page_id)
        self.entries[key] = entry
        self.entries.move_to_end(key)
        self._by_tag[page_tag(*key)] = key
        while len(self.entries) > self.max_entries:
            old, _ = self.entries.popitem(last=False)
            self._by_tag.pop(page_tag(*old), None)

    def invalidate(self, session_id: str, page_id: str) -> None:
        self.entries.pop((session_id, page_id), None)
        self._by_tag.pop(page_tag(session_id, page_id), None)

    def invalidate_tag(self, tag: str) -> None:
        key = self._by_tag.pop(tag, None)
        if key is not None:
            self.entries.pop(key, None)

    def invalidate_session(self, session_id: str) -> None:
        for key in [k for k in self.entries if k[0] == session_id]:
            self.invalidate(*key)

    def flush(self) -> None:
        self.entries.clear()
        self._by_tag.clear()

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {"entries": len(self.entries), "max_entries": self.max_entries, "hits": self.hits,
                "misses": self.misses, "hit_rate": round(self.hits / total, 3) if total else None}

    # -- invalidation through LISTEN/NOTIFY ------------------------------------
    def listen(self, dsn: str) -> None:
        """Follow page changes from every worker (one extra connection)."""
        if self._listener is None:
            self._listener = psycopg.connect(dsn, autocommit=True)
            self._listener.execute(f"listen {CHANNEL}")

    def poll(self, timeout: float = 0.0) -> int:
        """Apply the page-change notifications that have arrived (waiting up to ``timeout`` s for one)."""
        if self._listener is None:
            return 0
        seen = 0
        waited = list(self._listener.notifies(timeout=timeout, stop_after=1)) if timeout > 0 else []
        for notify in [*waited, *self._listener.notifies(timeout=0)]:
            seen += 1
            try:
                self.invalidate_tag(json.loads(notify.payload)["tag"])
            except (ValueError, KeyError, TypeError):
                self.flush()  # an unreadable notice: be safe
        return seen

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
