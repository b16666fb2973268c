"""pymemdb budget ... through Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pymemdb.cli.main import app

runner = CliRunner()
CHUNKS = [{"id": "sys", "type": "system_prompt", "content": "You are terse."},
          {"id": "doc", "type": "rag_document_chunk", "tokens": 900},
          {"id": "tool", "type": "tool_output", "tokens": 200}]


def test_optimize_table_and_json(env: str, tmp_path: Path) -> None:
    path = tmp_path / "chunks.json"
    path.write_text(json.dumps(CHUNKS))
    result = runner.invoke(app, ["budget", "optimize", "--file", str(path), "--tokens", "1000", "--reserve", "0"])
    assert result.exit_code == 0, result.output
    assert "2 of 3 chunks fit" in result.output and "dropped 1: doc" in result.output
    assert result.output.index("sys") < result.output.index("tool")
    out = runner.invoke(app, ["budget", "optimize", "-f", str(path), "--tokens", "3200", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [c["id"] for c in doc["optimized_chunks"]] == ["sys", "tool", "doc"] and doc["reserved_tokens"] == 2000


def test_stored_add_and_estimate(env: str, tmp_path: Path) -> None:
    path = tmp_path / "chunks.json"
    path.write_text(json.dumps({"chunks": [{"type": "tool_output", "content": "x" * 38}]}))
    added = runner.invoke(app, ["budget", "add", "s1", "--user", "alice", "-f", str(path)])
    assert added.exit_code == 0 and "stored 1 chunks (10 tokens)" in added.output
    result = runner.invoke(app, ["budget", "stored", "s1", "--tokens", "100", "--reserve", "0", "--user", "alice"])
    assert result.exit_code == 0, result.output
    assert "session s1: 1 chunks fit" in result.output and "recorded as" in result.output
    assert runner.invoke(app, ["budget", "estimate", "x" * 20]).output.strip() == "6"


def test_errors_are_one_line(env: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"id": "a", "type": "novel", "tokens": 1}]))
    result = runner.invoke(app, ["budget", "optimize", "-f", str(path)])
    assert result.exit_code == 2 and "unknown chunk type 'novel'" in result.output
    assert "system_prompt" in result.output
    path.write_text("[{")
    assert runner.invoke(app, ["budget", "optimize", "-f", str(path)]).exit_code == 2
    assert runner.invoke(app, ["budget", "optimize", "-f", str(tmp_path / "missing.json")]).exit_code == 2
