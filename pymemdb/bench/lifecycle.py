"""``pymemdb bench lifecycle``: what the VM lifecycle adds to a turn (issue 7).

One session of ``rows`` pages (default 10,000: transcript pages in L2 across
closed segments, generated set-based) with 50 claims, in ``hybrid`` paging
mode with the seed's VMConfig (32k L0 tokens, 2 faults per turn). Measured,
interleaved so both sides see the same cache state:

1. A turn: ``vm_turn_start`` (turn_begin + the user's page + the runtime
   pre-pass applied) against the baseline of ``turn_begin`` + ``page_create``
   (what a turn costs in ``model`` mode); messages alternate between a recall
   question and a plain one.
2. The pre-pass alone (``vm_prepass`` without applying) against one
   ``search_pages`` call of the message's topic, its main ingredient.
3. ``vm_metrics`` on the session after the turns (thrash index, prefetch hit
   rate), against ``vm_session_get``; and one ``segment_close`` of the turns.

The bench session (``bench_lifecycle``) is deleted at the end.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, LiteralString

import psycopg
from rich.table import Table

from pymemdb.bench import Progress, connect, derive_pages, fmt, percentile, ratio

SESSION = "bench_lifecycle"
USER = "bench"
TURNS = 200  # at --rows 10,000; fewer for small runs (rows / 50, at least 10)

GENERATE_PAGES: LiteralString = """
insert into memori.pages (session_id, user_id, page_id, page_type, modality, role, tier, content, tokens, size_bytes,
                          importance, turn, created_at, updated_at, last_accessed, segment)
select %(s)s, %(u)s, 'old_' || lpad(g::text, 7, '0'), 'transcript', 'text',
       case when g %% 2 = 0 then 'user' else 'assistant' end, 'L2',
       'Old turn ' || g || ' about topic' || (g %% 200) || ' and the service' || (g %% 37) || ' rollout details.',
       0, 0, 0.5, 0, %(now)s, %(now)s, %(now)s, 'old_' || (g / 100)
  from generate_series(1, %(n)s) g
"""


def _ms(samples: list[float]) -> dict[str, float]:
    xs = sorted(samples)
    return {"n": len(xs), "p50_ms": round(percentile(xs, 50), 3), "p95_ms": round(percentile(xs, 95), 3),
            "max_ms": round(xs[-1], 3)}


def _time(conn: psycopg.Connection[Any], query: LiteralString, params: dict[str, Any]) -> float:
    start = time.perf_counter()
    with conn.transaction():
        conn.execute(query, params).fetchall()
    return (time.perf_counter() - start) * 1000


def _pair(subject: list[float], baseline: list[float]) -> dict[str, Any]:
    s, b = _ms(subject), _ms(baseline)
    return {"subject": s, "baseline": b, "ratio_p50": ratio(s["p50_ms"], b["p50_ms"]),
            "ratio_p95": ratio(s["p95_ms"], b["p95_ms"])}


def run(dsn: str, rows: int = 10_000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    say: Callable[[str], None] = progress or (lambda _m: None)
    rng = random.Random(seed)
    conn = connect(dsn)
    now = "2026-11-22 09:00+00"
    try:
        conn.execute("delete from memori.vm_sessions where session_id = %s", (SESSION,))
        conn.execute("select memori.vm_session_configure(%s, %s::jsonb, %s, %s)",
                     (SESSION, '{"max_l0_tokens": 32000, "max_faults_per_turn": 2, "paging_mode": "hybrid"}',
                      USER, now))
        say(f"generating {rows:,} pages and 50 claims")
        params = {"s": SESSION, "u": USER, "n": rows, "now": now}
        conn.execute(GENERATE_PAGES, params)
        derive_pages(conn, params, references=False)
        conn.execute("analyze memori.pages")
        for k in range(50):
            conn.execute("select memori.claim_create(%s, %s, array[%s, %s], p_topic => %s, p_now => %s)",
                         (SESSION, f"Decision: use option {k} for topic{k}", f"old_{k % rows + 1:07d}",
                          f"old_{(k + 200) % rows + 1:07d}", f"topic{k}", now))
        turns = min(TURNS, max(10, rows // 50))

        def message(i: int) -> str:
            topic = rng.randrange(200)
            return (f"As we decided earlier, what's our topic{topic}?" if i % 2 == 0
                    else f"Tell me more about service{rng.randrange(37)} please")

        say(f"{turns} turns: vm_turn_start (hybrid) vs turn_begin + page_create, interleaved")
        subject: list[float] = []
        baseline: list[float] = []
        prepass: list[float] = []
        search: list[float] = []
        served = 0
        for i in range(turns):
            msg = message(i)
            start = time.perf_counter()
            with conn.transaction():
                out = conn.execute("select prefetch from memori.vm_turn_start(%(s)s, %(m)s, p_page_id => %(p)s)",
                                   {"s": SESSION, "m": msg, "p": f"t{i}_a"}).fetchone()
            subject.append((time.perf_counter() - start) * 1000)
            assert out is not None
            served += sum(1 for x in out[0] if x["outcome"] == "served")
            baseline.append(_time(conn, "select memori.turn_begin(%(s)s), memori.page_create(%(s)s, %(p)s, %(m)s,"
                                        " p_role => 'user')", {"s": SESSION, "m": msg, "p": f"t{i}_b"}))
            msg = message(i)
            prepass.append(_time(conn, "select * from memori.vm_prepass(%(s)s, %(m)s)", {"s": SESSION, "m": msg}))
            topics = conn.execute("select memori.vm_prepass_topics(%s)", (msg,)).fetchone()
            topic = (topics[0] if topics and topics[0] else ["topic1"])[0]
            search.append(_time(conn, "select * from memori.search_pages(%(s)s, %(q)s, p_limit => 20)",
                                {"s": SESSION, "q": topic}))
        say("vm_metrics vs vm_session_get; segment_close")
        metrics = [_time(conn, "select * from memori.vm_metrics(%(s)s)", {"s": SESSION}) for _ in range(30)]
        session = [_time(conn, "select * from memori.vm_session_get(%(s)s)", {"s": SESSION}) for _ in range(30)]
        pages = conn.execute("select count(*) from memori.segment_pages(%s)", (SESSION,)).fetchone()
        close_ms = _time(conn, "select * from memori.segment_close(%(s)s, 'Two hundred turns of questions.')",
                         {"s": SESSION})
        m = conn.execute("select thrash_index_max, faults_per_turn, faults_max_per_turn, faults_this_turn"
                         " from memori.vm_metrics(%s)", (SESSION,)).fetchone()
        assert m is not None and pages is not None
        result = {
            "pages": rows, "turns": turns, "prefetched_pages": served,
            "turn": _pair(subject, baseline),
            "prepass": _pair(prepass, search),
            "metrics": _pair(metrics, session),
            "segment_close": {"pages": int(pages[0]), "ms": round(close_ms, 3)},
            "thrash_index_max": m[0],
            "faults_per_turn": {"per_turn": m[1], "max_per_turn": m[2], "this_turn": m[3]},
        }
    finally:
        conn.execute("delete from memori.vm_sessions where session_id = %s", (SESSION,))
        conn.close()
    return result


def render(result: dict[str, Any]) -> list[Table]:
    t = Table(title=f"VM lifecycle on a session of {result['pages']:,} pages + 50 claims, {result['turns']} turns "
                    f"({result['prefetched_pages']} pages prefetched)")
    for col in ("call", "p50 ms", "p95 ms", "max ms", "p50 ratio", "p95 ratio"):
        t.add_column(col, justify="left" if col == "call" else "right")
    for name, base, key in (("vm_turn_start (pre-pass applied)", "turn_begin + page_create", "turn"),
                            ("vm_prepass (proposals only)", "search_pages, one topic", "prepass"),
                            ("vm_metrics", "vm_session_get", "metrics")):
        r = result[key]
        s, b = r["subject"], r["baseline"]
        t.add_row(name, fmt(s["p50_ms"]), fmt(s["p95_ms"]), fmt(s["max_ms"]), fmt(r["ratio_p50"], "x"),
                  fmt(r["ratio_p95"], "x"))
        t.add_row(f"  baseline: {base}", fmt(b["p50_ms"]), fmt(b["p95_ms"]), fmt(b["max_ms"]), "", "")
    sc = result["segment_close"]
    t.caption = (f"segment_close of {sc['pages']} transcript pages: {fmt(sc['ms'])} ms · "
                 f"thrash index (worst window) {result['thrash_index_max']}")
    return [t]
