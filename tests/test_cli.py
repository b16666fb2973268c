"""The CLI through Typer's CliRunner, plus the real console scripts end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import typer
from typer.testing import CliRunner

from pymemdb.cli.cleanup import app as cleanup_app
from pymemdb.cli.main import BENCH_SUITES
from pymemdb.cli.main import app as main_app
from tests.helpers import T0, memory

runner = CliRunner()


def _expired(dsn: str, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n):
            memory(conn, f"ns_{i % 2}", T0 - timedelta(seconds=i + 1))


def test_preview_is_the_default(env: str) -> None:
    result = runner.invoke(cleanup_app, [])
    assert result.exit_code == 0, result.output
    assert "Nothing to clean up" in result.output


def test_preview_groups_and_json(env: str) -> None:
    _expired(env, 5)
    result = runner.invoke(cleanup_app, ["preview", "--now", "2026-11-15T12:00:00", "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert "ns_0" in result.output and "total: 5 rows" in result.output
    previewed = runner.invoke(cleanup_app, ["preview", "--json", "--now", "2026-11-15T12:00:00+00:00"])
    data = json.loads(previewed.stdout)
    assert data["total"] == 5 and {g["owner"] for g in data["groups"]} == {"ns_0", "ns_1"}


def test_execute_yes_json(env: str) -> None:
    _expired(env, 5)
    result = runner.invoke(cleanup_app, ["execute", "--yes", "--json", "--batch-size", "2", "--work-share", "1",
                                         "--now", "2026-11-15T12:00:00"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["deleted"] == 5 and summary["batches"] == 3 and summary["status"] == "succeeded"
    status = json.loads(runner.invoke(cleanup_app, ["status", "--json"]).stdout)
    assert status["runs"][0]["deleted"] == 5 and status["job"] is None


def test_execute_while_locked_exits_3(env: str) -> None:
    with psycopg.connect(env, autocommit=True) as holder:
        holder.execute("select memori.cleanup_begin()")
        result = runner.invoke(cleanup_app, ["execute", "--yes"])
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1 and "cleanup already running" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["execute", "--yes", "--batch-size", "0"], 2, "batch size must be between 1 and 100000"),
        (["execute", "--yes", "--max-rows", "-1"], 2, "--max-rows must be >= 0, got -1"),
        (["execute", "--yes", "--work-share", "0"], 2, "memori.cleanup_work_share is '0.0'"),
        (["execute", "--yes", "--work-share", "1.5"], 2, "it must be a number above 0 and at most 1"),
        (["preview", "--limit", "-1"], 2, "--limit must be >= 0, got -1"),
        (["preview", "--max-rows", "-1"], 2, "--max-rows must be >= 0"),
        (["status", "--runs", "-1"], 2, "limit must be between 1 and 1000"),
        (["schedule", "61 * * * *"], 2, "outside 0-59"),
        (["schedule"], 1, "pg_cron is not installed"),
        (["unschedule"], 1, "memori-cleanup execute"),
        (["preview", "--now", "yesterday"], 2, "Invalid value"),
        (["frobnicate"], 2, "No such command"),
    ],
)
def test_errors_are_one_line_with_exit_codes(env: str, args: list[str], code: int, text: str) -> None:
    result = runner.invoke(cleanup_app, args)
    assert result.exit_code == code, result.output
    assert text in result.output
    assert "Traceback" not in result.output
    if code == 2 and "Invalid value" not in text and "No such" not in text:
        assert result.stderr.count("\n") == 1, "one line"


def test_unreachable_database_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMEMDB_DSN", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    result = runner.invoke(cleanup_app, ["status"])
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_init_sql_prints_the_script() -> None:
    result = runner.invoke(main_app, ["init", "--sql"])
    assert result.exit_code == 0
    assert "create schema if not exists memori" in result.stdout
    assert "create or replace function memori.cleanup_preview" in result.stdout


def test_init_is_a_noop_when_current(env: str) -> None:
    result = runner.invoke(main_app, ["init"])
    assert result.exit_code == 0 and "up to date" in result.output


def test_memory_commands(env: str) -> None:
    saved = runner.invoke(main_app, ["memories", "save-checkpoint", "api", "alice", "hello", "--metadata", '{"a": 1}'])
    assert saved.exit_code == 0 and "session_api_" in saved.output
    loaded = runner.invoke(main_app, ["memories", "load-checkpoint", "skill:api-builder", "alice", "--json"])
    assert loaded.exit_code == 0 and json.loads(loaded.stdout)["content"] == "hello"
    assert runner.invoke(main_app, ["memories", "load-checkpoint", "api", "bob"]).exit_code == 1
    bad = runner.invoke(main_app, ["memories", "save-checkpoint", "nope", "alice", "x"])
    assert bad.exit_code == 2 and "unknown skill nope" in bad.stderr and "skill:api-builder" in bad.stderr
    # memory, the sub-app's old name, still works for scripts (hidden from --help)
    bad_json = runner.invoke(main_app, ["memory", "save-checkpoint", "api", "alice", "x", "--metadata", "{"])
    assert bad_json.exit_code == 2 and "not valid JSON" in bad_json.stderr
    assert "session_api_" in runner.invoke(main_app, ["memory", "ttl-status"]).output


def test_memories_is_listed_and_memory_is_a_hidden_alias() -> None:
    commands = typer.main.get_command(main_app).commands
    assert not commands["memories"].hidden and commands["memory"].hidden
    assert commands["memory"].commands.keys() == commands["memories"].commands.keys()


def test_bench_commands_come_from_one_table() -> None:
    bench = typer.main.get_command(main_app).commands["bench"]
    assert list(bench.commands) == [s.name for s in BENCH_SUITES]
    for suite in BENCH_SUITES:
        command = bench.commands[suite.name]
        options = {p.name: p for p in command.params}
        # a suite that measures in interleaved windows (ttl) has --windows too
        assert list(options) == ["rows", "dsn", "as_json", "seed"] + (["windows"] if suite.windows else [])
        if suite.windows:
            assert options["windows"].default == suite.windows
        assert (options["rows"].default, options["rows"].help) == (suite.rows, suite.rows_help)
        assert options["seed"].default == 1
        assert command.help.startswith(suite.help)
        assert ("pymemdb\\[bench]" in command.help) == suite.needs_bench_extra


def test_console_scripts_end_to_end(env: str) -> None:
    """The installed entry points, as an operator runs them from a shell or cron."""
    scripts = Path(sysconfig.get_path("scripts"))  # this interpreter's, not whatever PATH finds first
    script = (str(scripts / "memori-cleanup") if (scripts / "memori-cleanup").exists()
              else shutil.which("memori-cleanup"))
    assert script
    assert Path(script).exists(), "pip install -e . installs the console scripts"
    _expired(env, 3)
    done = subprocess.run([script, "execute", "--yes", "--json", "--now", "2026-11-15T12:00:00"],
                          capture_output=True, text=True, env={"PYMEMDB_DSN": env, "PATH": "/usr/bin:/bin"},
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted"] == 3
    pymemdb_script = str(scripts / "pymemdb") if (scripts / "pymemdb").exists() else shutil.which("pymemdb")
    assert pymemdb_script
    helped = subprocess.run([pymemdb_script, "--help"], capture_output=True, text=True, check=False, timeout=60)
    assert helped.returncode == 0 and "memory layer" in helped.stdout


def test_demo_runs_in_a_scratch_database(env: str) -> None:
    result = runner.invoke(main_app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "deleted 4 of 4" in result.output
    with psycopg.connect(env) as conn:
        assert conn.execute("select count(*) from memori.memories").fetchone() == (0,), "user data untouched"


DELETE_LOG = """
create table public.delete_log (table_name text, id text, n serial);
create function public.log_delete() returns trigger language plpgsql as
  $$ begin insert into public.delete_log (table_name, id) values (tg_table_name, old.id::text); return old; end $$;
create trigger log_delete after delete on memori.memories for each row execute function public.log_delete();
create trigger log_delete after delete on memori.events for each row execute function public.log_delete();
create trigger log_delete after delete on memori.checkpoints for each row execute function public.log_delete();
"""


def test_preview_then_execute_delete_the_same_list(env: str) -> None:
    """Issue 16 item 3: `preview --now X` then `execute --now X --yes` on an idle database, compared row by row.

    The database has a history: a cleanup and checkpoints ran at the real clock, so there are events
    (kept 30 days from when they happened) that a --now half a year ahead finds expired; and the tool itself
    writes events (cleanup.batch_completed, checkpoint.expired, ...) while it runs.
    """
    # --now is half a year after the real clock; every date below is relative to the clock (fixed
    # ones would be due at the real clock once it passes them, and the cleanup below removes them)
    later_at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=184)
    with psycopg.connect(env, autocommit=True) as conn:
        for i in range(6):  # due at --now, not at the real clock
            memory(conn, f"ns_{i % 2}", later_at - timedelta(days=151, seconds=i + 1))
        for i in range(3):
            conn.execute("select memori.session_checkpoint_save('api', %s, 'x', '{}'::jsonb, %s)",
                         (f"u{i}", T0 - timedelta(days=40)))
            # automatic checkpoints (30 days) that expire before --now: the run reports them as
            # checkpoint.expired / expiring_soon events
            conn.execute("select memori.checkpoint_create('s1', 'alice', 'automatic', 't', '{}'::jsonb, "
                         "p_now => %s)", (later_at - timedelta(days=61 - i * 20),))
        conn.execute("select memori.cleanup_execute()")  # yesterday's cleanup, at the real clock: its events
        conn.execute(DELETE_LOG)
    later = later_at.strftime("%Y-%m-%dT%H:%M:%S%z")
    previewed = runner.invoke(cleanup_app, ["preview", "--json", "--limit", "100000", "--now", later])
    assert previewed.exit_code == 0, previewed.output
    planned = [(r["table_name"], r["row_id"]) for r in json.loads(previewed.stdout)["rows"]]
    assert len(planned) == json.loads(previewed.stdout)["total"] > 6
    executed = runner.invoke(cleanup_app, ["execute", "--yes", "--json", "--batch-size", "4", "--now", later])
    assert executed.exit_code == 0, executed.output
    with psycopg.connect(env, autocommit=True) as conn:
        deleted = [(r[0], r[1]) for r in conn.execute("select table_name, id from public.delete_log order by n")]
    assert sorted(deleted) == sorted(planned), "execute deleted exactly the previewed rows"
    assert json.loads(executed.stdout)["deleted"] == len(planned)
    # and a second preview at the same --now shows only what this execute itself wrote, kept for 30 days
    again = json.loads(runner.invoke(cleanup_app, ["preview", "--json", "--now", later]).stdout)
    assert again["total"] == 0, again
