"""Piped CLI output is whole, and bad command lines are one error line (issue 16, item 11)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pymemdb.cli.cleanup import app as cleanup_app
from pymemdb.cli.main import app as main_app

runner = CliRunner()
LONG_KEY = "context_" + "k" * 70  # wider than 80 columns with the other cells
LONG_VALUE = '"' + "v" * 120 + '"'


def _script(name: str) -> str:
    path = shutil.which(name, path=sysconfig.get_path("scripts")) or shutil.which(name)
    if path is None:
        pytest.skip(f"console script {name} is not installed")
    return path


def test_piped_table_rows_are_whole(env: str) -> None:
    """Through a real pipe (not a terminal): every cell printed in full, one line per row."""
    result = runner.invoke(main_app, ["context", "set", LONG_KEY, LONG_VALUE, "--user", "alice"])
    assert result.exit_code == 0, result.output
    done = subprocess.run([_script("pymemdb"), "context", "list", "--user", "alice"],
                          capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if LONG_KEY in line]
    assert len(lines) == 1, done.stdout
    assert "v" * 120 in lines[0], "the value cell is whole, on the key's line"
    assert "…" not in done.stdout


def test_cli_runner_output_is_not_cut_at_80_columns(env: str) -> None:
    runner.invoke(main_app, ["context", "set", LONG_KEY, LONG_VALUE, "--user", "alice"])
    result = runner.invoke(main_app, ["context", "list", "--user", "alice"])
    assert result.exit_code == 0, result.output
    assert LONG_KEY in result.output and "…" not in result.output


def test_long_lines_are_not_wrapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """db status off a terminal: the data directory (and URL) on one line, not broken at 80 columns."""
    home = tmp_path / ("deep" * 30)
    monkeypatch.setenv("PYMEMDB_HOME", str(home))
    result = runner.invoke(main_app, ["db", "status"])
    assert result.exit_code == 1  # not running
    assert str(home / "pgdata") in result.output.replace("\n", "") and result.output.count("\n") == 1


@pytest.mark.parametrize(("app", "args", "expected"), [
    (cleanup_app, ["preview", "--now", "notatime"], "Invalid value for '--now'"),
    (cleanup_app, ["execute", "--now", "2026-13-45", "--yes"], "Invalid value for '--now'"),
    (cleanup_app, ["preview", "--bogus"], "No such option: --bogus"),
    (main_app, ["context", "list", "--nope"], "No such option: --nope"),
    (main_app, ["memory", "list", "a", "b", "c", "d"], "unexpected extra argument"),
])
def test_bad_command_lines_are_one_error_line(app: object, args: list[str], expected: str) -> None:
    result = runner.invoke(app, args)  # type: ignore[arg-type]
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and expected.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in result.output


def test_bad_option_from_the_real_console_script() -> None:
    done = subprocess.run([_script("memori-cleanup"), "preview", "--now", "notatime"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: Invalid value for '--now'")


def test_help_and_no_arguments_still_show_help() -> None:
    assert runner.invoke(main_app, ["--help"]).exit_code == 0
    result = runner.invoke(main_app, ["db"])
    assert result.exit_code == 2 and "Usage" in result.output
