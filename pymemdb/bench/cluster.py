"""``pymemdb bench cluster``: one server against the three-node Citus cluster, in the same run (issue 20).

1. Three targets: the single server (the scratch database of ``--dsn``) and
   two databases of one Citus cluster (created on every node of the test
   cluster in ``$PYMEMDB_CITUS_DIR``, ``scripts/citus/cluster.sh start DIR``,
   or of one this benchmark starts in a temporary directory and stops at the
   end): ``cluster``, where ``memori.distribute()`` placed the tables and the
   coordinator runs every function (each statement routed to a shard), and
   ``delegated``, the same plus ``memori.distribute_functions(p_delegate =>
   true)``: Citus sends a whole call of a ``delegate`` function to the worker
   of its user (one round trip), the client passing the user.
2. The same per-user workload on all three, through the Python client as an
   app role (``memori_app``; row-level security on, the user set with ``SET
   LOCAL``): seed 05's checkpoint save and latest load, ``memory_save``,
   ``checkpoint_create``, the Store's put and get, ``context_resolve`` of a
   session, ``page_fault`` into a small working set (faults evict), and
   ``search_pages`` in the session. Calls alternate between the targets call
   by call (the order rotates every round), so drift and the machine's load
   hit all alike; p50/p95 per call and the ratio to the single server.
3. Per call on each cluster target: the commands the coordinator sends to the
   workers (``citus.log_remote_commands``; 1 for a delegated call) and the
   single- and multi-shard executions Citus counts on every node
   (``citus_stat_counters``); the single-shard share of the per-user calls,
   the call multi-shard by design (``context_resolve``: other users' project
   and global entries) counted apart.
4. The retention engine on ``rows`` expired memories spread over the users:
   ``cleanup_execute``'s time and the WAL it wrote (on the cluster, summed
   over the coordinator and the workers).

The cluster shares the machine's cores with the single server and the
client: the ratio is an upper bound of what a cluster of real machines adds.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rich.table import Table

import pymemdb
from pymemdb.bench import Progress, fmt, latency_summary, one, ratio, require_rows, stopwatch, wal_bytes_since, wal_lsn
from pymemdb.context import Scope
from pymemdb.db import Database
from pymemdb.errors import PymemdbError

NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)  # the benchmark's clock, passed as p_now
USERS = 12
ROUNDS = 150  # timed calls per call type and target (after WARMUP)
WARMUP = 20
COUNTED = 20  # calls per call type whose Citus statements are counted
APP_ROLE = "pymemdb_bench_app"
GOAL_RATIO = 2.0  # delegated calls: cluster p50 at most twice the single server's
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "citus" / "cluster.sh"
CALLS = ("checkpoint_save", "checkpoint_load", "memory_save", "checkpoint_create", "store_put", "store_get",
         "context_resolve", "page_fault", "page_search")
# the memori function behind each call (its delegation kind comes from memori.distribute_functions())
FUNCTIONS = {"checkpoint_save": "session_checkpoint_save", "checkpoint_load": "session_checkpoint_load_latest",
             "memory_save": "memory_save", "checkpoint_create": "checkpoint_create", "store_put": "store_put",
             "store_get": "store_get", "context_resolve": "context_resolve", "page_fault": "page_fault",
             "page_search": "search_pages"}
# read other users' rows on purpose (docs/scale-out.md): outside the single-shard share
MULTI_SHARD_BY_DESIGN = {"context_resolve": "project and global entries of other writers"}
TARGETS = ("single", "cluster", "delegated")
STORE_KEYS = 10
CONTROL = re.compile(r"^(BEGIN|COMMIT|ROLLBACK|PREPARE TRANSACTION|COMMIT PREPARED|ROLLBACK PREPARED|SAVEPOINT|"
                     r"RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT|SELECT assign_distributed_transaction_id|SET LOCAL)",
                     re.I)


@dataclass(frozen=True)
class Target:
    name: str
    dsn: str  # superuser
    node_dsns: tuple[str, ...]  # every node whose WAL counts (the cluster: coordinator and workers)

    def app_dsn(self, **options: str) -> str:
        return make_conninfo(self.dsn, user=APP_ROLE, password="", **options)


def _cluster_script(*args: str) -> str:
    if not SCRIPT.exists():
        raise PymemdbError("pymemdb bench cluster needs a source checkout (scripts/citus/cluster.sh is not installed)",
                           hint="Run it from a clone of pymemdb, or set PYMEMDB_CITUS_DIR to a running test cluster.")
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PymemdbError(f"cluster.sh {args[0]} failed: {last}",
                           hint="bash scripts/citus/cluster.sh build (the Citus archive must be in ../shared/vendor "
                                "or $PYMEMDB_CITUS_TARBALL); see docs/scale-out.md.")
    return done.stdout.strip()


@contextmanager
def citus_databases(progress: Progress | None, names: tuple[str, ...]) -> Iterator[dict[str, Target]]:
    """A new database per name on every node of the test cluster (``$PYMEMDB_CITUS_DIR``, else one started here)."""
    with ExitStack() as stack:
        directory = os.environ.get("PYMEMDB_CITUS_DIR")
        if not directory:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="pymemdb-bench-citus-"))
            os.chmod(directory, 0o755)  # the servers may run as an unprivileged user
            if progress:
                progress("starting a three-node Citus cluster")
            _cluster_script("start", directory)
            stack.callback(_cluster_script, "stop", directory)
        exports = dict(line.removeprefix("export ").partition("=")[::2]
                       for line in _cluster_script("env", directory).splitlines())
        targets = {}
        for target in names:
            name = f"pymemdb_bench_{target}_{os.getpid()}"
            dsn = _cluster_script("createdb", name, directory).splitlines()[-1]
            stack.callback(_cluster_script, "dropdb", name, directory)
            workers = tuple(make_conninfo(value.strip("'"), dbname=name) for key, value in sorted(exports.items())
                            if key.startswith("PYMEMDB_CITUS_WORKER") and key.endswith("_DSN"))
            targets[target] = Target(target, dsn, (dsn, *workers))
        yield targets


def _prepare(target: Target, distribute: bool, delegate: bool = False) -> dict[str, Any]:
    """Install; on a cluster distribute, register the functions (delegate) and count Citus statements; the app role."""
    pymemdb.install.install(target.dsn)
    placed: dict[str, Any] = {}
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        if distribute:
            rows = conn.execute("select table_name, status from memori.distribute()").fetchall()
            placed = {"distributed": sorted(t for t, s in rows if s in ("distributed", "already")
                                            and t not in _reference(conn)),
                      "not_distributed": sorted(t for t, s in rows if s in ("blocked", "unplanned"))}
            # sql/ again once the tables are placed, as `pymemdb init --distribute` does: the install
            # propagates the functions to the workers (registration fails without it)
            pymemdb.install.install(target.dsn, force=True)
            functions = conn.execute("select function_name, kind, status from memori.distribute_functions("
                                     "p_delegate => %s)", (delegate,)).fetchall()
            placed["kinds"] = {name.split("(")[0]: kind for name, kind, _ in functions}
            placed["registered"] = sorted(name.split("(")[0] for name, _, status in functions
                                          if status in ("registered", "already"))
            placed["failed"] = sorted(f"{name}: {status}" for name, _, status in functions
                                      if status.startswith(("failed", "not attempted")))
            # Citus propagates it to the workers, where a delegated call's statements run
            conn.execute(sql.SQL("alter database {} set citus.enable_stat_counters = on").format(
                sql.Identifier(str(conninfo_to_dict(target.dsn)["dbname"]))))
        if not one(conn, "select count(*) from pg_roles where rolname = %s", (APP_ROLE,)):
            conn.execute(sql.SQL("create role {} login in role memori_app").format(sql.Identifier(APP_ROLE)))
    return placed


def _reference(conn: psycopg.Connection[Any]) -> set[str]:
    return {r[0] for r in conn.execute(
        "select c.relname::text from pg_dist_partition p join pg_class c on c.oid = p.logicalrelid"
        " where p.partmethod = 'n'").fetchall()}


def _user(i: int) -> str:
    return f"bench-user-{i:02d}"


def _seed(db: Database) -> None:
    """Each user: one checkpoint, a session with user and session context, a VM session whose pages overflow L0."""
    for i in range(USERS):
        user = _user(i)
        acting = db.as_user(user)
        acting.memories.save_session_checkpoint("skill:api-builder", user, "state 0", now=NOW)
        acting.sessions.set(f"s-{user}", now=NOW)
        for k in range(20):
            acting.context.set(f"key{k}", {"v": k}, type="user_preferences", scope="user", now=NOW)
            if k % 4 == 0:
                acting.context.set(f"key{k}", {"v": -k}, type="session_context", scope="session",
                                   who=Scope(session_id=f"s-{user}"), now=NOW)
        acting.pages.turn_begin(f"vm-{user}", user_id=user, now=NOW)
        acting.pages.session_configure(f"vm-{user}", {"max_l0_tokens": 2000}, user_id=user, now=NOW)
        for p in range(40):
            content = f"Page {p} of the paging model: tiers, faults and evictions. " * 6
            acting.pages.create(f"vm-{user}", f"doc_{p}", content, page_type="artifact", add_to_working_set=False,
                                now=NOW)
        for k in range(STORE_KEYS):
            acting.store.put(["bench", "docs"], f"k{k}", {"text": f"document {k} of {user}"}, now=NOW)


def _call(db: Database, name: str, user: str, rng: random.Random) -> Callable[[], Any]:
    acting = db.as_user(user)
    if name == "checkpoint_save":
        return lambda: acting.memories.save_session_checkpoint("skill:api-builder", user, "state", now=NOW)
    if name == "checkpoint_load":
        return lambda: acting.memories.load_latest_checkpoint("api", user, now=NOW)
    if name == "memory_save":  # no owner given: the client passes the acting user
        return lambda: acting.memories.save("bench:notes", "a note", ttl=timedelta(days=7), now=NOW)
    if name == "checkpoint_create":
        return lambda: acting.checkpoints.create(f"s-{user}", user, "manual", "step", {"step": 1}, now=NOW)
    if name == "store_put":
        key = f"k{rng.randrange(STORE_KEYS)}"
        return lambda: acting.store.put(["bench", "docs"], key, {"text": f"document {key} of {user}"}, now=NOW)
    if name == "store_get":
        key = f"k{rng.randrange(STORE_KEYS)}"
        return lambda: acting.store.get(["bench", "docs"], key, now=NOW)
    if name == "context_resolve":
        return lambda: acting.context.resolve(Scope(session_id=f"s-{user}"), now=NOW)
    if name == "page_fault":
        page = f"doc_{rng.randrange(40)}"
        level = rng.choice((0, 1, 2))
        return lambda: acting.pages.fault(f"vm-{user}", page, level, "user_requested_recall", now=NOW)
    return lambda: acting.pages.search(f"vm-{user}", rng.choice(("paging model", "tiers faults", "evictions")), now=NOW)


def _workload(dbs: dict[str, Database], seed: int) -> dict[str, dict[str, Any]]:
    """Every call type, alternating between the targets call by call; latencies per target."""
    rng = random.Random(seed)
    samples: dict[str, dict[str, list[int]]] = {t: {c: [] for c in CALLS} for t in dbs}
    order = list(dbs)
    for r in range(WARMUP + ROUNDS):
        order = order[1:] + order[:1]  # each target goes first, second and last in turn
        for name in CALLS:
            user = _user(rng.randrange(USERS))
            state = rng.getstate()
            for target in order:
                rng.setstate(state)  # the same page, level and query on both targets
                call = _call(dbs[target], name, user, rng)
                start = time.perf_counter_ns()
                call()
                if r >= WARMUP:
                    samples[target][name].append(time.perf_counter_ns() - start)
    return {t: {c: latency_summary(xs) for c, xs in by_call.items()} for t, by_call in samples.items()}


def _shard_counts(target: Target, db: Database, seed: int) -> dict[str, dict[str, float]]:
    """Per call type over COUNTED calls: Citus's single- and multi-shard executions on every node, and the
    commands the coordinator sent to the workers per call (transaction control and SET LOCAL aside)."""
    rng = random.Random(seed)
    counts: dict[str, dict[str, float]] = {}
    sent: list[str] = []

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if message.startswith("issuing "):
            sent.extend(p for p in (p.strip() for p in message.removeprefix("issuing ").split(";"))
                        if p and not CONTROL.match(p))

    def read(conns: list[psycopg.Connection[Any]]) -> tuple[int, int]:
        single = multi = 0
        for conn in conns:
            row = conn.execute("select query_execution_single_shard, query_execution_multi_shard"
                               " from citus_stat_counters where name = current_database()").fetchone()
            assert row is not None
            single, multi = single + int(row[0]), multi + int(row[1])
        return single, multi

    traced = make_conninfo(db.dsn, options="-c citus.log_remote_commands=on -c client_min_messages=log")
    conns = [psycopg.connect(d, autocommit=True) for d in target.node_dsns]
    try:
        with pymemdb.connect(traced, min_size=1, max_size=1) as tracing:
            with tracing.pool.connection() as conn:  # the pool's one connection
                conn.add_notice_handler(notice)
            for name in CALLS:
                before = read(conns)
                sent.clear()
                for _ in range(COUNTED):
                    _call(tracing, name, _user(rng.randrange(USERS)), rng)()
                after = read(conns)
                counts[name] = {"single_shard": after[0] - before[0], "multi_shard": after[1] - before[1],
                                "remote_commands": round(len(sent) / COUNTED, 1)}
    finally:
        for c in conns:
            c.close()
    return counts


def _share(counts: dict[str, dict[str, float]]) -> float | None:
    """Single-shard executions of the per-user calls (the multi-shard-by-design ones apart) over all theirs."""
    per_user = [c for name, c in counts.items() if name not in MULTI_SHARD_BY_DESIGN]
    single = sum(c["single_shard"] for c in per_user)
    total = single + sum(c["multi_shard"] for c in per_user)
    return round(single / total, 4) if total else None


def _cleanup(target: Target, rows: int) -> dict[str, Any]:
    """``rows`` expired memories over the users, then cleanup_execute: seconds and WAL on every node."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute(
            "insert into memori.memories (user_id, owner_id, content, category, metadata, created_at, expires_at)"
            " select 'bench-user-' || lpad((g %% %s)::text, 2, '0'), 'bench-user-' || lpad((g %% %s)::text, 2, '0'),"
            "        'expired ' || g, 'context', '{}', %s - interval '2 days', %s - interval '1 day'"
            "   from generate_series(1, %s) g", (USERS, USERS, NOW, NOW, rows))
        conns = [psycopg.connect(d, autocommit=True) for d in target.node_dsns]
        try:
            starts = [wal_lsn(c) for c in conns]
            with stopwatch() as elapsed:
                deleted = one(conn, "select deleted from memori.cleanup_execute(p_now => %s)", (NOW,))
            wal = sum(wal_bytes_since(c, s) for c, s in zip(conns, starts, strict=True))
        finally:
            for c in conns:
                c.close()
        left = one(conn, "select count(*) from memori.memories where content like 'expired %%'")
    return {"rows": rows, "deleted": int(deleted), "left": int(left), "seconds": round(elapsed(), 2),
            "wal_bytes": wal, "rows_per_second": round(rows / elapsed()) if elapsed() else None}


def run(dsn: str, rows: int, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    require_rows(rows, 1000, "The cleanup step needs at least 1,000 expired rows.")
    result: dict[str, Any] = {"users": USERS, "rounds": ROUNDS, "load_average": list(os.getloadavg())}
    single = Target("single", dsn, (dsn,))
    with citus_databases(progress, ("cluster", "delegated")) as clusters, ExitStack() as stack:
        cluster, delegated = clusters["cluster"], clusters["delegated"]
        targets = (single, cluster, delegated)
        if progress:
            progress("installing on the three targets; distributing the clusters' tables, delegating one's functions")
        _prepare(single, distribute=False)
        result["placement"] = _prepare(cluster, distribute=True)
        result["delegation"] = _prepare(delegated, distribute=True, delegate=True)
        kinds = result["delegation"]["kinds"]
        result["kind"] = {c: ("by design" if c in MULTI_SHARD_BY_DESIGN else
                              "delegated" if FUNCTIONS[c] in result["delegation"]["registered"] else
                              kinds.get(FUNCTIONS[c], "per session")) for c in CALLS}
        dbs = {t.name: stack.enter_context(pymemdb.connect(t.app_dsn())) for t in targets}
        for db in dbs.values():
            _seed(db)
        if progress:
            progress(f"workload: {ROUNDS} timed calls of each type on each target, alternating")
        result["latency"] = _workload(dbs, seed)
        result["ratio_p50"] = {t: {c: ratio(result["latency"][t][c]["p50_us"], result["latency"]["single"][c]["p50_us"])
                                   for c in CALLS} for t in ("cluster", "delegated")}
        result["shards"] = {t.name: _shard_counts(t, dbs[t.name], seed) for t in (cluster, delegated)}
        result["single_shard_share"] = {t: _share(result["shards"][t]) for t in ("cluster", "delegated")}
        if progress:
            progress(f"cleanup of {rows:,} expired rows on one server and the cluster")
        result["cleanup"] = {t.name: _cleanup(t, rows) for t in (single, cluster)}
    result["load_average_end"] = list(os.getloadavg())
    result["goal_ratio_p50"] = GOAL_RATIO
    return result


def render(result: dict[str, Any]) -> list[Table]:
    latency = Table(title=f"Per-user calls, {result['users']} users, {result['rounds']} calls each "
                          f"(load {result['load_average'][0]:.1f} -> {result['load_average_end'][0]:.1f})")
    for col in ("call", "kind", "single p50/p95 µs", "cluster p50/p95 µs", "ratio p50",
                "delegated p50/p95 µs", f"ratio p50 (goal ≤ {result['goal_ratio_p50']})",
                "remote cmds/call (cluster/delegated)", "single/multi-shard (cluster)",
                "single/multi-shard (delegated)"):
        latency.add_column(col)
    for call in CALLS:
        s, c, d = (result["latency"][t][call] for t in TARGETS)
        nc, nd = result["shards"]["cluster"][call], result["shards"]["delegated"][call]
        latency.add_row(call, result["kind"][call], f"{fmt(s['p50_us'])} / {fmt(s['p95_us'])}",
                        f"{fmt(c['p50_us'])} / {fmt(c['p95_us'])}", fmt(result["ratio_p50"]["cluster"][call]),
                        f"{fmt(d['p50_us'])} / {fmt(d['p95_us'])}", fmt(result["ratio_p50"]["delegated"][call]),
                        f"{fmt(nc['remote_commands'])} / {fmt(nd['remote_commands'])}",
                        f"{fmt(nc['single_shard'])} / {fmt(nc['multi_shard'])}",
                        f"{fmt(nd['single_shard'])} / {fmt(nd['multi_shard'])}")
    share = result["single_shard_share"]
    cleanup = Table(title=f"cleanup_execute of expired memories (single-shard share of the per-user calls' "
                          f"executions, by-design multi-shard calls apart: cluster {fmt(share['cluster'])}, "
                          f"delegated {fmt(share['delegated'])})")
    for col in ("target", "rows", "deleted", "left", "seconds", "rows/s", "WAL MB"):
        cleanup.add_column(col)
    for name, c in result["cleanup"].items():
        cleanup.add_row(name, fmt(c["rows"]), fmt(c["deleted"]), fmt(c["left"]), fmt(c["seconds"]),
                        fmt(c["rows_per_second"]), fmt(round(c["wal_bytes"] / 2**20, 1)))
    placement = Table(title="Placement on the cluster")
    placement.add_column("distributed", overflow="fold", max_width=60)
    placement.add_column("not distributed (blocked)", overflow="fold", max_width=80)
    placement.add_row(", ".join(result["placement"].get("distributed", [])) or "-",
                      ", ".join(result["placement"].get("not_distributed", [])) or "-")
    return [latency, cleanup, placement]
