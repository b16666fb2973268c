"""``pymemdb bench search``: hybrid page search at scale (issue 7).

``rows`` pages (default 100,000) over 100 sessions of one user, generated
set-based in SQL, with neighbourhoods that overlap as real notes do: 1,000
topics, each a pseudo-random 384-d centre; a page mixes two topics (0.6 of
one, 0.4 of another) plus per-page noise, and its text draws on one shared
vocabulary of 60 words besides its topics' names; 1 % of the pages are
images (the selective filter). Queries mix two topics the same way with
fresh noise. The three scenarios' queries run in one random order, with no
exact scan between them (the exact rankings for recall are computed after
all the timed queries):

1. session scope: ``search_pages`` (vector only, limit 10) p95 against the
   baseline of a primary-key read, and recall@10 against exact ranking
   (goal: recall 1.0, p95 <= 10 ms);
2. user scope (all 100 sessions): the HNSW path with iterative scans and
   ``vm.search_ef_search`` (reported), recall@10 against exact ranking
   (goal >= 0.95);
3. user scope with the 1 % filter (modality image): rows returned (must be
   10 every time) and recall@10;
4. user scope with ``p_exact_total`` (every match counted, as before issue
   21): what the exact ``total_available`` costs (goal for 2: p95 <= 10 ms,
   sublinear in pages).

Bench sessions (``bench_search_*``) are deleted at the end.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from rich.table import Table

from pymemdb.bench import Progress, fmt, percentile, ratio, require_rows, stopwatch, vm_sessions

USER = "bench_search"
SESSIONS = 100
TOPICS = 1000
DIM = 384
WORDS = 60  # the shared vocabulary
GOAL_P95_MS = 10.0
GOAL_USER_RECALL = 0.95

# A topic's centre: DIM pseudo-random components in [-1, 1) (hashes of topic and dimension), as CENTRES reads them.
GENERATE: LiteralString = """
insert into memori.pages (session_id, user_id, page_id, modality, content, data, artifact_ref, tokens, size_bytes,
                          created_at, updated_at, last_accessed, embedding, search_tsv)
select 'bench_search_' || lpad((g %% %(sessions)s)::text, 3, '0'), %(u)s, 'p_' || g,
       case when (g / %(sessions)s) %% 100 = 7 then 'image' else 'text' end, c.content,
       null, case when (g / %(sessions)s) %% 100 = 7 then 'blob:' || g end, 10, 40, %(now)s, %(now)s, %(now)s,
       (select array_agg(0.6 * (mod(hashint8extended(a * 1000 + i, 21) & 2147483647, 20000) / 10000.0 - 1)
                         + 0.4 * (mod(hashint8extended(b * 1000 + i, 21) & 2147483647, 20000) / 10000.0 - 1)
                         + 0.3 * sin(g * 12.9898 + i * 78.233) order by i)
          from generate_series(1, %(dim)s) i)::public.vector,
       memori.page_search_vector(null, c.content)
  from (select g, mod(hashint8extended(g, 1) & 2147483647, %(topics)s) as a,
               mod(hashint8extended(g, 2) & 2147483647, %(topics)s) as b
          from generate_series(1, %(n)s) g) x
 cross join lateral (select 'page ' || g || ' about topic' || a || ' and topic' || b || ': '
         || (select string_agg(w, ' ') from (select ('{notes,agent,memory,user,plan,task,budget,context,search,page,
                 decision,meeting,project,deadline,review,design,database,index,query,cache,latency,error,retry,
                 release,deploy,test,customer,invoice,order,report,summary,draft,email,call,follow,issue,fix,
                 change,risk,owner,team,goal,metric,cost,price,contract,policy,access,backup,storage,model,prompt,
                 token,tool,vector,embedding,cluster,topic,shared,words}'::text[])[
                 1 + mod(hashint8extended(g * 10 + k, 7) & 2147483647, %(words)s)] as w
                  from generate_series(1, 12) k) ws) as content) c
"""
CENTRES: LiteralString = """
select t, array_agg(mod(hashint8extended(t * 1000 + i, 21) & 2147483647, 20000) / 10000.0 - 1 order by i)::float8[]
  from generate_series(0, %s - 1) t cross join generate_series(1, %s) i group by t order by t"""
SEARCH: LiteralString = """
select page_id from memori.search_pages(%s, null, %s::public.vector, p_modality => %s, p_limit => 10,
                                        p_scope => %s, p_exact_total => %s)"""
EXACT_SESSION: LiteralString = """
with c as materialized (select page_id, embedding operator(public.<=>) %s::public.vector as d from memori.pages
                         where session_id = %s and embedding is not null and (%s::text is null or modality = %s))
select page_id from c order by d, page_id limit 10"""
EXACT_USER: LiteralString = """
with c as materialized (select page_id, embedding operator(public.<=>) %s::public.vector as d from memori.pages
                         where user_id = %s and embedding is not null and (%s::text is null or modality = %s))
select page_id from c order by d, page_id limit 10"""
PK_READ: LiteralString = "select * from memori.pages where session_id = %s and page_id = %s"


def _query_vector(rng: random.Random, centres: Sequence[Sequence[float]]) -> str:
    a, b = centres[rng.randrange(len(centres))], centres[rng.randrange(len(centres))]
    v = [0.6 * a[i] + 0.4 * b[i] + rng.gauss(0, 0.2) for i in range(DIM)]
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


def _summary(samples_ns: Sequence[int]) -> dict[str, float]:
    xs = sorted(samples_ns)
    return {"n": len(xs), "p50_ms": round(percentile(xs, 50) / 1e6, 3), "p95_ms": round(percentile(xs, 95) / 1e6, 3),
            "max_ms": round(xs[-1] / 1e6, 3)}


def _ids(conn: psycopg.Connection[Any], query: LiteralString, params: Sequence[Any]) -> tuple[list[str], int]:
    start = time.perf_counter_ns()
    found = [r[0] for r in conn.execute(query, params).fetchall()]
    return found, time.perf_counter_ns() - start


# key, scope, modality filter, exact total (user scope counts every match only when asked)
SCENARIOS = (("session", "session", None, False), ("user", "user", None, False),
             ("user_filtered_1pct", "user", "image", False), ("user_exact_total", "user", None, True))


def _scenarios(conn: psycopg.Connection[Any], rng: random.Random, rows: int, n: int,
               centres: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The three scenarios' n queries each in one random order, timed, then their recall against exact ranking."""
    plan = [(key, scope, modality, exact, f"bench_search_{rng.randrange(SESSIONS):03d}",
             _query_vector(rng, centres)) for key, scope, modality, exact in SCENARIOS for _ in range(n)]
    rng.shuffle(plan)
    for _key, scope, modality, exact in SCENARIOS:  # one call of each: plans cached, not timed
        _ids(conn, SEARCH, (plan[0][4], plan[0][5], modality, scope, exact))
    got: list[list[str]] = []
    times: dict[str, list[int]] = {key: [] for key, *_ in SCENARIOS}
    base: dict[str, list[int]] = {key: [] for key, *_ in SCENARIOS}
    for key, scope, modality, exact, session, q in plan:
        found, t = _ids(conn, SEARCH, (session, q, modality, scope, exact))
        _, tb = _ids(conn, PK_READ, (session, f"p_{rng.randint(1, rows)}"))
        got.append(found)
        times[key].append(t)
        base[key].append(tb)
    recall: dict[str, list[float]] = {key: [] for key, *_ in SCENARIOS}
    short = dict.fromkeys(recall, 0)
    for (key, scope, modality, _exact, session, q), found in zip(plan, got, strict=True):
        if scope == "session":
            truth, _ = _ids(conn, EXACT_SESSION, (q, session, modality, modality))
        else:
            truth, _ = _ids(conn, EXACT_USER, (q, USER, modality, modality))
        short[key] += len(found) < min(10, len(truth))
        recall[key].append(len(set(found) & set(truth)) / max(1, len(truth)))
    out: dict[str, Any] = {}
    for key, scope, modality, _exact in SCENARIOS:
        s, b = _summary(times[key]), _summary(base[key])
        out[key] = {"scope": scope, "filter": modality, "subject": s, "baseline": b,
                    "ratio_p95": ratio(s["p95_ms"], b["p95_ms"]),
                    "recall_at_10": round(sum(recall[key]) / n, 4), "min_recall_at_10": round(min(recall[key]), 4),
                    "fewer_than_k": short[key]}
    return out


def run(dsn: str, rows: int = 100_000, *, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    require_rows(rows, 1000, "The issue's scale is 100000.")
    rng = random.Random(seed)
    queries = 50
    with vm_sessions(dsn, USER, "bench_search_%") as (conn, now):
        with stopwatch() as elapsed:
            for s in range(SESSIONS):
                conn.execute("select memori.turn_begin(%s, %s)", (f"bench_search_{s:03d}", USER))
            conn.execute(GENERATE, {"u": USER, "n": rows, "now": now, "sessions": SESSIONS,
                                    "topics": TOPICS, "dim": DIM, "words": WORDS})
            conn.execute("vacuum analyze memori.pages")
            generate_s = round(elapsed(), 1)
        if progress:
            progress(f"generated {rows:,} pages with embeddings and indexes in {generate_s} s")
        centres = [list(r[1]) for r in conn.execute(CENTRES, (TOPICS, DIM)).fetchall()]
        ef_search = conn.execute("select memori.setting_get('vm.search_ef_search') #>> '{}'").fetchone()
        found = _scenarios(conn, rng, rows, queries, centres)
    return {"suite": "search", "rows": rows, "seed": seed, "generate_s": generate_s,
            "topics": TOPICS, "queries_per_scenario": queries,
            "ef_search": ef_search[0] if ef_search else None, **found,
            "goals": {"session_p95_ms": GOAL_P95_MS, "session_recall": 1.0, "user_recall": GOAL_USER_RECALL,
                      "user_p95_ms": GOAL_P95_MS}}


def render(result: dict[str, Any]) -> list[Table]:
    t = Table(title=f"search_pages among {result['rows']:,} pages, {SESSIONS} sessions, 384-d, "
                    f"{result.get('topics', TOPICS):,} overlapping topics (generated in {result['generate_s']} s)")
    for col in ("scenario", "p50 ms", "p95 ms", "baseline p95 ms", "ratio p95", "recall@10", "min recall",
                "fewer than k"):
        t.add_column(col, justify="left" if col == "scenario" else "right")
    hnsw = f"user scope (HNSW, iterative, ef_search {result['ef_search']})" if result.get("ef_search") \
        else "user scope (HNSW, iterative)"
    for key, name in (("session", "session scope (exact)"), ("user", hnsw),
                      ("user_filtered_1pct", "user scope, 1 % filter"),
                      ("user_exact_total", "user scope, exact total (p_exact_total)")):
        if key not in result:
            continue
        r = result[key]
        t.add_row(name, fmt(r["subject"]["p50_ms"]), fmt(r["subject"]["p95_ms"]), fmt(r["baseline"]["p95_ms"]),
                  fmt(r["ratio_p95"], "x"), f"{r['recall_at_10']:.3f}", f"{r['min_recall_at_10']:.3f}",
                  str(r["fewer_than_k"]))
    return [t]
