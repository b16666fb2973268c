"""The core room (sql/000-core.sql): settings, their rules and the one token estimate (``db.setting``, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from pymemdb._sql import rows, scalar


@dataclass(frozen=True)
class SettingRule:
    """A row of memori.setting_rules(): what a memori.settings value must be (a write that breaks it: PM001)."""

    key: str
    kind: str
    min_value: Decimal | None
    max_value: Decimal | None
    choices: str | None  # the '|'-separated values of a choice
    rule: str  # the rule in words, as the PM001 message says it


SETTING_GET = scalar("setting_get", ("p_key", "text"), ("p_default", "jsonb"), result=object)
SETTING_RULES = rows("setting_rules", result=SettingRule)
TOKEN_ESTIMATE = scalar("token_estimate", ("p_text", "text"), ("p_kind", "text"), result=int)

__all__ = ["SETTING_GET", "SETTING_RULES", "TOKEN_ESTIMATE", "SettingRule"]
