"""The checkpoint client and CLI: typed results, batched create, error mapping, a live listener."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from typer.testing import CliRunner

import pymemdb
from pymemdb.checkpoints import Checkpoint, NewCheckpoint
from pymemdb.cli.main import app
from tests.helpers import T0

DAY = timedelta(days=1)
runner = CliRunner()


def test_create_get_update_versions(db: pymemdb.Database) -> None:
    row = db.checkpoints.create("s1", "alice", "manual", "Designed the API", {"step": 1}, tags=["api"], now=T0)
    assert isinstance(row, Checkpoint) and row.priority == 8 and row.expires_at == T0 + 90 * DAY
    assert db.checkpoints.get(row.id, now=T0) == row
    updated = db.checkpoints.update(row.id, {"step": 2, "extra": [1, 2]}, now=T0 + DAY)
    assert updated.version == 2
    assert [v.version for v in db.checkpoints.versions(row.id)] == [2, 1]
    assert db.checkpoints.at_version(row.id, 1) == {"step": 1}
    assert db.checkpoints.query(session_id="s1", now=T0 + DAY)[0].id == row.id
    assert db.checkpoints.preserve(row.id, False).preserve_important is False
    assert {s.checkpoint_type for s in db.checkpoints.stats(now=T0)} == {"manual", "automatic", "milestone"}
    assert db.checkpoints.status([row.id])[0].status in ("active", "expired")
    assert db.checkpoints.delete(row.id) is True


def test_create_many_is_one_transaction(db: pymemdb.Database) -> None:
    batch = [NewCheckpoint(f"s{i % 3}", "alice", "automatic", f"auto {i}", {"i": i}, now=T0) for i in range(50)]
    created = db.checkpoints.create_many(batch)
    assert [c.title for c in created] == [f"auto {i}" for i in range(50)]
    bad = [*batch[:5], NewCheckpoint("s", "u", "weekly", "t", {})]
    with pytest.raises(pymemdb.UnknownValue):
        db.checkpoints.create_many(bad)
    assert len(db.checkpoints.query(limit=1000, now=T0)) == 50, "all or nothing"


def test_milestone_and_auto(db: pymemdb.Database) -> None:
    db.checkpoints.create("s1", "alice", "manual", "start", {"skill_level": 1}, now=T0)
    milestone = db.checkpoints.detect_milestone("s1", "alice", {"skill_level": 2}, now=T0 + DAY)
    assert milestone is not None and milestone.title == "Milestone: skill_level_increase"
    assert db.checkpoints.detect_milestone("s1", "alice", {"skill_level": 2}, now=T0 + 2 * DAY) is None
    made = db.checkpoints.auto("s1", "alice", "task_complete", {"x": 1}, now=T0)
    assert made.created and made.checkpoint_id is not None
    again = db.checkpoints.auto("s1", "alice", "task_complete", {"x": 1}, now=T0 + timedelta(minutes=5))
    assert not again.created and again.reason == "interval_not_elapsed"


def test_errors_map(db: pymemdb.Database) -> None:
    with pytest.raises(pymemdb.UnknownValue) as info:
        db.checkpoints.create("s", "u", "weekly", "t", {})
    assert info.value.hint and "manual" in info.value.hint
    with pytest.raises(pymemdb.NotFound):
        db.checkpoints.update("00000000-0000-0000-0000-000000000000", {})
    with pytest.raises(pymemdb.PayloadTooLarge):
        db.checkpoints.create("s", "u", "manual", "t", {"blob": "x" * 1_048_577})
    with pytest.raises(pymemdb.InvalidArgument):
        db.checkpoints.create("s", "u", "manual", "t", {"a": "\x00"})


def test_events_reach_a_listener(db: pymemdb.Database) -> None:
    got: list[dict] = []  # type: ignore[type-arg]

    def listen() -> None:
        got.extend(db.events.listen(timeout=10, stop_after=3))

    listener = threading.Thread(target=listen)
    listener.start()
    time.sleep(0.5)  # LISTEN must be in place before the events commit
    row = db.checkpoints.create("s1", "alice", "manual", "t", {"a": 1})
    db.checkpoints.get(row.id)
    db.checkpoints.delete(row.id)
    listener.join(timeout=15)
    assert [e["type"] for e in got] == ["checkpoint.created", "checkpoint.queried", "checkpoint.deleted"]
    assert got[0]["payload"]["checkpoint_id"] == str(row.id)


def test_cli_checkpoint_commands(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMEMDB_DSN", dsn)
    made = runner.invoke(app, ["checkpoint", "create", "s1", "alice", "Designed it", "--data", '{"step": 1}',
                               "--tag", "api", "--json"])
    assert made.exit_code == 0, made.output
    cid = json.loads(made.stdout)["id"]
    assert runner.invoke(app, ["checkpoint", "get", cid]).exit_code == 0
    listed = runner.invoke(app, ["checkpoint", "list", "--session", "s1", "--json"])
    assert [c["id"] for c in json.loads(listed.stdout)] == [cid]
    assert runner.invoke(app, ["checkpoint", "list"]).exit_code == 0
    assert runner.invoke(app, ["checkpoint", "status", cid]).exit_code == 0
    assert "False" in runner.invoke(app, ["checkpoint", "preserve", cid, "--release"]).output
    assert "manual" in runner.invoke(app, ["checkpoint", "stats"]).output
    versions = runner.invoke(app, ["checkpoint", "versions", cid, "--show", "1", "--json"])
    assert json.loads(versions.stdout)["data"] == {"step": 1}
    bad = runner.invoke(app, ["checkpoint", "create", "s1", "alice", "t", "--type", "weekly"])
    assert bad.exit_code == 2 and "unknown checkpoint type" in bad.stderr and "manual" in bad.stderr
    missing = runner.invoke(app, ["checkpoint", "versions", "00000000-0000-0000-0000-000000000000"])
    assert missing.exit_code == 1 and "not found" in missing.stderr
    assert runner.invoke(app, ["checkpoint", "get", "00000000-0000-0000-0000-000000000000"]).exit_code == 1


def test_bench_checkpoints_small(dsn: str) -> None:
    """Issue 21: create() and create_many() run interleaved over a table that already holds --rows rows."""
    from pymemdb.bench import checkpoints as bench

    result = bench.run(dsn, 1000, single=100, batched=1000, batch_size=100, iterations=50)
    create = result["create"]
    assert create["interleaved"] == {"single_per_batch": 10, "batches": 10}
    assert create["single"]["checkpoints"] == 100 and create["create_many"]["checkpoints"] == 1000
    assert result["data"]["rows"] == 1000
    assert bench.render(result)
