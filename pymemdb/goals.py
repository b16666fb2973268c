"""Goals (seed 04): ``db.goals`` -- never compressed, updated from model output markers."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING

from pymemdb._sql import fn, given
from pymemdb.types import Goal, GoalMarkerResult

if TYPE_CHECKING:
    from pymemdb.db import Database

GOAL_CREATE = fn(
    "goal_create", ("p_session_id", "text"), ("p_description", "text"), ("p_priority", "text"),
    ("p_user_id", "text"), ("p_now", "timestamptz"), result=Goal,
)
GOAL_LIST = fn("goal_list", ("p_session_id", "text"), result=Goal, returns="many")
GOAL_MARKERS_APPLY = fn(
    "goal_markers_apply", ("p_session_id", "text"), ("p_text", "text"), ("p_user_id", "text"),
    ("p_now", "timestamptz"), result=GoalMarkerResult,
)
GOAL_BLOCK = fn("goal_block", ("p_session_id", "text"), returns="scalar")


class Goals:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(
        self,
        session_id: str,
        description: str,
        *,
        priority: str | None = None,
        user_id: str | None = None,
        now: datetime | None = None,
    ) -> Goal:
        """memori.goal_create: the session's new active goal (the previous one is paused)."""
        return self._db.call(  # type: ignore[no-any-return]
            GOAL_CREATE,
            **given(p_session_id=session_id, p_description=description, p_priority=priority, p_user_id=user_id,
                    p_now=now),
        )

    def list(self, session_id: str) -> builtins.list[Goal]:
        """memori.goal_list: every goal of the session, oldest first."""
        return self._db.call(GOAL_LIST, p_session_id=session_id)  # type: ignore[no-any-return]

    def markers_apply(
        self, session_id: str, text: str, *, user_id: str | None = None, now: datetime | None = None
    ) -> GoalMarkerResult:
        """memori.goal_markers_apply: [GOAL]/[CHECKPOINT]/[DECISION]/[ARTIFACT]/[NEXT]; unknown lines reported."""
        return self._db.call(  # type: ignore[no-any-return]
            GOAL_MARKERS_APPLY, **given(p_session_id=session_id, p_text=text, p_user_id=user_id, p_now=now)
        )

    def block(self, session_id: str) -> str | None:
        """memori.goal_block: the never-compressed goal section of the system prompt (None without a goal)."""
        return self._db.call(GOAL_BLOCK, p_session_id=session_id)  # type: ignore[no-any-return]
