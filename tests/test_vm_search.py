"""AI virtual memory search and page index through SQL (issue 7, seed 03 phases 6 and 13)."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, rows, value

S = "sess_1"


def page(conn: psycopg.Connection, page_id: str, content: str = "hello world", session: str = S,
         user: str = "alice", embedding: list[float] | None = None, **kw: object) -> None:
    args = {"p_session_id": session, "p_page_id": page_id, "p_content": content, "p_user_id": user,
            "p_now": T0, **kw}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    conn.execute(f"select memori.page_create({named})", args)
    if embedding is not None:
        conn.execute("select memori.page_embedding_set(%s, %s, %s::public.vector, %s)",
                     (session, page_id, vec(embedding), T0))


def vec(values: list[float]) -> str:
    return "[" + ",".join(f"{v:.6f}" for v in values) + "]"


def unit(seed: int, dim: int = 384) -> list[float]:
    rnd = random.Random(seed)
    v = [rnd.gauss(0, 1) for _ in range(dim)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def search(conn: psycopg.Connection, query: str | None, **kw: object) -> list[dict]:
    args = {"p_session_id": S, "p_query": query, "p_now": T0, **kw}
    named = ", ".join(f"{k} => %({k})s" + ("::public.vector" if k == "p_query_embedding" else "")
                      for k in args)
    return rows(conn, f"select * from memori.search_pages({named})", args)


def test_the_migration_adds_columns_indexes_and_the_dimension(conn: psycopg.Connection) -> None:
    assert value(conn, "select format_type(atttypid, atttypmod) from pg_attribute"
                       " where attrelid = 'memori.pages'::regclass and attname = 'embedding'") == "vector(384)"
    assert value(conn, "select value #>> '{}' from memori.settings where key = 'vm.embedding_dim'") == "384"
    idx = {r["indexname"]: r["indexdef"] for r in rows(conn, "select indexname, indexdef from pg_indexes"
                                                              " where tablename = 'pages'")}
    assert "hnsw" in idx["idx_pages_embedding_hnsw"] and "vector_cosine_ops" in idx["idx_pages_embedding_hnsw"]
    assert "gin" in idx["idx_pages_search_tsv"]


def test_full_text_finds_content_and_hints_and_returns_metadata_only(conn: psycopg.Connection) -> None:
    page(conn, "msg_001", "We chose PostgreSQL as the database for the project.")
    page(conn, "msg_002", "The frontend uses React.")
    page(conn, "claim_db", "Decision recorded.", p_page_type="claim", p_hint="database choice: postgres")
    found = search(conn, "database")
    assert [r["page_id"] for r in found] == ["claim_db", "msg_001"]  # hint weighs more than content
    first = found[0]
    assert set(first) == {"page_id", "session_id", "modality", "tier", "levels", "hint", "relevance",
                          "total_available", "mode", "total_exact"}
    assert (first["session_id"], first["modality"], first["levels"], first["hint"], first["total_available"],
            first["mode"]) == (S, "text", [0], "database choice: postgres", 2, "full_text")
    assert first["relevance"] == 1.0 and found[1]["relevance"] < 1.0
    conn.execute("select memori.page_representation_put(%s, 'msg_001', 2, 'db: postgres', null, 3, 1, %s)", (S, T0))
    assert search(conn, "database")[1]["levels"] == [0, 2]


def test_limit_filters_and_expiry(conn: psycopg.Connection) -> None:
    for i in range(8):
        page(conn, f"msg_{i:03}", f"note {i} about deployment",
             p_modality="structured" if i % 2 else "text", p_data='{"a": 1}' if i % 2 else None)
    page(conn, "gone", "deployment expired", p_expires_at=T0 + timedelta(seconds=1))
    assert len(search(conn, "deployment", p_limit=3)) == 3
    assert search(conn, "deployment", p_limit=3)[0]["total_available"] == 9
    assert "gone" not in [r["page_id"] for r in search(conn, "deployment", p_limit=100,
                                                          p_now=T0 + timedelta(seconds=1))]
    assert "gone" in [r["page_id"] for r in search(conn, "deployment", p_limit=100)]
    assert {r["modality"] for r in search(conn, "deployment", p_modality="structured", p_limit=100)} == {"structured"}
    assert search(conn, "deployment", p_page_types=["claim"]) == []


def test_hybrid_fuses_full_text_and_vectors(conn: psycopg.Connection) -> None:
    q = unit(1)
    page(conn, "near", "unrelated words entirely", embedding=q)               # vector rank 1 only
    page(conn, "both", "kubernetes deployment plan", embedding=unit(2))      # text rank 1, vector rank 2
    page(conn, "text_only", "kubernetes cluster notes")                      # text only
    found = search(conn, "kubernetes", p_query_embedding=vec(q), p_limit=3)
    assert {r["mode"] for r in found} == {"hybrid"}
    assert found[0]["total_available"] == 3
    scores = {r["page_id"]: r["relevance"] for r in found}
    assert set(scores) == {"near", "both", "text_only"}
    # RRF: 'both' is in both rankings, so first; 'near' (vector 1) beats 'text_only' (text 2) on ties by best rank
    assert found[0]["page_id"] == "both"
    assert scores["near"] == pytest.approx(round((1 / 61) / (2 / 61), 4))


def test_vector_only_query(conn: psycopg.Connection) -> None:
    for i in range(5):
        page(conn, f"p{i}", f"text {i}", embedding=unit(100 + i))
    found = search(conn, None, p_query_embedding=vec(unit(103)), p_limit=2)
    assert found[0]["page_id"] == "p3" and found[0]["mode"] == "hybrid"


def test_user_scope_covers_all_sessions_of_the_user_only(conn: psycopg.Connection) -> None:
    page(conn, "a1", "alpha release checklist", session="s_a1")
    page(conn, "a2", "alpha release notes", session="s_a2")
    page(conn, "b1", "alpha release secret", session="s_b1", user="bob")
    assert {r["page_id"] for r in search(conn, "alpha", p_session_id="s_a1")} == {"a1"}
    found = search(conn, "alpha", p_session_id="s_a1", p_scope="user")
    assert {(r["session_id"], r["page_id"]) for r in found} == {("s_a1", "a1"), ("s_a2", "a2")}
    assert_sqlstate(conn, "PM041", "select * from memori.search_pages('s_b1', 'alpha', p_user_id => 'alice')")


@pytest.mark.parametrize(("kw", "code"), [
    ({"p_scope": "world"}, "PM001"),
    ({"p_modality": "smell"}, "PM004"),
    ({"p_page_types": ["claim", "gossip"]}, "PM004"),
    ({"p_page_types": [None]}, "PM004"),
    ({"p_limit": 0}, "PM001"),
    ({"p_limit": 101}, "PM001"),
    ({"p_query_embedding": "[1,2,3]"}, "PM001"),
    ({"p_query_embedding": "[" + ",".join(["0"] * 384) + "]"}, "PM001"),
    ({"p_session_id": "nope"}, "PM005"),
])
def test_bad_input_raises_our_codes_with_hints(conn: psycopg.Connection, kw: dict, code: str) -> None:
    page(conn, "x", "anything")
    args = {"p_session_id": S, "p_query": "anything", **kw}
    named = ", ".join(f"{k} => %({k})s" + ("::public.vector" if k == "p_query_embedding" else "") for k in args)
    assert_sqlstate(conn, code, f"select * from memori.search_pages({named})", args)


def test_empty_query_is_refused(conn: psycopg.Connection) -> None:
    page(conn, "x", "anything")
    assert_sqlstate(conn, "PM001", "select * from memori.search_pages(%s, '  ')", (S,))
    # stop words only: a valid query that matches nothing
    assert search(conn, "the and of") == []


def test_wrong_dimension_page_embedding_is_refused(conn: psycopg.Connection) -> None:
    page(conn, "x", "anything")
    assert_sqlstate(conn, "PM001", "select memori.page_embedding_set(%s, 'x', '[1,2]'::public.vector)", (S,))


def test_never_fewer_than_limit_with_a_one_percent_filter_on_hnsw(conn: psycopg.Connection) -> None:
    """2,000 embedded pages of alice, 1 % of them images: the HNSW path (exact threshold lowered)
    with its post-filter must still return the limit, and the same rows as exact search."""
    conn.execute("select memori.turn_begin('big', 'alice', %s)", (T0,))
    conn.execute("""
      insert into memori.pages (session_id, user_id, page_id, modality, content, data, created_at, updated_at,
                                last_accessed, embedding)
      select 'big', 'alice', 'p' || g, case when g %% 100 = 0 then 'image' else 'text' end, 'filler ' || g,
             null, %(t)s, %(t)s, %(t)s,
             (select array_agg(sin(g * 7.31 + i * 1.7))::public.vector(384) from generate_series(1, 384) i)
        from generate_series(1, 2000) g""", {"t": T0})
    conn.execute("update memori.pages set artifact_ref = 'blob:' || page_id where modality = 'image'")
    q = vec(unit(7))
    exact = search(conn, None, p_session_id="big", p_query_embedding=q, p_modality="image", p_limit=10)
    assert len(exact) == 10
    conn.execute("update memori.settings set value = '5' where key = 'vm.search_exact_max'")
    conn.execute("analyze memori.pages")
    # at this size the planner would rather sort a scan; make it take the index, as it does at scale
    for knob in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
        conn.execute(f"set {knob} = off")
    raw = """select p.page_id from memori.pages p
               where p.user_id = 'alice' and p.embedding is not null and p.modality = 'image'
               order by p.embedding operator(public.<=>) %s::public.vector limit 10"""
    plan = "\n".join(r["QUERY PLAN"] for r in rows(conn, "explain " + raw, (q,)))
    assert "idx_pages_embedding_hnsw" in plan
    # what the guarantee is about: a plain filtered index scan loses rows ...
    conn.execute("set hnsw.iterative_scan = off")
    assert len(rows(conn, raw, (q,))) < 10
    # ... an iterative one (what search_pages sets for itself) does not
    conn.execute("set hnsw.iterative_scan = relaxed_order")
    assert len(rows(conn, raw, (q,))) == 10
    conn.execute("set hnsw.iterative_scan = off")
    scans = "select idx_scan from pg_stat_user_indexes where indexrelname = 'idx_pages_embedding_hnsw'"
    conn.execute("select pg_stat_force_next_flush()")
    before = value(conn, scans)
    approx = search(conn, None, p_session_id="big", p_scope="user", p_query_embedding=q, p_modality="image",
                    p_limit=10)
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    assert value(conn, scans) > before  # search_pages took the HNSW path
    assert len(approx) == 10
    # the count stopped after vm.search_exact_max + 1 matches: a lower bound, labelled so
    assert (approx[0]["total_available"], approx[0]["total_exact"]) == (6, False)
    counted = search(conn, None, p_session_id="big", p_scope="user", p_query_embedding=q, p_modality="image",
                     p_limit=10, p_exact_total=True)
    assert (counted[0]["total_available"], counted[0]["total_exact"]) == (20, True)
    assert [r["page_id"] for r in counted] == [r["page_id"] for r in approx]
    assert [r["page_id"] for r in approx] == [r["page_id"] for r in exact]
    # an index scan cut short by hnsw.max_scan_tuples falls back to exact ranking
    conn.execute("set hnsw.max_scan_tuples = 30")
    cut = search(conn, None, p_session_id="big", p_scope="user", p_query_embedding=q, p_modality="image",
                 p_limit=10)
    assert [r["page_id"] for r in cut] == [r["page_id"] for r in exact]


def test_the_hnsw_ranking_sets_its_ef_search_and_leaves_the_callers_settings(conn: psycopg.Connection) -> None:
    """Issue 21: vm.search_ef_search (and the iterative scan) are set for the HNSW ranking alone: after the
    call the caller's hnsw.ef_search and hnsw.iterative_scan are what they were, set for the session or
    for the transaction (SET LOCAL statements inside a function outlive it unless set back)."""
    assert value(conn, "select value #>> '{}' from memori.settings where key = 'vm.search_ef_search'") == "200"
    for i in range(12):
        page(conn, f"v{i}", f"vector page {i}", embedding=unit(100 + i))
    q = vec(unit(105))
    exact = [r["page_id"] for r in search(conn, None, p_scope="user", p_query_embedding=q, p_limit=3)]
    assert exact[0] == "v5"
    conn.execute("update memori.settings set value = '2' where key = 'vm.search_exact_max'")
    conn.execute("analyze memori.pages")
    for knob in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):  # take the index, as at scale
        conn.execute(f"set {knob} = off")
    shown = "select current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')"
    scans = "select idx_scan from pg_stat_user_indexes where indexrelname = 'idx_pages_embedding_hnsw'"
    conn.execute("set hnsw.ef_search = 17")
    conn.execute("set hnsw.iterative_scan = off")
    conn.execute("select pg_stat_force_next_flush()")
    before = value(conn, scans)
    found = search(conn, None, p_scope="user", p_query_embedding=q, p_limit=3)
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    assert value(conn, scans) > before  # the HNSW path
    assert [r["page_id"] for r in found] == exact
    assert conn.execute(shown).fetchone() == ("17", "off")
    # a filtered search plans per call (plan_cache_mode) and sets the caller's mode back too
    conn.execute("set plan_cache_mode = force_generic_plan")
    assert [r["page_id"] for r in search(conn, None, p_scope="user", p_query_embedding=q, p_limit=3,
                                         p_modality="text")] == exact
    assert value(conn, "select current_setting('plan_cache_mode')") == "force_generic_plan"
    conn.execute("reset plan_cache_mode")
    with conn.transaction():
        conn.execute("set local hnsw.ef_search = 23")
        conn.execute("set local hnsw.iterative_scan = strict_order")
        assert [r["page_id"] for r in search(conn, None, p_scope="user", p_query_embedding=q, p_limit=3)] == exact
        assert conn.execute(shown).fetchone() == ("23", "strict_order")
    assert conn.execute(shown).fetchone() == ("17", "off")
    # pgvector's range (1..1000): a value beyond it is refused when written, and one written before that
    # rule (the constraint is NOT VALID) is clamped rather than failing the search
    assert_sqlstate(conn, "PM001", "update memori.settings set value = '5000' where key = 'vm.search_ef_search'")
    conn.execute("alter table memori.settings drop constraint settings_value_valid")
    conn.execute("update memori.settings set value = '5000' where key = 'vm.search_ef_search'")
    assert [r["page_id"] for r in search(conn, None, p_scope="user", p_query_embedding=q, p_limit=3)] == exact
    assert conn.execute(shown).fetchone() == ("17", "off")


def chain_setup(conn: psycopg.Connection) -> None:
    page(conn, "msg_1", "a")
    page(conn, "msg_2", "b")
    page(conn, "sum_1", "summary", p_page_type="summary", p_provenance=["msg_1", "msg_2"])
    page(conn, "claim_1", "claim", p_page_type="claim", p_provenance=["sum_1", "msg_2"], p_importance=0.9)


def test_provenance_chain_up_and_down(conn: psycopg.Connection) -> None:
    chain_setup(conn)
    up = rows(conn, "select page_id, depth from memori.page_provenance_chain(%s, 'claim_1')", (S,))
    assert [(r["page_id"], r["depth"]) for r in up] == [("msg_2", 1), ("sum_1", 1), ("msg_1", 2)]
    down = rows(conn, "select page_id, depth from memori.page_provenance_chain(%s, 'msg_1', 'down')", (S,))
    assert [(r["page_id"], r["depth"]) for r in down] == [("sum_1", 1), ("claim_1", 2)]
    assert_sqlstate(conn, "PM001", "select * from memori.page_provenance_chain(%s, 'msg_1', 'sideways')", (S,))
    assert_sqlstate(conn, "PM005", "select * from memori.page_provenance_chain(%s, 'nope')", (S,))


def test_provenance_chain_is_cycle_safe(conn: psycopg.Connection) -> None:
    page(conn, "a", "a", p_provenance=["c"])
    page(conn, "b", "b", p_provenance=["a"])
    page(conn, "c", "c", p_provenance=["b"])
    up = rows(conn, "select page_id, depth from memori.page_provenance_chain(%s, 'a')", (S,))
    assert [(r["page_id"], r["depth"]) for r in up] == [("c", 1), ("b", 2)]
    down = rows(conn, "select page_id, depth from memori.page_provenance_chain(%s, 'a', 'down')", (S,))
    assert [(r["page_id"], r["depth"]) for r in down] == [("b", 1), ("c", 2)]


def test_pages_by_type_and_top_importance(conn: psycopg.Connection) -> None:
    chain_setup(conn)
    page(conn, "claim_2", "claim two", p_page_type="claim", p_importance=0.95)
    assert [r["page_id"] for r in rows(conn, "select * from memori.pages_by_type(%s, 'claim')", (S,))] == [
        "claim_1", "claim_2"]
    assert_sqlstate(conn, "PM004", "select * from memori.pages_by_type(%s, 'gossip')", (S,))
    top = rows(conn, "select * from memori.pages_top_importance(%s, 2)", (S,))
    assert [r["page_id"] for r in top] == ["claim_2", "claim_1"]
    assert [r["page_id"] for r in rows(conn, "select * from memori.pages_top_importance(%s, 5, 'summary')",
                                       (S,))] == ["sum_1"]
    assert_sqlstate(conn, "PM001", "select * from memori.pages_top_importance(%s, 0)", (S,))


def test_expired_pages_stay_out_of_the_index_queries(conn: psycopg.Connection) -> None:
    page(conn, "c1", "x", p_page_type="claim", p_expires_at=T0 + timedelta(seconds=1))
    at = T0 + timedelta(seconds=1)
    assert rows(conn, "select * from memori.pages_by_type(%s, 'claim', 100, %s)", (S, at)) == []
    assert rows(conn, "select * from memori.pages_top_importance(%s, 5, null, %s)", (S, at)) == []
    assert len(rows(conn, "select * from memori.pages_by_type(%s, 'claim', 100, %s)",
                    (S, at - timedelta(seconds=1)))) == 1
    assert one(conn, "select 1 as x") == {"x": 1}


def test_user_scope_under_row_level_security_sees_only_the_acting_users_pages(conn: psycopg.Connection) -> None:
    page(conn, "a1", "alpha plan", session="s_a1", embedding=unit(1))
    page(conn, "b1", "alpha secret", session="s_b1", user="bob", embedding=unit(1))
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', 'bob', false)")
    found = rows(conn, "select * from memori.search_pages('s_b1', 'alpha', %s::public.vector, p_scope => 'user')",
                 (vec(unit(1)),))
    assert [(r["session_id"], r["page_id"], r["total_available"]) for r in found] == [("s_b1", "b1", 1)]
    # alice's session is invisible to bob: not found, and no page of hers leaks
    assert_sqlstate(conn, "PM005", "select * from memori.search_pages('s_a1', 'alpha', p_scope => 'user')")
    assert_sqlstate(conn, "PM005", "select * from memori.page_provenance_chain('s_a1', 'a1')")
    assert [r["page_id"] for r in rows(conn, "select * from memori.pages_top_importance('s_b1', 5)")] == ["b1"]
    conn.execute("reset role")


def test_user_scope_total_is_exact_up_to_the_threshold_and_a_lower_bound_above(conn: psycopg.Connection) -> None:
    """Issue 21: user scope counts at most vm.search_exact_max + 1 matches unless p_exact_total."""
    for i in range(4):
        page(conn, f"m{i}", f"database note {i}")
    conn.execute("update memori.settings set value = '4' where key = 'vm.search_exact_max'")
    at = search(conn, "database", p_scope="user", p_limit=2)
    assert (at[0]["total_available"], at[0]["total_exact"]) == (4, True)  # exactly the threshold: exact
    page(conn, "m4", "database note 4")
    page(conn, "m5", "database note 5")
    above = search(conn, "database", p_scope="user", p_limit=2)
    assert (above[0]["total_available"], above[0]["total_exact"]) == (5, False)  # threshold + 1: at least
    exact = search(conn, "database", p_scope="user", p_limit=2, p_exact_total=True)
    assert (exact[0]["total_available"], exact[0]["total_exact"]) == (6, True)
    assert [r["page_id"] for r in exact] == [r["page_id"] for r in above]
    session = search(conn, "database", p_limit=2)  # session scope: one exact pass, as before
    assert (session[0]["total_available"], session[0]["total_exact"]) == (6, True)


def test_search_vector_is_written_with_the_content_and_kept_through_moves_and_forks(conn: psycopg.Connection) -> None:
    """search_tsv is written by page_create and page_update (not generated: migration 0030), so a page is
    found by its current content after an update, a fork's copy, a map and a level change."""
    conn.execute("select set_config('memori.user_id', 'alice', false)")
    page(conn, "msg_001", "The first draft mentions kangaroos.", p_hint="zoo notes")
    page(conn, "msg_002", "Unrelated text.")
    conn.execute("select memori.page_update(%s, 'msg_001', p_content => 'The new draft mentions penguins.',"
                 " p_now => %s)", (S, T0))
    conn.execute("select memori.page_update(%s, 'msg_002', p_data => '{\"a\": 1}'::jsonb, p_now => %s)", (S, T0))
    conn.execute("select memori.vm_add_page(%s, 'msg_001', 0, p_pin => false, p_now => %s)", (S, T0))
    conn.execute("select memori.vm_add_page(%s, 'msg_001', 3, p_pin => false, p_now => %s)", (S, T0))
    conn.execute("select memori.session_fork(%s, 'fork_1', %s)", (S, T0))
    conn.execute("select memori.page_update('fork_1', 'msg_002', p_content => 'Forked text about owls.', p_now => %s)",
                 (T0,))
    assert value(conn, "select count(*) from memori.pages where search_tsv is distinct from "
                       "memori.page_search_vector(hint, content)") == 0
    assert value(conn, "select count(*) from memori.pages where session_id = 'fork_1'") >= 1  # the fork's own rows
    assert [r["page_id"] for r in search(conn, "penguins")] == ["msg_001"]
    assert search(conn, "kangaroos") == []
    assert [r["page_id"] for r in search(conn, "zoo")] == ["msg_001"]  # the hint, weight A
    assert [r["page_id"] for r in search(conn, "owls", p_session_id="fork_1")] == ["msg_002"]
    assert search(conn, "owls") == []
    # the column is a plain one: nothing recomputes it behind an UPDATE
    assert value(conn, "select attgenerated from pg_attribute where attrelid = 'memori.pages'::regclass"
                       " and attname = 'search_tsv'") == ""
