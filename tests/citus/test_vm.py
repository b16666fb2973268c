"""The virtual memory's pages on the three-node Citus cluster (marker ``citus``, issue 20).

Revision 0028 gives every VM table a key that starts with user_id. This test
distributes the schema and shows, for pages, faults, the working set, context
and snapshots: every VM table is placed (distributed by user_id, or a
reference table per the plan), the API works for three users acting as an app
role, row-level security shows and changes no other user's row, and a page
fault (the hot path) runs on one shard of one worker.

The forks' copy-on-write triggers (sql/560), the shared regions' policies
(sql/570 and 900) and vm_recall_signals' trigger belong to the second half of
the VM's key migration (branch k-vm2). Until it lands, the test drops them in
its own database before distributing: the drops are no-ops once they are gone.
"""

from __future__ import annotations

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


def _remote_commands(conn: psycopg.Connection, query: str, params: tuple[object, ...]) -> list[tuple[str, str]]:
    """(command, server and connection) of every command Citus sends for one transaction."""
    seen: list[tuple[str, str]] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith("issuing "):
            seen.append((diag.message_primary or "", diag.message_detail or ""))

    conn.add_notice_handler(keep)
    try:
        with conn.transaction():
            _as(conn, "alice")
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

        # and EXPLAIN of its page read: Task Count 1
        with conn.transaction():
            _as(conn, "alice")
            plan = "\n".join(r[0] for r in conn.execute(
                "explain select * from memori.pages where user_id = 'alice' and session_id = 's-alice'"
                " and page_id = 'msg_1' for update"))
        assert "Task Count: 1" in plan, plan
