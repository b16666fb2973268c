"""The virtual memory's pages on the three-node Citus cluster (marker ``citus``, issue 20).

Revision 0028 gives every VM table a key that starts with user_id. This test
distributes the schema and shows, for pages, faults, the working set, context
and snapshots: every VM table is placed (distributed by user_id, or a
reference table per the plan), the API works for three users acting as an app
role, row-level security shows and changes no other user's row, and a page
fault (the hot path) runs on one shard of one worker. The readers that resolve
fork ancestry through memori.vm_visible_pages (search in session scope, the
provenance walk, page_compress_todo, ...) run on one worker and the user's
shards only, on a session and on a fork of it.

The forks' copy-on-write triggers (sql/560), the shared regions' policies
(sql/570 and 900) and vm_recall_signals' trigger belong to the second half of
the VM's key migration (branch k-vm2). Until it lands, the test drops them in
its own database before distributing: the drops are no-ops once they are gone.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.citus.conftest import placements

pytestmark = pytest.mark.citus

DISTRIBUTED = {"vm_sessions", "pages", "page_versions", "page_representations", "working_set", "page_mutations",
               "page_faults", "vm_forks", "vm_segments", "vm_pack_cache", "vm_prefetches", "vm_region_pages"}
REFERENCE = {"vm_regions", "vm_region_members", "vm_recall_signals"}
USERS = ("alice", "bob", "carol")
# what the second half of the VM's migration (k-vm2) removes or replaces
NOT_YET = """
drop trigger if exists pages_cow on memori.pages;
drop trigger if exists page_representations_cow on memori.page_representations;
drop trigger if exists vm_recall_signals_check on memori.vm_recall_signals;
drop policy if exists region_read on memori.pages;
drop policy if exists region_read on memori.page_representations;
drop policy if exists member_read on memori.vm_region_pages;
drop policy if exists member_read on memori.vm_regions;
"""


@pytest.fixture
def vm_cluster(citus_dsn: str) -> Iterator[tuple[str, str]]:
    """(postgres DSN, app-role DSN) of a distributed database."""
    role = f"vm_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute(NOT_YET)
        conn.execute("select * from memori.distribute()").fetchall()
        conn.execute(f"create role {role} login in role memori_app")
    info = conninfo_to_dict(citus_dsn)
    info.pop("password", None)
    try:
        yield citus_dsn, make_conninfo(**{**info, "user": role})  # type: ignore[arg-type]
    finally:
        with psycopg.connect(citus_dsn, autocommit=True) as conn:
            conn.execute(f"drop role if exists {role}")


def _as(conn: psycopg.Connection, user: str) -> None:
    """Act for a user in this transaction: SET LOCAL reaches the shards (set_config does not)."""
    conn.execute(f"set local memori.user_id = '{user}'")


def _workload(conn: psycopg.Connection, user: str) -> None:
    s = f"s-{user}"
    with conn.transaction():
        _as(conn, user)
        conn.execute("select memori.page_create(%s, 'sys_1', 'You are terse.', p_role => 'system')", (s,))
        conn.execute("select memori.page_create(%s, 'msg_1', %s, p_role => 'user')", (s, f"hello from {user}"))
        conn.execute("select memori.page_create(%s, 'doc_1', %s, p_add_to_working_set => false)",
                     (s, f"the design notes of {user}, long enough to compress"))
        conn.execute("select memori.page_representation_put(%s, 'doc_1', 2, %s)", (s, f"notes of {user}"))
        env = conn.execute("select memori.page_fault(%s, 'doc_1', 2, 'user_requested_recall')", (s,)).fetchone()
        assert env is not None and env[0]["effects"]["promoted_to_working_set"] is True, env
        assert env[0]["page"]["content"] == {"text": f"notes of {user}"}
        for _ in range(4):
            conn.execute("select memori.turn_begin(%s)", (s,))
        assert conn.execute("select (memori.page_update(%s, 'msg_1', %s)).version",
                            (s, f"edited by {user}")).fetchone() == (2,)
        evicted = conn.execute("select page_id from memori.vm_evict(%s, 1)", (s,)).fetchall()
        assert evicted, "something unpinned could go"
        assert conn.execute("select memori.page_flush(%s)", (s,)).fetchone() == (3,)
    with conn.transaction():
        _as(conn, user)
        context = conn.execute("select memori.vm_context(%s)", (s,)).fetchone()
        assert context is not None and "You are terse." in context[0] and "<VM:CONTEXT>" in context[0]
        manifest = conn.execute("select memori.vm_manifest(%s)", (s,)).fetchone()
        assert manifest is not None and manifest[0]["session_id"] == s
        ws = {r[0] for r in conn.execute("select page_id from memori.working_set_list(%s)", (s,))}
        assert "sys_1" in ws
        assert conn.execute("select (memori.page_lookup(%s, 'msg_1')).version", (s,)).fetchone() == (2,)
        assert len(conn.execute("select * from memori.page_history(%s, 'doc_1')", (s,)).fetchall()) >= 2
        assert len(conn.execute("select * from memori.page_fault_list(%s)", (s,)).fetchall()) == 1
        assert conn.execute("select count(*) from memori.vm_context_at_turn(%s, 1)", (s,)).fetchone() == (3,)
        # the VM part of a snapshot: state out, and back in (nothing changed since: nothing restored)
        state = conn.execute("select memori._vm_snapshot_state(%s)", (s,)).fetchone()
        assert state is not None and len(state[0]["pages"]) == 3
        restored = conn.execute("select memori._vm_snapshot_restore(%s, %s, now())",
                                (s, psycopg.types.json.Jsonb(state[0]))).fetchone()
        assert restored is not None and restored[0]["pages_restored"] == 0
    with conn.transaction():
        _as(conn, user)
        # L1 keeps no page: what an eviction moves there goes on to L2 (the overflow's UPDATE, its log rows)
        conn.execute("select memori.vm_session_configure(%s, '{\"max_l1_pages\": 0}'::jsonb)", (s,))
        free = conn.execute("select coalesce(sum(tokens), 0) from memori.vm_eviction_candidates(%s)", (s,)).fetchone()
        assert free is not None and free[0] > 0, "something unpinned could go"
        evicted = {r[0] for r in conn.execute("select page_id from memori.vm_evict(%s, %s) where action = 'evict'",
                                              (s, free[0]))}
        demoted = {r[0] for r in conn.execute("select page_id from memori.page_mutations "
                                              "where session_id = %s and cause = 'l1_full'", (s,))}
        assert evicted and evicted <= demoted, (evicted, demoted)
        assert conn.execute("select count(*) from memori.pages where session_id = %s and tier = 'L1'",
                            (s,)).fetchone() == (0,)


def _rls_matrix(conn: psycopg.Connection) -> None:
    tables = sorted(DISTRIBUTED - {"vm_region_pages", "vm_forks", "vm_segments", "vm_prefetches"})
    for user in USERS:
        with conn.transaction():
            _as(conn, user)
            for table in tables:
                seen = conn.execute(f"select count(*) filter (where user_id <> %s), count(*) from memori.{table}",
                                    (user,)).fetchone()
                assert seen is not None and seen[0] == 0, (user, table, seen)
                assert seen[1] > 0 or table == "vm_pack_cache", (user, table)
            changed = conn.execute("update memori.pages set importance = 0 where user_id <> %s", (user,)).rowcount
            gone = conn.execute("delete from memori.working_set where user_id <> %s", (user,)).rowcount
            assert (changed, gone) == (0, 0)
            # another user's session id is not ours: a call on it is "no VM session" (PM005)
            other = "s-bob" if user != "bob" else "s-alice"
            with pytest.raises(psycopg.Error) as info, conn.transaction():
                conn.execute("select memori.page_fault(%s, 'doc_1')", (other,))
            assert info.value.sqlstate == "PM005"


def _remote_commands(conn: psycopg.Connection, query: str, params: tuple[object, ...] | dict[str, object],
                     user: str = "alice") -> list[tuple[str, str]]:
    """(command, server and connection) of every command Citus sends for one transaction of a user."""
    seen: list[tuple[str, str]] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith("issuing "):
            seen.append((diag.message_primary or "", diag.message_detail or ""))

    conn.add_notice_handler(keep)
    try:
        with conn.transaction():
            _as(conn, user)
            conn.execute("set local citus.log_remote_commands = on")
            conn.execute(query, params)
    finally:
        conn.remove_notice_handler(keep)
    return seen


def test_vm_pages_on_the_cluster(vm_cluster: tuple[str, str]) -> None:
    dsn, app = vm_cluster
    placed = placements(dsn)
    assert {t: placed.get(t) for t in DISTRIBUTED} == dict.fromkeys(DISTRIBUTED, "distributed")
    assert {t: placed.get(t) for t in REFERENCE} == dict.fromkeys(REFERENCE, "reference")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # one co-location group with the other user tables
        groups = conn.execute("select count(distinct colocationid) from pg_dist_partition p"
                              " join pg_class c on c.oid = p.logicalrelid"
                              " where c.relnamespace = 'memori'::regnamespace and p.partmethod = 'h'").fetchone()
        assert groups == (1,)

    with psycopg.connect(app, autocommit=True) as conn:
        for user in USERS:
            _workload(conn, user)
        _rls_matrix(conn)

        # the hot path: a fault is answered by one shard group on one worker, one connection, no 2PC
        # (its reads of memori.settings are local: the coordinator holds the reference tables' copies)
        with conn.transaction():
            _as(conn, "alice")
            conn.execute("select memori.turn_begin('s-alice')")
        sent = _remote_commands(conn, "select memori.page_fault('s-alice', 'msg_1', 0, 'user_requested_recall')", ())
        statements = [c for c, _ in sent if not c.startswith(("issuing BEGIN", "issuing COMMIT"))]
        assert len(statements) >= 5, sent  # session, page, policy count, working set, writes, the fault row
        assert len({where for _, where in sent}) == 1, sent
        assert not any("PREPARE TRANSACTION" in c for c, _ in sent), sent
        shards = {tok.split("_")[-1] for c in statements for tok in c.split() if tok.startswith("memori.pages_")}
        assert len(shards) == 1, statements
        # a served fault (the page is loaded, mapped and logged), for every user (their shards are on
        # both workers, and a reference table read alone goes to one fixed worker): the policy and
        # setting reads it makes (retention, vm.autopin_pattern) are joined to the session's row,
        # so they stay on the session's node too
        nodes = set()
        for user in USERS:
            with conn.transaction():
                _as(conn, user)
                conn.execute("select memori.page_create(%s, 'doc_2', 'more notes', p_add_to_working_set => false)",
                             (f"s-{user}",))
            sent = _remote_commands(conn, "select memori.page_fault(%s, 'doc_2', 0, 'user_requested_recall')",
                                    (f"s-{user}",), user)
            assert any("INSERT INTO memori.working_set_" in c for c, _ in sent), sent
            assert len({where for _, where in sent}) == 1, (user, sent)
            assert not any("PREPARE TRANSACTION" in c for c, _ in sent), sent
            nodes |= {where.split(" connectionId")[0] for _, where in sent}
        assert len(nodes) == 2, nodes  # the three users cover both workers

        # and EXPLAIN of its page read: Task Count 1
        with conn.transaction():
            _as(conn, "alice")
            plan = "\n".join(r[0] for r in conn.execute(
                "explain select * from memori.pages where user_id = 'alice' and session_id = 's-alice'"
                " and page_id = 'msg_1' for update"))
        assert "Task Count: 1" in plan, plan


def _unit(seed: int, dim: int = 384) -> str:
    """A deterministic unit vector (pgvector's text form)."""
    v = [((seed * 7919 + i * 104729) % 2003) / 1001.0 - 1.0 for i in range(dim)]
    norm = sum(x * x for x in v) ** 0.5
    return "[" + ",".join(f"{x / norm:.6f}" for x in v) + "]"


def test_user_scope_hnsw_ranking_gets_its_settings_on_the_worker(vm_cluster: tuple[str, str]) -> None:
    """Issue 21: the HNSW ranking of a user-scope search runs on the worker with vm.search_ef_search and an
    iterative scan (SET LOCAL, which Citus sends to the transaction's workers; a function's SET clause
    and set_config() stay on the coordinator), and the caller's values are sent back after it."""
    dsn, _app = vm_cluster
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            _as(conn, "alice")
            for i in range(12):
                conn.execute("select memori.page_create('s-vec', %s, %s, p_add_to_working_set => false)",
                             (f"v{i}", f"vector page {i}"))
                conn.execute("select memori.page_embedding_set('s-vec', %s, %s::public.vector)", (f"v{i}", _unit(i)))
        exact = ("select page_id from memori.search_pages(null, null, %s::public.vector, p_scope => 'user',"
                 " p_limit => 3)")
        with conn.transaction():
            _as(conn, "alice")
            want = [r[0] for r in conn.execute(exact, (_unit(5),))]
        assert want[0] == "v5"
        conn.execute("update memori.settings set value = '2' where key = 'vm.search_exact_max'")
        # the reference table's CHECK runs on every node (memori._setting_valid exists on the workers)
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("update memori.settings set value = '-1' where key = 'vm.search_exact_max'")
        assert refused.value.sqlstate == "PM001" and "vm.search_exact_max" in str(refused.value)
        assert conn.execute("select value from memori.settings where key = 'vm.search_exact_max'").fetchone() == (2,)
        try:
            sent = _remote_commands(conn, exact, (_unit(5),))
            with conn.transaction():
                _as(conn, "alice")
                conn.execute("set local plan_cache_mode = force_generic_plan")
                got = [r[0] for r in conn.execute(exact, (_unit(5),))]
                after = conn.execute("select current_setting('hnsw.ef_search'),"
                                     " current_setting('hnsw.iterative_scan'),"
                                     " current_setting('plan_cache_mode')").fetchone()
        finally:
            conn.execute("update memori.settings set value = '5000' where key = 'vm.search_exact_max'")
    assert got == want
    # the caller's settings are theirs again after the call (plan_cache_mode: the function's SET clause
    # undoes the body's per-statement set_config on Citus)
    assert after == ("40", "off", "force_generic_plan")
    commands = [c for c, _ in sent]
    ranking = next(i for i, c in enumerate(commands) if "<=>" in c and "LIMIT" in c.upper())
    before = " ".join(commands[:ranking + 1]).lower()  # a SET LOCAL rides on the BEGIN of a new connection
    later = " ".join(commands[ranking + 1:]).lower()
    def setting(name: str, value: str) -> str:
        return rf"set local hnsw\.{name} (=|to) '?{value}'?"

    assert re.search(setting("ef_search", "200"), before), sent
    assert re.search(setting("iterative_scan", "relaxed_order"), before), sent
    assert re.search(setting("ef_search", "40"), later) and re.search(setting("iterative_scan", "off"), later), sent
    assert len({where.split(" connectionId")[0] for _, where in sent}) == 1, sent


# The readers that resolve fork ancestry through memori.vm_visible_pages, each called on a session and on a
# fork of it (issue 20): every statement they send reaches one worker and only the user's shard group.
VIEW_READERS = {
    "page_compress_todo": "select * from memori.page_compress_todo(%(s)s::text)",
    "page_provenance_chain up": "select * from memori.page_provenance_chain(%(s)s::text, 'sum_1')",
    "page_provenance_chain down": "select * from memori.page_provenance_chain(%(s)s::text, 'doc_1', 'down')",
    "search_pages session": "select * from memori.search_pages(%(s)s::text, 'design notes', p_scope => 'session')",
    "pages_by_type": "select * from memori.pages_by_type(%(s)s::text, 'transcript')",
    "pages_top_importance": "select * from memori.pages_top_importance(%(s)s::text)",
    "page_lookup": "select memori.page_lookup(%(s)s::text, 'doc_1')",
    "vm_manifest": "select memori.vm_manifest(%(s)s::text)",
    "vm_context": "select memori.vm_context(%(s)s::text)",
    "vm_metrics": "select memori.vm_metrics(%(s)s::text)",
    "snapshot state": "select memori._vm_snapshot_state(%(s)s::text)",
    "claim_conflicts": "select * from memori.claim_conflicts(%(s)s::text)",
    "claim_history": "select * from memori.claim_history(%(s)s::text, 'design')",
    "vm_prefetch": "select memori.vm_prefetch(%(s)s::text)",
    "vm_prepass on a recall signal": "select * from memori.vm_prepass(%(s)s::text, 'As we said earlier, the design?')",
    "page_flush": "select memori.page_flush(%(s)s::text)",  # in the source: copies what the fork shares
}


def _fork_workload(conn: psycopg.Connection, user: str) -> None:
    s, f = f"s-{user}", f"f-{user}"
    with conn.transaction():
        _as(conn, user)
        conn.execute("select memori.page_create(%s, 'msg_1', %s, p_role => 'user')", (s, f"hello from {user}"))
        conn.execute("select memori.page_create(%s, 'doc_1', %s, p_add_to_working_set => false)",
                     (s, f"the design notes of {user}, long enough to compress"))
        conn.execute("select memori.page_create(%s, 'sum_1', 'a summary of the design notes',"
                     " p_provenance => array['doc_1', 'msg_1'], p_add_to_working_set => false)", (s,))
        conn.execute("select memori.session_fork(%s, %s)", (s, f))
        conn.execute("select memori.page_create(%s, 'msg_2', %s, p_role => 'user')", (f, f"the fork of {user}"))
        conn.execute("select memori.page_update(%s, 'msg_1', %s)", (f, f"edited in the fork of {user}"))


def _shards(conn: psycopg.Connection, user: str) -> tuple[set[str], set[str]]:
    """The shard ids of the user's shard group, and those of the reference tables (one shard each)."""
    rows = conn.execute("select partmethod, get_shard_id_for_distribution_column(logicalrelid, %s::text)"
                        " from pg_dist_partition where logicalrelid::text like 'memori.%%'"
                        " and partmethod in ('h', 'n')", (user,)).fetchall()
    return {str(r[1]) for r in rows if r[0] == "h"}, {str(r[1]) for r in rows if r[0] == "n"}


def test_vm_readers_of_a_session_and_its_fork_are_single_shard(distributed_dsn: str) -> None:
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        for user in USERS:
            _fork_workload(conn, user)
        mine, reference = _shards(conn, "alice")
        # the fork sees its own pages, the edited copy and the source's other pages
        with conn.transaction():
            _as(conn, "alice")
            seen = conn.execute("select page_id, depth from memori.vm_visible_pages where user_id = 'alice'"
                                " and viewer_session_id = 'f-alice' order by page_id").fetchall()
            plan = "\n".join(r[0] for r in conn.execute(
                "explain select * from memori.vm_visible_pages where user_id = 'alice'"
                " and viewer_session_id = 'f-alice'"))
        assert seen == [("doc_1", 1), ("msg_1", 0), ("msg_2", 0), ("sum_1", 1)]
        assert "Task Count: 1" in plan, plan
        for session in ("s-alice", "f-alice"):
            for name, query in VIEW_READERS.items():
                sent = _remote_commands(conn, query, {"s": session})
                # a read of a reference table goes to any node's copy: one shard wherever it runs
                work = [(c, where) for c, where in sent if not c.startswith(("issuing BEGIN", "issuing COMMIT"))
                        and not set(re.findall(r"memori\.\w+?_(\d{6,})\b", c)) <= reference]
                assert work, (name, session)
                assert len({where for _, where in work}) == 1, (name, session, work)
                shards = {m for c, _ in work for m in re.findall(r"memori\.\w+?_(\d{6,})\b", c)}
                assert shards - reference <= mine, (name, session, shards - reference - mine, work)
        # and the results are the fork's: the provenance walk finds the fork's edit of msg_1
        with conn.transaction():
            _as(conn, "alice")
            chain = conn.execute("select page_id, depth from memori.page_provenance_chain('f-alice', 'sum_1')"
                                 ).fetchall()
            found = conn.execute("select page_id, session_id from memori.search_pages('f-alice', 'edited fork',"
                                 " p_scope => 'session')").fetchall()
        assert chain == [("doc_1", 1), ("msg_1", 1)]
        assert found[:1] == [("msg_1", "f-alice")]
