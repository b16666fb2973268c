"""Install and upgrade the memori schema.

Two layers, as DESIGN.md says: alembic revisions (run-once DDL) and then every
``sql/NNN-topic.sql`` file re-applied in order (functions, views, grants). The
whole install is one transaction under an advisory lock, so two installers
never interleave and a failure leaves the database as it was.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from pymemdb.errors import wrap_exceptions

_INSTALL_LOCK = 7310582961174350242  # advisory lock key: one installer at a time


def package_version() -> str:
    try:
        return version("pymemdb")
    except PackageNotFoundError:  # running from a source tree
        return "0+source"


def _migrations_dir() -> Path:
    return Path(str(resources.files("pymemdb.migrations")))


def sql_files() -> list[tuple[str, str]]:
    """(name, text) of every sql/NNN-topic.sql file, in install order."""
    root = resources.files("pymemdb.sql")
    files = sorted((p for p in root.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name, p.read_text(encoding="utf-8")) for p in files]


def sql_sha256() -> str:
    digest = hashlib.sha256()
    for name, text in sql_files():
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


def alembic_config(**kwargs: object) -> Config:
    cfg = Config(**kwargs)  # type: ignore[arg-type]
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("script_location", str(_migrations_dir()))
    cfg.set_main_option("version_locations", str(_migrations_dir() / "versions"))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def known_revisions() -> set[str]:
    """Every alembic revision this client ships."""
    return {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


@dataclass(frozen=True)
class InstallResult:
    changed: bool
    from_revision: str | None
    to_revision: str
    sql_sha256: str
    embedding_dim: int | None = None  # memori.pages.embedding's dimension after the install


def current_revision(cur: psycopg.Cursor[Any]) -> str | None:
    """The alembic revision of schema memori, or None when it is not installed."""
    if cur.execute("select to_regclass('memori.alembic_version')").fetchone() == (None,):
        return None
    row = cur.execute("select version_num from memori.alembic_version").fetchone()
    return row[0] if row else None


def _installed_sql_sha(cur: psycopg.Cursor[Any]) -> str | None:
    if cur.execute("select to_regclass('memori.installs')").fetchone() == (None,):
        return None
    row = cur.execute("select sql_sha256 from memori.installs order by id desc limit 1").fetchone()
    return row[0] if row else None


def install(
    dsn: str, *, target: str = "head", force: bool = False, apply_sql: bool = True,
    embedding_dim: int | None = None,
) -> InstallResult:
    """Install or upgrade the schema at ``dsn``; a no-op when already current (unless ``force``).

    ``embedding_dim`` chooses the dimension of page embeddings
    (``memori.vm_embedding_dim_set``, in the same transaction); left out, the
    installed dimension stays (384 on a new install). ``target``/``apply_sql``
    exist for the migration tests, which stop at an older revision to upgrade from it.
    """
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool
    )
    digest = sql_sha256()
    with wrap_exceptions(), engine.begin() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        # raw psycopg cursor: no parameters, so '%' in SQL text stays literal
        with raw.cursor() as cur:  # type: ignore[attr-defined]
            cur.execute("select pg_advisory_xact_lock(%s)", (_INSTALL_LOCK,))
            before = current_revision(cur)
            wanted = head_revision() if target == "head" else target
            if not force and before == wanted and (not apply_sql or _installed_sql_sha(cur) == digest):
                changed = embedding_dim is not None and _set_embedding_dim(cur, embedding_dim) != embedding_dim
                return InstallResult(changed, before, wanted, digest, _embedding_dim(cur))
            _citus_local_install(cur)
            cur.execute("create schema if not exists memori")
        _replay_missed_revisions(conn, before)
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, target)
        with raw.cursor() as cur:  # type: ignore[attr-defined]
            if apply_sql:
                for _name, text in sql_files():
                    cur.execute(text)
                cur.execute(
                    "insert into memori.installs (pymemdb_version, alembic_revision, sql_sha256)"
                    " values (%s, %s, %s)",
                    (package_version(), wanted, digest),
                )
                if embedding_dim is not None:
                    _set_embedding_dim(cur, embedding_dim)
            dim = _embedding_dim(cur) if apply_sql else None
            after = MigrationContext.configure(conn).get_current_revision()
    return InstallResult(True, before, after or wanted, digest, dim)


# Revisions put *under* a revision that had already landed, and a relation each
# one creates. A database installed before the re-chaining is stamped with a
# revision whose ancestors now include the inserted one, so alembic would never
# run it: 0004 went under 0005 (and 0007, which first sat on 0005), 0006 under
# 0007, 0009 under 0010. Never again: tests/frozen_revisions.txt freezes every
# landed revision's file and parent (tests/test_upgrade_paths.py).
RECHAINED: tuple[tuple[str, str], ...] = (
    ("0004", "memori.chunk_types"),
    ("0006", "memori.pages"),
    ("0009", "memori.vm_recall_signals"),
)


def missed_revisions(cur: psycopg.Cursor[Any], stamped: str | None) -> list[str]:
    """Revisions a database stamped ``stamped`` counts as applied but never ran (re-chained later)."""
    if stamped is None or stamped not in known_revisions():
        return []
    script = ScriptDirectory.from_config(alembic_config())
    applied = {rev.revision for rev in script.iterate_revisions(stamped, "base")}
    missed = []
    for revision, marker in RECHAINED:
        if revision in applied and cur.execute("select to_regclass(%s)", (marker,)).fetchone() == (None,):
            missed.append(revision)
    return missed


def _replay_missed_revisions(conn: Any, stamped: str | None) -> list[str]:
    """Run the upgrade() of every revision the stamped database missed, oldest first, before alembic goes on.

    Each one only creates what its marker says is absent (tables, indexes,
    types of its own), so running it after its later siblings gives the
    schema a fresh install has; sql/ is re-applied afterwards as always.
    """
    raw = conn.connection.dbapi_connection
    with raw.cursor() as cur:
        missed = missed_revisions(cur, stamped)
    if not missed:
        return []
    script = ScriptDirectory.from_config(alembic_config())
    with Operations.context(MigrationContext.configure(conn)):
        for revision in missed:
            module = script.get_revision(revision).module
            module.upgrade()
    return missed


def _replay_script(stamped: str) -> list[str]:
    """For ``install_script``: each re-chained revision under ``stamped``, run only if its marker is absent.

    The offline twin of ``_replay_missed_revisions``: the script cannot look at
    the database while it is written, so the check runs in it.
    """
    if stamped not in known_revisions():
        return []
    script = ScriptDirectory.from_config(alembic_config())
    applied = {rev.revision for rev in script.iterate_revisions(stamped, "base")}
    parts = []
    for revision, marker in RECHAINED:
        if revision not in applied:
            continue
        buffer = io.StringIO()
        context = MigrationContext.configure(dialect_name="postgresql",
                                             opts={"as_sql": True, "output_buffer": buffer})
        with Operations.context(context):
            script.get_revision(revision).module.upgrade()
        parts.append(
            f"-- revision {revision}, if this database missed it (installed before it was put under {stamped})\n"
            "do $pymemdb_replay$\nbegin\n"
            f"  if pg_catalog.to_regclass('{marker}') is null then\n"
            f"    execute $pymemdb_ddl${buffer.getvalue()}$pymemdb_ddl$;\n"
            "  end if;\nend\n$pymemdb_replay$;\n"
        )
    return parts
# The same rule as _citus_local_install for psql, session-wide: the script has several transactions.
_CITUS_LOCAL_INSTALL_SQL = """\
do $citus$
declare
  v_placed boolean;
begin
  if exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    execute 'select exists (select 1 from pg_dist_partition p join pg_class c on c.oid = p.logicalrelid'
            ' join pg_namespace n on n.oid = c.relnamespace where n.nspname = ''memori'')' into v_placed;
    if v_placed then
      perform pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', false);
    else
      perform pg_catalog.set_config('citus.enable_ddl_propagation', 'off', false);
    end if;
  end if;
end
$citus$;"""


def _citus_local_install(cur: psycopg.Cursor[Any]) -> None:
    """On a Citus coordinator: install locally while no memori table is placed, else propagate.

    Citus would otherwise propagate each new object whose dependencies it can
    (schema, types, functions, the empty first version of a generated view) and
    then refuse to replace that view once it reads local tables. The local
    objects reach the workers when ``memori.distribute()`` distributes them.
    """
    if cur.execute("select 1 from pg_extension where extname = 'citus'").fetchone() is None:
        return
    distributed = cur.execute(
        "select 1 from pg_dist_partition p join pg_class c on c.oid = p.logicalrelid"
        " join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'memori' limit 1"
    ).fetchone()
    if distributed is None:
        cur.execute("set local citus.enable_ddl_propagation = off")
    else:
        # one transaction writes reference tables and then propagates DDL to the same nodes
        cur.execute("set local citus.multi_shard_modify_mode = 'sequential'")


def _set_embedding_dim(cur: psycopg.Cursor[Any], dim: int) -> int | None:
    """memori.vm_embedding_dim_set: returns the dimension before."""
    row = cur.execute("select memori.vm_embedding_dim_set(%s)", (dim,)).fetchone()
    return row[0] if row else None


def _embedding_dim(cur: psycopg.Cursor[Any]) -> int | None:
    if cur.execute("select to_regprocedure('memori.vm_embedding_dim()')").fetchone() == (None,):
        return None  # stopped at a revision before search (migration tests)
    row = cur.execute("select memori.vm_embedding_dim()").fetchone()
    return row[0] if row else None


def install_script(from_revision: str | None = None, *, embedding_dim: int | None = None) -> str:
    """One SQL script a DBA can run with ``psql -v ON_ERROR_STOP=1 -f``: alembic offline mode plus sql/.

    Without ``from_revision`` it installs into a database that has no memori
    schema; with it, it upgrades from that revision. ``embedding_dim`` adds the
    call that chooses the page embedding dimension.
    """
    buffer = io.StringIO()
    cfg = alembic_config(output_buffer=buffer)
    revision_range = f"{from_revision}:head" if from_revision else "head"
    command.upgrade(cfg, revision_range, sql=True)
    parts = [
        f"-- pymemdb {package_version()} install script (alembic head {head_revision()})",
        "-- Run with: psql -v ON_ERROR_STOP=1 -f this.sql",
        "\\set ON_ERROR_STOP on",
        _CITUS_LOCAL_INSTALL_SQL,
        "create schema if not exists memori;",
        *(_replay_script(from_revision) if from_revision else []),
        buffer.getvalue(),
        "begin;",
    ]
    for name, text in sql_files():
        parts.append(f"-- ==== sql/{name} ====")
        parts.append(text)
    parts.append(
        "insert into memori.installs (pymemdb_version, alembic_revision, sql_sha256) "
        f"values ('{package_version()}', '{head_revision()}', '{sql_sha256()}');"
    )
    if embedding_dim is not None:
        parts.append(f"select memori.vm_embedding_dim_set({int(embedding_dim)});")
    parts.append("commit;")
    return "\n".join(parts) + "\n"
