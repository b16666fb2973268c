"""Seed 05 through SQL: session namespaces, TTL, latest checkpoint with fallback, monitoring.

Every test here runs twice: with the latest checkpoint's tier 1 as one server has
it (LANGUAGE sql, inlined) and as a Citus server has it (PL/pgSQL of the same
statement, memori._as_plpgsql).
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, memory, one, rows, save, value

SEC = timedelta(seconds=1)
DAY = timedelta(days=1)
TIER_ONE = "memori._session_checkpoint_current(text,text,timestamp with time zone)"


@pytest.fixture(name="dsn", params=["sql", "plpgsql"])
def dsn_of_each_tier_one_form(dsn: str, request: pytest.FixtureRequest) -> str:
    """A fresh database, seed 05's tier 1 in the form the parameter names."""
    if request.param == "plpgsql":
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("select memori._as_plpgsql(%s)", (TIER_ONE,)).fetchone() == (True,)
    return dsn


def test_session_namespace_per_skill_and_month(conn: psycopg.Connection) -> None:
    assert value(conn, "select memori.session_namespace('skill:lead-architect', %s)", (T0,)) == \
        "session_lead_architect_2026_11"
    assert value(conn, "select memori.session_namespace('backend', %s)", (T0,)) == "session_backend_2026_11"
    assert value(conn, "select memori.session_namespace('api', '2027-01-01 00:00:00+00')") == "session_api_2027_01"
    # the month is the UTC month: 23:30 on Jan 31 in UTC-5 is already February in UTC
    assert value(conn, "select memori.session_namespace('api', '2027-01-31 23:30:00-05')") == "session_api_2027_02"
    assert value(conn, "select memori.session_namespace('skill:frontend-design', %s)", (T0,)) == "pt2_project"


def test_save_records_type_ttl_and_expiry(conn: psycopg.Connection) -> None:
    row = save(conn, "skill:api-builder", "alice", "state", T0, '{"task": "x", "type": "other"}')
    assert row["user_id"] == "session_api_2026_11"
    assert row["category"] == "context"
    assert row["metadata"]["type"] == "session_checkpoint"  # ours wins over the caller's
    assert row["metadata"]["ttl_days"] == 7
    assert row["metadata"]["task"] == "x"
    assert row["owner_id"] == "alice"
    assert row["created_at"] == T0
    assert row["expires_at"] == T0 + 7 * DAY


def test_permanent_skill_has_no_expiry(conn: psycopg.Connection) -> None:
    row = save(conn, "skill:skill-creator", "alice", "how to build skills", T0)
    assert row["user_id"] == "pt2_project"
    assert row["expires_at"] is None
    assert row["metadata"]["ttl_days"] is None


def test_ttl_is_data_not_code(conn: psycopg.Connection) -> None:
    conn.execute("update memori.session_skills set ttl_days = 3 where short_name = 'api'")
    assert save(conn, "api", "alice", "s", T0)["expires_at"] == T0 + 3 * DAY
    conn.execute("insert into memori.session_skills (skill, short_name, ttl_days) values ('skill:qa', 'qa', 1)")
    assert save(conn, "skill:qa", "alice", "s", T0)["user_id"] == "session_qa_2026_11"


LOAD = "select * from memori.session_checkpoint_load_latest(%s, %s, %s)"


@pytest.mark.parametrize("by_name_first", [True, False])
def test_a_skill_is_resolved_by_id_then_short_name_then_id_without_prefix(
    conn: psycopg.Connection, by_name_first: bool
) -> None:
    """'dup' is the short name of one skill and, with 'skill:', the id of another: the short name wins,
    whatever the order the rows were written in (the save, the namespace and the latest read agree)."""
    skills = [("skill:x-builder", "dup"), ("skill:dup", "dupy")]
    for skill, short in skills if by_name_first else reversed(skills):
        conn.execute("insert into memori.session_skills (skill, short_name, ttl_days) values (%s, %s, 7)",
                     (skill, short))
    assert value(conn, "select memori.session_namespace('dup', %s)", (T0,)) == "session_dup_2026_11"
    assert value(conn, "select memori.session_namespace('skill:dup', %s)", (T0,)) == "session_dupy_2026_11"
    saved = save(conn, "dup", "alice", "by short name", T0)
    assert saved["user_id"] == "session_dup_2026_11" and saved["metadata"]["skill"] == "skill:x-builder"
    other = save(conn, "skill:dup", "alice", "by id", T0 + SEC)
    assert one(conn, LOAD, ("dup", "alice", T0 + DAY))["id"] == saved["id"]  # type: ignore[index]
    assert one(conn, LOAD, ("skill:dup", "alice", T0 + DAY))["id"] == other["id"]  # type: ignore[index]


@pytest.mark.parametrize(("offset", "visible"), [(-SEC, True), (timedelta(0), False), (SEC, False)])
def test_latest_checkpoint_expiry_boundary(conn: psycopg.Connection, offset: timedelta, visible: bool) -> None:
    """A checkpoint is visible until the second it expires; at expires_at it is gone."""
    row = save(conn, "api", "alice", "s", T0)
    at = row["expires_at"] + offset
    found = one(conn, LOAD, ("api", "alice", at))
    assert (found is not None) is visible


def test_latest_checkpoint_is_newest_and_per_user(conn: psycopg.Connection) -> None:
    save(conn, "api", "alice", "older", T0)
    save(conn, "api", "alice", "newer", T0 + SEC)
    save(conn, "api", "bob", "bob's", T0 + 2 * SEC)
    found = one(conn, LOAD, ("api", "alice", T0 + DAY))
    assert found is not None and found["content"] == "newer" and found["source"] == "current"
    assert one(conn, LOAD, ("api", "bob", T0 + DAY))["content"] == "bob's"  # type: ignore[index]
    assert one(conn, LOAD, ("api", "carol", T0 + DAY)) is None


def test_fallback_to_legacy_namespace(conn: psycopg.Connection) -> None:
    """Rows written by the seed's Python client into the user's own namespace are found."""
    memory(conn, "alice", None, '{"type": "session_checkpoint"}', created_at=T0)
    found = one(conn, LOAD, ("lead_architect", "alice", T0 + DAY))
    assert found is not None and found["source"] == "legacy" and found["user_id"] == "alice"


def test_fallback_to_previous_month(conn: psycopg.Connection) -> None:
    """A checkpoint saved on Nov 28 is still found on Dec 2 (the namespace changed with the month)."""
    saved = save(conn, "lead_architect", "alice", "end of november", T0.replace(day=28))
    december = T0.replace(month=12, day=2)
    found = one(conn, LOAD, ("lead_architect", "alice", december))
    assert found is not None and found["id"] == saved["id"] and found["source"] == "previous"
    # ...but not a namespace of another skill that merely shares the prefix
    conn.execute("insert into memori.session_skills (skill, short_name, ttl_days) values ('skill:x', 'lead', 7)")
    assert one(conn, LOAD, ("lead", "alice", december)) is None


def test_current_namespace_wins_over_legacy_even_if_older(conn: psycopg.Connection) -> None:
    save(conn, "api", "alice", "current", T0)
    memory(conn, "alice", None, '{"type": "session_checkpoint"}', created_at=T0 + DAY)
    assert one(conn, LOAD, ("api", "alice", T0 + 2 * DAY))["source"] == "current"  # type: ignore[index]


def test_expired_rows_never_come_back(conn: psycopg.Connection) -> None:
    save(conn, "api", "alice", "expired", T0)
    memory(conn, "alice", T0, '{"type": "session_checkpoint"}')
    assert one(conn, LOAD, ("api", "alice", T0 + 8 * DAY)) is None
    assert rows(conn, "select * from memori.memory_list('session_api_2026_11', 10, %s)", (T0 + 8 * DAY,)) == []


def test_only_the_users_own_rows_in_the_current_namespace(conn: psycopg.Connection) -> None:
    """Rows written without a user belong to their namespace (revision 0024), so no user's load returns them."""
    own = save(conn, "api", "alice", "alice's", T0)["id"]
    memory(conn, "session_api_2026_11", None, '{"type": "session_checkpoint"}', created_at=T0 + SEC)
    found = one(conn, LOAD, ("api", "alice", T0 + DAY))
    assert found is not None and found["id"] == own and found["source"] == "current"
    assert one(conn, LOAD, ("api", "bob", T0 + DAY)) is None
    # another user's row is never returned, even when newest
    save(conn, "api", "bob", "bob's", T0 + 2 * SEC)
    assert one(conn, LOAD, ("api", "alice", T0 + DAY))["id"] == own  # type: ignore[index]


def test_legacy_namespace_wins_over_earlier_months_even_if_older(conn: psycopg.Connection) -> None:
    save(conn, "api", "alice", "october", T0.replace(month=10, day=30))
    memory(conn, "alice", None, '{"type": "session_checkpoint"}', created_at=T0.replace(month=10, day=1))
    found = one(conn, LOAD, ("api", "alice", T0.replace(month=11, day=2)))
    assert found is not None and found["source"] == "legacy"
    # a permanent skill has no earlier months: its namespace is the current one
    save(conn, "skill-creator", "alice", "how", T0)
    assert one(conn, LOAD, ("skill-creator", "alice", T0 + DAY))["source"] == "current"  # type: ignore[index]


@pytest.mark.parametrize(
    ("skill", "user", "code"),
    [("api", "", "PM001"), ("api", None, "PM001"), ("api", "a\tb", "PM001"), ("nope", "alice", "PM002"),
     ("nope", "", "PM001"), (None, "alice", "PM001")],
)
def test_latest_checkpoint_rejects_bad_input_user_first(
    conn: psycopg.Connection, skill: str | None, user: str | None, code: str
) -> None:
    assert_sqlstate(conn, code, LOAD, (skill, user, T0))


def test_latest_checkpoint_is_inlined_and_tier_one_is_an_index_probe(conn: psycopg.Connection) -> None:
    """One server inlines the read and its tier 1 into the caller's statement (PL/pgSQL costs a call), tiers 2
    and 3 a function scan run only on a miss; the Citus form's tier 1 is PL/pgSQL (Citus prunes shards on its
    parameters). Tier 1 reads the user's newest row of one namespace by index."""
    tier_one = value(conn, "select l.lanname from pg_proc p join pg_language l on l.oid = p.prolang"
                           " where p.oid = %s::regprocedure", (TIER_ONE,))
    assert value(conn, "select l.lanname from pg_proc p join pg_language l on l.oid = p.prolang"
                       " where p.oid = 'memori.session_checkpoint_load_latest'::regproc") == "sql"
    saved = save(conn, "api", "alice", "now", T0)
    assert one(conn, LOAD, ("api", "alice", T0 + DAY))["id"] == saved["id"]  # type: ignore[index]
    plan = "\n".join(r[0] for r in conn.execute("explain (costs off) " + LOAD, ("api", "alice", T0 + DAY)))
    assert "Function Scan on _session_checkpoint_fallback" in plan, plan
    if tier_one == "sql":
        assert "Index Scan using idx_memories_" in plan and "Sort" not in plan, plan
        assert "Function Scan on _session_checkpoint_current" not in plan, plan
        assert "session_checkpoint_load_latest" not in plan, plan
    else:
        assert tier_one == "plpgsql" and "Function Scan on _session_checkpoint_current" in plan, plan
    plan = "\n".join(r[0] for r in conn.execute(
        "explain (costs off) select m.* from memori.memories m"
        " where m.owner_id = 'alice' and m.user_id = 'session_api_2026_11'"
        " and m.metadata->>'type' = 'session_checkpoint' and (m.expires_at is null or m.expires_at > %s)"
        " order by m.created_at desc, m.id desc limit 1", (T0 + DAY,)))
    assert "Index Scan using idx_memories_" in plan and "Sort" not in plan, plan


SEED05_LATEST = """SELECT * FROM memori.memories WHERE user_id = %s AND metadata->>'type' = 'session_checkpoint'
  AND (expires_at IS NULL OR expires_at > NOW()) ORDER BY created_at DESC LIMIT 1"""


def test_seed05_latest_checkpoint_is_an_index_probe(conn: psycopg.Connection) -> None:
    """Seed 05's verbatim read walks one namespace newest first: no sort of the namespace."""
    now = value(conn, "select now()")
    for i in range(50):
        save(conn, "api", f"user{i % 5}", f"c{i}", now - DAY + i * SEC)
    ns = value(conn, "select memori.session_namespace('api')")
    conn.execute("analyze memori.memories")
    with conn.transaction(force_rollback=True):
        conn.execute("set local enable_seqscan = off")  # a tiny table: ask for the plan of a big one
        conn.execute("set local enable_bitmapscan = off")
        plan = "\n".join(r[0] for r in conn.execute("explain (costs off) " + SEED05_LATEST, (ns,)))
    assert "idx_memories_checkpoint_latest" in plan and "Sort" not in plan, plan
    assert one(conn, SEED05_LATEST, (ns,))["content"] == "c49"  # type: ignore[index]


def test_active_memories_view_hides_expired(conn: psycopg.Connection) -> None:
    memory(conn, "ns", None)
    memory(conn, "ns", T0 + DAY * 365 * 10)
    memory(conn, "ns", T0 - DAY)
    assert value(conn, "select count(*) from memori.active_memories where user_id = 'ns'") == 2


def test_seed05_queries_verbatim(conn: psycopg.Connection) -> None:
    """Every SQL query of seed 05 runs unchanged against the installed schema."""
    now = value(conn, "select now()")
    save(conn, "lead_architect", "alice", "active", now - DAY)
    save(conn, "lead_architect", "alice", "expired", now - 8 * DAY)
    save(conn, "frontend-design", "alice", "permanent", now - DAY)
    memory(conn, "session_lead_architect_2020_01", None, '{"type": "session_checkpoint"}')

    latest = one(conn, """
        SELECT * FROM memori.memories
        WHERE user_id LIKE 'session_lead_architect_%'
          AND metadata->>'type' = 'session_checkpoint'
          AND (expires_at IS NULL OR expires_at > NOW())  -- TTL filter
        ORDER BY created_at DESC
        LIMIT 1;""")
    assert latest is not None and latest["content"] == "active"

    session_ns = value(conn, "select memori.session_namespace('lead_architect')")
    legacy = one(conn, """
        SELECT content, metadata, created_at, user_id
        FROM memori.memories
        WHERE (user_id = %s
               OR user_id = %s
               OR user_id LIKE 'session_lead_architect_%%')
          AND metadata->>'type' = 'session_checkpoint'
          AND (expires_at IS NULL OR expires_at > NOW())
        ORDER BY created_at DESC
        LIMIT 1""", (session_ns, "alice"))
    assert legacy is not None and legacy["content"] == "active"

    status = {r["user_id"]: r for r in rows(conn, """
        SELECT
            user_id,
            COUNT(*) FILTER (WHERE expires_at IS NULL) as permanent,
            COUNT(*) FILTER (WHERE expires_at > NOW()) as active_ttl,
            COUNT(*) FILTER (WHERE expires_at <= NOW()) as expired
        FROM memori.memories
        WHERE user_id LIKE 'session_%'
        GROUP BY user_id;""")}
    ns_now = session_ns
    ns_old = value(conn, "select memori.session_namespace('lead_architect', now() - interval '8 days')")
    if ns_now == ns_old:
        assert (status[ns_now]["active_ttl"], status[ns_now]["expired"]) == (1, 1)
    else:
        assert status[ns_now]["active_ttl"] == 1 and status[ns_old]["expired"] == 1
    assert status["session_lead_architect_2020_01"]["permanent"] == 1

    nxt = rows(conn, """
        SELECT
            user_id,
            MIN(expires_at) as next_expiry,
            MAX(expires_at) as latest_expiry
        FROM memori.memories
        WHERE expires_at IS NOT NULL
          AND expires_at > NOW()
        GROUP BY user_id;""")
    assert [r["user_id"] for r in nxt] == [ns_now]

    conn.execute("""
        DELETE FROM memori.memories WHERE expires_at IS NOT NULL AND expires_at <= NOW();""")
    assert value(conn, "select count(*) from memori.memories") == 3


def test_ttl_views_match_seed_queries(conn: psycopg.Connection) -> None:
    now = value(conn, "select now()")
    save(conn, "api", "alice", "a", now - DAY)
    save(conn, "api", "alice", "b", now - 8 * DAY)
    save(conn, "skill-creator", "alice", "c", now)
    view = {r["user_id"]: r for r in rows(conn, "select * from memori.ttl_status")}
    assert view["pt2_project"]["permanent"] == 1 and not view["pt2_project"]["is_session"]
    assert sum(r["active_ttl"] for r in view.values()) == 1
    assert sum(r["expired"] for r in view.values()) == 1
    nxt = rows(conn, "select * from memori.ttl_next_expiry")
    assert len(nxt) == 1 and nxt[0]["next_expiry"] > now


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("select memori.session_checkpoint_save('skill:nope', 'alice', 'x')", "PM002"),
        ("select memori.session_checkpoint_save('api', '', 'x')", "PM001"),
        ("select memori.session_checkpoint_save('api', '   ', 'x')", "PM001"),
        ("select memori.session_checkpoint_save('api', E'al\\nice', 'x')", "PM001"),
        ("select memori.session_checkpoint_save('api', 'alice', '')", "PM001"),
        ("select memori.session_checkpoint_save('api', 'alice', 'x', '[1]')", "PM001"),
        ("select memori.session_checkpoint_save('api', 'alice', repeat('x', 1048577))", "PM003"),
        ("select memori.session_checkpoint_save('api', repeat('a', 300), 'x')", "PM001"),
        ("select * from memori.session_checkpoint_load_latest('nope', 'alice')", "PM002"),
        ("select memori.memory_save('ns', 'x', p_ttl => interval '-1 day')", "PM001"),
        ("select * from memori.memory_list('ns', 0)", "PM001"),
    ],
)
def test_bad_input_is_rejected_with_our_codes(conn: psycopg.Connection, call: str, code: str) -> None:
    assert_sqlstate(conn, code, call)
    assert value(conn, "select count(*) from memori.memories") == 0


def test_unknown_skill_hint_lists_known_skills(conn: psycopg.Connection) -> None:
    err = assert_sqlstate(conn, "PM002", "select memori.session_namespace('nope')")
    assert "skill:api-builder" in (err.diag.message_hint or "")


def test_nul_bytes_in_json_are_rejected(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute("select memori.session_checkpoint_save('api', 'alice', 'x', '{\"a\": \"\\u0000\"}'::jsonb)")
    assert info.value.sqlstate == "22P05"  # mapped to InvalidArgument by the client
    assert value(conn, "select count(*) from memori.memories") == 0
