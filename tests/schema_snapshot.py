"""A comparable description of everything pymemdb installs: the basis of the migration tests."""

from __future__ import annotations

from typing import Any

import psycopg

QUERIES: dict[str, str] = {
    "columns": """
        select c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attnum
          from pg_attribute a join pg_class c on c.oid = a.attrelid
          join pg_namespace n on n.oid = c.relnamespace
          left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
         where n.nspname = 'memori' and a.attnum > 0 and not a.attisdropped
         order by 1, 7""",
    "relations": """
        select c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity,
               c.relacl::text, pg_get_userbyid(c.relowner), obj_description(c.oid, 'pg_class'), c.reloptions
          from pg_class c join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = 'memori' order by 1""",
    "indexes": "select indexname, indexdef from pg_indexes where schemaname = 'memori' order by 1",
    "constraints": """
        select conrelid::regclass::text, conname, pg_get_constraintdef(oid)
          from pg_constraint where connamespace = 'memori'::regnamespace order by 1, 2""",
    "functions": """
        select p.oid::regprocedure::text, md5(p.prosrc), p.proconfig, p.prosecdef, p.provolatile,
               pg_get_function_result(p.oid), p.proacl::text, pg_get_userbyid(p.proowner),
               obj_description(p.oid, 'pg_proc')
          from pg_proc p where p.pronamespace = 'memori'::regnamespace order by 1""",
    "views": """
        select viewname, md5(definition) from pg_views where schemaname = 'memori' order by 1""",
    "policies": "select tablename, policyname, cmd, roles::text, qual, with_check from pg_policies"
                " where schemaname = 'memori' order by 1, 2",
    "types": """
        select t.typname, t.typtype, pg_get_userbyid(t.typowner)
          from pg_type t where t.typnamespace = 'memori'::regnamespace order by 1""",
    "triggers": """
        select tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) from pg_trigger
         where not tgisinternal and tgrelid in (select oid from pg_class where relnamespace = 'memori'::regnamespace)
         order by 1, 2""",
    "schema": "select nspacl::text, pg_get_userbyid(nspowner) from pg_namespace where nspname = 'memori'",
    "config": """
        select 'settings', key, value::text from memori.settings
        union all select 'policies', table_name || '/' || kind,
                         concat_ws(',', priority, retention, preserve_important, cleanup_enabled)
          from memori.retention_policies
        union all select 'skills', skill, concat_ws(',', short_name, ttl_days, permanent_namespace)
          from memori.session_skills
        union all select 'registry', table_name, concat_ws(',', relation, candidate_view, id_column)
          from memori.retention_tables
        order by 1, 2""",
    "alembic": "select version_num from memori.alembic_version",
}


def snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(query).fetchall() for name, query in QUERIES.items()}  # type: ignore[arg-type]


def diff(a: dict[str, list[tuple[Any, ...]]], b: dict[str, list[tuple[Any, ...]]]) -> dict[str, Any]:
    out = {}
    for key in a:
        if a[key] != b[key]:
            # repr: rows may hold lists (proconfig, reloptions), which do not hash
            rows_a, rows_b = set(map(repr, a[key])), set(map(repr, b[key]))
            out[key] = {"only_a": sorted(rows_a - rows_b), "only_b": sorted(rows_b - rows_a)}
    return out
