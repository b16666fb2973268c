"""Catalog lint and least privilege: pinned search_path, no PUBLIC access, roles do only their job."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.conftest import ROOT
from tests.helpers import T0, assert_sqlstate, memory, rows, value

# Procedures that COMMIT cannot carry a SET clause; they qualify every name instead.
TRANSACTION_CONTROL = {"memori.cleanup_run(integer,integer,text)",
                       "memori._cleanup_whole(timestamp with time zone,integer,integer,text,boolean,"
                       "memori.cleanup_summary)"}
# SQL-standard bodies (BEGIN ATOMIC) are resolved when created, so the caller's
# search_path cannot reach them; without a SET clause PostgreSQL inlines them.
# The hot reads that read tables (the LangGraph saver's, seed 05's latest checkpoint)
# have string bodies instead, every table and function qualified: Citus refuses
# SQL-standard bodies that read distributed tables, and where Citus is installed they
# become PL/pgSQL with a pinned search_path (memori._as_plpgsql).
INLINED_STRING = {"memori.lg_checkpoint_stamp(text,text,uuid,text,timestamp with time zone)",
                  "memori.lg_checkpoint_get(text,text,uuid,text,timestamp with time zone,text,text)",
                  "memori.session_checkpoint_load_latest(text,text,timestamp with time zone)",
                  "memori._session_checkpoint_current(text,text,timestamp with time zone)"}
INLINED = INLINED_STRING | {
           "memori._lg_acting(text)", "memori._acting_user_inlined(text)",
           "memori._store_text_spec(jsonb,text[],text)", "memori._store_item_tsv(jsonb,text)",
           "memori._store_common_path(text)", "memori._context_scope_rank(text)",
           "memori._skill_namespace_of(text,text,timestamp with time zone)",
           "memori._lg_msgpack_array(bytea)", "memori._lg_msgpack_array_header(integer)",
           "memori._recency_curve(double precision,boolean,boolean,boolean,double precision,double precision,"
           "double precision,double precision)"}


def test_every_function_pins_search_path(conn: psycopg.Connection) -> None:
    unpinned = [
        r["sig"] for r in rows(conn, """
            select p.oid::regprocedure::text as sig, p.proconfig
              from pg_proc p where p.pronamespace = 'memori'::regnamespace""")
        if "search_path=pg_catalog, memori, pg_temp" not in (r["proconfig"] or [])
    ]
    assert sorted(unpinned) == sorted(TRANSACTION_CONTROL | INLINED)
    atomic = rows(conn, "select p.oid::regprocedure::text as sig from pg_proc p "
                        "where p.pronamespace = 'memori'::regnamespace and p.prosqlbody is not null")
    assert {r["sig"] for r in atomic} == INLINED - INLINED_STRING


def test_nothing_is_executable_by_public(conn: psycopg.Connection) -> None:
    # NULL proacl means the default, which grants EXECUTE to PUBLIC
    public = rows(conn, """
        select p.oid::regprocedure::text as sig from pg_proc p
         where p.pronamespace = 'memori'::regnamespace
           and (p.proacl is null or exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0))""")
    assert public == []
    assert value(conn, "select count(*) from pg_proc where pronamespace = 'memori'::regnamespace and prosecdef "
                       "and (proacl is null or exists (select 1 from aclexplode(proacl) a where a.grantee = 0))") == 0
    assert value(conn, "select count(*) from pg_namespace, aclexplode(nspacl) a "
                       "where nspname = 'memori' and a.grantee = 0") == 0
    assert value(conn, "select count(*) from pg_class c, aclexplode(c.relacl) a "
                       "where c.relnamespace = 'memori'::regnamespace and a.grantee = 0") == 0


def test_every_object_is_owned_by_memori_owner(conn: psycopg.Connection) -> None:
    owners = {r[0] for r in conn.execute("""
        select pg_get_userbyid(relowner) from pg_class where relnamespace = 'memori'::regnamespace
        union select pg_get_userbyid(proowner) from pg_proc where pronamespace = 'memori'::regnamespace
        union select pg_get_userbyid(nspowner) from pg_namespace where nspname = 'memori'""").fetchall()}
    assert owners == {"memori_owner"}
    assert value(conn, "select rolcanlogin from pg_roles where rolname = 'memori_owner'") is False


def test_every_public_object_is_documented(conn: psycopg.Connection) -> None:
    missing = rows(conn, """
        select p.oid::regprocedure::text as name from pg_proc p
         where p.pronamespace = 'memori'::regnamespace and obj_description(p.oid, 'pg_proc') is null
        union all
        select c.relname from pg_class c
         where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'v')
           and obj_description(c.oid, 'pg_class') is null
           and c.relname <> 'alembic_version'""")
    assert missing == []


def test_views_are_security_invoker(conn: psycopg.Connection) -> None:
    definer = rows(conn, """
        select relname from pg_class where relnamespace = 'memori'::regnamespace and relkind = 'v'
           and not coalesce('security_invoker=true' = any(reloptions), false)""")
    assert definer == []


def test_dynamic_sql_quotes_identifiers() -> None:
    """EXECUTE builds statements with format(%I/%L/%s of regclass) or USING, never raw concatenation."""
    allowed = {"'create or replace view memori.retention_rows with (security_invoker = true) as ' || v_branches"}
    for path in (ROOT / "sql").glob("*.sql"):
        for match in re.finditer(r"execute\s+('[^;]*?'\s*\|\|\s*\w+)", path.read_text(), flags=re.IGNORECASE):
            assert match.group(1) in allowed, f"{path.name}: unquoted dynamic SQL {match.group(1)!r}"


def _as(conn: psycopg.Connection, role: str) -> None:
    conn.execute(f"set role {role}")


def test_app_role_uses_the_api_but_cannot_run_cleanup(conn: psycopg.Connection) -> None:
    _as(conn, "memori_app")
    # fail closed: without memori.user_id an app role writes (and reads) nothing
    assert_no_privilege(conn, "select (memori.session_checkpoint_save('api', 'alice', 'x')).id")
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    value(conn, "select (memori.session_checkpoint_save('api', 'alice', 'x')).id")
    assert value(conn, "select count(*) from memori.cleanup_preview()") == 0
    assert_no_privilege(conn, "select memori.cleanup_execute()")
    assert_no_privilege(conn, "select memori.cleanup_schedule()")
    assert_no_privilege(conn, "update memori.retention_policies set priority = 0")
    assert_no_privilege(conn, "update memori.settings set value = 'false'")


def test_cleaner_role_cleans_but_cannot_write_memories(conn: psycopg.Connection) -> None:
    memory(conn, "ns", T0)
    _as(conn, "memori_cleaner")
    assert rows(conn, "select * from memori.cleanup_execute(%s)", (T0,))[0]["deleted"] == 1
    conn.execute("call memori.cleanup_run(10, null, 'sql')")
    assert_no_privilege(conn, "select memori.session_checkpoint_save('api', 'alice', 'x')")
    assert_no_privilege(conn, "insert into memori.memories (user_id, content) values ('x', 'y')")
    assert_no_privilege(conn, "update memori.memories set expires_at = null")


def assert_no_privilege(conn: psycopg.Connection, query: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(query)


def test_search_path_hijack_is_ignored(conn: psycopg.Connection) -> None:
    """Objects named like ours (or like pg_catalog's) in public and pg_temp are never called."""
    conn.execute("create function public._setting(text) returns jsonb language sql "
                 "as $$ select '\"hijacked\"'::jsonb $$")
    conn.execute("create function public.now() returns timestamptz language sql "
                 "as $$ select '2000-01-01'::timestamptz $$")
    conn.execute("create table public.memories (id int)")
    conn.execute("create temp table memories (id bigint, user_id text)")
    conn.execute("set search_path = pg_temp, public, pg_catalog")
    row = rows(conn, "select * from memori.session_checkpoint_save('api', 'alice', 'x')")[0]
    assert row["created_at"].year > 2000
    latest = rows(conn, "select * from memori.session_checkpoint_load_latest('api', 'alice')")  # inlined: qualified
    assert [(r["id"], r["source"]) for r in latest] == [(row["id"], "current")]
    assert value(conn, "select count(*) from memori.memories") == 1
    assert_sqlstate(conn, "PM001", "select * from memori.cleanup_preview(now(), 0)")


def test_search_path_hijack_is_ignored_by_the_context_store(conn: psycopg.Connection) -> None:
    conn.execute("create function public._acting_user(text) returns text language sql as $$ select 'mallory' $$")
    conn.execute("create function public._is_project_member(text, text) returns boolean language sql "
                 "as $$ select true $$")
    conn.execute("create table public.context_entries (id uuid, key text, value jsonb)")
    conn.execute("create temp table sessions (session_id text, user_id text)")
    conn.execute("create function pg_temp.current_setting(text, boolean) returns text language sql "
                 "as $$ select 'mallory' $$")
    conn.execute("set search_path = pg_temp, public, pg_catalog")
    conn.execute("select memori.context_set('k', '\"u\"', 'user_preferences', 'user', 'alice')")
    conn.execute("select memori.context_set('k', '\"s\"', 'user_preferences', 'session', 'alice', null, 's1')")
    row = rows(conn, "select * from memori.context_get('k', 'alice', null, 's1')")[0]
    assert (row["value"], row["scope"], row["user_id"]) == ("s", "session", "alice")
    assert value(conn, "select count(*) from public.context_entries") == 0
    assert value(conn, "select count(*) from memori.sessions where user_id = 'alice'") == 1
