"""MCP bearer tokens (sql/820-mcp.sql): ``db.mcp_tokens``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from pymemdb._sql import NOW, USER_ID, Room, given, maybe, one, rows, scalar
from pymemdb.errors import McpInvalidArgument


@dataclass(frozen=True)
class McpTokenSecret:
    """memori.mcp_token_secret: a new token; ``token`` is the secret, shown this once."""

    token_id: int
    user_id: str
    name: str
    token: str
    token_prefix: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class McpTokenInfo:
    """memori.mcp_token_info: a token without its secret; status active | expired | revoked."""

    token_id: int
    user_id: str
    name: str
    token_prefix: str
    status: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None
    created_by: str


@dataclass(frozen=True)
class McpPrincipal:
    """memori.mcp_principal: the user a valid token acts for."""

    token_id: int
    user_id: str
    name: str
    expires_at: datetime


MCP_TOKEN_CREATE = one(
    "mcp_token_create", USER_ID, ("p_name", "text"), ("p_ttl", "interval"), NOW, result=McpTokenSecret,
)
# a NULL user is every user here (an admin's listing or revoke by id): the client leaves it out
# when not given, and memori.distribute_functions() keeps both on the coordinator for that reason
MCP_TOKEN_LIST = rows("mcp_token_list", USER_ID, ("p_include_inactive", "boolean"), NOW, result=McpTokenInfo,
                      fill_user=False)
MCP_TOKEN_REVOKE = scalar("mcp_token_revoke", USER_ID, ("p_name", "text"), ("p_token_id", "bigint"), NOW, result=int,
                          fill_user=False)
MCP_TOKEN_VERIFY = maybe("mcp_token_verify", ("p_token", "text"), ("p_client", "text"), NOW, result=McpPrincipal)


class McpTokens(Room):
    def create(
        self, user_id: str, name: str = "default", *, ttl: timedelta | None = None, now: datetime | None = None
    ) -> McpTokenSecret:
        """memori.mcp_token_create: issue a token for ``user_id``; the secret is in the result only."""
        return self._db.call(
            MCP_TOKEN_CREATE, **given(p_user_id=user_id, p_name=name, p_ttl=ttl, p_now=now)
        )

    def list(
        self, user_id: str | None = None, *, include_inactive: bool = False, now: datetime | None = None
    ) -> list[McpTokenInfo]:
        """memori.mcp_token_list: the tokens the caller may see (of one user if given), never a secret."""
        return self._db.call(
            MCP_TOKEN_LIST, **given(p_user_id=user_id, p_include_inactive=include_inactive, p_now=now)
        )

    def revoke(
        self,
        user_id: str | None = None,
        name: str | None = None,
        *,
        token_id: int | None = None,
        now: datetime | None = None,
    ) -> int:
        """memori.mcp_token_revoke: revoke by name (of a user) or id; returns how many."""
        return self._db.call(
            MCP_TOKEN_REVOKE, **given(p_user_id=user_id, p_name=name, p_token_id=token_id, p_now=now)
        )

    def verify(
        self, token: str | None, *, client: str | None = None, now: datetime | None = None
    ) -> McpPrincipal | None:
        """memori.mcp_token_verify: the user a token acts for, or None (the refusal is recorded)."""
        return self._db.call(
            MCP_TOKEN_VERIFY, p_token=token, **given(p_client=client, p_now=now)
        )


_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
          "w": 604800, "week": 604800, "weeks": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_ttl(text: str | float | int) -> timedelta:
    """A positive duration: seconds as a number, or ``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"1.5 hours"``.

    Raises PM130 (McpInvalidArgument) otherwise.
    """
    seconds: float | None = None
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    elif isinstance(text, str):
        match = _DURATION.match(text.lower())
        if match and match.group(2) in _UNITS | {"": 1}:
            seconds = float(match.group(1)) * (_UNITS.get(match.group(2), 1))
    if seconds is None or not math.isfinite(seconds) or seconds <= 0 or seconds > 100 * 365 * 86400:
        raise McpInvalidArgument(
            f"ttl {text!r} is not a positive duration",
            sqlstate="PM130",
            hint="Pass seconds as a number, or a number with a unit: '90s', '30m', '12h', '7d', '2w'; "
                 "omit the ttl to keep it forever.",
        )
    return timedelta(seconds=seconds)
