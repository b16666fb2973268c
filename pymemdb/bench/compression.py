"""``pymemdb bench compression``: message_add throughput and compression_plan latency (seed 04).

1. ``message_add`` throughput: one call per transaction through the client,
   against a plain INSERT into memori.messages per transaction (the table's
   own cost, the baseline), and batched: ``batch_size`` calls per
   transaction in a pipeline.
2. ``compression_plan`` latency on a session of ``rows`` messages (issue 8:
   10,000), generated with one INSERT ... SELECT. Two shapes: nothing
   compressed yet (the planner walks every message: the worst case) and
   compressed through 90 % (the usual case after earlier compressions).
   Each plan runs in a rolled-back transaction, so every sample plans the
   same state. The baseline is ``compression_budget`` (the O(1) budget read
   message_add also does) and a plain sum over the session's messages.
3. EXPLAIN (ANALYZE, BUFFERS) of the statements the worst-case plan runs.

Bench sessions start with ``bench_``; they are removed at the end.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from typing import Any, LiteralString

from psycopg import sql
from rich.table import Table

import pymemdb
from pymemdb.bench import Progress, connect, explain_nested, fmt, latency_summary, one, percentile, ratio, require_rows

NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)
PREFIX = "bench_"
USER = "bench_user"

PLAN: LiteralString = ("select * from memori.compression_plan(%s, p_context_size => 8000,"
                       " p_system_prompt_tokens => 500, p_force => true, p_now => %s)")
BUDGET: LiteralString = "select * from memori.compression_budget(%s, 8000, 500)"
SUM: LiteralString = "select sum(tokens) from memori.messages where session_id = %s"
ADD: LiteralString = ("select (memori.message_add(%s, %s, %s, p_tokens => %s, p_user_id => %s, p_now => %s)).seq")
INSERT: LiteralString = ("insert into memori.messages (session_id, user_id, seq, role, content, tokens, created_at)"
                         " values (%s, %s, %s, %s, %s, %s, %s)")
GENERATE: LiteralString = """
insert into memori.messages (session_id, user_id, seq, role, content, tokens, created_at)
select %(s)s, %(u)s, g, case when g %% 2 = 1 then 'user' else 'assistant' end,
       repeat('word ', case when g %% 2 = 1 then 10 else 60 end),
       case when g %% 2 = 1 then 13 else 75 end, %(now)s
  from generate_series(1, %(n)s) g
"""
STATE: LiteralString = """
insert into memori.compression_state (session_id, user_id, last_seq, compressed_through_seq, created_at, updated_at)
values (%(s)s, %(u)s, %(n)s, %(through)s, %(now)s, %(now)s)
"""


def _text(rng: random.Random) -> str:
    words = ("plan", "budget", "token", "summary", "goal", "context")
    return " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))


def _throughput(count: int, seconds: float) -> dict[str, float]:
    return {"messages": count, "seconds": round(seconds, 3), "per_s": round(count / seconds, 1),
            "us_each": round(seconds / count * 1e6, 1)}


def _latency(conn: Any, query: LiteralString, params: tuple[Any, ...], iterations: int) -> dict[str, float]:
    samples: list[int] = []
    for i in range(iterations + 10):
        with conn.transaction(force_rollback=True):
            start = time.perf_counter_ns()
            conn.execute(query, params, prepare=True).fetchall()
            elapsed = time.perf_counter_ns() - start
        if i >= 10:  # warm-up: plans cached, pages in cache
            samples.append(elapsed)
    summary = latency_summary(samples)
    summary["p95_us"] = round(percentile(sorted(samples), 95) / 1000, 1)
    return summary


def run(
    dsn: str,
    rows: int = 10_000,
    *,
    seed: int = 1,
    progress: Progress | None = None,
    single: int = 1000,
    batch_size: int = 500,
    iterations: int = 200,
) -> dict[str, Any]:
    """Run the compression benchmark against ``dsn`` (schema memori installed) and return its figures."""
    say = progress or (lambda _msg: None)
    require_rows(rows, 1000, "Use --rows 10000 (the issue's scale).")
    rng = random.Random(seed)
    texts = [_text(rng) for _ in range(256)]
    result: dict[str, Any] = {"suite": "compression", "rows": rows, "seed": seed, "now": NOW.isoformat()}
    with connect(dsn) as conn:
        # the session-keyed calls (compression_plan) act for memori.user_id: session ids are per user
        conn.execute("select set_config('memori.user_id', %s, false)", (USER,))
        result["server_version"] = one(conn, "show server_version")
        try:
            # -- 1. message_add throughput ---------------------------------------
            say(f"message_add: {single} calls, one per transaction, through the client")
            with pymemdb.connect(dsn, max_size=2) as db:
                start = time.perf_counter()
                for i in range(single):
                    db.compression.message_add(f"{PREFIX}single", "user" if i % 2 else "assistant", texts[i % 256],
                                               user_id=USER, now=NOW)
                single_w = _throughput(single, time.perf_counter() - start)
            say(f"baseline: {single} plain INSERTs, one per transaction")
            start = time.perf_counter()
            for i in range(single):
                with conn.transaction():
                    conn.execute(INSERT, (f"{PREFIX}insert", USER, i + 1, "user", texts[i % 256], 30, NOW),
                                 prepare=True)
            insert_w = _throughput(single, time.perf_counter() - start)
            batched_n = max(rows, batch_size)
            say(f"message_add batched: {batched_n} calls, {batch_size} per transaction, pipelined")
            start = time.perf_counter()
            for lo in range(0, batched_n, batch_size):
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(ADD, [(f"{PREFIX}batch", "user" if i % 2 else "assistant", texts[i % 256], None,
                                           USER, NOW) for i in range(lo, min(lo + batch_size, batched_n))])
            batched_w = _throughput(batched_n, time.perf_counter() - start)
            result["message_add"] = {
                "single": single_w, "plain_insert": insert_w, "batched": batched_w, "batch_size": batch_size,
                "single_vs_insert": ratio(single_w["us_each"], insert_w["us_each"]),
                "batched_vs_single": ratio(batched_w["per_s"], single_w["per_s"]),
            }

            # -- 2. compression_plan on a long session ------------------------------
            plans: dict[str, Any] = {}
            for shape, through in (("nothing_compressed", 0), ("compressed_90pct", rows * 9 // 10)):
                session = f"{PREFIX}plan_{shape}"
                say(f"generating a {rows:,}-message session ({shape})")
                with conn.transaction():
                    conn.execute(GENERATE, {"s": session, "u": USER, "n": rows, "now": NOW})
                    conn.execute(STATE, {"s": session, "u": USER, "n": rows, "through": through, "now": NOW})
                    conn.execute("select memori._compression_recount(%s, %s)", (USER, session))
                conn.execute("analyze memori.messages")
                say(f"compression_plan x {iterations} ({shape})")
                plan = _latency(conn, PLAN, (session, NOW), iterations)
                plans[shape] = {"plan": plan, "compressed_through": through,
                                "planned_messages": one(conn, "select message_count from memori.compression_plan("
                                                              "%s, 8000, 500, %s, true)", (session, NOW))}
            long_session = f"{PREFIX}plan_nothing_compressed"
            budget = _latency(conn, BUDGET, (long_session,), iterations)
            total = _latency(conn, SUM, (long_session,), iterations)
            worst = plans["nothing_compressed"]["plan"]
            result["plan"] = {
                "session_messages": rows, "iterations": iterations, "shapes": plans,
                "baseline_budget": budget, "baseline_sum": total,
                "worst_p95_vs_sum_p95": ratio(worst["p95_us"], total["p95_us"]),
                "usual_p95_vs_budget_p95": ratio(plans["compressed_90pct"]["plan"]["p95_us"], budget["p95_us"]),
            }
            result["explain_plan"] = explain_nested(conn, PLAN, (long_session, NOW))
        finally:
            say("removing bench sessions")
            with conn.transaction():
                for table in ("messages", "compression_state", "compression_plans", "snapshots", "goals",
                              "compression_checkpoints"):
                    conn.execute(sql.SQL("delete from memori.{} where session_id like 'bench\\_%'")
                                 .format(sql.Identifier(table)))
                conn.execute("delete from memori.events where payload->>'session_id' like 'bench\\_%'")
    return result


def render(result: dict[str, Any]) -> list[Table]:
    """The result as rich tables: message_add throughput, plan latency."""
    ma = result["message_add"]
    tt = Table(title=f"message_add throughput (batches of {ma['batch_size']})")
    for col in ("way", "messages", "per s", "µs each"):
        tt.add_column(col, justify="left" if col == "way" else "right")
    for name, w in (("message_add(): 1 per transaction", ma["single"]),
                    ("plain INSERT: 1 per transaction (baseline)", ma["plain_insert"]),
                    ("message_add(): batched, pipelined", ma["batched"])):
        tt.add_row(name, fmt(w["messages"]), fmt(w["per_s"]), fmt(w["us_each"]))
    tt.caption = (f"message_add through the client costs {fmt(ma['single_vs_insert'])}x a raw plain insert; "
                  f"batched is {fmt(ma['batched_vs_single'])}x the single-call throughput")
    pl = result["plan"]
    pt = Table(title=f"compression_plan on a {pl['session_messages']:,}-message session ({pl['iterations']} runs)")
    for col in ("query", "p50 µs", "p95 µs", "p99 µs", "planned messages"):
        pt.add_column(col, justify="left" if col == "query" else "right")
    for shape, s in pl["shapes"].items():
        pt.add_row(f"compression_plan ({shape})", fmt(s["plan"]["p50_us"]), fmt(s["plan"]["p95_us"]),
                   fmt(s["plan"]["p99_us"]), fmt(s["planned_messages"]))
    pt.add_row("compression_budget (baseline)", fmt(pl["baseline_budget"]["p50_us"]),
               fmt(pl["baseline_budget"]["p95_us"]), fmt(pl["baseline_budget"]["p99_us"]), "-")
    pt.add_row("sum(tokens) of the session (baseline)", fmt(pl["baseline_sum"]["p50_us"]),
               fmt(pl["baseline_sum"]["p95_us"]), fmt(pl["baseline_sum"]["p99_us"]), "-")
    pt.caption = (f"worst case p95 = {fmt(pl['worst_p95_vs_sum_p95'])}x one scan of the session; "
                  f"usual case p95 = {fmt(pl['usual_p95_vs_budget_p95'])}x the O(1) budget read")
    return [tt, pt]
