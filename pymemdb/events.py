"""Events: ``db.events.list(...)`` reads memori.events; ``db.events.listen()`` follows them live."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from pymemdb._sql import fn, given
from pymemdb.errors import wrap_exceptions
from pymemdb.types import Event

if TYPE_CHECKING:
    from pymemdb.db import Database

CHANNEL = "memori_events"

EVENT_LIST = fn(
    "event_list", ("p_event_type", "text"), ("p_limit", "integer"), ("p_now", "timestamptz"),
    result=Event, returns="many",
)


class Events:
    def __init__(self, db: Database) -> None:
        self._db = db

    def list(
        self, event_type: str | None = None, *, limit: int | None = None, now: datetime | None = None
    ) -> list[Event]:
        """memori.event_list: newest unexpired events, optionally of one type."""
        return self._db.call(  # type: ignore[no-any-return]
            EVENT_LIST, **given(p_event_type=event_type, p_limit=limit, p_now=now)
        )

    def listen(self, *, timeout: float | None = None, stop_after: int | None = None) -> Iterator[dict[str, Any]]:
        """Yield events as they are committed: ``for event in db.events.listen(): ...``.

        Each item is ``{"id", "type", "occurred_at", "payload"}`` (``truncated``
        instead of ``payload`` for bodies over NOTIFY's 8000 bytes: read those by
        id). A user's event is notified without its body (LISTEN is not subject
        to row-level security); its body is read here from memori.events as the
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

    def _private_body(self, event_id: int) -> dict[str, Any] | None:
        """The payload of a user's event if the acting user may see it (RLS, and the user itself)."""
        with self._db.transaction() as cur:
            row = cur.execute("select payload, user_id from memori.events where id = %s", (event_id,)).fetchone()
        if row is None or (self._db.user_id is not None and row[1] != self._db.user_id):
            return None
        return row[0]  # type: ignore[no-any-return]
