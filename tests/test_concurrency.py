"""Cleanup racing writers that extend TTLs, and racing other cleanups, judged by an audit of deletions."""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pymemdb
from tests.helpers import T0, rows, run_threads, value

ROWS = 3000


def audit(stamp: str) -> str:
    """DDL of a trigger that records every deleted memory in public.delete_audit, with ``stamp`` (a column)."""
    return f"""
create table public.delete_audit (id bigint, expires_at timestamptz, {stamp});
create function public.audit_delete() returns trigger language plpgsql as $$
begin
  insert into public.delete_audit (id, expires_at) values (old.id, old.expires_at);
  return old;
end $$;
create trigger audit_delete after delete on memori.memories for each row execute function public.audit_delete();
"""


AUDIT = audit("deleted_by int default pg_backend_pid()")


def _seed(conn: psycopg.Connection) -> None:
    conn.execute(AUDIT)
    conn.execute(
        "insert into memori.memories (user_id, content, created_at, expires_at, owner_id) "
        "select 'ns_' || (g %% 7), 'x', %s - interval '8 days', %s - (g || ' seconds')::interval, 'ns_' || (g %% 7) "
        "from generate_series(1, %s) g",
        (T0, T0, ROWS),
    )


def _cleaner(dsn: str, results: list[object], stop: threading.Event) -> None:
    with pymemdb.connect(dsn, max_size=1) as db:
        while not stop.is_set():
            try:
                results.append(db.cleanup.execute(now=T0, batch_size=50))
                return
            except pymemdb.CleanupAlreadyRunning as exc:
                results.append(exc)
                time.sleep(0.01)


def _writer(dsn: str, extended: set[int], seed: int, stop: threading.Event) -> None:
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            ids = rng.sample(range(1, ROWS + 1), 5)
            got = conn.execute(
                "update memori.memories set expires_at = %s where id = any(%s) returning id",
                (T0 + timedelta(days=1), ids),
            ).fetchall()
            extended.update(r[0] for r in got)


def test_cleanup_races_writers_and_other_cleanups(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _seed(conn)
    stop = threading.Event()
    extended: set[int] = set()
    results: list[object] = []
    writers = [threading.Thread(target=_writer, args=(dsn, extended, s, stop)) for s in (1, 2)]
    cleaners = [threading.Thread(target=_cleaner, args=(dsn, results, stop)) for _ in range(3)]
    for t in writers + cleaners:
        t.start()
    for t in cleaners:
        t.join(timeout=120)
    stop.set()
    for t in writers:
        t.join(timeout=30)

    with psycopg.connect(dsn, autocommit=True) as conn:
        audit = rows(conn, "select id, expires_at from public.delete_audit")
        deleted = [r["id"] for r in audit]
        remaining = {r["id"] for r in rows(conn, "select id from memori.memories")}
        summaries = [r for r in results if not isinstance(r, Exception)]
        refused = [r for r in results if isinstance(r, pymemdb.CleanupAlreadyRunning)]

        assert len(summaries) == 3, "every cleaner eventually ran, one at a time"
        assert refused, "overlapping cleanups were refused, not queued"
        assert len(deleted) == len(set(deleted)), "nothing deleted twice"
        assert all(r["expires_at"] <= T0 for r in audit), "nothing unexpired deleted"
        assert not (extended & set(deleted)), "a committed TTL extension always wins"
        assert extended <= remaining
        assert len(deleted) + len(remaining) == ROWS
        assert sum(s.deleted for s in summaries) == len(deleted)  # type: ignore[attr-defined]
        # whatever the writers did not extend is gone
        assert value(conn, "select count(*) from memori.memories where expires_at <= %s", (T0,)) == 0
        statuses = {r["status"] for r in rows(conn, "select status from memori.cleanup_runs")}
        assert statuses == {"succeeded"}


def test_concurrent_window_adds_keep_the_limit_and_business_updates_merge(dsn: str) -> None:
    """add_window locks the session; business_context_update serialises per user: no lost or extra rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("update memori.settings set value = '5' where key = 'context.max_windows'")
        conn.execute("select memori.session_context_set('s1', 'alice')")

    def worker(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            for i in range(20):
                c.execute("select memori.session_context_add_window('s1', 'conversation', %s, %s, 'session', "
                          "'alice')", (Jsonb({"w": n, "i": i}), 1 + (n + i) % 10))
            c.execute("select memori.business_context_update(%s, 'alice')",
                      (Jsonb({"context_variables": None, "active_workflow": f"w{n}"}),))
            c.execute("select memori.business_context_update(%s, 'alice')",
                      (Jsonb({"current_project": f"p{n}"}),))

    assert run_threads(worker, 4) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select count(*) from memori.context_windows").fetchone() == (5,)
        ctx = conn.execute("select memori.business_context_get('alice')").fetchone()[0]  # type: ignore[index]
        assert set(ctx) == {"context_variables", "active_workflow", "current_project", "user_id"}


# -- writers and cleaners at the real clock (issue 16, item 1) ---------------------------
SLOW_SECONDS = float(os.environ.get("PYMEMDB_SLOW_SECONDS", "10"))
WRITERS = 4  # writer k owns the ids = k (mod 4): writers never wait for each other
TIMED_AUDIT = audit("deleted_at timestamptz default clock_timestamp()")


def _extender(dsn: str, k: int, due: list[tuple[float, int]], extended: set[int], errors: list[BaseException],
              stop: threading.Event) -> None:
    """Extends the TTL of rows about to expire (or just expired), as an application does.

    Even writers extend 6 rows in one `= ANY` update; odd ones row by row, in random order, in one transaction.
    """
    rng = random.Random(k)
    mine = [(at, i) for at, i in due if i % WRITERS == k]
    try:
        with psycopg.connect(dsn) as conn:
            while not stop.is_set():
                now = time.time()
                near = [i for at, i in mine if now - 0.5 <= at <= now + 0.5]
                ids = rng.sample(near, min(6, len(near)))
                if not ids:
                    time.sleep(0.01)
                    continue
                if k % 2 == 0:
                    got = [r[0] for r in conn.execute(
                        "update memori.memories set expires_at = now() + interval '1 day' "
                        "where id = any(%s) returning id", (ids,))]
                else:
                    got = []
                    for i in ids:
                        got += [r[0] for r in conn.execute(
                            "update memori.memories set expires_at = now() + interval '1 day' "
                            "where id = %s returning id", (i,))]
                        time.sleep(0.002)  # the application's work between two statements
                conn.commit()
                extended.update(got)  # committed: these rows must never be deleted
                time.sleep(0.02)
    except BaseException as exc:
        errors.append(exc)


def _cli_cleaner(dsn: str, runs: list[object], errors: list[BaseException], stop: threading.Event) -> None:
    """The `memori-cleanup execute` path: the client drives cleanup_begin / cleanup_batch / cleanup_finish."""
    try:
        with pymemdb.connect(dsn, max_size=1) as db:
            while not stop.is_set():
                try:
                    runs.append(db.cleanup.execute(batch_size=100))
                except pymemdb.CleanupAlreadyRunning:
                    pass
                time.sleep(0.1)
    except BaseException as exc:
        errors.append(exc)


def _cron_cleaner(dsn: str, errors: list[BaseException], stop: threading.Event) -> None:
    """What pg_cron runs: CALL memori.cleanup_run(500), one transaction per batch."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                try:
                    conn.execute("call memori.cleanup_run(500)")
                except psycopg.Error as exc:
                    if exc.sqlstate != "PM020":  # the other cleaner is running: fine
                        raise
                time.sleep(0.1)
    except BaseException as exc:
        errors.append(exc)


@pytest.mark.slow
def test_writers_and_cleaners_never_deadlock(dsn: str) -> None:
    """4 TTL-extending writers x 2 cleaners for PYMEMDB_SLOW_SECONDS (default 10; the acceptance run is 60).

    0 deadlocks (pg_stat_database, so deadlocks a cleaner caught and retried count too), 0 writer or cleaner
    errors, and no row whose TTL extension committed is ever deleted (audit trigger).
    """
    rows_per_second = 400
    total = int(rows_per_second * (SLOW_SECONDS + 2))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TIMED_AUDIT)
        # rows expire steadily from 2 s ago to the end of the run, in an order unrelated to their ids:
        # the cleaner deletes in expiry order, an `= ANY` update locks in id order
        conn.execute(
            "insert into memori.memories (user_id, content, expires_at, owner_id) "
            "select 'ns_' || (g %% 7), 'x', now() - interval '2 seconds' + (g / %s::float8) * interval '1 second', "
            "'ns_' || (g %% 7) "
            "from generate_series(1, %s) g order by random()", (rows_per_second, total))
        due = [(r["at"], r["id"]) for r in rows(
            conn, "select id, extract(epoch from expires_at)::float8 as at from memori.memories")]
        deadlocks_before = value(conn, "select deadlocks from pg_stat_database where datname = current_database()")

    stop = threading.Event()
    extended: set[int] = set()
    writer_errors: list[BaseException] = []
    cleaner_errors: list[BaseException] = []
    cli_runs: list[object] = []
    threads = [threading.Thread(target=_extender, args=(dsn, k, due, extended, writer_errors, stop))
               for k in range(WRITERS)]
    threads += [threading.Thread(target=_cli_cleaner, args=(dsn, cli_runs, cleaner_errors, stop)),
                threading.Thread(target=_cron_cleaner, args=(dsn, cleaner_errors, stop))]
    for t in threads:
        t.start()
    time.sleep(SLOW_SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)

    with psycopg.connect(dsn, autocommit=True) as conn:
        time.sleep(1.1)  # backends flush their statistics at most once a second
        conn.execute("select pg_stat_clear_snapshot()")
        deadlocks = value(conn, "select deadlocks from pg_stat_database where datname = current_database()")
        deadlocks -= deadlocks_before
        audit = rows(conn, "select id, expires_at, deleted_at from public.delete_audit")
        deleted = {r["id"] for r in audit}
        runs = rows(conn, "select trigger, status, deleted, retried, skipped, error from memori.cleanup_runs")
        figures = {
            "seconds": SLOW_SECONDS, "deadlocks": deadlocks, "writer_errors": len(writer_errors),
            "cleaner_errors": len(cleaner_errors), "ttl_extended": len(extended), "deleted": len(deleted),
            "extended_and_deleted": len(extended & deleted),
            "runs": {t: sum(1 for r in runs if r["trigger"] == t) for t in ("cli", "cron")},
            "runs_not_succeeded": [(r["trigger"], r["status"], r["error"]) for r in runs
                                   if r["status"] not in ("succeeded", "running")],
            "batches_retried": sum(r["retried"] for r in runs),
            "rows_left_to_next_run": sum(r["skipped"] for r in runs),
        }
        print(f"\nwriters x cleaners: {figures}")
        assert writer_errors == [] and cleaner_errors == [], (writer_errors, cleaner_errors)
        assert deadlocks == 0, figures
        assert not (extended & deleted), "a committed TTL extension always wins"
        assert all(r["expires_at"] <= r["deleted_at"] for r in audit), "nothing unexpired deleted"
        assert figures["runs_not_succeeded"] == []
        assert figures["runs"]["cli"] > 0 and figures["runs"]["cron"] > 0 and extended and deleted
