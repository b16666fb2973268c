"""Declarations of the SQL functions the client calls.

Each client method calls exactly one ``memori`` function through a
``SqlFunction``: its name, its parameters with explicit casts, and the
dataclass its rows become. The contract test (tests/test_contract.py) checks
every declaration against ``pg_proc``, so the client cannot drift from the SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from psycopg import sql
from psycopg.adapt import PyFormat
from psycopg.types.json import Jsonb

if TYPE_CHECKING:
    from pymemdb.db import Database

T = TypeVar("T")

# Parameters most functions take, declared once: (name, SQL type for the cast).
NOW = ("p_now", "timestamptz")
USER_ID = ("p_user_id", "text")
SESSION_ID = ("p_session_id", "text")

REGISTRY: list[SqlFunction[Any]] = []

# The user argument of a per-user function: the one Citus delegates a call by (p_owner_id for
# memory_save, else p_user_id). memori.distribute_functions() picks it by the same rule.
USER_PARAMS = ("p_owner_id", "p_user_id")

# What the client sends for the user argument when it knows no acting user: the value a NULL
# means (memori.user_id), as an expression. Citus 14.0.1 crashes the coordinator when a registered
# function gets a NULL constant as its distribution argument, a default NULL included; it delegates
# only a constant, so a call with this expression runs on the coordinator (docs/scale-out.md).
NO_USER = sql.SQL("nullif(pg_catalog.current_setting('memori.user_id', true), '')")


@dataclass(frozen=True)
class SqlFunction(Generic[T]):
    """A declaration. Declare with one()/maybe()/rows()/scalar(): their kind types ``Database.call``."""

    name: str  # without schema
    params: tuple[tuple[str, str], ...]  # (parameter name, SQL type for the cast)
    result: type[T] | None  # dataclass for rows; for a scalar its Python type (static only) or None
    returns: Literal["one", "many", "scalar"]
    # False where a NULL user means something else than the acting user (mcp_token_list and
    # mcp_token_revoke: every user, an admin's call); the client then leaves the argument out
    fill_user: bool = True

    def __post_init__(self) -> None:
        REGISTRY.append(self)

    @property
    def user_param(self) -> str | None:
        """The user argument (``p_owner_id``, else ``p_user_id``) the client always passes, or None."""
        names = {p for p, _ in self.params}
        return next((p for p in USER_PARAMS if p in names), None) if self.fill_user else None

    def query(self, args: dict[str, Any], *, binary: bool = False) -> sql.Composed:
        """``select ... from memori.name(p_x => %(p_x)s::type, ...)`` for the args given.

        Arguments that are not given are left out so the SQL defaults apply
        (``p_now default now()``, ...), except the user argument (``user_param``): never
        left out nor NULL (``Database.call`` passes the acting user; without one it is the
        expression ``NO_USER``, what its NULL default means). ``binary``: the parameters travel in
        PostgreSQL's binary format (``%(p_x)b``; bytea and arrays of it are not
        escaped byte by byte).
        """
        placeholder = PyFormat.BINARY if binary else PyFormat.AUTO
        return self._select({p: sql.Placeholder(p, placeholder) for p in args})

    def positional(self, names: Sequence[str]) -> str:
        """The text of ``query`` with ``names`` bound to ``$1, $2, ...`` in that order: a prepared statement's."""
        return self._select({p: sql.SQL(f"${i}") for i, p in enumerate(names, 1)}).as_string(None)

    def _select(self, values: dict[str, sql.Composable]) -> sql.Composed:
        unknown = set(values) - {p for p, _ in self.params}
        if unknown:
            raise TypeError(f"memori.{self.name} has no parameter(s) {sorted(unknown)}")
        if self.user_param is not None and self.user_param not in values:
            values = {**values, self.user_param: NO_USER}
        named = sql.SQL(", ").join(
            sql.SQL("{} => {}::{}").format(sql.Identifier(p), values[p], sql.SQL(cast))
            for p, cast in self.params
            if p in values
        )
        target = sql.SQL("{}.{}({})").format(sql.Identifier("memori"), sql.Identifier(self.name), named)
        if self.returns == "scalar":
            return sql.SQL("select {} as value").format(target)
        return sql.SQL("select * from {}").format(target)


class OneRow(SqlFunction[T]):
    """A function that always returns one row (a composite result): ``call`` returns ``T``."""


class MaybeRow(SqlFunction[T]):
    """A function that returns at most one row: ``call`` returns ``T | None``."""


class Rows(SqlFunction[T]):
    """A set-returning function: ``call`` returns ``list[T]``."""


class Scalar(SqlFunction[T]):
    """A function returning one value: ``call`` returns ``T`` (not checked at run time: the SQL is)."""


def one(name: str, *params: tuple[str, str], result: type[T], fill_user: bool = True) -> OneRow[T]:
    return OneRow(name, tuple(params), result, "one", fill_user)


def maybe(name: str, *params: tuple[str, str], result: type[T], fill_user: bool = True) -> MaybeRow[T]:
    return MaybeRow(name, tuple(params), result, "one", fill_user)


def rows(name: str, *params: tuple[str, str], result: type[T], fill_user: bool = True) -> Rows[T]:
    return Rows(name, tuple(params), result, "many", fill_user)


def scalar(name: str, *params: tuple[str, str], result: type[T], fill_user: bool = True) -> Scalar[T]:
    """``result`` is the Python type of the value (``int``, ``bool``, ``dict``), for the type checker."""
    return Scalar(name, tuple(params), result, "scalar", fill_user)


def given(**kwargs: Any) -> dict[str, Any]:
    """Drop arguments left at None so the SQL defaults apply."""
    return {k: v for k, v in kwargs.items() if v is not None}


def jsonb(value: Any) -> Jsonb | None:
    """``value`` as a jsonb argument; None stays None, so given() leaves it out and the SQL default applies."""
    return None if value is None else Jsonb(value)


class Room:
    """A concern's client (``db.memories``, ``db.budget``, ...): one-call wrappers over ``self._db.call``."""

    def __init__(self, db: Database) -> None:
        self._db = db
