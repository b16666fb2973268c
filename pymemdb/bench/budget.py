"""``pymemdb bench budget``: context_optimize_stored against a lean client and the naive one (seed 02).

For each size (``rows // 10`` and ``rows`` stored chunks in one session,
2,000 and 20,000 by default), in the same run:

1. Generates the session's chunks in one INSERT ... SELECT: the seed's chunk
   types (mostly chat history and RAG chunks), content of 200 to 2,000
   characters, timestamps over the 30 days before a fixed ``now``, business
   and RAG metadata on some; then VACUUM ANALYZE (as autovacuum would) so the
   ranking index is all-visible.
2. Times, interleaved, what an application sees: ``context_optimize_stored``
   (one call, the allocation with the winners' content back as JSON,
   ``persist`` off and on) against the naive client approach: fetch every
   unexpired candidate with its content and metadata, compute the priorities
   in Python (the same formulas: base + linear recency + RAG + business
   boosts), sort, walk the budget, build the same result. Both must select
   the same chunks.
3. EXPLAINs the statements context_optimize_stored runs (auto_explain): the
   candidate scan must be an index-only scan without heap fetches.

The bench sessions (``bench_*``) and their events are removed at the end.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg.types.json import Jsonb
from rich.table import Table

from pymemdb.bench import Progress, connect, explain_nested, fmt, latency_summary, one, ratio, require_rows

NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)  # the benchmark's clock, passed as p_now
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
AVAILABLE = 32000  # maxOverall; the default reserve (maxSystemPrompt, 2000) leaves 30,000
GOALS = {"small": 3.0, "large": 10.0}  # p50 speed-up goals over the lean client at rows // 10 and rows chunks
PREFIX = "bench_"
MAX_CONFLICTS = 100  # both sides list the first 100 conflicts (memori.settings budget.max_conflicts)
MAX_DROPPED_IDS = 1000  # and the first 1,000 dropped ids (budget.max_dropped_ids); chunks_dropped counts all

# Row i of a session: a type (history and RAG chunks are the common case), content of 200..2000
# characters, a timestamp in the 30 days before now (some without), RAG relevance on RAG chunks,
# business metadata on every seventh chunk. Boosts are computed by the SQL API's own helpers.
GENERATE: LiteralString = """
with p as (select %(now)s::timestamptz as now, %(rows)s::integer as rows, %(seed)s::bigint as seed,
                  %(session)s::text as session, memori._budget_config() as cfg),
g as (
  select i,
         (array['chat_history_user', 'chat_history_assistant', 'chat_history_user', 'chat_history_assistant',
                'rag_document_chunk', 'rag_generic_chunk', 'rag_ebook_chunk', 'rag_memory_commit', 'tool_output',
                'tool_input', 'critical_rag_document'])[1 + mod(hashint8extended(i, p.seed) & 2147483647, 11)]
           as chunk_type,
         left(repeat(md5(i::text) || ' ', 60), 200 + mod(hashint8extended(i, p.seed + 1) & 2147483647, 1801)::integer)
           as content,
         case when mod(i, 10) = 0 then null
              else p.now - make_interval(secs => mod(hashint8extended(i, p.seed + 2) & 2147483647, 30 * 86400)) end
           as ts,
         jsonb_strip_nulls(jsonb_build_object(
           'rag_match_metadata', case when mod(i, 3) = 0 then jsonb_build_object(
               'relevance', mod(hashint8extended(i, p.seed + 3) & 2147483647, 1000) / 1000.0) end,
           'revenueImpact', case when mod(i, 7) = 0 then mod(hashint8extended(i, p.seed + 4) & 2147483647, 300000) end,
           'urgency', case when mod(i, 7) = 0 then (array['critical', 'high', 'medium', 'low'])[1 + mod(i / 7, 4)] end,
           'source_system', 'bench')) as metadata,
         p.*
    from p cross join generate_series(1, p.rows) i
)
insert into memori.context_chunks (session_id, user_id, chunk_type, content, tokens, ts, ts_us, metadata, rag_boost,
                                   business_boost, revenue_boost, business, created_at, expires_at)
select g.session, 'bench_user', g.chunk_type, g.content, memori.token_estimate(g.content, 'general'), s.ts,
       memori._epoch_us(s.ts),
       g.metadata, s.rag, s.business, s.revenue, s.is_business, g.now, g.now + interval '30 days'
  from g
 cross join lateral memori._chunk_score(0, jsonb_build_object('timestamp', g.ts, 'metadata', g.metadata), g.now,
                                        '{"prefer_recent": true, "recency_mode": "linear"}', g.cfg) s
 order by g.i
"""

# what an application reads: the optimization_result row (the first two columns are the selection)
STORED: LiteralString = ("select * from memori.context_optimize_stored(%s::text, %s::integer, %s::jsonb,"
                         " %s::timestamptz)")
# The naive client's query: every unexpired candidate of the session, with content and metadata.
FETCH_ALL: LiteralString = """
select id, chunk_type, content, tokens, ts, metadata from memori.context_chunks
 where session_id = %s::text and (expires_at is null or expires_at > %s::timestamptz)
 order by seq
"""

# The lean client's queries: the candidates' metadata without content, then the winners' content.
FETCH_META: LiteralString = """
select id, chunk_type, null::text, tokens, ts, metadata from memori.context_chunks
 where session_id = %s::text and (expires_at is null or expires_at > %s::timestamptz)
 order by seq
"""
FETCH_CONTENT: LiteralString = "select id, content from memori.context_chunks where id = any(%s::uuid[])"


class NaiveRanker:
    """The client-side approach: the configuration once, then rank fetched rows in Python."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.base = dict(conn.execute("select chunk_type, base_priority from memori.chunk_types").fetchall())
        self.boosts: dict[str, dict[str, float]] = {}
        for factor, value, boost in conn.execute("select factor, value, boost from memori.priority_boosts"):
            self.boosts.setdefault(factor, {})[value.lower().replace("_", "")] = boost
        self.reserve = one(conn, "select tokens from memori.token_budgets where name = 'maxSystemPrompt'")

    def _lookup(self, factor: str, value: Any) -> float:
        return self.boosts[factor].get(value.lower().replace("_", ""), 0.0) if isinstance(value, str) else 0.0

    def rank(self, rows: list[tuple[Any, ...]], available: int, now: datetime) -> dict[str, Any]:
        candidates = []
        for index, (cid, ctype, content, tokens, ts, meta) in enumerate(rows):
            revenue = meta.get("revenueImpact", meta.get("revenue_impact"))
            revenue_boost = min(float(revenue) / 10000.0, 20.0) if isinstance(revenue, int | float) else 0.0
            business = min(revenue_boost + self._lookup("urgency", meta.get("urgency"))
                           + self._lookup("client_tier", meta.get("clientTier", meta.get("client_tier")))
                           + self._lookup("deal_status", meta.get("dealStatus", meta.get("deal_status")))
                           + self._lookup("relationship", meta.get("relationship", meta.get("relationship_stage"))),
                           20.0)
            relevance = (meta.get("rag_match_metadata") or {}).get("relevance")
            rag = float(relevance) * 20.0 if isinstance(relevance, int | float) else 0.0
            # age in ms as the SQL computes it: exact microseconds, rounded once
            recency = 0.0 if ts is None else max(0.0, min(20.0, 20.0 - ((now - ts) // US) / 1000 / 86400000.0))
            priority = ((float(self.base[ctype]) + recency) + rag) + business
            newest_first = (0, -((ts - EPOCH) // US)) if ts is not None else (1, 0)
            candidates.append((-priority, newest_first, index, cid, ctype, tokens, content, priority))
        candidates.sort(key=lambda c: c[:3])
        budget, used = available - self.reserve, 0
        allocated: list[dict[str, Any]] = []
        dropped: list[str] = []
        conflicts: list[dict[str, Any]] = []
        conflicts_count = 0
        for _, _, index, cid, ctype, tokens, content, priority in candidates:
            if used + tokens <= budget:
                allocated.append({"id": str(cid), "type": ctype, "tokens": tokens, "priority": priority,
                                  "token_span": [used, used + tokens], "original_index": index, "content": content})
                used += tokens
            else:
                dropped.append(str(cid))
                if allocated:
                    conflicts_count += 1
                if allocated and len(conflicts) < MAX_CONFLICTS:
                    conflicts.append({"chunk1": allocated[-1]["id"], "chunk2": str(cid),
                                      "conflict_type": "budget_exceeded", "resolution": "keep_chunk1"})
        return {"optimized_chunks": allocated, "dropped_chunk_ids": dropped[:MAX_DROPPED_IDS],
                "chunks_dropped": len(dropped), "conflicts": conflicts, "conflicts_count": conflicts_count,
                "total_tokens_used": used, "tokens_remaining": budget - used}


def lean(conn: psycopg.Connection[Any], ranker: NaiveRanker, session: str, now: datetime) -> dict[str, Any]:
    """The competent client: rank the metadata in Python, then fetch the content of the winners only."""
    meta = conn.execute(FETCH_META, (session, now), prepare=True).fetchall()
    result = ranker.rank(meta, AVAILABLE, now)
    winners = [c["id"] for c in result["optimized_chunks"]]
    content = {str(k): v for k, v in conn.execute(FETCH_CONTENT, (winners,), prepare=True).fetchall()}
    for c in result["optimized_chunks"]:
        c["content"] = content[c["id"]]
    return result


def _generate(conn: psycopg.Connection[Any], session: str, rows: int, seed: int) -> dict[str, Any]:
    start = time.perf_counter()
    conn.execute(GENERATE, {"now": NOW, "rows": rows, "seed": seed, "session": session})
    seconds = time.perf_counter() - start
    conn.execute("vacuum (analyze) memori.context_chunks")
    stats = conn.execute("select count(*), sum(tokens), sum(octet_length(content)) from memori.context_chunks"
                         " where session_id = %s", (session,)).fetchone()
    assert stats is not None
    return {"chunks": stats[0], "tokens": int(stats[1]), "content_bytes": int(stats[2]),
            "generate_s": round(seconds, 2)}


def _interleaved(conn: psycopg.Connection[Any], session: str, ranker: NaiveRanker, runs: int) -> dict[str, Any]:
    quiet, persisted = Jsonb({"persist": False}), Jsonb({"user_id": "bench_user"})
    samples: dict[str, list[int]] = {"stored": [], "stored_persist": [], "lean": [], "naive": []}
    same = True
    for i in range(runs + 2):  # the first two of each are warm-up
        t0 = time.perf_counter_ns()
        row = conn.execute(STORED, (session, AVAILABLE, quiet, NOW), prepare=True).fetchone()
        t1 = time.perf_counter_ns()
        conn.execute(STORED, (session, AVAILABLE, persisted, NOW), prepare=True).fetchone()
        t2 = time.perf_counter_ns()
        fetched = conn.execute(FETCH_ALL, (session, NOW), prepare=True).fetchall()
        naive = ranker.rank(fetched, AVAILABLE, NOW)
        t3 = time.perf_counter_ns()
        lean_result = lean(conn, ranker, session, NOW)
        t4 = time.perf_counter_ns()
        assert row is not None
        result = {"optimized_chunks": row[0], "dropped_chunk_ids": row[1], "chunks_dropped": row[6],
                  "conflicts": row[7], "conflicts_count": row[8]}
        if i >= 2:
            samples["stored"].append(t1 - t0)
            samples["stored_persist"].append(t2 - t1)
            samples["naive"].append(t3 - t2)
            samples["lean"].append(t4 - t3)
        for other in (naive, lean_result):
            same = same and [(c["id"], c["content"]) for c in result["optimized_chunks"]] \
                == [(c["id"], c["content"]) for c in other["optimized_chunks"]] \
                and all(result[k] == other[k] for k in ("dropped_chunk_ids", "chunks_dropped", "conflicts_count"))
            same = same and [(c["chunk1"], c["chunk2"]) for c in result["conflicts"]] \
                == [(c["chunk1"], c["chunk2"]) for c in other["conflicts"]]
    out: dict[str, Any] = {name: latency_summary(xs) for name, xs in samples.items()}
    out["same_selection"] = same
    out["allocated"] = len(result["optimized_chunks"])
    out["result_bytes"] = len(json.dumps(result))
    return out


def _explain(conn: psycopg.Connection[Any], session: str) -> dict[str, Any]:
    plan = explain_nested(conn, STORED, (session, AVAILABLE, Jsonb({"persist": False}), NOW))
    lines = plan.splitlines()
    scan = [ln.strip() for ln in lines if "context_chunks" in ln and "Scan" in ln]
    heap = [int(ln.split("Heap Fetches:")[1]) for ln in lines if "Heap Fetches:" in ln]
    return {"candidate_scan": scan[0] if scan else None, "index_only": bool(scan) and "Index Only Scan" in scan[0],
            "heap_fetches": heap[0] if heap else None, "plan": plan}


def run(dsn: str, rows: int = 20000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    require_rows(rows, 100, "Pass the larger session size, e.g. --rows 20000 (the smaller is a tenth).")
    say = progress or (lambda _msg: None)
    sizes = {"small": rows // 10, "large": rows}
    out: dict[str, Any] = {"now": NOW.isoformat(), "available_tokens": AVAILABLE, "sizes": {}}
    with connect(dsn) as conn:
        ranker = NaiveRanker(conn)
        try:
            for label, n in sizes.items():
                session = f"{PREFIX}s{n}"
                say(f"generating {n:,} chunks in session {session}")
                data = _generate(conn, session, n, seed)
                runs = 30 if n <= 5000 else 12
                say(f"timing context_optimize_stored vs. the lean and the naive client, {runs} runs each")
                timing = _interleaved(conn, session, ranker, runs)
                explain = _explain(conn, session)
                speedup = ratio(timing["lean"]["p50_us"], timing["stored"]["p50_us"])
                out["sizes"][label] = {
                    "chunks": n, "data": data, "timing": timing, "explain": explain,
                    "speedup_p50": speedup, "goal": GOALS[label],
                    "speedup_naive_p50": ratio(timing["naive"]["p50_us"], timing["stored"]["p50_us"]),
                    "goal_met": speedup is not None and speedup >= GOALS[label] and explain["index_only"]
                    and explain["heap_fetches"] == 0,
                }
        finally:
            conn.execute("delete from memori.context_chunks where session_id like 'bench\\_%'")
            conn.execute("delete from memori.context_optimizations where user_id = 'bench_user'")
            conn.execute("delete from memori.events where event_type like 'context.%'")
    return out


def render(result: dict[str, Any]) -> list[Table]:
    table = Table(title=f"context_optimize_stored vs. a lean client and the naive one "
                        f"({result['available_tokens']:,} tokens available)")
    for column in ("chunks", "content", "allocated", "stored p50", "stored p99", "+persist p50", "lean p50",
                   "lean p99", "vs. lean p50", "goal", "naive p50", "vs. naive p50", "index-only, heap fetches",
                   "same selection"):
        table.add_column(column, justify="right")
    for size in result["sizes"].values():
        t, e = size["timing"], size["explain"]
        table.add_row(fmt(size["chunks"]), fmt(size["data"]["content_bytes"] / 1e6, " MB"), fmt(t["allocated"]),
                      fmt(t["stored"]["p50_us"] / 1000, " ms"), fmt(t["stored"]["p99_us"] / 1000, " ms"),
                      fmt(t["stored_persist"]["p50_us"] / 1000, " ms"),
                      fmt(t["lean"]["p50_us"] / 1000, " ms"), fmt(t["lean"]["p99_us"] / 1000, " ms"),
                      fmt(size["speedup_p50"], "x"),
                      f">= {size['goal']:g}x " + ("met" if size["goal_met"] else "MISSED"),
                      fmt(t["naive"]["p50_us"] / 1000, " ms"), fmt(size["speedup_naive_p50"], "x"),
                      f"{'yes' if e['index_only'] else 'no'}, {fmt(e['heap_fetches'])}",
                      "yes" if t["same_selection"] else "NO")
    table.caption = ("lean: the candidates' metadata, ranked in Python, then the winners' content (the headline); "
                     "naive: every candidate with its content")
    return [table]
