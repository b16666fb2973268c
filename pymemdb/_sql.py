"""Declarations of the SQL functions the client calls.

Each client method calls exactly one ``memori`` function through a
``SqlFunction``: its name, its parameters with explicit casts, and the
dataclass its rows become. The contract test (tests/test_contract.py) checks
every declaration against ``pg_proc``, so the client cannot drift from the SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from psycopg import sql

REGISTRY: list[SqlFunction] = []


@dataclass(frozen=True)
class SqlFunction:
    name: str  # without schema
    params: tuple[tuple[str, str], ...]  # (parameter name, SQL type for the cast)
    result: type | None  # dataclass for rows; None for a scalar
    returns: Literal["one", "many", "scalar"]

    def __post_init__(self) -> None:
        REGISTRY.append(self)

    def query(self, args: dict[str, Any]) -> sql.Composed:
        """``select ... from memori.name(p_x => %(p_x)s::type, ...)`` for the args given.

        Arguments that are not given are left out so the SQL defaults apply
        (``p_now default now()``, ...).
        """
        unknown = set(args) - {p for p, _ in self.params}
        if unknown:
            raise TypeError(f"memori.{self.name} has no parameter(s) {sorted(unknown)}")
        named = sql.SQL(", ").join(
            sql.SQL("{} => {}::{}").format(sql.Identifier(p), sql.Placeholder(p), sql.SQL(cast))
            for p, cast in self.params
            if p in args
        )
        target = sql.SQL("{}.{}({})").format(sql.Identifier("memori"), sql.Identifier(self.name), named)
        if self.returns == "scalar":
            return sql.SQL("select {} as value").format(target)
        return sql.SQL("select * from {}").format(target)


def given(**kwargs: Any) -> dict[str, Any]:
    """Drop arguments left at None so the SQL defaults apply."""
    return {k: v for k, v in kwargs.items() if v is not None}


def fn(
    name: str,
    *params: tuple[str, str],
    result: type | None = None,
    returns: Literal["one", "many", "scalar"] = "one",
) -> SqlFunction:
    return SqlFunction(name, tuple(params), result, returns)
