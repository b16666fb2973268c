"""A pooled connection's delegated calls do not grow its worker backend (issue 20).

Citus 14.0.1 re-plans the shard query of a kept (generic) plan on a worker at every call and
keeps every copy (citusdata/citus#8824): a worker backend serving one coordinator connection grew
by tens of kB per delegated call, without bound. For every function memori.distribute_functions()
delegates, its sample call (tests/citus/test_single_shard.py, SAMPLES) runs many times on one
coordinator connection, and the anonymous resident memory (RssAnon) of the worker backend serving
that connection must not grow by more than a small bound per call.

PYMEMDB_LEAK_REPORT=1 prints the growth per call of each function (the figures of
docs/scale-out.md); PYMEMDB_LEAK_CALLS sets the calls measured per function.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pymemdb.install import install
from tests.citus.conftest import CitusCluster
from tests.citus.test_single_shard import SAMPLES

pytestmark = pytest.mark.citus

USER = "mallory"
WARM_UP = 12  # calls before the first reading (the generic plan comes at the sixth)
CALLS = int(os.environ.get("PYMEMDB_LEAK_CALLS", "100"))
BOUND_KB = 2.0  # per call; a leaking function grew 60 kB and more a call


def _rss_anon_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError(f"no RssAnon in /proc/{pid}/status")


def _call(conn: psycopg.Connection, call: str, *, keep: bool = False) -> None:
    """One sample call in the client's way (a transaction with SET LOCAL); rolled back unless keep."""
    with conn.transaction(force_rollback=not keep):
        conn.execute(sql.SQL("set local memori.user_id = {}").format(sql.Literal(USER)))
        conn.execute(call, {"u": USER}).fetchall()


def _keep(conn: psycopg.Connection, call: str) -> None:
    """The call kept, for the calls after it; one that fails here (a sample that expects the rows
    of the single-shard test's other users) leaves nothing, and the next samples do without."""
    try:
        _call(conn, call, keep=True)
    except psycopg.Error:
        pass


@pytest.fixture
def app_dsn(distributed_dsn: str) -> Iterator[str]:
    role = f"kwm_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} login in role memori_admin").format(sql.Identifier(role)))
    yield psycopg.conninfo.make_conninfo(distributed_dsn, user=role)
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def _worker_backends(cluster: CitusCluster, dsn: str, gpid: int) -> list[int]:
    """The pids of the worker backends that serve the coordinator backend of global pid gpid."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    pids = []
    for name, worker in cluster.exports().items():
        if not name.startswith("PYMEMDB_CITUS_WORKER"):
            continue
        with psycopg.connect(psycopg.conninfo.make_conninfo(worker, dbname=dbname), autocommit=True) as conn:
            pids += [pid for (pid,) in conn.execute(
                "select pid from pg_stat_activity where application_name = %s", (f"citus_internal gpid={gpid}",))]
    return pids


def _growth(conn: psycopg.Connection, call: str, pids: Callable[[], list[int]]) -> float:
    """kB per call of the backends pids() names, over CALLS calls after a warm-up."""
    for _ in range(WARM_UP):
        _call(conn, call)
    before = {pid: _rss_anon_kb(pid) for pid in pids()}
    for _ in range(CALLS):
        _call(conn, call)
    after = {pid: _rss_anon_kb(pid) for pid in pids()}
    # a backend that appeared after the warm-up counts from nothing (it would be a new connection)
    return sum(after[pid] - before.get(pid, after[pid]) for pid in after) / CALLS


def test_delegated_calls_do_not_grow_the_worker_backend(citus_cluster: CitusCluster, distributed_dsn: str,
                                                         app_dsn: str) -> None:
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        rows = conn.execute("select function_name, kind, status from memori.distribute_functions(p_delegate => true)")
        listed = rows.fetchall()
        rows_kind = [(name, kind) for name, kind, _ in listed]
        kinds = {name.split("(")[0]: (kind, status) for name, kind, status in listed}
    delegated = [name for name in SAMPLES if kinds.get(name, ("", ""))[0] == "delegate"]
    assert delegated and {kinds[n][1] for n in delegated} <= {"registered", "already"}, kinds
    # a re-install replaces every function (CREATE OR REPLACE drops a SET clause): the delegated
    # ones keep planning per call, on the coordinator and on the workers
    install(distributed_dsn, force=True)
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        probe = ("select count(*) from pg_dist_object o join pg_proc p on p.oid = o.objid"
                 " where o.classid = 'pg_proc'::regclass and o.force_delegation"
                 " and 'plan_cache_mode=force_custom_plan' = any (coalesce(p.proconfig, '{}'))")
        here = conn.execute(probe).fetchone()
        there = conn.execute(sql.SQL("select result from run_command_on_workers({})").format(sql.Literal(probe)))
        count = sum(kind == "delegate" for kind, _ in kinds.values())
        assert here == (count,) and [r for (r,) in there.fetchall()] == [str(count)] * 2, (here, count)
        if os.environ.get("PYMEMDB_LEAK_UNFIXED") == "1":  # measure without the remedy (Citus propagates it)
            conn.execute("set search_path = pg_catalog, memori")  # the names as distribute_functions printed them
            for name, kind in rows_kind:
                if kind == "delegate":
                    conn.execute(sql.SQL("alter function {} reset plan_cache_mode").format(sql.SQL(name)))
    report = os.environ.get("PYMEMDB_LEAK_REPORT") == "1"
    grown: dict[str, float] = {}
    # autocommit: each call its own transaction (BEGIN … COMMIT/ROLLBACK), as a pooled client runs it
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        gpid = conn.execute("select citus_backend_gpid()").fetchone()[0]  # type: ignore[index]
        for name in SAMPLES:  # in their order: a later call needs the rows of an earlier one
            if name in delegated:
                kb = _growth(conn, SAMPLES[name], lambda: _worker_backends(citus_cluster, distributed_dsn, gpid))
                if report:
                    print(f"delegated {name}: {kb:.1f} kB/call")
                if kb > BOUND_KB:
                    grown[name] = kb
            _keep(conn, SAMPLES[name])
    assert not grown, f"worker backend growth per delegated call above {BOUND_KB} kB: {grown}"


def test_coordinator_calls_do_not_grow_the_coordinator_backend(distributed_dsn: str, app_dsn: str) -> None:
    """Not registered (run statement by statement on the coordinator): its own backend. Only with
    PYMEMDB_LEAK_REPORT=1 (a writer of a reference table grew it, by local execution on the
    coordinator's copy, until memori.distribute_functions() gave it custom plans)."""
    if os.environ.get("PYMEMDB_LEAK_REPORT") != "1":
        pytest.skip("a measurement (PYMEMDB_LEAK_REPORT=1), not part of the check")
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        conn.execute("select * from memori.distribute_functions()").fetchall()  # classify, register nothing
    grown: dict[str, float] = {}
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        for name in SAMPLES:
            kb = _growth(conn, SAMPLES[name], lambda: [pid])
            print(f"coordinator {name}: {kb:.1f} kB/call")
            if kb > BOUND_KB:
                grown[name] = kb
            _keep(conn, SAMPLES[name])
    assert not grown, f"coordinator backend growth per call above {BOUND_KB} kB: {grown}"
