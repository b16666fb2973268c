"""docs/reference.md: the signature of every public function and procedure of schema memori, from the catalog.

Generated from pg_proc (arguments with their defaults, result, `comment on function`), so it cannot drift
from the installed schema. Regenerate after changing a function::

    python -m tests.docs_reference "$PYMEMDB_DSN" > docs/reference.md

(any database where `pymemdb init` ran; tests/test_docs.py checks that every public function is listed).
"""

from __future__ import annotations

import sys

import psycopg

HEADER = """# Function reference

Every public function and procedure of schema `memori` (names not starting with `_`), with its
arguments and defaults, its result and its one-line purpose (`comment on function`, also shown by
`\\df+` and `\\dd memori.*` in psql). Generated from the catalog by `python -m tests.docs_reference
"$PYMEMDB_DSN" > docs/reference.md`; the pages of each concern have the examples with their output:
[sql-api.md](sql-api.md), [context.md](context.md), [budget.md](budget.md),
[compression.md](compression.md), [vm.md](vm.md), [langgraph.md](langgraph.md), [mcp.md](mcp.md).
Error codes: [errors.md](errors.md).

| function | returns | purpose |
|---|---|---|
"""

QUERY = """
select p.proname, pg_get_function_arguments(p.oid), coalesce(pg_get_function_result(p.oid), 'procedure'),
       coalesce(obj_description(p.oid, 'pg_proc'), '')
  from pg_proc p
 where p.pronamespace = 'memori'::regnamespace and p.proname !~ '^_' and p.prokind in ('f', 'p')
 order by p.proname, pg_get_function_arguments(p.oid)
"""


def public_functions(conn: psycopg.Connection) -> list[tuple[str, str, str, str]]:
    return [tuple(row) for row in conn.execute(QUERY).fetchall()]  # type: ignore[misc]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(rows: list[tuple[str, str, str, str]]) -> str:
    lines = [f"| `memori.{name}({_cell(args)})` | `{_cell(result)}` | {_cell(purpose)} |"
             for name, args, result, purpose in rows]
    return HEADER + "\n".join(lines) + "\n"


def main(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        sys.stdout.write(render(public_functions(conn)))


if __name__ == "__main__":
    main(sys.argv[1])
