"""The core room (sql/000-core.sql): settings and the one token estimate (``db.setting``, ``db.token_estimate``)."""

from __future__ import annotations

from pymemdb._sql import scalar

SETTING_GET = scalar("setting_get", ("p_key", "text"), ("p_default", "jsonb"), result=object)
TOKEN_ESTIMATE = scalar("token_estimate", ("p_text", "text"), ("p_kind", "text"), result=int)

__all__ = ["SETTING_GET", "TOKEN_ESTIMATE"]
