"""Goals (seed 04, sql/410-compression-goals.sql): ``db.goals``, never compressed, updated from model markers."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from pymemdb._sql import NOW, SESSION_ID, USER_ID, Room, given, one, rows, scalar


@dataclass(frozen=True)
class Goal:
    """A row of memori.goals."""

    id: UUID
    session_id: str
    user_id: str
    description: str
    priority: str
    status: str
    next_steps: list[str]
    created_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True)
class GoalMarkerResult:
    """memori.goal_marker_result: what goal_markers_apply changed, and the lines it did not understand."""

    goal_id: UUID | None
    goals_created: int
    checkpoints_updated: int
    decisions_added: int
    artifacts_recorded: int
    next_steps: list[str]
    unknown: list[str]


GOAL_CREATE = one(
    "goal_create", SESSION_ID, ("p_description", "text"), ("p_priority", "text"), USER_ID, NOW, result=Goal,
)
GOAL_LIST = rows("goal_list", SESSION_ID, result=Goal)
GOAL_MARKERS_APPLY = one("goal_markers_apply", SESSION_ID, ("p_text", "text"), USER_ID, NOW, result=GoalMarkerResult)
GOAL_BLOCK = scalar("goal_block", SESSION_ID, result=str)


class Goals(Room):
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
        return self._db.call(
            GOAL_CREATE,
            **given(p_session_id=session_id, p_description=description, p_priority=priority, p_user_id=user_id,
                    p_now=now),
        )

    def list(self, session_id: str) -> builtins.list[Goal]:
        """memori.goal_list: every goal of the session, oldest first."""
        return self._db.call(GOAL_LIST, p_session_id=session_id)

    def markers_apply(
        self, session_id: str, text: str, *, user_id: str | None = None, now: datetime | None = None
    ) -> GoalMarkerResult:
        """memori.goal_markers_apply: [GOAL]/[CHECKPOINT]/[DECISION]/[ARTIFACT]/[NEXT]; unknown lines reported."""
        return self._db.call(
            GOAL_MARKERS_APPLY, **given(p_session_id=session_id, p_text=text, p_user_id=user_id, p_now=now)
        )

    def block(self, session_id: str) -> str | None:
        """memori.goal_block: the never-compressed goal section of the system prompt (None without a goal)."""
        block: str | None = self._db.call(GOAL_BLOCK, p_session_id=session_id)
        return block
