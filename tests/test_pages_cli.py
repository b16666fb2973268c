"""pymemdb vm ... through Typer's CliRunner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pymemdb.cli.main import app

runner = CliRunner()


def run(*args: str) -> str:
    result = runner.invoke(app, ["vm", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_pages_commands(env: str) -> None:
    assert run("turn", "s1", "--user", "alice").strip() == "1"
    assert "msg_1: L0" in run("add", "s1", "msg_1", "What about the paging model?", "--role", "user")
    run("add", "s1", "doc_1", "The page table maps ids to tiers.", "--type", "artifact", "--no-map", "--hint", "notes")
    envelope = json.loads(run("fault", "s1", "doc_1", "--level", "0", "--reason", "user_requested_recall"))
    assert envelope["page"]["content"] == {"text": "The page table maps ids to tiers."}
    assert json.loads(run("manifest", "s1"))["working_set"][1]["page_id"] == "doc_1"
    assert 'U (msg_1): "What about the paging model?"' in run("context", "s1")
    assert "<VM:RULES>" in run("context", "s1", "--developer", "strict")
    assert [m["mutation_type"] for m in json.loads(run("history", "s1", "doc_1", "--json"))] == ["create", "fault_in"]
    assert "fault_in" in run("history", "s1", "doc_1")
    assert [s["page_id"] for s in json.loads(run("replay", "s1", "1", "--json"))] == ["doc_1", "msg_1"]
    assert "doc_1" in run("replay", "s1", "1")
    for _ in range(3):  # msg_1 leaves the pinned last turns, doc_1 its fault protection
        run("turn", "s1")
    assert "doc_1" in run("evict", "s1", "1")


def test_pages_errors_are_one_line_with_a_hint(env: str) -> None:
    result = runner.invoke(app, ["vm", "add", "s1", "m", "x", "--type", "note", "--user", "alice"])
    assert result.exit_code == 2
    assert "unknown page type 'note'. Use one of" in result.output
    result = runner.invoke(app, ["vm", "fault", "nope", "m"])
    assert result.exit_code == 1 and "no VM session" in result.output
    runner.invoke(app, ["vm", "turn", "s1", "--user", "alice"])
    result = runner.invoke(app, ["vm", "fault", "s1", "missing"])
    assert result.exit_code == 1 and '"reason": "unknown_page"' in result.output


def test_pages_is_a_hidden_alias_of_vm(env: str) -> None:
    # one `vm` sub-app holds pages, fork, gc, regions and the lifecycle (issue 19); `pages` still runs for scripts
    top = runner.invoke(app, ["--help"]).output
    assert " vm " in top and " pages " not in top
    listed = runner.invoke(app, ["vm", "--help"]).output
    assert all(f" {c} " in listed for c in ("add", "fault", "fork", "gc", "region", "claim", "segment-close"))
    result = runner.invoke(app, ["pages", "add", "s_alias", "m1", "hello", "--user", "alice"])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["pages", "fork", "s_alias", "s_alias_fork"]).exit_code == 0
