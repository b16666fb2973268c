"""Cleanup racing writers that extend TTLs, and racing other cleanups, judged by an audit of deletions."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import psycopg
from psycopg.types.json import Jsonb

import pymemdb
from tests.helpers import T0, rows, value

ROWS = 3000

AUDIT = """
create table public.delete_audit (id bigint, expires_at timestamptz, deleted_by int default pg_backend_pid());
create function public.audit_delete() returns trigger language plpgsql as $$
begin
  insert into public.delete_audit (id, expires_at) values (old.id, old.expires_at);
  return old;
end $$;
create trigger audit_delete after delete on memori.memories for each row execute function public.audit_delete();
"""


def _seed(conn: psycopg.Connection) -> None:
    conn.execute(AUDIT)
    conn.execute(
        "insert into memori.memories (user_id, content, created_at, expires_at) "
        "select 'ns_' || (g %% 7), 'x', %s - interval '8 days', %s - (g || ' seconds')::interval "
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
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                for i in range(20):
                    c.execute("select memori.session_context_add_window('s1', 'conversation', %s, %s, 'session', "
                              "'alice')", (Jsonb({"w": n, "i": i}), 1 + (n + i) % 10))
                c.execute("select memori.business_context_update(%s, 'alice')",
                          (Jsonb({"context_variables": None, "active_workflow": f"w{n}"}),))
                c.execute("select memori.business_context_update(%s, 'alice')",
                          (Jsonb({"current_project": f"p{n}"}),))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select count(*) from memori.context_windows").fetchone() == (5,)
        ctx = conn.execute("select memori.business_context_get('alice')").fetchone()[0]  # type: ignore[index]
        assert set(ctx) == {"context_variables", "active_workflow", "current_project", "user_id"}
