"""`pymemdb demo vm`: the seed's North Star acceptance run, end to end against the database, no LLM.

A 205-turn conversation at the seed's timing: five decisions made early
(turns 1-10) and recorded as claims, 190 turns of unrelated implementation
detail (segments closed every 50 turns by the infinite-conversation hook),
then "As we decided earlier, what's our X?" for the five topics on turns
201-205; the figures (thrash index included) are read right after turn 205,
before any later turn can dilute the window. ``spoken=True`` says each subject
as words ("database choice") instead of the seed's identifier
("database_choice"): a multi-word subject is still one topic. The session
runs in ``hybrid`` paging mode with the seed's VMConfig (32,000 L0 tokens, 2
faults per turn).

The model is a deterministic script that behaves like a grounded one: it
answers only from the text of VM:CONTEXT (``vm_context``) or, when the
decision is not there, from ``search_pages`` + ``page_fault`` results, and it
cites the page ids it used. Nothing else of the database is visible to it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

import pymemdb
from pymemdb.cli.scratch import scratch_database

DEMO_DATABASE = "pymemdb_demo_vm"
SESSION = "north_star"
USER = "demo"

# the seed's five topics and what was decided
DECISIONS: dict[str, str] = {
    "database_choice": "PostgreSQL",
    "api_framework": "FastAPI",
    "frontend_stack": "React with TypeScript",
    "deployment_strategy": "Kubernetes on GCP",
    "testing_approach": "Pytest with 80% coverage",
}
CODENAMES = ("kestrel", "juniper", "marlin", "quartz", "saffron", "tundra", "walnut", "zephyr", "beacon", "copper")
MAX_L0_TOKENS = 32_000
VM_CONFIG: dict[str, object] = {"max_l0_tokens": MAX_L0_TOKENS, "max_faults_per_turn": 2, "paging_mode": "hybrid"}

_LINE = re.compile(r"^([UATSIDV]) \(([^)]+)\): (.*)$")


@dataclass(frozen=True)
class Answer:
    """What the scripted model said, where from, and which pages it cites."""

    text: str
    value: str | None
    citations: tuple[str, ...]
    source: str  # context | fault | none


@dataclass
class Recall:
    topic: str
    turn: int
    expected: str
    answer: Answer
    faults: int
    claim_id: str
    provenance: tuple[str, ...]

    @property
    def correct(self) -> bool:
        cited = set(self.answer.citations) & ({self.claim_id} | set(self.provenance))
        return self.answer.value == self.expected and bool(cited)


@dataclass
class NorthStarResult:
    turns: int = 0
    recalls: list[Recall] = field(default_factory=list)
    max_l0_tokens: int = 0
    max_recall_faults: int = 0
    # read right after the last recall turn (the seed's timing), then at the very end
    metrics: dict[str, Any] = field(default_factory=dict)
    final_metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def recalled(self) -> int:
        return sum(r.correct for r in self.recalls)

    @property
    def passed(self) -> bool:
        return (self.turns >= 200 and self.recalled == len(DECISIONS) and self.max_recall_faults <= 2
                and self.max_l0_tokens <= MAX_L0_TOKENS
                and self.metrics.get("thrash_index_max", 1) < 0.5)


def context_lines(context: str) -> dict[str, str]:
    """page id -> text of each page line of a VM:CONTEXT block (JSON-quoted text decoded)."""
    found: dict[str, str] = {}
    for line in context.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        text = m.group(3)
        try:
            decoded = json.loads(text)
            text = decoded if isinstance(decoded, str) else text
        except ValueError:
            pass
        found[m.group(2)] = text
    return found


def _decision(text: str, topic: str) -> str | None:
    m = re.search(rf"(?:Decision: use|go with) (.+?) for {re.escape(topic)}\b", text)
    return m.group(1) if m else None


class ScriptedModel:
    """A deterministic stand-in for a grounded model: evidence is VM:CONTEXT and tool results only."""

    def __init__(self, db: pymemdb.Database, session_id: str) -> None:
        self.db = db
        self.session_id = session_id

    def recall(self, topic: str, now: datetime) -> Answer:
        lines = context_lines(self.db.pages.context(self.session_id, now=now))
        # every mapped page that states the decision is evidence; a claim's wording wins
        found = {page_id: v for page_id, text in lines.items() if (v := _decision(text, topic)) is not None}
        if found:
            claims = [p for p in found if p.startswith("claim_")]
            value = found[claims[-1]] if claims else next(iter(found.values()))
            cites = claims + [p for p in found if p not in claims and found[p] == value]
            return self._answer(topic, value, cites, "context")
        # not in context: search, then fault the best match in (the model's own fault, counted like any other)
        for hit in self.db.pages.search(self.session_id, topic.replace("_", " "), page_types=["claim"], limit=3,
                                        now=now):
            envelope = self.db.pages.fault(self.session_id, hit.page_id, 0, "user_requested_recall", now=now)
            page = envelope.get("page") or {}
            faulted = _decision(str((page.get("content") or {}).get("text", "")), topic)
            if faulted is not None:
                return self._answer(topic, faulted, [hit.page_id], "fault")
        return Answer("I don't have that in the mapped context.", None, (), "none")

    @staticmethod
    def _answer(topic: str, value: str, cites: list[str], source: str) -> Answer:
        refs = " ".join(f"[ref: {c}]" for c in dict.fromkeys(cites))
        return Answer(f"As we decided, our {topic} is {value}. {refs}", value, tuple(dict.fromkeys(cites)), source)


class Conversation:
    """Turns through db.vm.turn_start (the pre-pass runs in hybrid mode) and assistant pages."""

    def __init__(self, db: pymemdb.Database, session_id: str, start: datetime) -> None:
        self.db = db
        self.session_id = session_id
        self.start = start
        self.turn = 0
        self.segment = "seg_0001"
        self.max_l0 = 0

    @property
    def now(self) -> datetime:
        return self.start + timedelta(minutes=self.turn)

    def user_says(self, text: str) -> str:
        started = self.db.vm.turn_start(self.session_id, text, user_id=USER, now=self.start
                                        + timedelta(minutes=self.turn + 1))
        self.turn = started.turn
        self.segment = started.segment
        return started.page_id

    def ai_responds(self, text: str) -> str:
        page_id = f"msg_{self.turn:04d}_assistant"
        self.db.pages.create(self.session_id, page_id, text, role="assistant", segment=self.segment, now=self.now)
        self.max_l0 = max(self.max_l0, sum(w.tokens for w in self.db.pages.working_set(self.session_id)))
        return page_id

    def close_segment(self) -> None:
        self.db.vm.segment_close(self.session_id, now=self.now)


def _detail(i: int) -> tuple[str, str]:
    name = CODENAMES[i % len(CODENAMES)]
    question = f"Tell me about implementation detail {i} of the {name} service."
    body = " ".join(
        f"Step {k} of detail {i} in {name}: the handler validates input, writes a row, emits an event and "
        f"retries with backoff when the upstream times out." for k in range(1, 15))
    return question, body


def run_north_star(
    db: pymemdb.Database, *, session_id: str = SESSION, start: datetime | None = None, detail_turns: int = 190,
    segment_turns: int = 50, filler_turns: int = 0, spoken: bool = False,
    progress: Callable[[str], None] | None = None,
) -> NorthStarResult:
    """The seed's acceptance scenario on ``db``; returns what happened (assert on ``result.passed``).

    ``result.metrics`` is read right after the recall turns; ``filler_turns``
    more turns follow them (``result.final_metrics`` is read after those).
    """
    say = progress or (lambda _msg: None)

    def subject(topic: str) -> str:
        return topic.replace("_", " ") if spoken else topic

    start = start or datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    db.pages.session_configure(session_id, VM_CONFIG, user_id=USER, now=start)
    chat = Conversation(db, session_id, start)
    model = ScriptedModel(db, session_id)
    result = NorthStarResult()
    claims: dict[str, tuple[str, tuple[str, ...]]] = {}

    say("phase 1: five decisions, recorded as claims")
    for topic, value in DECISIONS.items():
        said = subject(topic)
        asked = chat.user_says(f"For {said}, what should we use?")
        advised = chat.ai_responds(f"I recommend {value} for {said}: it fits the team and the load we expect.")
        agreed = chat.user_says(f"Agreed, let's go with {value} for {said}.")
        chat.ai_responds(f"Noted: {value} for {said}.")
        claim = db.vm.claim_create(session_id, f"Decision: use {value} for {said}", [asked, advised, agreed],
                                   topic=topic, now=chat.now)
        claims[topic] = (claim.page_id, tuple(claim.provenance))
    chat.close_segment()

    say(f"phase 2: {detail_turns} turns of unrelated detail, a segment closed every {segment_turns}")
    for i in range(detail_turns):
        question, body = _detail(i)
        chat.user_says(question)
        chat.ai_responds(body)
        if (i + 1) % segment_turns == 0:
            chat.close_segment()

    say("phase 3: recall challenges, one per topic on consecutive turns (the seed's timing)")
    for topic, value in DECISIONS.items():
        said = subject(topic)
        chat.user_says(f"As we decided earlier, what's our {said}?")
        answer = model.recall(said, chat.now)
        chat.ai_responds(answer.text)
        db.vm.cite(session_id, answer.citations, now=chat.now)
        faults = sum(1 for f in db.pages.fault_list(session_id, turn=chat.turn) if f.outcome == "served")
        claim_id, provenance = claims[topic]
        result.recalls.append(Recall(topic, chat.turn, value, answer, faults, claim_id, provenance))
    result.metrics = _metrics(db, session_id, chat.now)  # right after the recall turns

    for k in range(filler_turns):
        chat.user_says(f"Next task {k}: draft the release notes paragraph.")
        chat.ai_responds(f"Release notes paragraph {k}: small fixes and better logs.")

    result.turns = chat.turn
    result.max_l0_tokens = chat.max_l0
    result.max_recall_faults = max((r.faults for r in result.recalls), default=0)
    result.final_metrics = _metrics(db, session_id, chat.now)
    return result


def _metrics(db: pymemdb.Database, session_id: str, now: datetime) -> dict[str, Any]:
    """memori.vm_metrics as a dict, with the client's page-table cache counters under ``tlb``."""
    return {**dataclasses.asdict(db.pages.metrics(session_id, now=now)), "tlb": db.pages.tlb.stats()}


def render(result: NorthStarResult) -> list[Table]:
    recalls = Table(title="Recall challenges (As we decided earlier, what's our X?)")
    for column in ("turn", "topic", "answer", "cites", "from", "faults", "ok"):
        recalls.add_column(column)
    for r in result.recalls:
        recalls.add_row(str(r.turn), r.topic, r.answer.value or "-", ", ".join(r.answer.citations), r.answer.source,
                        str(r.faults), "yes" if r.correct else "NO")
    m = result.metrics
    figures = Table(title="North Star figures (seed 03)")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    figures.add_column("required", justify="right")
    rows = [
        ("turns", str(result.turns), ">= 200"),
        ("decisions recalled with a citation", f"{result.recalled}/{len(DECISIONS)}", "5/5"),
        ("most faults on a recall turn", str(result.max_recall_faults), "<= 2"),
        ("largest L0 (tokens)", f"{result.max_l0_tokens:,}", "<= 32,000"),
        ("thrash index right after the recall turns (last window / worst window)",
         f"{m.get('thrash_index')} / {m.get('thrash_index_max')}", "< 0.5"),
        ("faults per turn (mean / max)",
         f"{m['faults_per_turn']} / {m['faults_max_per_turn']}", ""),
        ("faults by reason", json.dumps(m["faults_by_reason"]), ""),
        ("evictions from L0 / to L2", f"{m['evictions_from_l0']} / {m['evictions_to_l2']}", ""),
        ("tokens available in L0", f"{m['tokens_available']:,}", ""),
        ("segments closed", str(m["segments_closed"]), ""),
        ("compression ratio (segment tokens per summary token)", str(m["compression_ratio"]), "> 10"),
        ("prefetch hit rate (cited / prefetched)",
         "none needed" if not m["prefetched"]
         else f"{m['prefetch_hit_rate']} ({m['prefetch_used']}/{m['prefetched']})", "> 0.6"),
        # every turn changes L0, so the packed context is rebuilt each time
        ("pack cache hit rate", str(m["pack_hit_rate"]), ""),
        # the scripted model reads through vm_context and page_fault, never page_lookup
        ("page-table cache (client TLB) hit rate",
         "no lookups" if m["tlb"].get("hit_rate") is None else str(m["tlb"]["hit_rate"]), ""),
        ("claims in L0 at the end", f"{m['claims_in_l0']}/{m['claims']}", ""),
    ]
    for row in rows:
        figures.add_row(*row)
    return [recalls, figures]


def run_demo_vm(dsn: str | None, *, keep: bool = False, as_json: bool = False, console: Console | None = None) -> bool:
    """Run the North Star scenario in a scratch database (pymemdb_demo_vm) and print its figures."""
    out = console or Console()
    with scratch_database(dsn, DEMO_DATABASE, keep=keep) as target, pymemdb.connect(target, user_id=USER) as db:
        result = run_north_star(db, progress=None if as_json else (lambda msg: out.print(f"[dim]{msg}[/dim]")))
    if as_json:
        out.print_json(json.dumps({
            "passed": result.passed, "turns": result.turns, "recalled": result.recalled,
            "max_recall_faults": result.max_recall_faults, "max_l0_tokens": result.max_l0_tokens,
            "recalls": [{"topic": r.topic, "turn": r.turn, "answer": r.answer.text, "citations": r.answer.citations,
                         "faults": r.faults, "correct": r.correct} for r in result.recalls],
            "metrics": result.metrics}, default=str))
        return result.passed
    for table in render(result):
        out.print(table)
    out.print(("PASSED" if result.passed else "FAILED") + f": the North Star run (database {DEMO_DATABASE}"
              + (", kept)." if keep else ", dropped)."))
    return result.passed
