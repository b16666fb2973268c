"""``pymemdb bench context``: scope resolution against a primary-key get (seed 01, part 2).

1. Generates ``rows`` context entries in one INSERT ... SELECT: 200 keys at
   every scope, so each resolution has four candidates and picks the session
   one — global (200 entries), ``rows // 2000`` projects, ``rows // 500``
   users (each a member of one project) and sessions (of a user, in the
   user's project) for the rest.
2. Times memori.context_get (a random session's user, project and session, a
   random key) against ``select * from memori.context_entries where id = $1``
   on the same table, prepared and interleaved, as the superuser (no
   row-level security) and as memori_app acting for one user (RLS on).
3. Times memori.context_resolve of all 200 keys for a random requester, and
   one ``db.context.get`` through the client (its transaction sets
   memori.user_id first), and EXPLAINs the statements the functions run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, LiteralString

import psycopg
from rich.table import Table

import pymemdb
from pymemdb.bench import (
    Probe,
    Progress,
    connect,
    explain_nested,
    fmt,
    interleaved,
    latency_summary,
    one,
    ratio,
    require_rows,
    stopwatch,
)
from pymemdb.context import Scope
from pymemdb.errors import PymemdbError

NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)  # the benchmark's clock, passed as p_now
KEYS = 200
GOAL_GET_RATIO = 2.0  # context_get p50 over a PK get's

GENERATE: LiteralString = """
with p as (select %(now)s::timestamptz as now, %(keys)s::integer as keys, %(projects)s::integer as projects,
                  %(users)s::integer as users, %(sessions)s::integer as sessions),
projects as (
  insert into memori.projects (project_id, name, owner_id, created_at)
  select 'bench_p' || j, 'bench project ' || j, 'bench_owner', p.now from p, generate_series(0, p.projects - 1) j
  returning project_id),
owners as (
  insert into memori.project_members (project_id, user_id, project_owner, role, added_at)
  select project_id, 'bench_owner', 'bench_owner', 'owner', (select now from p) from projects
  returning 1),
members as (
  insert into memori.project_members (project_id, user_id, project_owner, added_at)
  select 'bench_p' || mod(u, p.projects), 'bench_u' || u, 'bench_owner', p.now
    from p, generate_series(0, p.users - 1) u
  returning 1)
select (select count(*) from projects) + (select count(*) from owners) + (select count(*) from members)
"""
# who may read a project is on the project and its entries (member_ids, readers): the product's own sync
MEMBERS_SYNC: LiteralString = """
select count(memori._project_members_sync(project_id, owner_id)) from memori.projects where project_id like 'bench\\_p%'
"""
SESSIONS: LiteralString = """
insert into memori.sessions (session_id, user_id, project_id, start_time, last_activity)
select 'bench_s' || s, 'bench_u' || mod(s, %(users)s), 'bench_p' || mod(mod(s, %(users)s), %(projects)s),
       %(now)s, %(now)s
  from generate_series(0, %(sessions)s - 1) s
"""
# one statement per scope; values are small objects with some text, as settings and state are
ENTRIES: LiteralString = """
insert into memori.context_entries (key, value, type, scope, user_id, project_id, session_id, created_at, updated_at,
                                    project_owner, readers)
select 'key_' || lpad(k::text, 3, '0'),
       jsonb_build_object('v', o * 1000 + k, 'note', left(md5((o * 1000 + k)::text), 16)),
       %(type)s, %(scope)s,
       case %(scope)s when 'user' then 'bench_u' || o when 'session' then 'bench_u' || mod(o, %(users)s)
                      else 'bench_owner' end,
       pr.project_id,
       case when %(scope)s = 'session' then 'bench_s' || o end,
       %(now)s, %(now)s,
       pr.owner_id, pr.member_ids  -- a project entry carries its project's owner and readers
  from generate_series(0, %(owners)s - 1) o
  left join memori.projects pr on %(scope)s = 'project' and pr.project_id = 'bench_p' || o
 cross join generate_series(0, %(keys)s - 1) k
"""
GET: LiteralString = ("select * from memori.context_get(p_key => %s::text, p_user_id => %s::text, "
                      "p_project_id => %s::text, p_session_id => %s::text, p_now => %s::timestamptz)")
RESOLVE: LiteralString = ("select * from memori.context_resolve(p_user_id => %s::text, p_project_id => %s::text, "
                          "p_session_id => %s::text, p_now => %s::timestamptz)")
PK_GET: LiteralString = "select * from memori.context_entries where id = %s::uuid"


def _generate(conn: psycopg.Connection[Any], rows: int) -> dict[str, Any]:
    projects = max(1, rows // 2000)
    users = max(1, rows // 500)
    sessions = max(1, (rows - KEYS - (projects + users) * KEYS) // KEYS)
    shape = {"now": NOW, "keys": KEYS, "projects": projects, "users": users, "sessions": sessions}
    with stopwatch() as elapsed:
        conn.execute(GENERATE, shape)
        conn.execute(MEMBERS_SYNC)
        conn.execute(SESSIONS, shape)
        for scope, type_, owners in (("global", "business_context", 1), ("project", "business_context", projects),
                                     ("user", "user_preferences", users), ("session", "session_context", sessions)):
            conn.execute(ENTRIES, {**shape, "scope": scope, "type": type_, "owners": owners})
        conn.execute("vacuum analyze memori.context_entries, memori.sessions, memori.project_members, memori.projects")
    return {**{k: v for k, v in shape.items() if k != "now"},
            "entries": one(conn, "select count(*) from memori.context_entries"),
            "table_mb": round(one(conn, "select pg_table_size('memori.context_entries')") / 2**20, 1),
            "indexes_mb": round(one(conn, "select pg_indexes_size('memori.context_entries')") / 2**20, 1),
            "generate_s": round(elapsed(), 1)}


def _requester(rng: random.Random, data: dict[str, Any]) -> tuple[str, str, str]:
    s = rng.randrange(data["sessions"])
    user = s % data["users"]
    return f"bench_u{user}", f"bench_p{user % data['projects']}", f"bench_s{s}"


def _key(rng: random.Random) -> str:
    return f"key_{rng.randrange(KEYS):03d}"


@contextmanager
def _as_app(conn: psycopg.Connection[Any], user: str) -> Iterator[None]:
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', %s, false)", (user,))
    try:
        yield
    finally:
        conn.execute("reset role")
        conn.execute("reset memori.user_id")


def _reads(conn: psycopg.Connection[Any], data: dict[str, Any], iterations: int, seed: int) -> dict[str, Any]:
    # the PK baseline's ids: 1 % of the pages (the seed's sample); a small table may have none in its 1 %
    ids = [r[0] for r in conn.execute(
        "select id::text from memori.context_entries tablesample system (1) repeatable (%s) limit 5000", (seed,))]
    if len(ids) < 1000:
        ids = [r[0] for r in conn.execute("select id::text from memori.context_entries order by id limit 5000")]
    get = Probe("context_get", GET, lambda r: (_key(r), *_requester(r, data), NOW))
    pk = Probe("pk_get", PK_GET, lambda r: (r.choice(ids),))
    out: dict[str, Any] = {"iterations": iterations, "superuser": interleaved(conn, [get, pk], iterations, seed)}

    # memori_app under row-level security, acting for the user of session 0
    user, project, session = "bench_u0", "bench_p0", "bench_s0"
    sessions = [f"bench_s{s}" for s in range(0, data["sessions"], data["users"])]
    own_ids = [r[0] for r in conn.execute(
        "select id::text from memori.context_entries where user_id = %s limit 5000", (user,))]
    rls_get = Probe("context_get", GET, lambda r: (_key(r), user, project, r.choice(sessions), NOW))
    rls_pk = Probe("pk_get", PK_GET, lambda r: (r.choice(own_ids),))
    with _as_app(conn, user):
        out["rls"] = interleaved(conn, [rls_get, rls_pk], iterations, seed)
    for mode in ("superuser", "rls"):
        r = out[mode]
        r["ratio_p50"] = ratio(r["context_get"]["p50_us"], r["pk_get"]["p50_us"])
        r["ratio_p99"] = ratio(r["context_get"]["p99_us"], r["pk_get"]["p99_us"])

    resolve = Probe("context_resolve", RESOLVE, lambda r: (*_requester(r, data), NOW))
    resolved = len(conn.execute(RESOLVE, (*_requester(random.Random(seed), data), NOW)).fetchall())
    out["resolve"] = {**interleaved(conn, [resolve], max(200, iterations // 10), seed)["context_resolve"],
                      "keys": resolved}
    out["explain_get"] = explain_nested(conn, GET, ("key_007", user, project, session, NOW))
    out["explain_resolve"] = explain_nested(conn, RESOLVE, (user, project, session, NOW))
    conn.execute("select set_config('memori.user_id', %s, false)", (user,))
    out["explain_get_rls"] = explain_nested(conn, GET, ("key_007", user, project, session, NOW), role="memori_app")
    conn.execute("reset memori.user_id")
    return out


def _client_get(dsn: str, data: dict[str, Any], iterations: int, seed: int) -> dict[str, float]:
    """db.context.get as an application calls it: pool, BEGIN, set_config(memori.user_id), the call, COMMIT."""
    rng = random.Random(seed)
    samples: list[int] = []
    with pymemdb.connect(dsn, min_size=1, max_size=1) as db:
        for i in range(iterations + iterations // 5):
            user, project, session = _requester(rng, data)
            with stopwatch() as elapsed:
                db.context.get(_key(rng), Scope(user, project, session), now=NOW)
            if i >= iterations // 5:
                samples.append(int(elapsed() * 1e9))
    return latency_summary(samples)


def run(
    dsn: str,
    rows: int = 1_000_000,
    *,
    seed: int = 1,
    progress: Progress | None = None,
    iterations: int = 5000,
) -> dict[str, Any]:
    """Run the context benchmark against ``dsn`` (schema memori installed, no context entries yet)."""
    say = progress or (lambda _msg: None)
    require_rows(rows, 10_000, "Use --rows 100000 for a quick run.")
    with connect(dsn) as conn:
        if one(conn, "select count(*) from memori.context_entries"):
            raise PymemdbError("memori.context_entries is not empty; the benchmark needs it empty",
                               hint="Run it against a scratch database (pymemdb bench context does).")
        result: dict[str, Any] = {"suite": "context", "rows": rows, "seed": seed, "now": NOW.isoformat(),
                                  "server_version": one(conn, "show server_version"),
                                  "goals": {"get_ratio": GOAL_GET_RATIO}}
        try:
            say(f"generating {rows:,} context entries ...")
            result["data"] = _generate(conn, rows)
            say(f"timing {iterations:,} context_get and PK gets (superuser, then memori_app under RLS), resolve ...")
            result["reads"] = _reads(conn, result["data"], iterations, seed)
            say("timing db.context.get through the client ...")
            result["reads"]["client_get"] = _client_get(dsn, result["data"], max(500, iterations // 5), seed)
            result["goal_met"] = result["reads"]["superuser"]["ratio_p50"] <= GOAL_GET_RATIO
        finally:
            say("removing bench data ...")
            conn.execute("truncate memori.context_entries, memori.context_windows, memori.sessions, "
                         "memori.project_members, memori.projects cascade")
    return result


def render(result: dict[str, Any]) -> list[Table]:
    data, reads = result["data"], result["reads"]
    info = Table(title=f"bench context: {data['entries']:,} entries, now = {result['now']}")
    for col in ("keys", "projects", "users", "sessions", "table", "indexes", "generate"):
        info.add_column(col, justify="right")
    info.add_row(fmt(data["keys"]), fmt(data["projects"]), fmt(data["users"]), fmt(data["sessions"]),
                 f"{data['table_mb']:,} MB", f"{data['indexes_mb']:,} MB", f"{data['generate_s']} s")

    rt = Table(title=f"context_get (4 scopes) vs a primary-key get ({reads['iterations']:,} each, prepared, "
                     "interleaved)")
    for col in ("as", "query", "p50 µs", "p99 µs", "mean µs", "vs PK p50", "vs PK p99"):
        rt.add_column(col, justify="left" if col in ("as", "query") else "right")
    for mode, label in (("superuser", "superuser (no RLS)"), ("rls", "memori_app (RLS)")):
        r = reads[mode]
        for name in ("context_get", "pk_get"):
            s = r[name]
            rt.add_row(label, name, fmt(s["p50_us"]), fmt(s["p99_us"]), fmt(s["mean_us"]),
                       fmt(r["ratio_p50"], "x") if name == "context_get" else "",
                       fmt(r["ratio_p99"], "x") if name == "context_get" else "",
                       style=("bold" if result["goal_met"] else "bold red")
                       if (mode, name) == ("superuser", "context_get") else None)
    c = reads["client_get"]
    rt.add_row("client", "db.context.get", fmt(c["p50_us"]), fmt(c["p99_us"]), fmt(c["mean_us"]), "", "")
    rt.caption = (f"goal context_get ≤ {result['goals']['get_ratio']}x PK at p50: "
                  f"{'met' if result['goal_met'] else 'MISSED'}; client = pool + BEGIN + set_config + call + COMMIT")

    rs = reads["resolve"]
    res = Table(title=f"context_resolve of {rs['keys']} keys (4 scopes each)")
    for col in ("n", "p50 µs", "p99 µs", "mean µs"):
        res.add_column(col, justify="right")
    res.add_row(fmt(rs["n"]), fmt(rs["p50_us"]), fmt(rs["p99_us"]), fmt(rs["mean_us"]))

    plans = Table(title="Plans (EXPLAIN ANALYZE, BUFFERS of the statements the functions run)")
    plans.add_column("function")
    plans.add_column("plan", overflow="fold")
    plans.add_row("context_get", reads["explain_get"])
    plans.add_row("context_get (RLS)", reads["explain_get_rls"])
    plans.add_row("context_resolve", reads["explain_resolve"])
    return [info, rt, res, plans]
