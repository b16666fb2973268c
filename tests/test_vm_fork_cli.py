"""pymemdb vm fork | fork-chain | storage | gc | region ... through Typer's CliRunner (issue 7)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pymemdb.cli.main import app

runner = CliRunner()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, ["vm", *args])
    assert result.exit_code == code, result.output
    return result.output


def test_fork_chain_storage_gc(env: str) -> None:
    run("add", "s1", "msg_1", "We picked PostgreSQL.", "--user", "alice", "--no-map")
    run("add", "s1", "msg_2", "Backups run nightly.", "--user", "alice")
    out = run("fork", "s1", "f1")
    assert "f1: fork of s1 (depth 1), 1 pages shared, 1 mapped pages copied" in out
    assert json.loads(run("fork-chain", "f1", "--json"))[0]["ancestor_session_id"] == "s1"
    assert "pages" in run("storage")
    assert json.loads(run("gc", "--json"))["live_sessions"] == 2
    err = run("fork", "s1", "f1", code=1)
    assert "already exists" in err and "Fork into a new session id" in err


def test_regions(env: str) -> None:
    run("add", "a1", "p1", "alice's decision", "--user", "alice")
    assert "scope pages, owner alice" in run("region", "create", "r1", "--user", "alice")
    assert "shared" in run("region", "put", "r1", "a1", "p1", "--user", "alice")
    assert "granted" in run("region", "grant", "r1", "bob", "--user", "alice")
    assert json.loads(run("region", "show", "r1", "--user", "bob", "--json"))[0]["content"] == "alice's decision"
    assert "r1" in run("region", "list", "--user", "bob")
    err = run("region", "show", "r1", "--user", "mallory", code=1)
    assert "grant you access" in err
    assert "revoked" in run("region", "revoke", "r1", "bob", "--user", "alice")
    assert "removed" in run("region", "remove", "r1", "a1", "p1", "--user", "alice")
    assert "dropped r1" in run("region", "drop", "r1", "--user", "alice")


def test_bench_fork_small(dsn: str) -> None:
    from pymemdb.bench import fork as bench

    result = bench.run(dsn, 1000, seed=3)
    assert result["fork_large"]["own_rows"] == bench.MAPPED
    assert result["fork_vs_copy_bytes"] < 0.5
    assert result["writes_many"]["writes"] == 100
    assert len(bench.render(result)) == 3
