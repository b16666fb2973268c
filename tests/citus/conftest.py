"""The three-node Citus test cluster (scripts/citus/cluster.sh), for tests marked ``citus``.

One cluster per test session, started in a temporary directory and stopped at
the end; one database per test (created on every node, the workers
registered, the schema installed on the coordinator). Without the Citus
source archive the tests are skipped with one line, except under CI=true,
where they must run (.ci/run builds the cluster first).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pymemdb.install import install
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "citus" / "cluster.sh"
ARCHIVE_ABSENT = 3  # cluster.sh's exit code when the Citus archive is not found


@dataclass(frozen=True)
class CitusCluster:
    directory: Path
    dsn: str  # the coordinator's pymemdb database
    env: dict[str, str]

    def run(self, *args: str) -> str:
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=self.env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"cluster.sh {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return done.stdout.strip()

    def exports(self) -> dict[str, str]:
        """PYMEMDB_CITUS_DSN, PYMEMDB_CITUS_WORKER1_DSN, ... from ``cluster.sh env``."""
        values = {}
        for line in self.run("env", str(self.directory)).splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            values[name] = value.strip("'")
        return values


@pytest.fixture(scope="session")
def citus_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CitusCluster]:
    directory = tmp_path_factory.mktemp("citus")
    env = {**os.environ, "PYMEMDB_PYTHON": sys.executable}
    started = subprocess.run(["bash", str(SCRIPT), "start", str(directory)],
                             capture_output=True, text=True, env=env, check=False)
    if started.returncode != 0:
        last = (started.stderr.strip().splitlines() or ["no output"])[-1]
        message = f"Citus test cluster unavailable: {last}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: the Citus tests must run; see scripts/citus/cluster.sh)")
        if started.returncode == ARCHIVE_ABSENT:
            pytest.skip(message)
        pytest.fail(message)
    cluster = CitusCluster(directory, started.stdout.strip().splitlines()[-1], env)
    try:
        yield cluster
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(directory)], capture_output=True, env=env, check=False)


@pytest.fixture
def citus_db(citus_cluster: CitusCluster) -> Iterator[str]:
    """A new database on the cluster with citus and vector on every node; no pymemdb schema yet."""
    name = f"pymemdb_citus_{uuid.uuid4().hex[:10]}"
    dsn = citus_cluster.run("createdb", name, str(citus_cluster.directory)).splitlines()[-1]
    try:
        yield dsn
    finally:
        citus_cluster.run("dropdb", name, str(citus_cluster.directory))


@pytest.fixture
def citus_dsn(citus_db: str) -> str:
    """A new cluster database with the pymemdb schema installed on the coordinator (local tables)."""
    install(citus_db)
    return citus_db


@pytest.fixture
def distributed_dsn(citus_dsn: str) -> str:
    """A cluster database with the pymemdb schema installed, memori.distribute() applied, and sql/
    re-applied (so every function reaches the workers), as ``pymemdb init --distribute`` does."""
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute("select * from memori.distribute()").fetchall()
    install(citus_dsn, force=True)
    return citus_dsn


def placements(dsn: str) -> dict[str, str]:
    """Every memori table Citus knows: 'distributed', 'reference' or 'local' (Citus-managed)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select c.relname::text, case when p.partmethod = 'h' then 'distributed'"
            " when p.repmodel = 't' then 'reference' else 'local' end"
            " from pg_dist_partition p join pg_class c on c.oid = p.logicalrelid"
            " where c.relnamespace = 'memori'::regnamespace").fetchall()
    return dict(rows)
