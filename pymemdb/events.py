"""Events (sql/030-events.sql): ``db.events.list(...)`` and ``get(id)`` read them; ``listen()`` follows them live."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pymemdb._sql import NOW, Room, given, maybe, rows
from pymemdb.errors import wrap_exceptions


@dataclass(frozen=True)
class Event:
    """A row of memori.events."""

    id: int
    event_type: str
    occurred_at: datetime
    payload: dict[str, Any]
    expires_at: datetime | None
    user_id: str  # the acting user; '' (the reserved system user) for system events (cleanup)

CHANNEL = "memori_events"

EVENT_LIST = rows("event_list", ("p_event_type", "text"), ("p_limit", "integer"), NOW, result=Event)
EVENT_GET = maybe("event_get", ("p_id", "bigint"), result=Event)


class Events(Room):
    def list(
        self, event_type: str | None = None, *, limit: int | None = None, now: datetime | None = None
    ) -> list[Event]:
        """memori.event_list: newest unexpired events, optionally of one type."""
        return self._db.call(
            EVENT_LIST, **given(p_event_type=event_type, p_limit=limit, p_now=now)
        )

    def listen(self, *, timeout: float | None = None, stop_after: int | None = None) -> Iterator[dict[str, Any]]:
        """Yield events as they are committed: ``for event in db.events.listen(): ...``.

        Each item is ``{"id", "type", "occurred_at", "payload"}`` (``truncated``
        instead of ``payload`` for bodies over NOTIFY's 8000 bytes: read those by
        id). A user's event is notified without its body (LISTEN is not subject
        to row-level security); its body is read with memori.event_get as the
        acting user, and events this user may not see are skipped. Uses its own
        connection for LISTEN, not the pool's.
        """
        with wrap_exceptions(), psycopg.connect(self._db.dsn, autocommit=True) as conn:
            conn.execute(f"listen {CHANNEL}")
            for notify in conn.notifies(timeout=timeout, stop_after=stop_after):
                event = json.loads(notify.payload)
                if event.pop("private", False):
                    body = self._private_body(event["id"])
                    if body is None:
                        continue
                    event["payload"] = body
                yield event

    def get(self, event_id: int) -> Event | None:
        """memori.event_get: one event by id, if the acting user may see it."""
        return self._db.call(EVENT_GET, p_id=event_id)

    def _private_body(self, event_id: int) -> dict[str, Any] | None:
        """The payload of a user's event if the acting user may see it (memori.event_get decides)."""
        event = self.get(event_id)
        return None if event is None else event.payload
