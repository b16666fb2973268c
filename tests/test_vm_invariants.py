"""The working-set budget invariants under random add/fault/evict/pin sequences (hypothesis stateful test).

Whatever the sequence: L0 never holds more than max_l0_tokens, a pinned page is
never evicted, a page faulted in during the last fault_protection_turns is never
evicted, each mapped page's tokens are those of its level, and replaying the
mutation log gives the working set as it is.
"""

from __future__ import annotations

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.helpers import T0, rows, value

S = "sess_inv"
MAX_L0 = 200
POLICIES = st.sampled_from([None, "lru", "importance_weighted_lru", "modality_aware_lru"])


def test_budget_invariants_hold(conn: psycopg.Connection) -> None:
    class WorkingSetMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.pages: list[str] = []
            self.turn = 0
            self.faulted: dict[str, int] = {}  # page -> turn it was last faulted in (served)
            self.pinned_before: set[str] = set()

        def _call(self, query: str, params: tuple[object, ...]) -> bool:
            """Run a VM call; PM060 (budget cannot be met) is an allowed answer, nothing else is."""
            self.pinned_before = self._pinned()
            try:
                conn.execute(query, params)
                return True
            except psycopg.Error as exc:
                assert exc.sqlstate == "PM060", exc
                return False

        def _pinned(self) -> set[str]:
            return {r["page_id"] for r in rows(conn, "select page_id from memori.working_set where pinned")}

        @initialize(pinned_last_turns=st.integers(0, 2))
        def start(self, pinned_last_turns: int) -> None:
            conn.execute("delete from memori.vm_sessions")
            conn.execute("delete from memori.page_mutations")
            conn.execute("delete from memori.page_faults")
            conn.execute("select memori.vm_session_configure(%s, %s::jsonb, 'alice', %s)",
                         (S, f'{{"max_l0_tokens": {MAX_L0}, "pinned_last_turns": {pinned_last_turns}}}', T0))

        @rule()
        def next_turn(self) -> None:
            self.pinned_before = self._pinned()
            self.turn = value(conn, "select memori.turn_begin(%s, 'alice', %s)", (S, T0))

        @rule(tokens=st.integers(1, 90), kind=st.sampled_from(["transcript", "summary", "claim", "artifact"]),
              modality=st.sampled_from(["text", "image", "audio"]), pin=st.sampled_from([None, True, False]),
              mapped=st.booleans(), importance=st.floats(0, 1))
        def add(self, tokens: int, kind: str, modality: str, pin: bool | None, mapped: bool, importance: float) -> None:
            page_id = f"p{len(self.pages)}"
            if self._call("select memori.page_create(%s, %s, %s, p_page_type => %s, p_modality => %s, p_tokens => %s,"
                          " p_pin => %s, p_add_to_working_set => %s, p_importance => %s, p_role => 'user',"
                          " p_user_id => 'alice', p_now => %s)",
                          (S, page_id, "words about things " * 3, kind, modality, tokens, pin, mapped, importance, T0)):
                self.pages.append(page_id)

        @rule(data=st.data(), level=st.integers(0, 3),
              reason=st.sampled_from(["user_requested_recall", "resolve_reference", "speculative"]))
        def fault(self, data: st.DataObject, level: int, reason: str) -> None:
            if not self.pages:
                return
            page_id = data.draw(st.sampled_from(self.pages))
            self.pinned_before = self._pinned()
            env = value(conn, "select memori.page_fault(%s, %s, %s, %s, p_now => %s)", (S, page_id, level, reason, T0))
            if env["page"] is not None and env["effects"]["promoted_to_working_set"]:
                self.faulted[page_id] = self.turn

        @rule(tokens=st.integers(0, 150), policy=POLICIES)
        def evict(self, tokens: int, policy: str | None) -> None:
            self._call("select memori.vm_evict(%s, %s, %s)", (S, tokens, policy))

        @rule(data=st.data(), level=st.integers(0, 3))
        def map_page(self, data: st.DataObject, level: int) -> None:
            if self.pages:
                page_id = data.draw(st.sampled_from(self.pages))
                if level in (1, 2) and not value(conn, "select count(*) from memori.page_representations "
                                                        "where page_id = %s and level = %s", (page_id, level)):
                    level = 3
                self._call("select memori.vm_add_page(%s, %s, %s)", (S, page_id, level))

        @rule(data=st.data(), level=st.integers(1, 2), share=st.floats(0.05, 0.9))
        def compress(self, data: st.DataObject, level: int, share: float) -> None:
            if self.pages:
                page_id = data.draw(st.sampled_from(self.pages))
                tokens = value(conn, "select tokens from memori.pages where page_id = %s", (page_id,))
                self._call("select memori.page_representation_put(%s, %s, %s, 'short form', p_tokens => %s)",
                           (S, page_id, level, max(1, int(tokens * share))))

        @rule(data=st.data(), pinned=st.booleans())
        def pin(self, data: st.DataObject, pinned: bool) -> None:
            if self.pages:
                page_id = data.draw(st.sampled_from(self.pages))
                self._call("select memori.page_pin(%s, %s, %s)", (S, page_id, pinned))
                if not pinned:
                    self.pinned_before.discard(page_id)

        @rule(data=st.data(), tokens=st.integers(1, 90))
        def update(self, data: st.DataObject, tokens: int) -> None:
            if self.pages:
                page_id = data.draw(st.sampled_from(self.pages))
                self._call("select memori.page_update(%s, %s, 'new words here', p_tokens => %s)", (S, page_id, tokens))

        @invariant()
        def l0_within_budget(self) -> None:
            used = value(conn, "select coalesce(sum(tokens), 0) from memori.working_set")
            assert used <= MAX_L0

        @invariant()
        def pinned_and_protected_stay(self) -> None:
            mapped = {r["page_id"] for r in rows(conn, "select page_id from memori.working_set")}
            assert self.pinned_before <= mapped
            protected = {p for p, t in self.faulted.items() if self.turn - t < 2}
            assert protected <= mapped

        @invariant()
        def tokens_are_those_of_the_level(self) -> None:
            wrong = rows(conn, """
                select w.page_id from memori.working_set w join memori.pages p using (user_id, session_id, page_id)
                 where w.tokens is distinct from memori._vm_level_tokens(p, w.level)
                    or p.tier <> 'L0' or p.compression_level <> w.level""")
            assert wrong == []

        @invariant()
        def the_eviction_order_reads_the_pages_columns(self) -> None:
            # copied into the working-set row when mapped (migration 0031); _vm_candidates reads only them
            wrong = rows(conn, """
                select w.page_id from memori.working_set w join memori.pages p using (user_id, session_id, page_id)
                 where (w.page_type, w.modality, w.importance, w.superseded, w.last_evict_turn, w.last_fault_turn)
                       is distinct from (p.page_type, p.modality, p.importance, p.superseded_by is not null,
                                         p.last_evict_turn, p.last_fault_turn)""")
            assert wrong == []

        @invariant()
        def replay_equals_the_working_set(self) -> None:
            replayed = {(r["page_id"], r["level"], r["tokens"])
                        for r in rows(conn, "select * from memori.vm_context_at_turn(%s, %s)", (S, self.turn))}
            mapped = {(r["page_id"], r["level"], r["tokens"]) for r in rows(conn, "select * from memori.working_set")}
            assert replayed == mapped

    run_state_machine_as_test(
        WorkingSetMachine,
        settings=settings(max_examples=40, stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]),
    )


def test_concurrent_workers_keep_the_budget(conn: psycopg.Connection, dsn: str) -> None:
    """Two workers of one agent faulting at once: the session lock serialises them, the budget holds."""
    import threading

    conn.execute("select memori.vm_session_configure(%s, %s::jsonb, 'alice', %s)",
                 (S, '{"max_l0_tokens": 300, "pinned_last_turns": 0, "max_faults_per_turn": 1000}', T0))
    conn.execute("select count(memori.page_create(%s, 'p' || g, 'words about things ' || g, p_tokens => 20 + g %% 40,"
                 " p_add_to_working_set => false, p_user_id => 'alice')) from generate_series(1, 60) g", (S,))
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                for i in range(30):
                    c.execute("select memori.page_fault(%s, %s, 0, 'user_requested_recall')",
                              (S, f"p{(i * 7 + offset) % 60 + 1}"))
                    if i % 5 == 0:
                        c.execute("select memori.turn_begin(%s)", (S,))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert value(conn, "select sum(tokens) from memori.working_set") <= 300
    turn = value(conn, "select turn from memori.vm_sessions")
    replayed = {(r["page_id"], r["level"], r["tokens"])
                for r in rows(conn, "select * from memori.vm_context_at_turn(%s, %s)", (S, turn))}
    assert replayed == {(r["page_id"], r["level"], r["tokens"]) for r in rows(conn, "select * from memori.working_set")}
