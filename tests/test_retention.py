"""The retention engine through SQL: order, preserve-important, batches, preview == execute, runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import T0, assert_sqlstate, memory, rows, value

SEC = timedelta(seconds=1)
DAY = timedelta(days=1)
CHECKPOINT = '{"type": "session_checkpoint"}'
IMPORTANT = '{"important": true}'


def preview(conn: psycopg.Connection, at=T0, batch=1000, max_rows=None) -> list[dict]:  # type: ignore[no-untyped-def]
    return rows(conn, "select * from memori.cleanup_preview(%s, %s, %s)", (at, batch, max_rows))


def execute(conn: psycopg.Connection, at=T0, batch=1000, max_rows=None) -> dict:  # type: ignore[no-untyped-def]
    return rows(conn, "select * from memori.cleanup_execute(%s, %s, %s)", (at, batch, max_rows))[0]


@pytest.mark.parametrize(("offset", "expired"), [(-SEC, True), (timedelta(0), True), (SEC, False)])
def test_expiry_boundary(conn: psycopg.Connection, offset: timedelta, expired: bool) -> None:
    """expires_at <= now is expired (seed 05's DELETE); one second later it is still live."""
    memory(conn, "ns", T0 + offset)
    assert len(preview(conn)) == (1 if expired else 0)
    assert execute(conn)["deleted"] == (1 if expired else 0)
    assert value(conn, "select count(*) from memori.memories") == (0 if expired else 1)


@pytest.mark.parametrize(
    "query",
    [
        "select memori.cleanup_count(%s, -1)",
        "select * from memori.cleanup_preview(%s, 1000, -1)",
        "select * from memori.cleanup_preview_summary(%s, -1)",
        "select * from memori.cleanup_execute(%s, 1000, -1)",
        "select * from memori.cleanup_begin(%s, 1000, -1)",
        "select * from memori.cleanup_preview(%s, 0)",
        "select * from memori.cleanup_execute(%s, -1)",
    ],
)
def test_negative_caps_are_pm001(conn: psycopg.Connection, query: str) -> None:
    """Every row cap is NULL or >= 0 (memori._check_cap); issue 16: cleanup_count(now(), -1) returned -1."""
    memory(conn, "ns", T0 - SEC)
    assert_sqlstate(conn, "PM001", query, (T0,))
    assert value(conn, "select count(*) from memori.cleanup_runs") == 0
    assert value(conn, "select memori.cleanup_count(%s, 0)", (T0,)) == 0


def test_negative_caps_of_runs_and_batches_are_pm001(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM001", "call memori.cleanup_run(1000, -1)")
    assert_sqlstate(conn, "PM001", "call memori.cleanup_run(-1)")
    run = rows(conn, "select * from memori.cleanup_begin(%s)", (T0,))[0]
    assert_sqlstate(conn, "PM001", "select * from memori.cleanup_batch(%s, -1)", (run["id"],))
    rows(conn, "select * from memori.cleanup_finish(%s)", (run["id"],))
    err = assert_sqlstate(conn, "PM001", "select memori._check_cap('limit', -5)")
    assert "limit must be NULL (no cap) or >= 0, got -5" in str(err)


def test_permanent_rows_never_cleaned(conn: psycopg.Connection) -> None:
    memory(conn, "ns", None)
    assert preview(conn, T0 + 36500 * DAY) == []


def test_order_is_priority_then_expiry(conn: psycopg.Connection) -> None:
    generic_old = memory(conn, "ns", T0 - 10 * DAY)            # priority 5
    checkpoint_new = memory(conn, "s", T0 - DAY, CHECKPOINT)    # priority 1
    checkpoint_old = memory(conn, "s", T0 - 2 * DAY, CHECKPOINT)
    event = value(conn, "insert into memori.events (event_type, expires_at) values ('x', %s) returning id",
                  (T0 - SEC,))                                   # priority 0
    order = [(r["table_name"], r["row_id"]) for r in preview(conn)]
    assert order == [("events", str(event)), ("memories", str(checkpoint_old)),
                     ("memories", str(checkpoint_new)), ("memories", str(generic_old))]
    assert [r["seq"] for r in preview(conn)] == [1, 2, 3, 4]


def test_policy_priority_is_data(conn: psycopg.Connection) -> None:
    generic = memory(conn, "ns", T0 - DAY)
    checkpoint = memory(conn, "s", T0 - DAY, CHECKPOINT)
    conn.execute("update memori.retention_policies set priority = 9 "
                 "where table_name = 'memories' and kind = 'session_checkpoint'")
    assert [r["row_id"] for r in preview(conn)] == [str(generic), str(checkpoint)]


def test_preserve_important(conn: psycopg.Connection) -> None:
    kept = memory(conn, "ns", T0 - DAY, IMPORTANT)              # default policy preserves important
    gone = memory(conn, "ns", T0 - DAY)
    checkpoint_important = memory(conn, "s", T0 - DAY, '{"type": "session_checkpoint", "important": true}')
    ids = {r["row_id"] for r in preview(conn)}
    assert ids == {str(gone), str(checkpoint_important)}  # checkpoint policy does not preserve
    execute(conn)
    assert value(conn, "select array_agg(id) from memori.memories") == [kept]
    conn.execute("update memori.retention_policies set preserve_important = false where kind = '*'")
    assert [r["row_id"] for r in preview(conn)] == [str(kept)]


def test_policy_and_global_switch_disable_cleanup(conn: psycopg.Connection) -> None:
    memory(conn, "ns", T0 - DAY)
    conn.execute("update memori.retention_policies set cleanup_enabled = false where table_name = 'memories'")
    assert preview(conn) == []
    conn.execute("update memori.retention_policies set cleanup_enabled = true")
    conn.execute("update memori.settings set value = 'false' where key = 'cleanup.enabled'")
    assert preview(conn) == []
    assert execute(conn)["deleted"] == 0


def test_batches_and_max_rows(conn: psycopg.Connection) -> None:
    for i in range(10):
        memory(conn, "ns", T0 - (i + 1) * SEC)
    planned = preview(conn, batch=3)
    assert [r["batch"] for r in planned] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    assert len(preview(conn, max_rows=4)) == 4
    summary = execute(conn, batch=3, max_rows=7)
    assert (summary["planned"], summary["deleted"], summary["batches"]) == (7, 7, 3)
    assert summary["deleted_by_table"] == {"memories": 7}
    assert value(conn, "select count(*) from memori.memories") == 3
    # the 3 left are the youngest expired ones (deletion order is oldest expiry first)
    assert value(conn, "select min(expires_at) from memori.memories") == T0 - 3 * SEC
    assert execute(conn, max_rows=0)["deleted"] == 0


@pytest.mark.parametrize(
    "call",
    [
        "select * from memori.cleanup_preview(now(), 0)",
        "select * from memori.cleanup_preview(now(), -5)",
        "select * from memori.cleanup_preview(now(), 1000, -1)",
        "select * from memori.cleanup_preview(null)",
        "select * from memori.cleanup_execute(now(), 100001)",
        "select * from memori.cleanup_execute(now(), 10, null, 'manual')",
    ],
)
def test_bad_cleanup_arguments(conn: psycopg.Connection, call: str) -> None:
    assert_sqlstate(conn, "PM001", call)


def test_runs_are_recorded_with_events(conn: psycopg.Connection) -> None:
    for i in range(5):
        memory(conn, "ns", T0 - (i + 1) * SEC)
    summary = execute(conn, batch=2)
    run = rows(conn, "select * from memori.cleanup_runs where id = %s", (summary["run_id"],))[0]
    assert run["status"] == "succeeded" and run["trigger"] == "sql"
    assert (run["planned"], run["deleted"], run["batches"]) == (5, 5, 3)
    assert run["finished_at"] >= run["started_at"]
    assert value(conn, "select count(*) from memori.cleanup_queue") == 0
    batches = rows(conn, "select payload from memori.events where event_type = 'cleanup.batch_completed' order by id")
    assert [b["payload"]["deleted_count"] for b in batches] == [2, 2, 1]
    assert [b["payload"]["total_checked"] for b in batches] == [2, 2, 1]
    assert value(conn, "select count(*) from memori.events where event_type = 'cleanup.cleaned_up'") == 1


def test_status_view(conn: psycopg.Connection) -> None:
    now = value(conn, "select now()")
    memory(conn, "ns", now - SEC)
    memory(conn, "ns", now + 6 * DAY)
    memory(conn, "ns", now + 8 * DAY)
    memory(conn, "ns", now - SEC, IMPORTANT)
    status = sorted((r["status"], r["should_cleanup"]) for r in rows(
        conn, "select * from memori.retention_status where table_name = 'memories'"))
    assert status == [("active", False), ("expired", False), ("expired", True), ("expiring_soon", False)]
    assert rows(conn, "select expired_waiting, expiring_soon from memori.cleanup_status")[0] == \
        {"expired_waiting": 1, "expiring_soon": 1}


def test_begin_batch_finish_across_transactions(dsn: str) -> None:
    with psycopg.connect(dsn) as c:
        for i in range(5):
            memory(c, "ns", T0 - (i + 1) * SEC)
        c.commit()
        run = rows(c, "select * from memori.cleanup_begin(%s, 2)", (T0,))[0]
        c.commit()
        results = []
        while True:
            batch = rows(c, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
            c.commit()
            results.append((batch["deleted"], batch["remaining"], batch["done"]))
            if batch["done"]:
                break
        assert results == [(2, 3, False), (2, 1, False), (1, 0, True)]
        summary = rows(c, "select * from memori.cleanup_finish(%s)", (run["id"],))[0]
        c.commit()
        assert summary["status"] == "succeeded" and summary["deleted"] == 5
        # the session lock is released: another run can start
        assert value(c, "select memori._cleanup_lock_held()") is False
        c.rollback()



def _set(conn: psycopg.Connection, key: str, value_json: str) -> None:
    conn.execute("update memori.settings set value = %s::jsonb where key = %s", (value_json, key))


@pytest.mark.parametrize(
    ("share", "least", "batch_ms", "rest"),
    [("1", "5", 40.0, 5.0),  # share 1: only the least pause
     ("0.5", "5", 40.0, 40.0),  # half the time in batches: rest as long as the batch took
     ("0.25", "5", 40.0, 120.0),  # a quarter: three times as long
     ("0.25", "200", 40.0, 200.0),  # never below cleanup.batch_pause_ms
     ("0.1", "0", 0.0, 0.0)],  # a batch that took no time asks for no rest
)
def test_the_rest_after_a_batch_keeps_the_runs_share_of_time(
    conn: psycopg.Connection, share: str, least: str, batch_ms: float, rest: float
) -> None:
    """Issue 21: a cleaner that never rests takes a core the application's reads wait for; cleanup.work_share
    bounds its share of a run's time."""
    _set(conn, "cleanup.work_share", share)
    _set(conn, "cleanup.batch_pause_ms", least)
    assert value(conn, "select memori._cleanup_pause_ms(%s)", (batch_ms,)) == pytest.approx(rest)


@pytest.mark.parametrize(
    ("key", "bad"),
    [("cleanup.work_share", "0"), ("cleanup.work_share", "1.0001"), ("cleanup.work_share", "-0.5"),
     ("cleanup.work_share", '"fast"'), ("cleanup.work_share", "null"),
     ("cleanup.batch_pause_ms", "-1"), ("cleanup.batch_pause_ms", '"5"')],
)
def test_pacing_settings_out_of_range_fail_the_run_before_it_deletes(
    conn: psycopg.Connection, key: str, bad: str
) -> None:
    memory(conn, "ns", T0 - SEC)
    err = assert_sqlstate(conn, "PM001", "update memori.settings set value = %s::jsonb where key = %s", (bad, key))
    assert key in str(err)  # refused when written (memori.setting_rules)
    # a value written before the rules existed (the constraint is NOT VALID) still fails the run, not a batch
    conn.execute("alter table memori.settings drop constraint settings_value_valid")
    _set(conn, key, bad)
    err = assert_sqlstate(conn, "PM001", "select * from memori.cleanup_execute(%s)", (T0,))
    assert key in str(err) and "update memori.settings" in (err.diag.message_hint or "")
    assert_sqlstate(conn, "PM001", "select * from memori.cleanup_begin(%s)", (T0,))
    assert value(conn, "select count(*) from memori.memories") == 1  # nothing deleted
    assert value(conn, "select count(*) from memori.cleanup_runs") == 0


def test_a_session_runs_with_its_own_share(conn: psycopg.Connection) -> None:
    """SET memori.cleanup_work_share (memori-cleanup execute --work-share) wins over the setting; RESET, the
    setting applies again; a session value out of range is PM001 before anything is deleted."""
    _set(conn, "cleanup.batch_pause_ms", "0")
    assert value(conn, "select memori._cleanup_pause_ms(10)") == pytest.approx(10 * 0.97 / 0.03)  # the default
    conn.execute("set memori.cleanup_work_share = '0.5'")
    assert value(conn, "select memori._cleanup_pause_ms(10)") == pytest.approx(10.0)
    conn.execute("set memori.cleanup_work_share = 1")
    assert value(conn, "select memori._cleanup_pause_ms(10)") == 0
    memory(conn, "ns", T0 - SEC)
    for bad in ("0", "1.5", "fast", "-1", "1e"):
        conn.execute("select set_config('memori.cleanup_work_share', %s, false)", (bad,))
        err = assert_sqlstate(conn, "PM001", "select * from memori.cleanup_execute(%s)", (T0,))
        assert "memori.cleanup_work_share" in str(err) and "RESET" in (err.diag.message_hint or "")
    assert value(conn, "select count(*) from memori.memories") == 1
    conn.execute("reset memori.cleanup_work_share")
    assert value(conn, "select memori._cleanup_pause_ms(10)") == pytest.approx(10 * 0.97 / 0.03)


@pytest.mark.parametrize("bad", [-1.0, None, float("nan")])
def test_a_batch_time_that_is_no_duration_is_pm001(conn: psycopg.Connection, bad: float | None) -> None:
    assert_sqlstate(conn, "PM001", "select memori._cleanup_pause_ms(%s)", (bad,))


def test_each_batch_returns_its_rest_and_the_last_none(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for i in range(5):
            memory(c, "ns", T0 - (i + 1) * SEC)
        _set(c, "cleanup.work_share", "0.5")
        _set(c, "cleanup.batch_pause_ms", "3")
        run = rows(c, "select * from memori.cleanup_begin(%s, 2)", (T0,))[0]
        rests = []
        while True:
            batch = rows(c, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
            rests.append((batch["done"], batch["pause_ms"]))
            if batch["done"]:
                break
        rows(c, "select * from memori.cleanup_finish(%s)", (run["id"],))
    assert [done for done, _ in rests] == [False, False, True]
    assert all(rest >= 3 for done, rest in rests if not done)  # at least batch_pause_ms, as long as the batch
    assert rests[-1][1] == 0


def test_second_cleanup_is_refused_not_queued(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as first, psycopg.connect(dsn, autocommit=True) as second:
        run = rows(first, "select * from memori.cleanup_begin(%s)", (T0,))[0]
        err = assert_sqlstate(second, "PM020", "select * from memori.cleanup_execute(%s)", (T0,))
        assert f"run {run['id']}" in (err.diag.message_detail or "")
        assert_sqlstate(second, "PM020", "select * from memori.cleanup_begin(%s)", (T0,))
        # re-entrant advisory locks must not let the same session start twice either
        assert_sqlstate(first, "PM020", "select * from memori.cleanup_begin(%s)", (T0,))
        # a batch from a session without the lock is refused
        assert_sqlstate(second, "PM021", "select * from memori.cleanup_batch(%s)", (run["id"],))
        rows(first, "select * from memori.cleanup_finish(%s)", (run["id"],))
        assert execute(second)["status"] == "succeeded"


def test_cleanup_run_in_a_transaction_block_fails_before_taking_the_lock(dsn: str) -> None:
    """CALL cleanup_run inside BEGIN cannot commit: it fails (2D000) before the session lock, not after."""
    with psycopg.connect(dsn, autocommit=True) as c, psycopg.connect(dsn, autocommit=True) as other:
        memory(c, "ns", T0 - SEC)
        with pytest.raises(psycopg.Error) as info, c.transaction():
            c.execute("call memori.cleanup_run(10, null, 'sql')")
        assert info.value.sqlstate == "2D000"  # invalid transaction termination
        assert value(c, "select memori._cleanup_lock_held()") is False
        assert value(c, "select count(*) from memori.cleanup_runs") == 0
        assert execute(other, T0 + DAY)["deleted"] == 1  # no CleanupAlreadyRunning (PM020)
        c.execute("call memori.cleanup_run(10, null, 'sql')")  # at top level it runs
        assert value(c, "select memori._cleanup_lock_held()") is False


def test_dead_runner_is_marked_abandoned(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        memory(c, "ns", T0 - SEC)
    with psycopg.connect(dsn, autocommit=True) as dying:
        dead = rows(dying, "select * from memori.cleanup_begin(%s)", (T0,))[0]
    # connection closed mid-run: lock released by the server, run left "running"
    with psycopg.connect(dsn, autocommit=True) as c:
        summary = execute(c)
        assert summary["deleted"] == 1
        assert value(c, "select status from memori.cleanup_runs where id = %s", (dead["id"],)) == "abandoned"
        assert value(c, "select count(*) from memori.cleanup_queue") == 0


@contextmanager
def _held(dsn: str, c: psycopg.Connection, count: int, index: int) -> Iterator[psycopg.Connection]:
    """``count`` expired memories, skipped rows retried without pause, and a writer holding the ``index``-th."""
    ids = [memory(c, "ns", T0 - (i + 1) * SEC) for i in range(count)]
    c.execute("update memori.settings set value = '0' where key = 'cleanup.skip_retry_pause_ms'")
    with psycopg.connect(dsn) as writer:
        writer.execute("select 1 from memori.memories where id = %s for update", (ids[index],))
        yield writer


def test_a_row_a_writer_holds_is_skipped_then_retried(dsn: str) -> None:
    """The cleaner never waits for a writer: a held row is skipped, tried again at the end of the run."""
    with psycopg.connect(dsn, autocommit=True) as c:
        with _held(dsn, c, 8, 0) as writer:
            run = rows(c, "select * from memori.cleanup_begin(%s, 8)", (T0,))[0]
            first = rows(c, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
            # 7 went at once, without waiting; the held row stays in the plan
            assert (first["deleted"], first["skipped"], first["remaining"], first["done"]) == (7, 1, 1, False)
            again = rows(c, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
            assert (again["deleted"], again["skipped"], again["done"]) == (0, 1, False)
            writer.rollback()  # the writer is done: the next attempt gets the row
        last = rows(c, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
        assert (last["deleted"], last["skipped"], last["remaining"], last["done"]) == (1, 0, 0, True)
        summary = rows(c, "select * from memori.cleanup_finish(%s)", (run["id"],))[0]
        assert summary["deleted"] == summary["planned"] == 8 and summary["skipped"] == 0
        assert value(c, "select count(*) from memori.memories") == 0


def test_a_row_held_at_every_attempt_is_left_to_the_next_run(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        with _held(dsn, c, 3, 1) as writer:
            summary = execute(c, T0, 2)  # one transaction: terminates without the row
            writer.rollback()
        assert summary["status"] == "succeeded" and summary["deleted"] == 2 and summary["skipped"] == 1
        # first attempt + cleanup.skip_retries (3) more, one batch each
        assert summary["batches"] == 2 + 3
        assert value(c, "select count(*) from memori.cleanup_queue") == 0
        assert value(c, "select skipped from memori.cleanup_runs where id = %s", (summary["run_id"],)) == 1
        assert execute(c)["deleted"] == 1, "the next run deletes it"


def test_a_row_extended_while_held_is_not_retried(dsn: str) -> None:
    """A writer that extends a planned row and commits wins; the row is not reported as skipped."""
    with psycopg.connect(dsn, autocommit=True) as c:
        ids = [memory(c, "ns", T0 - (i + 1) * SEC) for i in range(3)]
        run = rows(c, "select * from memori.cleanup_begin(%s, 10)", (T0,))[0]
        c.execute("update memori.memories set expires_at = %s where id = %s", (T0 + DAY, ids[2]))
        batch = rows(c, "select * from memori.cleanup_batch(%s)", (run["id"],))[0]
        assert (batch["deleted"], batch["skipped"], batch["done"]) == (2, 0, True)
        rows(c, "select * from memori.cleanup_finish(%s)", (run["id"],))
        assert [r["id"] for r in rows(c, "select id from memori.memories")] == [ids[2]]


def test_a_deadlock_in_a_batch_is_retried_in_sql(dsn: str) -> None:
    """40P01 (or 55P03) inside a batch: rolled back and retried at half size by cleanup_batch itself."""
    with psycopg.connect(dsn, autocommit=True) as c:
        for i in range(4):
            memory(c, "ns", T0 - (i + 1) * SEC)
        # the first two deletes of the run fail as a lost deadlock would
        # (a sequence: its count survives the rollback of the failed attempt)
        c.execute("create sequence public.fails minvalue -1000 start 1")
        c.execute("create function public.fail() returns trigger language plpgsql as $$ begin "
                  "if nextval('public.fails') <= 2 then "
                  "raise exception 'deadlock detected' using errcode = '40P01'; end if; "
                  "return old; end $$")
        c.execute("create trigger fail before delete on memori.memories for each row execute function public.fail()")
        summary = execute(c, T0, 4)
        assert summary["status"] == "succeeded" and summary["deleted"] == 4
        run = rows(c, "select * from memori.cleanup_runs where id = %s", (summary["run_id"],))[0]
        assert run["retried"] == 2
        # retried at half size each time: 4 -> 2 -> 1 row went; then the other 3 in the next batch
        assert summary["batches"] == 2
        c.execute("alter sequence public.fails restart with -1000")  # lose every time now
        memory(c, "ns", T0 - SEC)
        assert_sqlstate(c, "PM022", "select * from memori.cleanup_execute(%s)", (T0,))


# -- preview == execute on random data ------------------------------------------------
namespaces = st.sampled_from(["ns_a", "ns_b", "session_api_2026_11"])
kinds = st.sampled_from(["{}", CHECKPOINT, IMPORTANT, '{"type": "session_checkpoint", "important": true}'])
expiries = st.one_of(st.none(), st.integers(min_value=-5, max_value=5))
row_strategy = st.tuples(namespaces, kinds, expiries)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(row_strategy, max_size=25), batch=st.integers(1, 7),
       max_rows=st.one_of(st.none(), st.integers(0, 30)))
def test_preview_equals_execute(conn: psycopg.Connection, data: list, batch: int, max_rows: int | None) -> None:
    conn.execute("truncate memori.memories, memori.events, memori.cleanup_runs")
    for namespace, metadata, offset in data:
        memory(conn, namespace, None if offset is None else T0 + offset * SEC, metadata)
    before = {r["id"] for r in rows(conn, "select id from memori.memories")}
    planned = [int(r["row_id"]) for r in preview(conn, T0, batch, max_rows) if r["table_name"] == "memories"]
    summary = execute(conn, T0, batch, max_rows)
    after = {r["id"] for r in rows(conn, "select id from memori.memories")}
    assert sorted(before - after) == sorted(planned)
    assert summary["deleted"] == len(planned) == summary["planned"]
    # nothing unexpired and nothing preserved was deleted
    assert value(conn, "select count(*) from memori.memories where expires_at > %s or expires_at is null",
                 (T0,)) == sum(1 for _, _, o in data if o is None or o > 0)


@pytest.mark.parametrize("chunk", [1, 2, 3, 50000])
def test_planning_in_chunks_equals_preview(conn: psycopg.Connection, chunk: int) -> None:
    """A run plans cleanup.plan_chunk_rows rows per transaction; the chunks concatenate to the preview."""
    conn.execute("update memori.settings set value = %s where key = 'cleanup.plan_chunk_rows'", (str(chunk),))
    for i in range(7):
        memory(conn, f"ns_{i % 3}", T0 - (i % 4) * SEC, CHECKPOINT if i % 2 else "{}")  # ties on expiry
    planned = [(r["table_name"], r["row_id"]) for r in preview(conn)]
    assert value(conn, "select memori.cleanup_count(%s)", (T0,)) == len(planned) == 7
    conn.execute("create table public.delete_log (id bigint, at timestamptz default clock_timestamp(), n serial)")
    conn.execute("create function public.log_delete() returns trigger language plpgsql as "
                 "$$ begin insert into public.delete_log (id) values (old.id); return old; end $$")
    conn.execute("create trigger log_delete after delete on memori.memories for each row "
                 "execute function public.log_delete()")
    summary = execute(conn, T0, 2)
    order = [str(r["id"]) for r in rows(conn, "select id from public.delete_log order by n")]
    assert order == [row_id for _, row_id in planned], "deleted in exactly the previewed order"
    assert summary["deleted"] == summary["planned"] == 7
    assert value(conn, "select count(*) from memori.memories") == 0
