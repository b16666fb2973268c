"""Compression through the client: the simulated 8K conversation, summarizers, run(), goals and snapshots."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pymemdb
from pymemdb.compression import (
    CompressionRequest,
    ExtractiveSummarizer,
    OpenAISummarizer,
    SummarizerError,
    estimate_tokens,
)
from tests.helpers import T0

SEC = timedelta(seconds=1)
TOPICS = ["the login endpoint", "JWT signing keys", "the refresh token flow", "password hashing with bcrypt",
          "rate limiting", "the session table schema", "error responses", "integration tests"]
LOCKED = ["Use JWT for authentication", "Store tokens in httpOnly cookies", "Hash passwords with bcrypt cost 12"]


def assistant_text(rng: random.Random, turn: int) -> str:
    topic = rng.choice(TOPICS)
    sentences = [f"For turn {turn} I looked at {topic} again.",
                 f"The change to {topic} keeps the public API stable and adds tests.",
                 f"We compared two options for {topic} and picked the simpler one.",
                 "Edge cases around expiry and clock skew are covered by new unit tests.",
                 f"Next I will wire {rng.choice(TOPICS)} into the router and measure latency.",
                 "Logs show no errors after the refactor; the old helper can be removed.",
                 f"Remember that {topic} must not leak stack traces to clients."]
    rng.shuffle(sentences)
    body = " ".join(sentences[: rng.randint(4, 7)])
    markers = []
    if turn % 9 == 3:
        markers.append(f"[CHECKPOINT] Step {turn} on {topic} - COMPLETED")
    if turn % 13 == 5:
        markers.append(f"[ARTIFACT] Modified src/auth/step{turn}.ts")
    if turn % 17 == 1 and turn // 17 < len(LOCKED):
        markers.append(f"[DECISION] {LOCKED[turn // 17]} - LOCKED")
    return "\n".join([body, *markers])


def user_text(rng: random.Random, turn: int) -> str:
    return f"Q{turn}: what about {rng.choice(TOPICS)}? Keep it short\u2014and exact (ünïcode)."


def test_simulated_8k_conversation_sustains_compressions(db: pymemdb.Database) -> None:
    """8K context: >= 6 compressions, never over budget, available never below a floor,
    user messages byte-identical, locked decisions never summarised."""
    db = db.as_user("alice")  # the acting user of every call (memori._acting_user)
    rng = random.Random(4)
    session, usable, floor = "sim", 6800, 2500
    db.compression.message_add(session, "system", "You are a careful senior engineer. " * 57, user_id="alice",
                               context_size=8000, now=T0)
    db.compression.message_add(session, "assistant", "[GOAL] Implement user authentication system - HIGH\n"
                               "[CHECKPOINT] Design authentication flow - IN PROGRESS", now=T0)
    sent_users: list[str] = []
    stats: list[tuple[int, int, int, int]] = []
    at, compressions, turn = T0, 0, 0
    while compressions < 8 and turn < 400:
        turn += 1
        for role, text in (("user", user_text(rng, turn)), ("assistant", assistant_text(rng, turn))):
            at += SEC
            if role == "user":
                sent_users.append(text)
            added = db.compression.message_add(session, role, text, user_id="alice", now=at)
            context = db.compression.active_context(session)
            assert sum(i.tokens for i in context) <= usable, f"over budget at turn {turn}"
            if added.should_compress:
                run = db.compression.run(session, ExtractiveSummarizer(), now=at)
                assert run.compressed, run.plan.reason
                compressions += 1
                budget = db.compression.budget(session)
                assert budget.available_tokens >= floor
                assert budget.used_tokens < budget.trigger_tokens, "no rapid re-compression"
                stats.append((turn, budget.checkpoint_tokens, budget.available_tokens, budget.used_tokens))
        # invariants after every turn
        context = db.compression.active_context(session)
        assert [i.content for i in context if i.kind == "user"] == sent_users
        [goal] = [i.content for i in context if i.kind == "goal"]
        summaries = " ".join(i.content for i in context if i.kind == "checkpoint")
        assert "[DECISION]" not in summaries and "[GOAL]" not in summaries
        for decision in LOCKED:
            if decision in goal:
                assert f"🔒 {decision} (locked)" in goal
    print("turn, checkpoint tokens, available, used after each compression:", stats)
    assert compressions >= 6
    goal = db.goals.block(session)
    assert goal is not None
    for decision in LOCKED:
        assert f"🔒 {decision} (locked)" in goal, "locked decisions stay verbatim in the goal block"
    levels = [i for i in db.compression.active_context(session) if i.kind == "checkpoint"]
    assert 1 <= len(levels) <= 4
    export = db.compression.session_export(session, model="llama3.2:3b", provider="ollama")
    assert export is not None and export["metadata"]["compressionCount"] == compressions
    assert [m["parts"][0]["text"] for m in export["messages"] if m["role"] == "user"] == sent_users


def request(source: str, target: int) -> CompressionRequest:
    return CompressionRequest("new", "new", 3, estimate_tokens(source), target, source, "prompt:\n" + source)


def test_extractive_summarizer_is_deterministic_and_within_target() -> None:
    rng = random.Random(1)
    source = "\n\n".join("assistant: " + assistant_text(rng, t) for t in range(30))
    summarizer = ExtractiveSummarizer()
    for target in (1, 5, 40, 200, 10_000):
        out = summarizer.summarize(request(source, target))
        assert (out and estimate_tokens(out) <= max(target, 1)) or target >= estimate_tokens(source)
        assert out == summarizer.summarize(request(source, target))
    assert summarizer.summarize(request("short text.", 100)) == "short text."


class _Chat(BaseHTTPRequestHandler):
    answers: ClassVar[list[tuple[int, str]]] = []
    seen: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Chat.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        status, text = _Chat.answers.pop(0)
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def chat_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_openai_summarizer_against_a_local_server(chat_server: str) -> None:
    _Chat.seen.clear()
    _Chat.answers[:] = [(200, "A short summary."), (200, "word " * 400), (500, "boom")]
    summarizer = OpenAISummarizer(chat_server, "llama3.2:3b", api_key="test-key", timeout=5)
    assert summarizer.summarize(request("x " * 500, 50)) == "A short summary."
    seen = _Chat.seen[0]
    assert seen["path"] == "/v1/chat/completions" and seen["auth"] == "Bearer test-key"
    body = seen["body"]
    assert isinstance(body, dict) and body["model"] == "llama3.2:3b" and body["max_tokens"] == 50
    assert body["messages"][1]["content"].startswith("prompt:")
    assert estimate_tokens(summarizer.summarize(request("x " * 500, 50))) <= 50, "over-long answers are trimmed"
    with pytest.raises(SummarizerError):
        summarizer.summarize(request("x " * 500, 50))


def test_run_with_http_summarizer_and_a_failing_one(db: pymemdb.Database, chat_server: str) -> None:
    db = db.as_user("bob")  # the acting user of every call (memori._acting_user)
    for i in range(12):
        db.compression.message_add("h", "user", f"question {i}", user_id="bob", now=T0)
        db.compression.message_add("h", "assistant", "A long answer sentence. " * 40, user_id="bob", now=T0)
    _Chat.answers[:] = [(200, "The assistant answered twelve questions.")]
    run = db.compression.run("h", OpenAISummarizer(chat_server, "m", timeout=5), context_size=8000, force=True, now=T0)
    assert run.applied is not None and run.applied.summary_tokens == estimate_tokens(
        "The assistant answered twelve questions.")

    class Broken:
        def summarize(self, request: CompressionRequest) -> str:
            raise RuntimeError("model crashed")

    for _ in range(12):
        db.compression.message_add("h", "assistant", "Another long answer. " * 40, user_id="bob", now=T0 + SEC)
    before = db.compression.active_context("h")
    with pytest.raises(SummarizerError):
        db.compression.run("h", Broken(), context_size=8000, force=True, now=T0 + SEC)
    assert db.compression.active_context("h") == before, "a failed summarizer changes nothing"
    assert db.events.list(event_type="compression.error", now=T0 + SEC)[0].payload["error"].endswith("model crashed")


def test_compression_cli(db: pymemdb.Database, dsn: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = db.as_user("alice")  # the acting user of every call (memori._acting_user)
    from typer.testing import CliRunner

    from pymemdb.cli.main import app

    runner = CliRunner()
    db.compression.message_add("cli", "system", "rules " * 100, user_id="alice", context_size=8000)
    for i in range(20):
        db.compression.message_add("cli", "user", f"question {i}", tool_calls=None, user_id="alice")
        db.compression.message_add("cli", "assistant", "A long answer sentence. " * 50,
                                   tool_calls=[{"id": f"call_{i}", "name": "read_file", "args": {"path": "a.ts"}}])
    result = runner.invoke(app, ["compression", "status", "cli", "--dsn", dsn, "-u", "alice", "--model-size", "3"])
    assert result.exit_code == 0, result.output
    assert "Context: " in result.output and "/6,800" in result.output and "(0 compressions)" in result.output
    assert "should compress: yes" in result.output
    result = runner.invoke(app, ["compression", "compress", "cli", "--dsn", dsn, "-u", "alice"])
    assert result.exit_code == 0 and "compression 1:" in result.output, result.output
    result = runner.invoke(app, ["compression", "compress", "cli", "--dsn", dsn, "-u", "alice"])
    assert "skipped:" in result.output
    out = tmp_path / "cli.json"
    result = runner.invoke(app, ["compression", "export", "cli", "--dsn", dsn, "-u", "alice", "-o", str(out),
                                 "--model", "m"])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["sessionId"] == "cli" and len(document["messages"]) == 41 and len(document["toolCalls"]) == 20
    assert document["metadata"]["compressionCount"] == 1 and document["model"] == "m"
    result = runner.invoke(app, ["compression", "snapshot", "cli", "--dsn", dsn, "-u", "alice", "--json"])
    snap = json.loads(result.output)
    result = runner.invoke(app, ["compression", "restore", snap["id"], "--dsn", dsn, "-u", "alice"])
    assert result.exit_code == 0 and "restored session cli" in result.output
    result = runner.invoke(app, ["compression", "snapshot", "cli", "--list", "--dsn", dsn, "-u", "alice", "--json"])
    assert {s["kind"] for s in json.loads(result.output)} >= {"manual", "pre_restore"}
    result = runner.invoke(app, ["compression", "status", "nope", "--dsn", dsn, "-u", "alice"])
    assert result.exit_code == 1 and "has no messages" in result.output
    # `session` stays a hidden alias of `compression` (db.sessions is the context store's)
    result = runner.invoke(app, ["session", "status", "cli", "--dsn", dsn, "-u", "alice", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["budget"]["session_id"] == "cli", result.output
    listed = runner.invoke(app, ["--help"]).output
    assert "│ compression " in listed and "│ session " not in listed
    result = runner.invoke(app, ["compression", "compress", "cli", "--llm-url", "http://127.0.0.1:9/v1", "--dsn", dsn,
                                 "-u", "alice"])
    assert result.exit_code == 2 and "--model" in result.output


def test_goals_snapshots_and_reliability_through_the_client(db: pymemdb.Database) -> None:
    db = db.as_user("alice")  # the acting user of every call (memori._acting_user)
    goal = db.goals.create("g", "Ship compression", priority="high", user_id="alice", now=T0)
    assert goal.status == "active" and goal.priority == "high"
    result = db.goals.markers_apply("g", "[DECISION] Plans are persisted - LOCKED\n[WHAT] ?", now=T0)
    assert result.goal_id == goal.id and result.decisions_added == 1 and result.unknown == ["[WHAT] ?"]
    second = db.goals.create("g", "Write the docs", now=T0 + SEC)
    assert [(g.description, g.status) for g in db.goals.list("g")] == [
        ("Ship compression", "paused"), ("Write the docs", "active")]
    assert (db.goals.block("g") or "").startswith("ACTIVE GOAL: Write the docs")
    assert second.id != goal.id
    with pytest.raises(pymemdb.UnknownValue):
        db.goals.create("g", "x", priority="urgent")

    db.compression.message_add("g", "user", "hello", user_id="alice", now=T0)
    snap = db.snapshots.create("g", {"note": "first"}, now=T0)
    assert snap.metadata == {"note": "first"} and len(snap.state["goals"]) == 2
    db.goals.create("g", "Third goal", now=T0 + 2 * SEC)
    pre = db.snapshots.restore(snap.id, now=T0 + 3 * SEC)
    assert pre.kind == "pre_restore"
    assert (db.goals.block("g") or "").startswith("ACTIVE GOAL: Write the docs")
    assert [s.kind for s in db.snapshots.list("g", now=T0 + 4 * SEC)] == ["pre_restore", "manual"]
    with pytest.raises(pymemdb.NotFound):
        db.snapshots.restore("00000000-0000-0000-0000-000000000000")

    score = db.compression.reliability_score(13.5, 2, 0.9)
    assert score.level == "low" and float(score.score) == pytest.approx(0.70 * 0.70 * 0.9)
    assert db.compression.session_reliability("g", 70).warning is None
    with pytest.raises(pymemdb.ContextTooSmall):
        db.compression.budget("g", context_size=100, system_prompt_tokens=200)
    plan = db.compression.plan("g", force=True, now=T0)
    assert plan.status == "skipped"
    with pytest.raises(pymemdb.CompressionPlanFinished):
        db.compression.apply(plan.id, "x")


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=1, max_size=3000), target=st.integers(1, 400))
def test_extractive_summaries_fit_their_target(text: str, target: int) -> None:
    source = text.strip()
    if not source:
        return
    out = ExtractiveSummarizer().summarize(request(source, target))
    assert out.strip(), "never an empty summary"
    assert estimate_tokens(out) <= max(target, 0) or estimate_tokens(out) <= estimate_tokens(source) <= target


def test_bench_compression_small(dsn: str) -> None:
    """`pymemdb bench compression` on its smallest data: every figure it reports is there, and it cleans up."""
    from pymemdb.bench import compression as bench

    result = bench.run(dsn, 1000, single=50, batch_size=100, iterations=20)
    assert result["message_add"]["single_vs_insert"] is not None
    assert result["plan"]["shapes"]["compressed_90pct"]["planned_messages"] is not None
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select count(*) from memori.messages").fetchone() == (0,)
    assert bench.render(result)
