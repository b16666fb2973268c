"""db.vm_fork through the client: forks, GC and shared regions (issue 7)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pymemdb
from pymemdb.errors import ForkTooDeep, RegionAccessDenied, RegionExists, RegionScopeMismatch, SessionExists
from pymemdb.types import SessionForkResult, VmGcResult
from tests.helpers import T0


def test_fork_chain_storage_and_copy_on_write(db: pymemdb.Database) -> None:
    for i in range(3):
        db.pages.create("src", f"m{i}", f"message {i}", user_id="alice", add_to_working_set=i == 0, now=T0)
    forked = db.vm_fork.fork("src", "f1", now=T0)
    assert isinstance(forked, SessionForkResult)
    assert (forked.depth, forked.shared_pages, forked.working_set_pages) == (1, 2, 1)
    assert [(c.ancestor_session_id, c.depth) for c in db.vm_fork.fork_chain("f1")] == [("src", 1)]
    assert db.vm_fork.fork_chain("src") == []
    db.pages.update("f1", "m1", content="fork's own", now=T0)
    assert db.pages.fault("f1", "m1", 0, "user_requested_recall", now=T0)["page"]["content"]["text"] == "fork's own"
    assert db.pages.fault("src", "m1", 0, "user_requested_recall", now=T0)["page"]["content"]["text"] == "message 1"
    sizes = {s.table_name: s.bytes for s in db.vm_fork.storage()}
    assert {"pages", "vm_forks", "working_set", "page_representations"} <= set(sizes)
    with pytest.raises(SessionExists):
        db.vm_fork.fork("src", "f1", now=T0)


def test_fork_depth_error(db: pymemdb.Database) -> None:
    db.pages.create("a", "m", "x", user_id="alice", now=T0)
    with db.transaction() as cur:
        cur.execute("update memori.settings set value = '1' where key = 'vm.max_fork_depth'")
    db.vm_fork.fork("a", "b", now=T0)
    with pytest.raises(ForkTooDeep):
        db.vm_fork.fork("b", "c", now=T0)


def test_gc(db: pymemdb.Database) -> None:
    db.pages.create("live", "a", "kept", user_id="alice", now=T0)
    db.pages.create("gone", "b", "collected", user_id="alice", now=T0)
    with db.transaction() as cur:
        cur.execute("update memori.vm_sessions set expires_at = %s where session_id = 'gone'", (T0,))
    result = db.vm_fork.gc(now=T0 + timedelta(seconds=1))
    assert isinstance(result, VmGcResult)
    assert (result.live_sessions, result.reachable, result.marked) == (1, 1, 1)
    reachable = db.vm_fork.gc_reachable(now=T0)
    assert [(r.session_id, r.page_id, r.via) for r in reachable] == [("live", "a", "live_session")]


def test_regions(db: pymemdb.Database) -> None:
    alice, bob = db.as_user("alice"), db.as_user("bob")
    alice.pages.create("a1", "p1", "shared decision", now=T0)
    region = alice.vm_fork.region_create("r1", "pages", "decisions", now=T0)
    assert (region.user_id, region.scope) == ("alice", "pages")
    assert alice.vm_fork.region_page_put("r1", "a1", "p1", now=T0)
    assert alice.vm_fork.region_grant("r1", "bob", now=T0)
    assert [p.content for p in bob.vm_fork.region_pages("r1")] == ["shared decision"]
    assert [(r.region_id, r.members) for r in bob.vm_fork.region_list()] == [("r1", None)]
    assert [(r.region_id, r.members, r.entries) for r in alice.vm_fork.region_list()] == [("r1", ["bob"], 1)]
    with pytest.raises(RegionAccessDenied):
        bob.vm_fork.region_grant("r1", "mallory")
    with pytest.raises(RegionExists):
        alice.vm_fork.region_create("r1")
    with pytest.raises(RegionScopeMismatch):
        alice.vm_fork.region_page_put("r1", "a1")
    assert alice.vm_fork.region_page_remove("r1", "a1", "p1")
    assert alice.vm_fork.region_revoke("r1", "bob")
    with pytest.raises(RegionAccessDenied):
        bob.vm_fork.region_pages("r1")
    assert alice.vm_fork.region_drop("r1")
