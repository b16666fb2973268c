"""The client cannot drift from the SQL: every wrapper matches pg_proc, every code is documented."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re

import psycopg

import pymemdb
from pymemdb import errors
from pymemdb._sql import REGISTRY, OneRow
from tests.conftest import ROOT
from tests.helpers import rows

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
