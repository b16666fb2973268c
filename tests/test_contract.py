"""The client cannot drift from the SQL: every wrapper matches pg_proc, every code is documented."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import types
import typing
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg

import pymemdb
from pymemdb import errors
from pymemdb._sql import REGISTRY, OneRow, SqlFunction
from tests.conftest import ROOT
from tests.helpers import rows, value

# Importing every client module registers its SqlFunctions, whatever ran before.
for _module in pkgutil.iter_modules(pymemdb.__path__):
    if _module.name != "__main__":  # that one runs the CLI
        importlib.import_module(f"pymemdb.{_module.name}")
# Integrations are sub-packages with optional dependencies (installed by the test extra).
importlib.import_module("pymemdb.integrations.langgraph")
# The MCP server is a sub-package too (the mcp extra, also in the test extra).
importlib.import_module("pymemdb.mcp.tokens")
importlib.import_module("pymemdb.mcp.server")

# SQL functions deliberately without a client method.
NO_WRAPPER = {
    "retention_register",  # DBA-only: registering a table is an install-time step
    "page_search_vector",  # for SQL: what a direct INSERT into memori.pages writes; Python never holds a tsvector
}


def _signature(conn: psycopg.Connection, name: str) -> dict:  # type: ignore[type-arg]
    found = rows(conn, """
        select p.proname, p.proretset,
               coalesce(p.proargnames, '{}') as names,
               coalesce(p.proargmodes::text[], array_fill('i'::text, array[p.pronargs])) as modes,
               coalesce(p.proallargtypes, p.proargtypes::oid[]) as types,
               p.prorettype, t.typrelid
          from pg_proc p join pg_type t on t.oid = p.prorettype
         where p.pronamespace = 'memori'::regnamespace and p.proname = %s""", (name,))
    assert len(found) == 1, f"memori.{name}: expected one function, found {len(found)} (overloads?)"
    return found[0]


def test_every_wrapper_matches_pg_proc(conn: psycopg.Connection) -> None:
    assert REGISTRY
    for function in REGISTRY:
        sig = _signature(conn, function.name)
        inputs = {n: t for n, m, t in zip(sig["names"], sig["modes"], sig["types"], strict=True) if m in ("i", "b")}
        for param, cast in function.params:
            assert param in inputs, f"memori.{function.name} has no parameter {param}"
            same = conn.execute("select %s::regtype::oid = %s::oid", (cast, inputs[param])).fetchone()
            assert same == (True,), f"memori.{function.name}({param}) is not {cast}"
        if isinstance(function, OneRow):
            assert not sig["proretset"], f"memori.{function.name} returns a set: declare it maybe() or rows()"
        if function.result is None or function.returns == "scalar":
            continue
        outputs = [n for n, m in zip(sig["names"], sig["modes"], strict=True) if m in ("o", "t")]
        if not outputs:
            outputs = [r["attname"] for r in rows(conn, "select attname from pg_attribute where attrelid = %s "
                                                       "and attnum > 0 and not attisdropped order by attnum",
                                                 (sig["typrelid"],))]
        fields = [f.name for f in dataclasses.fields(function.result)]
        assert fields == outputs, f"{function.result.__name__} != memori.{function.name} result columns"
        # "one" may be a set of at most one row (load_latest, cleanup_job); "many" must be a set
        assert sig["proretset"] or function.returns != "many", f"memori.{function.name} returns one row"


# -- result types: SQL column types against the dataclass annotations ---------------------
# The Python types a value of each SQL type may be declared as (psycopg's loaders, and what a
# dataclass may widen them to). Documents (json, jsonb) and extension types are anything.
SQL_TO_PYTHON: dict[str, tuple[Any, ...]] = {
    "text": (str,), "character varying": (str,), "name": (str,), "character": (str,), "\"char\"": (str,),
    "citext": (str,), "regclass": (str,),
    "smallint": (int,), "integer": (int,), "bigint": (int,), "oid": (int,),
    "numeric": (Decimal, int, float), "double precision": (float,), "real": (float,),
    "boolean": (bool,),
    "timestamp with time zone": (datetime,), "timestamp without time zone": (datetime,), "date": (date,),
    "interval": (timedelta,),
    "uuid": (UUID,),
    "bytea": (bytes,),
    "jsonb": (dict, list, str, int, float, bool, object, Any), "json": (dict, list, str, int, float, bool, object, Any),
}


def _python_base(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether it admits None)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
        return inner, len(args) < len(typing.get_args(annotation))
    return annotation, annotation is Any or annotation is object


def _fits(sql_type: str, annotation: Any) -> bool:
    """Does a value of ``sql_type`` (format_type) fit the Python annotation (None aside)?"""
    if annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation) or annotation
    if sql_type.endswith("[]"):
        element = typing.get_args(annotation)  # list[X] or list[X | None]: elements may be NULL
        return origin is list and (not element or _fits(sql_type[:-2], _python_base(element[0])[0]))
    allowed = SQL_TO_PYTHON.get(sql_type)
    if allowed is None:  # a composite, an enum, an extension's type (vector): not checked here
        return True
    return origin in allowed


def _result_columns(conn: psycopg.Connection, function: SqlFunction[Any]) -> list[dict[str, Any]]:
    """Name, type and NOT NULL of each result column of memori.<function> (composite, OUT or TABLE)."""
    sig = _signature(conn, function.name)
    found = rows(conn, """
        select a.name, format_type(a.type, null) as type, false as not_null
          from unnest(%(names)s::text[], %(modes)s::text[], %(types)s::oid[]) as a(name, mode, type)
         where a.mode in ('o', 't')""", {"names": sig["names"], "modes": sig["modes"], "types": sig["types"]})
    if found:
        return found
    return rows(conn, """
        select a.attname as name, format_type(a.atttypid, null) as type,
               a.attnotnull and c.relkind = 'r' as not_null
          from pg_attribute a join pg_class c on c.oid = a.attrelid
         where a.attrelid = %s and a.attnum > 0 and not a.attisdropped order by a.attnum""", (sig["typrelid"],))


def test_result_columns_have_the_python_types(conn: psycopg.Connection) -> None:
    """Field names AND types: every result column's SQL type fits its dataclass field's annotation,
    a scalar's type fits its declared result, and a field of a NOT NULL table column is not ``| None``."""
    problems = []
    for function in REGISTRY:
        if function.result is None:
            continue
        if function.returns == "scalar":
            sql_type = value(conn, "select format_type(prorettype, null) from pg_proc "
                                   "where pronamespace = 'memori'::regnamespace and proname = %s", (function.name,))
            if sql_type != "void" and not _fits(sql_type, function.result):
                problems.append(f"memori.{function.name} returns {sql_type}, declared {function.result}")
            continue
        hints = typing.get_type_hints(function.result)
        for column in _result_columns(conn, function):
            if column["name"] not in hints:
                continue  # names are checked by test_every_wrapper_matches_pg_proc
            base, optional = _python_base(hints[column["name"]])
            where = f"{function.result.__name__}.{column['name']} (memori.{function.name})"
            if not _fits(column["type"], base):
                problems.append(f"{where}: SQL {column['type']} is not {hints[column['name']]}")
            if optional and column["not_null"] and column["type"] not in ("json", "jsonb"):  # JSON null is None
                problems.append(f"{where}: the column is NOT NULL, the field says | None")
    assert not problems, "\n".join(problems)


def test_the_type_checker_catches_mismatches() -> None:
    assert _fits("bigint", int) and _fits("text[]", list[str]) and _fits("jsonb", dict[str, Any])
    assert not _fits("text", int) and not _fits("timestamp with time zone", str) and not _fits("integer[]", list[str])
    assert _python_base(int | None) == (int, True) and _python_base(str) == (str, False)
    assert _fits("bytea[]", list[bytes | None]) and not _fits("bytea[]", list[str | None])


def test_every_public_sql_function_has_a_wrapper(conn: psycopg.Connection) -> None:
    public = {r["proname"] for r in rows(conn, """
        select proname from pg_proc where pronamespace = 'memori'::regnamespace
           and proname not like '\\_%' and prokind = 'f'""")}
    wrapped = {f.name for f in REGISTRY}
    assert public - wrapped == NO_WRAPPER


def test_every_error_code_is_documented_and_mapped() -> None:
    doc = (ROOT / "docs" / "errors.md").read_text()
    raised = set()
    for path in (ROOT / "sql").glob("*.sql"):
        raised |= set(re.findall(r"errcode = '(PM\d{3})'", path.read_text()))
    for path in (ROOT / "migrations" / "versions").glob("*.py"):
        raised |= set(re.findall(r"errcode = '(PM\d{3})'", path.read_text()))
    classes = {cls.sqlstate for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, errors.PymemdbError) and cls.sqlstate}
    documented = set(re.findall(r"`(PM\d{3})`", doc))
    assert raised <= documented, f"undocumented: {raised - documented}"
    assert classes == documented, "each documented code has its exception class"
    assert raised <= classes | {"PM001"}
