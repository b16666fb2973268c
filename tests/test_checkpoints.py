"""The checkpoint tracker through SQL: policies, status, cleanup order, milestones, auto, versions, events."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from tests.helpers import T0, assert_sqlstate, one, rows, value

DAY = timedelta(days=1)
SEC = timedelta(seconds=1)


def create(conn: psycopg.Connection, kind: str = "manual", *, session: str = "s1", user: str = "alice",
           data: dict[str, Any] | None = None, at=T0, retention: int | None = None,  # type: ignore[no-untyped-def]
           tags: list[str] | None = None, title: str = "t") -> dict[str, Any]:
    row = one(conn, "select * from memori.checkpoint_create(%s, %s, %s, %s, %s, p_tags => %s,"
                    " p_retention_days => %s, p_now => %s)",
              (session, user, kind, title, Jsonb(data if data is not None else {"k": 1}), tags or [], retention, at))
    assert row is not None
    return row


def events(conn: psycopg.Connection, kind: str) -> list[dict[str, Any]]:
    return [r["payload"] for r in rows(conn, "select payload from memori.events where event_type = %s order by id",
                                       (kind,))]


@pytest.mark.parametrize(
    ("kind", "priority", "days"), [("manual", 8, 90), ("automatic", 5, 30), ("milestone", 10, 365)]
)
def test_type_policy_sets_priority_and_retention(
    conn: psycopg.Connection, kind: str, priority: int, days: int
) -> None:
    row = create(conn, kind)
    assert (row["priority"], row["retention_days"]) == (priority, days)
    assert row["expires_at"] == T0 + days * DAY
    assert row["pxyz"] == {"entity": "checkpoint", "operation": "created", "policy": kind,
                           "time": row["created_at"].isoformat().replace("+00:00", "+00:00")} or \
        (row["pxyz"]["entity"] == "checkpoint" and row["pxyz"]["policy"] == kind)
    assert row["preserve_important"] is True and row["version"] == 1


def test_retention_override_up_to_the_maximum(conn: psycopg.Connection) -> None:
    assert create(conn, "automatic", retention=365)["expires_at"] == T0 + 365 * DAY
    assert create(conn, "manual", retention=1)["retention_days"] == 1
    err = assert_sqlstate(conn, "PM001", "select memori.checkpoint_create('s', 'u', 'manual', 't', '{}', "
                                         "p_retention_days => 366)")
    assert "365" in (err.diag.message_hint or "")


def test_policy_is_data(conn: psycopg.Connection) -> None:
    conn.execute("update memori.retention_policies set priority = 3, retention = '7 days' "
                 "where table_name = 'checkpoints' and kind = 'manual'")
    row = create(conn, "manual")
    assert (row["priority"], row["retention_days"]) == (3, 7)


def test_pxyz_cannot_be_forged_or_left_out(conn: psycopg.Connection) -> None:
    """The writing functions set pxyz; the CHECK refuses a direct write with a wrong coordinate, or none."""
    insert = ("insert into memori.checkpoints (session_id, user_id, checkpoint_type, title, data, priority,"
              " retention_days, pxyz) values ('s', 'u', 'manual', 't', '{}', 8, 90, %s)")
    for pxyz in ('{"forged": true}', '{}', '{"entity": "checkpoint", "operation": "created", "policy": "milestone",'
                 ' "time": "2026-11-22T09:00:00+00:00"}'):
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(insert, (pxyz,))
    conn.execute(insert, ('{"entity": "checkpoint", "operation": "created", "policy": "manual",'
                          ' "time": "2026-11-22T09:00:00+00:00"}',))
    row = create(conn, "manual")
    assert row["pxyz"]["operation"] == "created" and row["pxyz"]["policy"] == "manual"
    preserved = one(conn, "select * from memori.checkpoint_preserve(%s, false)", (row["id"],))
    assert preserved is not None and preserved["pxyz"]["operation"] == "updated"


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("select memori.checkpoint_create('s', 'u', 'weekly', 't', '{}')", "PM004"),
        ("select memori.checkpoint_create('s', 'u', null, 't', '{}')", "PM004"),
        ("select memori.checkpoint_create('s', 'u', 'manual', '', '{}')", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', '  ', '{}')", "PM001"),
        ("select memori.checkpoint_create('', 'u', 'manual', 't', '{}')", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't', '[1, 2]')", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't', '\"x\"')", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't', null)", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't', '{}', p_retention_days => 0)", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't', '{}', p_metadata => '[]')", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't', '{}', p_tags => array[''])", "PM001"),
        ("select memori.checkpoint_create('s', 'u', 'manual', 't',"
         " jsonb_build_object('blob', repeat('x', 1048577)))", "PM003"),
        ("select * from memori.checkpoint_query(p_type => 'weekly')", "PM004"),
        ("select * from memori.checkpoint_query(p_limit => 0)", "PM001"),
        ("select memori.checkpoint_update(gen_random_uuid(), '{}')", "PM005"),
        ("select memori.checkpoint_preserve(gen_random_uuid(), true)", "PM005"),
        ("select memori.checkpoint_at_version(gen_random_uuid(), 1)", "PM005"),
    ],
)
def test_bad_input_is_rejected_and_writes_nothing(conn: psycopg.Connection, call: str, code: str) -> None:
    err = assert_sqlstate(conn, code, call)
    if code == "PM004":
        assert "manual" in (err.diag.message_hint or "")
    assert value(conn, "select count(*) from memori.checkpoints") == 0
    assert value(conn, "select count(*) from memori.events") == 0


def _status(conn: psycopg.Connection, offset: timedelta) -> dict[str, Any]:
    """A manual checkpoint expiring `offset` from now (now as the view sees it)."""
    now = value(conn, "select now()")
    row = create(conn, "manual", at=now - 90 * DAY + offset)
    found = one(conn, "select * from memori.checkpoint_expiry_status where checkpoint_id = %s", (row["id"],))
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("offset", "status"),
    [(8 * DAY, "active"), (7 * DAY + SEC, "active"), (7 * DAY, "expiring_soon"), (SEC, "expiring_soon"),
     (timedelta(0), "expired"), (-SEC, "expired")],
)
def test_expiry_status_boundaries(conn: psycopg.Connection, offset: timedelta, status: str) -> None:
    with conn.transaction():  # one now() for the insert and the view
        found = _status(conn, offset)
    assert found["status"] == status
    assert float(found["days_until_expiry"]) == pytest.approx(offset.total_seconds() / 86400, abs=1e-3)


@pytest.mark.parametrize("kind", ["manual", "automatic", "milestone"])
@pytest.mark.parametrize("preserve", [True, False])
@pytest.mark.parametrize("expired", [True, False])
def test_should_cleanup_matrix(conn: psycopg.Connection, kind: str, preserve: bool, expired: bool) -> None:
    """should_cleanup = enabled and expired and (not preserve_important or type not in {manual, milestone})."""
    now = value(conn, "select now()")
    days = {"manual": 90, "automatic": 30, "milestone": 365}[kind]
    row = create(conn, kind, at=now - days * DAY - (SEC if expired else -DAY))
    value(conn, "select memori.checkpoint_preserve(%s, %s)", (row["id"], preserve))
    expected = expired and (not preserve or kind not in ("manual", "milestone"))
    status = one(conn, "select * from memori.checkpoint_expiry_status where checkpoint_id = %s", (row["id"],))
    assert status["should_cleanup"] is expected  # type: ignore[index]
    planned = {r["row_id"] for r in rows(conn, "select row_id from memori.cleanup_preview(%s)", (now,))}
    assert (str(row["id"]) in planned) is expected
    conn.execute("update memori.settings set value = 'false' where key = 'cleanup.enabled'")
    assert value(conn, "select should_cleanup from memori.checkpoint_expiry_status") is False


def test_cleanup_order_across_types_and_tables(conn: psycopg.Connection) -> None:
    """Priority ascending (events 0, session checkpoints 1, automatic 5, manual 8), then expiry ascending."""
    conn.execute("update memori.settings set value = 'false' where key = 'checkpoint.preserve_important'")
    manual_old = create(conn, "manual", at=T0 - 200 * DAY)["id"]
    auto_new = create(conn, "automatic", at=T0 - 31 * DAY)["id"]
    auto_old = create(conn, "automatic", at=T0 - 40 * DAY)["id"]
    memory = value(conn, "insert into memori.memories (user_id, content, metadata, expires_at, owner_id) values "
                         "('session_api_2026_11', 'x', '{\"type\": \"session_checkpoint\"}', %s, 'alice') returning id",
                   (T0 - DAY,))
    conn.execute("truncate memori.events")  # the creation events are due too (priority 0, first)
    order = [(r["table_name"], r["row_id"], r["batch"]) for r in
             rows(conn, "select * from memori.cleanup_preview(%s, 2)", (T0,))]
    assert [o[:2] for o in order] == [("memories", str(memory)), ("checkpoints", str(auto_old)),
                                      ("checkpoints", str(auto_new)), ("checkpoints", str(manual_old))]
    assert [o[2] for o in order] == [1, 1, 2, 2]
    summary = one(conn, "select * from memori.cleanup_execute(%s, 100, 3)", (T0,))
    assert summary["deleted_by_table"] == {"memories": 1, "checkpoints": 2}  # type: ignore[index]
    assert value(conn, "select array_agg(id) from memori.checkpoints") == [manual_old]


def test_cleanup_emits_checkpoint_events(conn: psycopg.Connection) -> None:
    gone = create(conn, "automatic", at=T0 - 31 * DAY)["id"]
    soon = create(conn, "automatic", at=T0 - 25 * DAY)["id"]
    one(conn, "select * from memori.cleanup_execute(%s)", (T0,))
    assert events(conn, "checkpoint.expired")[0]["ids"] == [str(gone)]
    assert events(conn, "checkpoint.expiring_soon")[0]["ids"] == [str(soon)]
    assert events(conn, "checkpoint.cleaned_up")[0]["ids"] == [str(gone)]
    batch = events(conn, "checkpoint.cleanup_batch_completed")[0]
    assert (batch["deleted_count"], batch["total_checked"]) == (1, 1)
    # the next run reports only what crossed the lines since
    one(conn, "select * from memori.cleanup_execute(%s)", (T0 + SEC,))
    assert len(events(conn, "checkpoint.expired")) == 1


def test_query_filters_and_order(conn: psycopg.Connection) -> None:
    a = create(conn, "manual", session="s1", at=T0, tags=["api", "release"])["id"]
    b = create(conn, "automatic", session="s1", at=T0 + SEC, tags=["api"])["id"]
    c = create(conn, "manual", session="s2", user="bob", at=T0 + 2 * SEC)["id"]
    expired = create(conn, "automatic", session="s1", at=T0 - 40 * DAY)["id"]

    def ids(**kw: Any) -> list[Any]:
        args = ", ".join(f"{k} => %({k})s" for k in kw)
        return [r["id"] for r in rows(conn, f"select id from memori.checkpoint_query({args})", kw)]

    assert ids(p_session_id="s1", p_now=T0 + DAY) == [b, a]
    assert ids(p_session_id="s1", p_include_expired=True, p_now=T0 + DAY) == [b, a, expired]
    assert ids(p_user_id="bob", p_now=T0 + DAY) == [c]
    assert ids(p_type="automatic", p_now=T0 + DAY) == [b]
    assert ids(p_tags=["api", "release"], p_now=T0 + DAY) == [a]
    assert ids(p_from=T0 + SEC, p_to=T0 + 2 * SEC, p_now=T0 + DAY) == [b]
    assert ids(p_limit=1, p_now=T0 + DAY) == [c]
    assert value(conn, "select count(*) from memori.checkpoint_get(%s, %s)", (expired, T0 + DAY)) == 0
    assert events(conn, "checkpoint.queried")[-1]["count"] == 0
    conn.execute("update memori.settings set value = 'false' where key = 'checkpoint.query_events'")
    before = value(conn, "select count(*) from memori.events")
    ids(p_session_id="s1", p_now=T0 + DAY)
    assert value(conn, "select count(*) from memori.events") == before


def test_delete_and_events(conn: psycopg.Connection) -> None:
    row = create(conn)
    assert value(conn, "select memori.checkpoint_delete(%s)", (row["id"],)) is True
    assert value(conn, "select memori.checkpoint_delete(%s)", (row["id"],)) is False
    assert [e["checkpoint_id"] for e in events(conn, "checkpoint.created")] == [str(row["id"])]
    assert [e["checkpoint_id"] for e in events(conn, "checkpoint.deleted")] == [str(row["id"])]


def test_large_data_is_reported_compressed(conn: psycopg.Connection) -> None:
    small = create(conn, data={"text": "x" * 4900})
    big = create(conn, data={"text": "abc " * 5000})
    compressed = events(conn, "checkpoint.compressed")
    assert [e["checkpoint_id"] for e in compressed] == [str(big["id"])]
    assert compressed[0]["stored_bytes"] < compressed[0]["raw_bytes"]
    stats = {r["checkpoint_type"]: r for r in rows(conn, "select * from memori.checkpoint_stats(null, %s)", (T0,))}
    assert stats["manual"]["total"] == 2 and stats["manual"]["stored_bytes"] < stats["manual"]["raw_bytes"]
    assert small["id"] != big["id"]


def test_stats_by_type_and_status(conn: psycopg.Connection) -> None:
    create(conn, "manual", at=T0)
    create(conn, "manual", at=T0 - 85 * DAY)  # expiring soon
    create(conn, "automatic", at=T0 - 31 * DAY)  # expired
    create(conn, "milestone", at=T0, user="bob")
    stats = {r["checkpoint_type"]: r for r in rows(conn, "select * from memori.checkpoint_stats(null, %s)", (T0,))}
    assert list(stats) == ["milestone", "manual", "automatic"]
    assert (stats["manual"]["total"], stats["manual"]["active"], stats["manual"]["expiring_soon"]) == (2, 1, 1)
    assert stats["automatic"]["expired"] == 1
    assert stats["manual"]["next_expiry"] == T0 + 5 * DAY
    alice = {r["checkpoint_type"]: r["total"] for r in
             rows(conn, "select * from memori.checkpoint_stats('alice', %s)", (T0,))}
    assert alice == {"milestone": 0, "manual": 2, "automatic": 1}


# -- milestones -------------------------------------------------------------------------
MILESTONE = "select * from memori.checkpoint_detect_milestone('s1', 'alice', %s, %s)"


@pytest.mark.parametrize(
    ("previous", "current", "triggers"),
    [
        ({"tasks": [{"completed": True}, {"completed": False}]}, {"tasks": [{"completed": True}, {"completed": True}]},
         ["all_tasks_completed"]),
        ({"tasks": [{"completed": True}]}, {"tasks": [{"completed": True}]}, None),  # already all done before
        ({"tasks": [{"completed": False}]}, {"tasks": []}, None),  # an empty list is no accomplishment
        ({"tasks": [{"completed": False}]}, {"tasks": [{"completed": True}, {}]}, None),
        ({"skill_level": 2}, {"skill_level": 3}, ["skill_level_increase"]),
        ({"skill_level": 3}, {"skill_level": 3}, None),
        ({"efficiency": 1.0}, {"efficiency": 1.1}, None),  # must be more than 1.1x
        ({"efficiency": 1.0}, {"efficiency": 1.11}, ["efficiency_improvement_detected"]),
        ({"efficiency": "fast"}, {"efficiency": 2}, None),
        ({"skill_level": 1, "efficiency": 1, "tasks": [{"completed": False}]},
         {"skill_level": 2, "efficiency": 2, "tasks": [{"completed": True}]},
         ["all_tasks_completed", "skill_level_increase", "efficiency_improvement_detected"]),
        ({}, {}, None),
    ],
)
def test_milestone_criteria(conn: psycopg.Connection, previous: dict, current: dict,  # type: ignore[type-arg]
                            triggers: list[str] | None) -> None:
    before = create(conn, "manual", data=previous, at=T0)
    found = one(conn, MILESTONE, (Jsonb(current), T0 + SEC))
    if triggers is None:
        assert found is None
        assert events(conn, "checkpoint.milestone_detected") == []
        return
    assert found is not None
    assert found["checkpoint_type"] == "milestone" and found["priority"] == 10
    assert found["title"] == f"Milestone: {triggers[0]}"
    assert found["metadata"] == {"triggers": triggers, "previous_checkpoint_id": str(before["id"])}
    assert found["data"] == current
    assert events(conn, "checkpoint.milestone_detected")[0]["triggers"] == triggers
    assert events(conn, "checkpoint.milestone_created")[0]["checkpoint_id"] == str(found["id"])


def test_milestone_needs_a_previous_checkpoint_and_criteria_are_rows(conn: psycopg.Connection) -> None:
    assert one(conn, MILESTONE, (Jsonb({"skill_level": 9}), T0)) is None
    create(conn, data={"coverage": 0.5}, at=T0)
    conn.execute("insert into memori.milestone_criteria (name, kind, path, position) "
                 "values ('coverage_up', 'increase', '{coverage}', 0)")
    found = one(conn, MILESTONE, (Jsonb({"coverage": 0.8}), T0 + SEC))
    assert found is not None and found["title"] == "Milestone: coverage_up"
    conn.execute("update memori.milestone_criteria set enabled = false")
    assert one(conn, MILESTONE, (Jsonb({"coverage": 0.9}), T0 + 2 * SEC)) is None


# -- automatic checkpoints ----------------------------------------------------------------
AUTO = "select * from memori.checkpoint_auto('s1', 'alice', %s, '{\"a\": 1}', %s)"


def test_auto_checkpoint_interval_and_triggers(conn: psycopg.Connection) -> None:
    first = one(conn, AUTO, ("task_complete", T0))
    assert first["created"] and first["reason"] == "created"  # type: ignore[index]
    made = one(conn, "select * from memori.checkpoints where id = %s", (first["checkpoint_id"],))  # type: ignore[index]
    assert made["checkpoint_type"] == "automatic" and made["metadata"] == {"trigger": "task_complete"}  # type: ignore[index]
    again = one(conn, AUTO, ("context_change", T0 + 1799 * SEC))
    assert again == {"created": False, "reason": "interval_not_elapsed", "next_allowed_at": T0 + 1800 * SEC,
                     "checkpoint_id": None}
    assert one(conn, AUTO, ("session_end", T0 + 1800 * SEC))["created"]  # type: ignore[index]
    assert one(conn, AUTO, ("lunch_break", T0 + DAY))["reason"] == "trigger_not_configured"  # type: ignore[index]
    conn.execute("update memori.settings set value = 'false' where key = 'checkpoint.auto_enabled'")
    assert one(conn, AUTO, ("task_complete", T0 + DAY))["reason"] == "disabled"  # type: ignore[index]
    assert value(conn, "select count(*) from memori.checkpoints") == 2
    assert_sqlstate(conn, "PM001", AUTO, ("", T0))


# -- versions -----------------------------------------------------------------------------
def test_versions_are_capped_and_rebuilt_exactly(conn: psycopg.Connection) -> None:
    row = create(conn, data={"step": 0, "notes": ["a"]})
    history = [{"step": 0, "notes": ["a"]}]
    for i in range(1, 15):
        data = {"step": i, "notes": history[-1]["notes"] + [chr(97 + i)], "nested": {"i": i} if i % 2 else None}
        value(conn, "select (memori.checkpoint_update(%s, %s, %s)).version", (row["id"], Jsonb(data), T0 + i * SEC))
        history.append(data)
    versions = rows(conn, "select * from memori.checkpoint_versions(%s)", (row["id"],))
    assert [v["version"] for v in versions] == list(range(15, 5, -1))  # 10 kept, current first
    assert versions[0]["is_current"] and not versions[1]["is_current"]
    for v in range(6, 16):
        rebuilt = value(conn, "select memori.checkpoint_at_version(%s, %s)", (row["id"], v))
        assert rebuilt == history[v - 1], f"version {v}"
    err = assert_sqlstate(conn, "PM005", "select memori.checkpoint_at_version(%s, 5)", (row["id"],))
    assert "6 to 15" in (err.diag.message_hint or "")
    assert value(conn, "select pxyz->>'operation' from memori.checkpoints") == "updated"


def test_update_refuses_expired_checkpoints(conn: psycopg.Connection) -> None:
    row = create(conn, "automatic", at=T0 - 31 * DAY)
    assert_sqlstate(conn, "PM005", "select memori.checkpoint_update(%s, '{}', %s)", (row["id"], T0))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8).filter(lambda s: "\x00" not in s),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5).filter(lambda s: "\x00" not in s), children, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(st.sampled_from(["a", "b", "c", "tasks", "state"]), json_values, max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(objects, min_size=1, max_size=14), keep=st.integers(1, 6))
def test_version_reconstruction_property(conn: psycopg.Connection, history: list[dict], keep: int) -> None:  # type: ignore[type-arg]
    """Every kept version is rebuilt exactly; exactly `keep` versions are kept (fewer if fewer exist)."""
    conn.execute("truncate memori.checkpoints cascade")
    conn.execute("update memori.settings set value = %s where key = 'checkpoint.max_versions'", (json.dumps(keep),))
    cid = create(conn, data=history[0])["id"]
    for data in history[1:]:
        value(conn, "select (memori.checkpoint_update(%s, %s, %s)).id", (cid, Jsonb(data), T0))
    kept = [r["version"] for r in rows(conn, "select version from memori.checkpoint_versions(%s)", (cid,))]
    assert kept == list(range(len(history), max(len(history) - keep, 0), -1))
    for v in kept:
        assert value(conn, "select memori.checkpoint_at_version(%s, %s)", (cid, v)) == history[v - 1]


def test_create_many_validates_each_and_writes_all_or_nothing(conn: psycopg.Connection) -> None:
    items = [{"session_id": "s1", "user_id": "u", "type": t, "title": f"c{i}", "data": {"i": i}, "tags": ["x"]}
             for i, t in enumerate(["manual", "automatic", "milestone"])]
    made = rows(conn, "select * from memori.checkpoint_create_many(%s, %s)", (Jsonb(items), T0))
    assert [(r["title"], r["priority"], r["retention_days"]) for r in made] == [
        ("c0", 8, 90), ("c1", 5, 30), ("c2", 10, 365)]
    assert all(r["pxyz"]["operation"] == "created" and r["tags"] == ["x"] for r in made)
    created = events(conn, "checkpoint.created")  # a batch is one event listing its checkpoints
    assert created == [{"count": 3, "checkpoint_ids": [str(r["id"]) for r in made]}]
    bad = [*items, {"session_id": "s1", "user_id": "u", "type": "weekly", "title": "t", "data": {}}]
    err = assert_sqlstate(conn, "PM004", "select * from memori.checkpoint_create_many(%s)", (Jsonb(bad),))
    assert "checkpoint 4 of the list" in err.diag.message_primary  # type: ignore[operator]
    assert_sqlstate(conn, "PM001", "select * from memori.checkpoint_create_many(%s)",
                    (Jsonb([{**items[0], "sesion_id": "typo"}]),))
    assert_sqlstate(conn, "PM001", "select * from memori.checkpoint_create_many('{}')")
    assert_sqlstate(conn, "PM001", "select * from memori.checkpoint_create_many(%s)", (Jsonb([1] * 10001),))
    assert value(conn, "select count(*) from memori.checkpoints") == 3
