"""memori.distribute() and the distribution plan on a single server (no Citus): fast, no cluster."""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

import pymemdb
from pymemdb.cli.main import app
from pymemdb.errors import CitusMissing
from tests.helpers import rows


def test_distribute_without_citus_is_pm140_with_a_hint(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select * from memori.distribute()")
    assert caught.value.sqlstate == "PM140"
    assert "CREATE EXTENSION citus" in (caught.value.diag.message_hint or "")
    with pytest.raises(psycopg.Error) as dry:
        conn.execute("select * from memori.distribute(p_dry_run => true)")
    assert dry.value.sqlstate == "PM140"


def test_distribute_functions_without_citus_is_pm140(db: pymemdb.Database) -> None:
    with pytest.raises(CitusMissing):
        db.cluster.distribute_functions(dry_run=True)


def test_client_maps_pm140(db: pymemdb.Database) -> None:
    with pytest.raises(CitusMissing) as caught:
        db.cluster.distribute()
    assert caught.value.hint and "citus_add_node" in caught.value.hint


def test_init_distribute_without_citus_fails_with_the_hint(env: str) -> None:
    result = CliRunner().invoke(app, ["init", "--distribute"])
    assert result.exit_code == 1
    assert "citus extension is not installed" in result.output and "CREATE EXTENSION citus" in result.output


def test_the_plan_places_every_table(conn: psycopg.Connection) -> None:
    """A new table must get a placement in sql/950-distribute.sql (docs/scale-out.md's plan table)."""
    tables = {r["relname"] for r in rows(conn, """
        select relname from pg_class
         where relnamespace = 'memori'::regnamespace and relkind in ('r', 'p') and not relispartition""")}
    plan = rows(conn, "select * from memori.distribution_plan()")
    assert {p["table_name"] for p in plan} == tables
    assert [p["ord"] for p in plan] == list(range(1, len(plan) + 1))
    assert {p["placement"] for p in plan} == {"distributed", "reference", "local"}
    # every distributed table is distributed by its user (memories: owner_id, its user_id is seed 05's
    # namespace); reference and local tables have no column
    for p in plan:
        owner = "owner_id" if p["table_name"] == "memories" else "user_id"
        expected = owner if p["placement"] == "distributed" else None
        assert p["distribution_column"] == expected, p["table_name"]


def test_every_user_table_is_distributed_or_a_cross_user_reference(conn: psycopg.Connection) -> None:
    cross_user = {"projects", "project_members", "vm_regions", "vm_region_members"}
    owned = {r["relname"] for r in rows(conn, """
        select c.relname from pg_class c join pg_attribute a on a.attrelid = c.oid
         where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'p')
           and a.attname in ('user_id', 'owner_id') and not a.attisdropped""")}
    plan = {p["table_name"]: p["placement"] for p in rows(conn, "select * from memori.distribution_plan()")}
    for table in owned:
        assert plan[table] == ("reference" if table in cross_user else "distributed"), table


def test_referenced_tables_come_first(conn: psycopg.Connection) -> None:
    order = {p["table_name"]: p["ord"] for p in rows(conn, "select * from memori.distribution_plan()")}
    placement = {p["table_name"]: p["placement"] for p in rows(conn, "select * from memori.distribution_plan()")}
    for fk in rows(conn, """
        select c.conrelid::regclass::text as child, c.confrelid::regclass::text as parent from pg_constraint c
         where c.contype = 'f' and c.connamespace = 'memori'::regnamespace and c.conrelid <> c.confrelid"""):
        child, parent = fk["child"].removeprefix("memori."), fk["parent"].removeprefix("memori.")
        if placement[child] == placement[parent] or placement[parent] == "reference":
            assert order[parent] < order[child], f"{parent} must be placed before {child}"


def test_blockers_name_the_keys_without_the_user(conn: psycopg.Connection) -> None:
    conn.execute("create table memori.blocker_probe (id bigint primary key, payload text)")
    found = rows(conn, """
        select memori._distribution_blockers('memori.blocker_probe', 'distributed', 'user_id') as b,
               memori._distribution_blockers('memori.settings', 'reference', null) as ok,
               memori._distribution_blockers('memori.retention_tables', 'reference', null) as oids""")[0]
    assert "no column user_id" in found["b"]
    assert any(b.startswith("blocker_probe_pkey PRIMARY KEY") for b in found["b"])
    assert found["ok"] == []
    assert found["oids"] == []  # qualified names since revision 0029, not node-local OIDs
