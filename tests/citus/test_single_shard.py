"""Every per-user call is answered by one shard; delegated calls and the acting user (marker ``citus``).

The functions come from the catalog (every public function of schema memori with a
``p_user_id`` or ``p_owner_id`` argument), so a function added later is checked too:
it needs a sample call in SAMPLES, or a reason in MULTI_SHARD_BY_DESIGN. A call is
single-shard when every command the coordinator sends for it (``citus.log_remote_commands``,
read from the client's notices) goes to the shards of one hash range, on one node.
Functions that reach a table not distributed yet (``memori.distribute_functions()``
says which) are reported by a skipped test until their table is distributed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql

import pymemdb
from tests.citus.conftest import placements

pytestmark = pytest.mark.citus

USERS = ("alice", "bob", "carol")

# One call per public per-user function, for the user %(u)s, run in this order (later calls use
# the rows of earlier ones). Arguments left out take their SQL defaults. One block per concern
# (each concern's samples side by side).
STORE_SAMPLES: dict[str, str] = {
    "store_put": "select * from memori.store_put(p_user_id => %(u)s, p_namespace => array['docs', 'a'], "
                 "p_key => 'k1', p_value => '{\"text\": \"shards keep each user together\"}')",
    "store_put_many": "select * from memori.store_put_many(p_user_id => %(u)s, p_items => "
                      "'[{\"namespace\": [\"docs\", \"b\"], \"key\": \"k2\", \"value\": {\"text\": \"second\"}}]')",
    "store_get": "select * from memori.store_get(p_user_id => %(u)s, p_namespace => array['docs', 'a'], p_key => 'k1')",
    "store_get_many": "select * from memori.store_get_many(p_user_id => %(u)s, p_namespaces => '[[\"docs\", \"a\"]]', "
                      "p_keys => array['k1'])",
    "store_list_namespaces": "select * from memori.store_list_namespaces(p_user_id => %(u)s, "
                             "p_prefix => array['docs'])",
    "store_search": "select * from memori.store_search(p_user_id => %(u)s, p_namespace_prefix => array['docs'], "
                    "p_query => 'shards')",
    "store_delete": "select * from memori.store_delete(p_user_id => %(u)s, p_namespace => array['docs', 'b'], "
                    "p_key => 'k2')",
    "store_namespace_delete": "select * from memori.store_namespace_delete(p_user_id => %(u)s, "
                              "p_prefix => array['docs', 'b'])",
    "mcp_token_create": "select * from memori.mcp_token_create(p_user_id => %(u)s, p_name => 'ci')",
    "mcp_token_list": "select * from memori.mcp_token_list(p_user_id => %(u)s)",
    "mcp_token_revoke": "select * from memori.mcp_token_revoke(p_user_id => %(u)s, p_name => 'ci')",
}

CHECKPOINTS_SAMPLES: dict[str, str] = {
    "memory_save": "select * from memori.memory_save(p_namespace => 'shared_ns', p_content => 'a note', "
                   "p_owner_id => %(u)s)",
    "session_checkpoint_save": "select * from memori.session_checkpoint_save(p_skill => 'api', p_user_id => %(u)s, "
                               "p_content => 'where we are')",
    "session_checkpoint_load_latest": "select * from memori.session_checkpoint_load_latest(p_skill => 'api', "
                                      "p_user_id => %(u)s)",
    "checkpoint_create": "select * from memori.checkpoint_create(p_session_id => 's1', p_user_id => %(u)s, "
                         "p_type => 'manual', p_title => 't', p_data => '{\"skill_level\": 1}')",
    "checkpoint_query": "select * from memori.checkpoint_query(p_session_id => 's1', p_user_id => %(u)s)",
    "checkpoint_stats": "select * from memori.checkpoint_stats(p_user_id => %(u)s)",
    "checkpoint_detect_milestone": "select * from memori.checkpoint_detect_milestone(p_session_id => 's1', "
                                   "p_user_id => %(u)s, p_current => '{\"skill_level\": 2}')",
    "checkpoint_auto": "select * from memori.checkpoint_auto(p_session_id => 's1', p_user_id => %(u)s, "
                       "p_trigger => 'task_complete', p_data => '{\"step\": 1}')",
}

CONTEXT_SAMPLES: dict[str, str] = {
    "project_create": "select * from memori.project_create(p_project_id => 'p_' || %(u)s, p_name => 'P', "
                      "p_user_id => %(u)s)",
    "project_member_list": "select * from memori.project_member_list(p_project_id => 'p_' || %(u)s, "
                           "p_user_id => %(u)s)",
    "session_context_set": "select * from memori.session_context_set(p_session_id => 's1', p_user_id => %(u)s)",
    "session_context_add_window": "select * from memori.session_context_add_window(p_session_id => 's1', "
                                  "p_window_type => 'conversation', p_content => '{\"n\": 1}', p_user_id => %(u)s)",
    "session_context_get": "select * from memori.session_context_get(p_session_id => 's1', p_user_id => %(u)s)",
    "session_context_remove_window": "select * from memori.session_context_remove_window(p_session_id => 's1', "
                                     "p_window_id => (select window_id from memori.context_windows where "
                                     "user_id = %(u)s and session_id = 's1' limit 1), p_user_id => %(u)s)",
    "chunk_add_many": "select * from memori.chunk_add_many(p_session_id => 's1', p_chunks => "
                      "'[{\"type\": \"tool_output\", \"content\": \"out\", \"tokens\": 10}]', p_user_id => %(u)s)",
    "context_set": "select * from memori.context_set(p_key => 'k', p_value => '1', p_type => 'user_preferences', "
                   "p_scope => 'user', p_user_id => %(u)s)",
    "context_delete": "select * from memori.context_delete(p_key => 'k', p_scope => 'user', p_user_id => %(u)s)",
    "context_prune_old": "select * from memori.context_prune_old(p_older_than => '30 days', p_user_id => %(u)s)",
    "context_cleanup_by_scope": "select * from memori.context_cleanup_by_scope(p_scope => 'user', "
                                "p_user_id => %(u)s, p_expired_only => true)",
    "business_context_set": "select * from memori.business_context_set(p_context => '{\"focus_mode\": \"deep_work\"}', "
                            "p_user_id => %(u)s)",
    "business_context_update": "select * from memori.business_context_update("
                               "p_fields => '{\"current_project\": \"p\"}', p_user_id => %(u)s)",
    "business_context_get": "select * from memori.business_context_get(p_user_id => %(u)s)",
}

COMPRESSION_SAMPLES: dict[str, str] = {
    "message_add": "select * from memori.message_add(p_session_id => 'cmp-' || %(u)s, p_role => 'assistant', "
                   "p_content => 'Answer. [DECISION] Keep PostgreSQL - LOCKED', p_user_id => %(u)s, "
                   "p_context_size => 4000)",
    "goal_create": "select * from memori.goal_create(p_session_id => 'cmp-' || %(u)s, p_description => 'Ship it', "
                   "p_priority => 'high', p_user_id => %(u)s)",
    "goal_markers_apply": "select * from memori.goal_markers_apply(p_session_id => 'cmp-' || %(u)s, p_text => "
                          "E'[CHECKPOINT] keys - IN PROGRESS\\n[DECISION] Keep PostgreSQL - LOCKED\\n"
                          "[ARTIFACT] Created keys.py\\n[NEXT] rotate keys', p_user_id => %(u)s)",
}

# the saver's calls on a thread 'chat' (a checkpoint of run r1 with a blob and a pending write),
# copied to 'chat2', which is pruned and deleted (lg_threads_prune acts for one user: no all-users mode)
_LG_ID = "00000000-0000-0000-0000-000000000001"
LANGGRAPH_SAMPLES: dict[str, str] = {
    "lg_checkpoint_put": "select memori.lg_checkpoint_put(p_user_id => %(u)s, p_thread_id => 'chat', "
                         f"p_checkpoint_ns => '', p_checkpoint_id => '{_LG_ID}', p_parent_id => null, "
                         "p_checkpoint => '{\"channel_versions\": {\"messages\": \"1\"}}', "
                         "p_metadata => '{\"run_id\": \"r1\"}', p_blob_channels => array['messages'], "
                         "p_blob_versions => array['1'], p_blob_types => array['msgpack'], "
                         "p_blob_values => array['\\x91a161'::bytea])",
    "lg_writes_put": "select * from memori.lg_writes_put(p_user_id => %(u)s, p_thread_id => 'chat', "
                     f"p_checkpoint_ns => '', p_checkpoint_id => '{_LG_ID}', p_task_id => 't1', p_task_path => '', "
                     "p_idx => array[0], p_channels => array['messages'], p_types => array['msgpack'], "
                     "p_values => array['\\x91a162'::bytea])",
    "lg_checkpoint_get": "select * from memori.lg_checkpoint_get(p_user_id => %(u)s, p_thread_id => 'chat')",
    "lg_checkpoint_stamp": "select * from memori.lg_checkpoint_stamp(p_user_id => %(u)s, p_thread_id => 'chat')",
    "lg_blob_value": "select memori.lg_blob_value(p_user_id => %(u)s, p_thread_id => 'chat', "
                     "p_channel => 'messages', p_version => '1')",
    "lg_checkpoint_list": "select * from memori.lg_checkpoint_list(p_user_id => %(u)s, p_thread_id => 'chat')",
    "lg_delta_history": "select * from memori.lg_delta_history(p_user_id => %(u)s, p_thread_id => 'chat', "
                        "p_channels => array['messages'])",
    "lg_thread_copy": "select memori.lg_thread_copy(p_user_id => %(u)s, p_source_thread_id => 'chat', "
                      "p_target_thread_id => 'chat2')",
    "lg_threads_prune": "select * from memori.lg_threads_prune(p_user_id => %(u)s, p_thread_ids => array['chat2'])",
    "lg_runs_delete": "select memori.lg_runs_delete(p_user_id => %(u)s, p_run_ids => array['r1'])",
    "lg_thread_delete": "select memori.lg_thread_delete(p_user_id => %(u)s, p_thread_id => 'chat2')",
}

VM_SAMPLES: dict[str, str] = {
    "vm_session_configure": "select * from memori.vm_session_configure('s1', '{\"max_l0_tokens\": 4000}', "
                            "p_user_id => %(u)s)",
    "page_create": "select * from memori.page_create('s1', 'msg_1', 'the shards keep each user together', "
                   "p_role => 'user', p_user_id => %(u)s)",
    "turn_begin": "select * from memori.turn_begin('s1', p_user_id => %(u)s)",
    "claim_create": "select * from memori.claim_create('s1', 'each user lives on one shard', array['msg_1'], "
                    "p_topic => 'shards', p_user_id => %(u)s)",
    # the pre-pass (paging mode hybrid, the default) searches the session: one shard since the fork
    # readers name the user (vm_visible_pages)
    "vm_turn_start": "select * from memori.vm_turn_start('s1', 'what keeps each user together?', "
                     "p_user_id => %(u)s)",
    "search_pages": "select * from memori.search_pages('s1', 'shards', p_scope => 'user', p_user_id => %(u)s)",
    # regions: vm_regions and vm_region_members are reference tables (a write there is one
    # shard, on every node); a region's entries live with their owner's pages
    "region_create": "select * from memori.region_create('r-' || %(u)s, p_user_id => %(u)s)",
    "region_grant": "select * from memori.region_grant('r-' || %(u)s, 'zed', p_user_id => %(u)s)",
    "region_page_put": "select * from memori.region_page_put('r-' || %(u)s, 's1', 'msg_1', p_user_id => %(u)s)",
    "region_page_remove": "select * from memori.region_page_remove('r-' || %(u)s, 's1', 'msg_1', "
                          "p_user_id => %(u)s)",
    "region_revoke": "select * from memori.region_revoke('r-' || %(u)s, 'zed', p_user_id => %(u)s)",
    "region_drop": "select * from memori.region_drop('r-' || %(u)s, p_user_id => %(u)s)",
}

SAMPLES: dict[str, str] = {**STORE_SAMPLES, **CHECKPOINTS_SAMPLES, **CONTEXT_SAMPLES, **COMPRESSION_SAMPLES,
                           **LANGGRAPH_SAMPLES, **VM_SAMPLES}

# Per-user functions that read other users' rows on purpose (docs/scale-out.md, "Multi-shard by
# design"); memori.distribute_functions() keeps them on the coordinator for the same reasons.
MULTI_SHARD_BY_DESIGN: dict[str, str] = {
    "context_get": "resolves project and global entries written by other users",
    "context_resolve": "resolves project and global entries written by other users",
    "context_search": "searches project and global entries written by other users",
    "context_stats": "counts the project and global entries the user reads, written by other users",
    "context_expiring_soon": "lists the project and global entries the user reads, written by other users",
    "project_member_add": "rewrites the readers of the project's entries, which live with the members who wrote them",
    "project_member_remove": "rewrites the readers of the project's entries, which live with the members who "
                             "wrote them, and hands the leaver's entries to the owner",
    "region_pages": "reads the pages of a shared region, which live with their owners",
    "region_list": "counts the entries of regions other users shared, which live with their owners",
}

# Per-user functions that touch reference tables only: run on the coordinator, its own copies answer
# their reads and a write goes to every copy (no user's shard is reached, so no hash range to check);
# delegated, they are one command on the user's node like the others.
REFERENCE_TABLES_ONLY: frozenset[str] = frozenset({"project_member_list", "project_create"})

SHARD_NAME = re.compile(r"\bmemori\.[a-z_]+?_(\d{6,})\b")
# Citus serialises a write (or FOR UPDATE) of a reference table with a lock on its first placement
SHARD_LOCK = re.compile(r"\block_shard_resources\(\d+, ARRAY\[([\d, ]+)\]\)")
CONTROL = re.compile(r"^(BEGIN|COMMIT|ROLLBACK|PREPARE TRANSACTION|COMMIT PREPARED|ROLLBACK PREPARED|SAVEPOINT|"
                     r"RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT|SELECT assign_distributed_transaction_id)", re.I)


@dataclass
class Trace:
    """What the coordinator sent to the workers for one call."""

    commands: list[tuple[str, str]] = field(default_factory=list)  # (node, command)

    def work(self) -> list[tuple[str, str]]:
        """The commands that are not transaction control (the propagated SET LOCAL aside)."""
        out = []
        for node, command in self.commands:
            parts = [p.strip() for p in command.split(";") if p.strip()]
            parts = [p for p in parts if not CONTROL.match(p) and not p.lower().startswith("set local ")]
            out += [(node, p) for p in parts]
        return out


@pytest.fixture
def login(distributed_dsn: str) -> Iterator[Callable[[str], str]]:
    """A login role in a memori group role (row-level security applies): its DSN."""
    roles: list[str] = []

    def make(group: str) -> str:
        role = f"kss_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(distributed_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("create role {} login in role {}").format(sql.Identifier(role), sql.Identifier(group)))
        roles.append(role)
        return psycopg.conninfo.make_conninfo(distributed_dsn, user=role)

    yield make
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        for role in roles:
            conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def _shard_ranges(dsn: str) -> dict[int, str | None]:
    """Shard id -> hash range start of every memori shard (None: a reference table's, on every node)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select s.shardid, case when p.partmethod = 'h' then s.shardminvalue end from pg_dist_shard s"
            " join pg_dist_partition p on p.logicalrelid = s.logicalrelid").fetchall()
    return dict(rows)


def _traced(conn: psycopg.Connection, user: str, call: str) -> Trace:
    """Run ``call`` for ``user`` in the client's way (a transaction with SET LOCAL) and trace it."""
    trace = Trace()

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if message.startswith("issuing "):
            node = (diag.message_detail or "").removeprefix("on server ").split(" ")[0]
            trace.commands.append((node, message.removeprefix("issuing ")))

    conn.add_notice_handler(notice)
    try:
        with conn.transaction():
            conn.execute(sql.SQL("set local memori.user_id = {}").format(sql.Literal(user)))
            conn.execute("set local citus.log_remote_commands = on")
            conn.execute("set local client_min_messages = log")
            conn.execute(call, {"u": user}).fetchall()
    finally:
        conn.remove_notice_handler(notice)
    return trace


def _per_user_functions(dsn: str) -> dict[str, tuple[str, str | None]]:
    """Every public per-user function: name -> (kind, reason) from memori.distribute_functions()."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select function_name, kind, reason from memori.distribute_functions(p_dry_run => true)")
        return {name.split("(")[0]: (kind, reason) for name, kind, reason in rows.fetchall()}


def _shard_ids(command: str) -> list[int]:
    """The shards a command names: in a table name, or in the lock Citus takes for a reference write."""
    locked = [s for ids in SHARD_LOCK.findall(command) for s in ids.split(",")]
    return [int(s) for s in SHARD_NAME.findall(command) + locked]


def _assert_single_shard(name: str, trace: Trace, shards: dict[int, str | None], *, delegated: bool) -> None:
    # a read of a reference table goes to any node's copy, and a write goes to every copy under
    # a lock on the first one: it is one shard wherever it runs
    work = [(node, command) for node, command in trace.work()
            if not (ids := _shard_ids(command)) or any(shards.get(i) for i in ids)]
    if not work and name in REFERENCE_TABLES_ONLY and not delegated:
        return
    assert work, f"{name}: the sample call sent nothing to a worker (it does not reach a table)"
    nodes = {node for node, _ in work}
    assert len(nodes) == 1, f"{name}: commands on {len(nodes)} nodes: {work}"
    if delegated:
        assert len(work) == 1 and f"memori.{name}(" in work[0][1], f"{name} was not delegated: {work}"
        return
    ranges = {shards[i] for _, command in work for i in _shard_ids(command) if shards.get(i)}
    # none: a write of reference tables only (its shard lock on the first node, its copies on every node)
    assert len(ranges) <= 1, f"{name}: shards of {len(ranges)} hash ranges: {work}"


def test_every_per_user_function_is_single_shard(distributed_dsn: str, login: Callable[[str], str]) -> None:
    # memori_admin: in memori_app (row-level security applies), and it may issue MCP tokens
    app_dsn = login("memori_admin")
    functions = _per_user_functions(distributed_dsn)
    assert set(MULTI_SHARD_BY_DESIGN) <= set(functions), set(MULTI_SHARD_BY_DESIGN) - set(functions)
    assert set(SAMPLES) <= set(functions), f"samples of functions that are gone: {set(SAMPLES) - set(functions)}"
    checked = [name for name, (kind, _) in functions.items()
               if kind != "waiting" and name not in MULTI_SHARD_BY_DESIGN]
    missing = sorted(set(checked) - set(SAMPLES))
    assert not missing, f"per-user functions without a sample call in SAMPLES: {missing}"
    # the classifier keeps every multi-shard-by-design function off the workers
    assert all(functions[name][0] != "delegate" for name in MULTI_SHARD_BY_DESIGN)
    order = [name for name in SAMPLES if name in checked]
    shards = _shard_ranges(distributed_dsn)

    # 1. registered nowhere: the coordinator runs each function, each statement goes to one shard
    with psycopg.connect(app_dsn) as conn:
        for user in USERS:
            for name in order:
                _assert_single_shard(name, _traced(conn, user, SAMPLES[name]), shards, delegated=False)

    # 2. delegated: the whole call is one command on the node of the user's shards
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        rows = conn.execute("select function_name, kind, status from memori.distribute_functions(p_delegate => true)")
        registered = {name.split("(")[0]: status for name, kind, status in rows.fetchall() if kind == "delegate"}
    assert registered and set(registered.values()) <= {"registered", "already"}, registered
    with psycopg.connect(app_dsn) as conn:
        for user in ("dave", "erin"):
            for name in order:
                _assert_single_shard(name, _traced(conn, user, SAMPLES[name]), shards,
                                     delegated=functions[name][0] == "delegate")


def test_functions_waiting_for_their_tables(distributed_dsn: str) -> None:
    waiting = {name: reason for name, (kind, reason) in _per_user_functions(distributed_dsn).items()
               if kind == "waiting"}
    if waiting:
        pytest.skip(f"{len(waiting)} per-user functions not checked, their tables are not distributed: "
                    + "; ".join(f"{name} ({reason})" for name, reason in sorted(waiting.items())))


def test_delegated_calls_keep_the_acting_user(distributed_dsn: str, login: Callable[[str], str]) -> None:
    """Registration is opt-in and idempotent; on the worker the propagated SET LOCAL is the acting user."""
    app_dsn, admin_dsn = login("memori_app"), login("memori_admin")
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        before = conn.execute("select count(*) from memori.distribute_functions() where status = 'not registered'"
                              " and kind = 'delegate'").fetchone()
        assert before is not None and before[0] > 0  # nothing is registered without p_delegate
        first = conn.execute("select status from memori.distribute_functions(p_delegate => true)"
                             " where kind = 'delegate'").fetchall()
        again = conn.execute("select status from memori.distribute_functions(p_delegate => true)"
                             " where kind = 'delegate'").fetchall()
        assert {s for (s,) in first} == {"registered"} and {s for (s,) in again} == {"already"}
        # a delegated function's helpers are on every worker
        on_workers = conn.execute("select result from run_command_on_workers("
                                  "$$select to_regprocedure('memori._acting_user(text)') is not null$$)").fetchall()
        assert on_workers == [("t",), ("t",)]
    assert placements(distributed_dsn)["store_items"] == "distributed"

    # three users through the Python client as an app role: each call delegated, each sees its own
    for user in USERS:
        with pymemdb.connect(app_dsn, user_id=user) as db:
            db.store.put(["notes"], "k", {"owner": user})
            assert db.store.get(["notes"], "k").value == {"owner": user}  # type: ignore[union-attr]
            assert [r.key for r in db.store.search(["notes"], query=None)] == ["k"]
        with pymemdb.connect(admin_dsn, user_id=user) as admin:
            admin.mcp_tokens.create(user, "cli")
            assert [t.name for t in admin.mcp_tokens.list(user)] == ["cli"]
    with psycopg.connect(app_dsn) as conn:
        # the worker's privileges are the coordinator's: MCP tokens are memori_admin's (PUBLIC's
        # default execute privilege, which Citus leaves on the workers, is taken back)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for function"), \
                conn.transaction():
            conn.execute("set local memori.user_id = 'alice'")
            conn.execute(SAMPLES["mcp_token_create"], {"u": "alice"}).fetchall()
        # another user's call inside bob's transaction: refused on the worker (PM040)
        with pytest.raises(psycopg.Error, match="acts for user 'bob', not 'alice'"), conn.transaction():
            conn.execute("set local memori.user_id = 'bob'")
            conn.execute(SAMPLES["store_get"], {"u": "alice"}).fetchall()
        # the row-level-security matrix: 0 rows of another user visible or changed
        for me in USERS:
            for other in USERS:
                if other == me:
                    continue
                with conn.transaction():
                    conn.execute(sql.SQL("set local memori.user_id = {}").format(sql.Literal(me)))
                    for table in ("store_items", "store_namespaces", "mcp_tokens"):
                        seen = conn.execute(sql.SQL("select count(*) from memori.{} where user_id = %s")
                                            .format(sql.Identifier(table)), (other,)).fetchone()
                        assert seen == (0,), (me, other, table)
                    changed = conn.execute("update memori.store_items set value = '{}' where user_id = %s",
                                           (other,)).rowcount
                    assert changed == 0
                    deleted = conn.execute("delete from memori.store_namespaces where user_id = %s", (other,)).rowcount
                    assert deleted == 0
    for user in USERS:
        with pymemdb.connect(app_dsn, user_id=user) as db:
            assert db.store.get(["notes"], "k").value == {"owner": user}  # type: ignore[union-attr]


def test_nothing_is_delegated_before_distribute(citus_dsn: str) -> None:
    """Before distribute() no table is placed: every per-user function waits, even with p_delegate."""
    with pymemdb.connect(citus_dsn) as db:
        rows = db.cluster.distribute_functions(delegate=True)
    assert rows and {r.kind for r in rows} == {"waiting"} and {r.status for r in rows} == {"not registered"}


# Client calls that leave the user out (the connection's user acts): the client passes it, so each
# is delegated with that user, and a registered function never sees a NULL user (issue 20).
CLIENT_CALLS: dict[str, Callable[[pymemdb.Database], object]] = {
    "memory_save": lambda db: db.memories.save("ns-shared", "a memory without owner"),
    "checkpoint_create": lambda db: db.checkpoints.create("s1", str(db.user_id), "manual", "t", {"k": 1}),
    "checkpoint_query": lambda db: db.checkpoints.query(session_id="s1"),
    "business_context_get": lambda db: db.business.get(),
    "context_set": lambda db: db.context.set("theme", {"v": 1}, type="user_preferences", scope="user"),
    "store_put": lambda db: db.store.put(["docs"], "k", {"text": "one"}),
    "store_get": lambda db: db.store.get(["docs"], "k"),
    "store_search": lambda db: db.store.search(["docs"], query=None),
}


def test_client_calls_are_delegated_with_their_user(distributed_dsn: str, login: Callable[[str], str]) -> None:
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        rows = conn.execute("select function_name, kind from memori.distribute_functions(p_delegate => true)")
        kinds = {name.split("(")[0]: kind for name, kind in rows.fetchall()}
        started = conn.execute("select pg_postmaster_start_time()").fetchone()
    assert {kinds[name] for name in CLIENT_CALLS} == {"delegate"}, kinds
    issued: list[str] = []

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith("issuing "):
            issued.append(diag.message_primary or "")

    def traced(dsn: str, user: str | None) -> pymemdb.Database:
        db = pymemdb.connect(psycopg.conninfo.make_conninfo(
            dsn, options="-c citus.log_remote_commands=on -c client_min_messages=log"),
            min_size=1, max_size=1, user_id=user)
        with db.pool.connection() as conn:  # the pool's one connection: trace it
            conn.add_notice_handler(notice)
        return db

    app_dsn = login("memori_app")
    for user in USERS:
        with traced(app_dsn, user) as db:
            for name, call in CLIENT_CALLS.items():
                issued.clear()
                call(db)
                delegated = [m for m in issued if f"memori.{name}(" in m]
                assert len(delegated) == 1 and f"'{user}'::text" in delegated[0], (name, user, issued)
    # no acting user at all (an owner's call): what NULL means, not delegated, run on the coordinator
    with traced(distributed_dsn, None) as db:
        issued.clear()
        assert db.memories.save("ns-owner", "nobody's").owner_id == "ns-owner"
        assert issued and not [m for m in issued if "memori.memory_save(" in m], issued
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:  # the coordinator never restarted
        assert conn.execute("select pg_postmaster_start_time()").fetchone() == started


def test_registration_right_after_distribute(citus_dsn: str) -> None:
    """distribute(), then registration without re-applying sql/: helpers reach the workers callees first
    (a worker checks a SQL function's body on creation: _age_ms before _epoch_us failed and aborted it)."""
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        conn.execute("select * from memori.distribute()").fetchall()
        rows = conn.execute("select kind, status from memori.distribute_functions(p_delegate => true)").fetchall()
        on_workers = conn.execute("select result from run_command_on_workers("
                                  "$$select to_regprocedure('memori._age_ms(timestamptz, timestamptz)') is not null$$)")
        assert on_workers.fetchall() == [("t",), ("t",)]
    statuses = {status for kind, status in rows if kind == "delegate"}
    assert statuses == {"registered"}, [r for r in rows if r[1] != "registered"]
