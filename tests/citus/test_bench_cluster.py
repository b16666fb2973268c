"""``pymemdb bench cluster`` runs end to end on the session's test cluster (a few calls; never timed here)."""

from __future__ import annotations

import pytest

from pymemdb.bench import cluster as bench_cluster
from tests.citus.conftest import CitusCluster

pytestmark = pytest.mark.citus


def test_bench_cluster_runs_on_the_three_targets(dsn: str, citus_cluster: CitusCluster,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYMEMDB_CITUS_DIR", str(citus_cluster.directory))
    for name, value in (("USERS", 3), ("ROUNDS", 4), ("WARMUP", 1), ("COUNTED", 2)):
        monkeypatch.setattr(bench_cluster, name, value)
    result = bench_cluster.run(dsn, 1000)
    assert set(result["latency"]) == {"single", "cluster", "delegated"}
    assert all(result["latency"][t][c]["n"] == 4 for t in bench_cluster.TARGETS for c in bench_cluster.CALLS)
    assert {"store_items", "mcp_tokens"} <= set(result["placement"]["distributed"])
    # the delegated target: the per-user calls of delegate functions are one command on one worker
    assert result["placement"]["registered"] == [] and not result["delegation"]["failed"]
    delegated = [c for c, kind in result["kind"].items() if kind == "delegated"]
    expected = {"memory_save", "checkpoint_create", "store_put", "store_get", "page_search"}
    assert expected <= set(delegated), result["kind"]
    for call in delegated:
        assert result["shards"]["delegated"][call]["remote_commands"] == 1, (call, result["shards"]["delegated"][call])
        assert result["shards"]["cluster"][call]["remote_commands"] >= 1
    assert result["kind"]["context_resolve"] == "by design"
    assert result["kind"]["checkpoint_load"] == "coordinator"  # one statement, not delegable (docs/scale-out.md)
    for target in ("single", "cluster"):  # every expired row deleted, on one server and across shards
        assert result["cleanup"][target]["deleted"] >= 1000
        assert result["cleanup"][target]["left"] == 0
    assert bench_cluster.render(result)
