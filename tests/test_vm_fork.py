"""Copy-on-write fork of a VM session through SQL (issue 7, seed 03 10.3)."""

from __future__ import annotations

from datetime import timedelta

import psycopg

from tests.helpers import T0, assert_sqlstate, one, rows, value

S = "src"


def page(conn: psycopg.Connection, page_id: str, content: str, session: str = S, **kw: object) -> dict:
    args = {"p_session_id": session, "p_page_id": page_id, "p_content": content, "p_user_id": "alice",
            "p_now": T0, **kw}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    found = one(conn, f"select * from memori.page_create({named})", args)
    assert found is not None
    return found


def fork(conn: psycopg.Connection, source: str, new: str) -> dict:
    found = one(conn, "select * from memori.session_fork(%s, %s, %s)", (source, new, T0))
    assert found is not None
    return found


def seen(conn: psycopg.Connection, session: str) -> dict[str, str]:
    """page id -> content, as the session sees its pages."""
    return {r["page_id"]: r["content"] for r in rows(
        conn, "select page_id, content from memori.vm_visible_pages where viewer_session_id = %s", (session,))}


def own_rows(conn: psycopg.Connection, session: str) -> int:
    return value(conn, "select count(*) from memori.pages where session_id = %s", (session,))


def world(conn: psycopg.Connection, n: int = 20) -> None:
    for i in range(n):
        page(conn, f"msg_{i:03d}", f"message number {i} about topic{i % 3}", p_add_to_working_set=False)


def test_fork_sees_every_page_without_copying(conn: psycopg.Connection) -> None:
    world(conn)
    result = fork(conn, S, "f1")
    assert (result["session_id"], result["source_session_id"], result["depth"], result["shared_pages"],
            result["working_set_pages"]) == ("f1", S, 1, 20, 0)
    assert own_rows(conn, "f1") == 0
    assert seen(conn, "f1") == seen(conn, S)
    assert value(conn, "select user_id from memori.vm_sessions where session_id = 'f1'") == "alice"
    fault = value(conn, "select memori.page_fault('f1', 'msg_003', 0, 'user_requested_recall', 'model', %s)", (T0,))
    assert fault["page"]["content"]["text"] == "message number 3 about topic0"
    chain = rows(conn, "select ancestor_session_id, depth from memori.session_fork_chain('f1')")
    assert chain == [{"ancestor_session_id": S, "depth": 1}]


def test_write_in_the_fork_copies_and_leaves_the_source(conn: psycopg.Connection) -> None:
    world(conn)
    fork(conn, S, "f1")
    conn.execute("select memori.page_update('f1', 'msg_001', 'changed in the fork', p_now => %s)", (T0,))
    assert own_rows(conn, "f1") == 1
    assert seen(conn, "f1")["msg_001"] == "changed in the fork"
    assert seen(conn, S)["msg_001"] == "message number 1 about topic1"
    assert value(conn, "select version from memori.pages where session_id = 'f1' and page_id = 'msg_001'") == 2
    # the copy brought the representations with it; the source keeps its own
    assert value(conn, "select count(*) from memori.page_representations where session_id = 'f1'") == 1
    assert value(conn, "select count(*) from memori.page_representations where session_id = %s", (S,)) == 20


def test_write_in_the_source_does_not_change_the_fork(conn: psycopg.Connection) -> None:
    world(conn)
    fork(conn, S, "f1")
    conn.execute("select memori.page_update(%s, 'msg_002', 'changed in the source', p_now => %s)", (S, T0))
    conn.execute("select memori.page_representation_put(%s, 'msg_004', 1, 'reduced', p_now => %s)", (S, T0))
    conn.execute("select memori.page_embedding_set(%s, 'msg_005', null, %s)", (S, T0))
    assert seen(conn, "f1")["msg_002"] == "message number 2 about topic2"
    assert seen(conn, S)["msg_002"] == "changed in the source"
    # msg_002 (update), msg_004 (representation), msg_005 (embedding) were copied down; nothing else
    assert sorted(r["page_id"] for r in rows(conn, "select page_id from memori.pages where session_id = 'f1'")) == [
        "msg_002", "msg_004", "msg_005"]
    assert value(conn, "select count(*) from memori.page_representations "
                       "where session_id = 'f1' and page_id = 'msg_004' and level = 1") == 0
    # pages the source creates after the fork stay out of it
    page(conn, "msg_new", "created after the fork", p_add_to_working_set=False)
    assert "msg_new" not in seen(conn, "f1")
    assert value(conn, "select memori.page_lookup('f1', 'msg_new', %s)", (T0,)) is None
    # ... and the fork may use the id for a page of its own
    page(conn, "msg_new", "the fork's own", session="f1", p_add_to_working_set=False)
    assert seen(conn, "f1")["msg_new"] == "the fork's own"
    assert seen(conn, S)["msg_new"] == "created after the fork"
    assert_sqlstate(conn, "PM063", "select memori.page_create('f1', 'msg_001', 'again', p_now => %s)", (T0,))


def test_fork_of_a_fork(conn: psycopg.Connection) -> None:
    world(conn, 5)
    fork(conn, S, "f1")
    conn.execute("select memori.page_update('f1', 'msg_001', 'f1 version', p_now => %s)", (T0,))
    page(conn, "f1_only", "made in f1", session="f1", p_add_to_working_set=False)
    result = fork(conn, "f1", "g1")
    assert result["depth"] == 2
    assert seen(conn, "g1") == seen(conn, "f1")
    # f1 writes a page g1 sees through f1 (its own row) and one g1 sees through src
    conn.execute("select memori.page_update('f1', 'msg_001', 'f1 again', p_now => %s)", (T0,))
    conn.execute("select memori.page_update('f1', 'msg_002', 'f1 on msg_002', p_now => %s)", (T0,))
    conn.execute("select memori.page_update(%s, 'msg_003', 'src on msg_003', p_now => %s)", (S, T0))
    g = seen(conn, "g1")
    assert (g["msg_001"], g["msg_002"], g["msg_003"], g["f1_only"]) == (
        "f1 version", "message number 2 about topic2", "message number 3 about topic0", "made in f1")
    assert seen(conn, "f1")["msg_003"] == "message number 3 about topic0"
    assert seen(conn, S)["msg_001"] == "message number 1 about topic1"
    # a write in g1 copies into g1 only
    conn.execute("select memori.page_update('g1', 'msg_004', 'g1 version', p_now => %s)", (T0,))
    assert (seen(conn, "g1")["msg_004"], seen(conn, "f1")["msg_004"], seen(conn, S)["msg_004"]) == (
        "g1 version", "message number 4 about topic1", "message number 4 about topic1")


def test_working_set_is_copied_and_the_fork_behaves_like_its_source(conn: psycopg.Connection) -> None:
    conn.execute("select memori.turn_begin(%s, 'alice', %s)", (S, T0))
    for i in range(6):
        page(conn, f"msg_{i}", f"decision {i}: we use PostgreSQL for storage", p_add_to_working_set=i >= 3,
             p_role="user")
    page(conn, "claim_db", "database is PostgreSQL", p_page_type="claim", p_importance=0.95,
         p_provenance=["msg_0", "msg_1"], p_add_to_working_set=False)
    result = fork(conn, S, "f1")
    assert result["working_set_pages"] == 3 and own_rows(conn, "f1") == 3
    ws = "select page_id, level, tokens, pinned from memori.working_set where session_id = %s order by page_id"
    assert rows(conn, ws, ("f1",)) == rows(conn, ws, (S,))
    assert value(conn, "select memori.vm_context('f1', p_now => %s)", (T0,)) == \
        value(conn, "select memori.vm_context(%s, p_now => %s)", (S, T0))
    m_src = value(conn, "select memori.vm_manifest(%s, p_now => %s)", (S, T0))
    m_fork = value(conn, "select memori.vm_manifest('f1', p_now => %s)", (T0,))
    assert m_fork["available_pages"] == m_src["available_pages"]
    assert m_fork["total_available"] == m_src["total_available"] == 4
    # the same pages (the order of equal full-text ranks follows row ids, and copies have new ids)
    found = "select page_id, total_available from memori.search_pages(%s, 'PostgreSQL', p_limit => 10)"
    assert sorted(map(str, rows(conn, found, ("f1",)))) == sorted(map(str, rows(conn, found, (S,))))
    assert {r["session_id"] for r in rows(conn, "select * from memori.search_pages('f1', 'PostgreSQL')")} == {"f1"}
    assert [r["page_id"] for r in rows(conn, "select * from memori.pages_by_type('f1', 'claim')")] == ["claim_db"]
    assert [r["page_id"] for r in rows(
        conn, "select * from memori.page_provenance_chain('f1', 'claim_db', 'up')")] == ["msg_0", "msg_1"]
    assert [r["page_id"] for r in rows(conn, "select * from memori.pages_top_importance('f1', 1)")] == ["claim_db"]
    by_tier = "select pages_by_tier from memori.vm_metrics(%s, %s)"
    assert value(conn, by_tier, ("f1", T0)) == value(conn, by_tier, (S, T0))
    replay = rows(conn, "select page_id from memori.vm_context_at_turn('f1', 1)")
    assert [r["page_id"] for r in replay] == ["msg_3", "msg_4", "msg_5"]
    # faulting a shared page into the fork copies it; the source's tier is untouched
    env = value(conn, "select memori.page_fault('f1', 'claim_db', 0, 'user_requested_recall', 'model', %s)", (T0,))
    assert env["effects"]["promoted_to_working_set"]
    assert value(conn, "select tier from memori.pages where session_id = %s and page_id = 'claim_db'", (S,)) == "L2"
    assert value(conn, "select tier from memori.pages where session_id = 'f1' and page_id = 'claim_db'") == "L0"
    # the source's working set changes copy the rows it shared down to the fork first
    conn.execute("select memori.page_pin(%s, 'msg_0', true, p_now => %s)", (S, T0))
    assert value(conn, "select tier from memori.vm_visible_pages where viewer_session_id = 'f1' "
                       "and page_id = 'msg_0'") == "L2"


def test_flush_pin_and_lookup_in_a_fork(conn: psycopg.Connection) -> None:
    world(conn, 3)
    fork(conn, S, "f1")
    assert value(conn, "select (memori.page_lookup('f1', 'msg_001', %s)).dirty", (T0,)) is True
    assert value(conn, "select memori.page_flush('f1', p_now => %s)", (T0,)) == 3
    assert value(conn, "select count(*) from memori.pages where session_id = %s and dirty", (S,)) == 3
    assert value(conn, "select (memori.page_lookup('f1', 'msg_001', %s)).dirty", (T0,)) is False
    assert value(conn, "select memori.page_pin('f1', 'msg_002', true, p_now => %s)", (T0,)) is True
    assert value(conn, "select count(*) from memori.working_set where session_id = %s", (S,)) == 0


def test_fork_errors(conn: psycopg.Connection) -> None:
    world(conn, 2)
    fork(conn, S, "f1")
    assert_sqlstate(conn, "PM094", "select memori.session_fork(%s, 'f1', %s)", (S, T0))
    assert_sqlstate(conn, "PM005", "select memori.session_fork('nope', 'f2', %s)", (T0,))
    assert_sqlstate(conn, "PM001", "select memori.session_fork(%s, '', %s)", (S, T0))
    conn.execute("update memori.settings set value = '2' where key = 'vm.max_fork_depth'")
    fork(conn, "f1", "g1")
    assert_sqlstate(conn, "PM098", "select memori.session_fork('g1', 'h1', %s)", (T0,))
    conn.execute("select set_config('memori.user_id', 'mallory', false)")
    # session ids are per user (issue 20): mallory has no session of that id, so none to fork
    assert_sqlstate(conn, "PM005", "select memori.session_fork(%s, 'f9', %s)", (S, T0))


def test_deleting_the_source_copies_what_the_fork_still_shares(conn: psycopg.Connection) -> None:
    world(conn, 4)
    fork(conn, S, "f1")
    page(conn, "late", "after the fork", p_add_to_working_set=False)
    before = seen(conn, "f1")
    conn.execute("delete from memori.vm_sessions where session_id = %s", (S,))
    assert seen(conn, "f1") == before
    assert own_rows(conn, "f1") == 4
    # an expired shared row is not copied: the fork did not see it either
    world(conn, 2)
    fork(conn, S, "f2")
    conn.execute("update memori.pages set expires_at = %s where session_id = %s and page_id = 'msg_000'",
                 (T0 - timedelta(days=1), S))
    assert own_rows(conn, "f2") == 1  # the update itself copied the live row down first


def test_deleting_a_source_and_its_fork_together(conn: psycopg.Connection) -> None:
    world(conn, 3)
    fork(conn, S, "f1")
    fork(conn, "f1", "g1")
    conn.execute("delete from memori.vm_sessions where session_id in (%s, 'f1')", (S,))
    assert len(seen(conn, "g1")) == 3 and own_rows(conn, "g1") == 3
    conn.execute("delete from memori.vm_sessions")
    assert value(conn, "select count(*) from memori.pages") == 0


def test_storage_of_a_fork_is_constant_until_writes_and_linear_in_them(conn: psycopg.Connection) -> None:
    """The copy-on-write proof at a small scale (pymemdb bench fork runs it at 10,000 pages)."""
    from pymemdb.bench import fork as bench

    conn.execute("select set_config('memori.user_id', 'bench', false)")
    bench.make_source(conn, "small", 200, T0)
    bench.make_source(conn, "large", 2000, T0)
    small = bench._fork(conn, "small", "small_f", T0)
    large = bench._fork(conn, "large", "large_f", T0)
    copy = bench._full_copy(conn, "large", "large_copy", T0)
    # the same growth for 10x the pages: only the mapped pages are the fork's own rows
    assert small["own_rows"] == large["own_rows"] == bench.MAPPED
    assert large["row_bytes"] == small["row_bytes"]  # exact: the bytes of the fork's rows
    assert large["row_bytes"] < copy["row_bytes"] / 20
    assert large["bytes"] <= small["bytes"] + 64 * 1024  # relation growth: 8 kB pages, free space reused
    assert large["bytes"] < copy["bytes"] / 5
    assert set(large["by_table"]) <= {"pages", "page_representations", "working_set", "vm_sessions", "vm_forks",
                                      "page_mutations"}
    # N writes: N page rows (and their representations and versions), bytes proportional to N
    few = bench._writes(conn, "large_f", list(range(100, 120)), T0)
    many = bench._writes(conn, "large_f", list(range(200, 400)), T0)
    assert own_rows(conn, "large_f") == bench.MAPPED + 220
    assert value(conn, "select count(*) from memori.page_versions where session_id = 'large_f'") == 220
    # each write copies one page (its content varies by a few digits): O(N)
    assert few["row_bytes_per_write"] > 0
    assert abs(many["row_bytes_per_write"] / few["row_bytes_per_write"] - 1) < 0.05
    assert many["bytes"] > few["bytes"]
    assert own_rows(conn, "large") == 2000


def test_segment_close_in_a_fork_leaves_the_source_alone(conn: psycopg.Connection) -> None:
    # the source's transcript is mapped in L0; the fork gets its working set as own rows
    for i in range(4):
        page(conn, f"u{i}", f"user turn {i} about databases and deployment plans", p_role="user")
    before = {r["page_id"]: r["tier"] for r in rows(
        conn, "select page_id, tier from memori.pages where session_id = %s", (S,))}
    fork(conn, S, "f1")
    closed = one(conn, "select * from memori.segment_close('f1', 'the four turns', p_now => %s)", (T0,))
    assert closed is not None and closed["pages"] == 4
    after = {r["page_id"]: r["tier"] for r in rows(
        conn, "select page_id, tier from memori.pages where session_id = %s", (S,))}
    assert after == before  # the source's pages and tiers are untouched
    summary = one(conn, "select provenance from memori.pages where session_id = 'f1' and page_type = 'summary'")
    assert summary is not None and sorted(summary["provenance"]) == ["u0", "u1", "u2", "u3"]
    assert value(conn, "select count(*) from memori.vm_segments where session_id = %s", (S,)) == 0
