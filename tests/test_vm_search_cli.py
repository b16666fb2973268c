"""pymemdb vm search through Typer's CliRunner (issue 7)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pymemdb.cli.main import app

runner = CliRunner()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, ["vm", *args])
    assert result.exit_code == code, result.output
    return result.output


def test_pages_search(env: str) -> None:
    run("add", "s1", "msg_1", "We picked PostgreSQL for the database.", "--user", "alice")
    run("add", "s2", "msg_9", "The database backups run nightly.", "--user", "alice")
    out = run("search", "s1", "database")
    assert "msg_1" in out and "1 of 1 matching pages (full_text)" in out
    found = json.loads(run("search", "s1", "database", "--scope", "user", "--limit", "5", "--json"))
    assert {(r["session_id"], r["page_id"]) for r in found} == {("s1", "msg_1"), ("s2", "msg_9")}
    assert json.loads(run("search", "s1", "database", "--embed", "--json"))[0]["mode"] == "hybrid"
    err = run("search", "s1", "database", "--limit", "0", code=2)
    assert "outside 1..100" in err


def test_bench_search_small(dsn: str) -> None:
    from pymemdb.bench import search as bench

    result = bench.run(dsn, 2000, seed=3)
    for key in ("session", "user", "user_filtered_1pct"):
        assert result[key]["fewer_than_k"] == 0, result[key]
    assert result["session"]["recall_at_10"] == 1.0
    assert result["user_filtered_1pct"]["recall_at_10"] == 1.0  # 20 candidates: exact ranking
    assert bench.render(result)
