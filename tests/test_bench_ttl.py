"""bench ttl: the planning breakdown against the installed cleanup plan; the interleaved reader windows.

The breakdown times and explains the function cleanup_begin plans with; when
that function's shape changed (one statement per table) the benchmark failed at
its last step, after minutes of work, with nothing to show for it.
"""

from __future__ import annotations

from array import array
from datetime import timedelta

from pymemdb.bench import connect, ttl


def test_plan_breakdown_times_and_explains_the_installed_plan(dsn: str) -> None:
    with connect(dsn) as conn:
        # two events due at the bench's clock, one not
        conn.execute("insert into memori.events (event_type, expires_at) values ('a', %s), ('b', %s), ('c', %s)",
                     (ttl.NOW, ttl.NOW - timedelta(days=1), ttl.NOW + timedelta(seconds=1)))
        out = ttl._plan_breakdown(conn)
    assert out["plan_rows"] == 2 and out["chunks"] == 1
    assert out["chunk_rows"] > 0 and out["chunk_query_ms"] >= 0
    # the statements _cleanup_plan runs, as auto_explain saw them
    assert "Query Text" in out["explain_plan_query"] or "->" in out["explain_plan_query"]


def test_reader_windows_pool_each_kind_and_give_the_noise_floor() -> None:
    """Idle and cleanup windows alternate; each kind is pooled, the A/A is even idle windows against odd."""
    readers = ttl.ReaderProcesses("", [])
    starts, latencies = array("q"), array("q")
    spans = []
    for w in range(8):  # during, idle, during, idle, ...: 600 reads each, 1 ns apart
        kind = "during" if w % 2 == 0 else "idle"
        spans.append(ttl.Span(kind, w * 600, (w + 1) * 600))
        # the cleanup's reads 3 µs; the idle windows' 1 µs (1st, 3rd) and 2 µs (2nd, 4th)
        lat = 3000 if kind == "during" else 1000 if w % 4 == 1 else 2000
        starts.extend(range(w * 600, (w + 1) * 600))
        latencies.extend([lat] * 600)
    readers._samples["r"] = (starts, latencies)
    spec = ttl.ReaderSpec("r", "select 1", [()], 100.0)

    out = ttl._reader_windows(readers, spec, spans)

    assert out["idle"]["n"] == out["during"]["n"] == 2400  # a read on a bound counts in one window
    assert out["windows"] == 4
    assert out["p99_ratio"] == 1.5  # 3 µs against the pooled idle p99 of 2 µs
    assert out["aa_p99_ratio"] == 2.0 and out["aa_method"] == "even idle windows / odd"
    assert out["idle_tail_vs_head_p99_ratio"] == 1.0
    # the pairs resampled: 1.5x unless every draw is a 1 µs idle window (3x, 1 in 16)
    assert out["p99_ratio_ci95"] == [1.5, 3.0]

    # one idle window: the A/A is its second half against its first; below 1,000 reads no p99
    short = ttl._reader_windows(readers, spec, spans[:2])
    assert short["aa_method"] == "idle 2nd half / 1st" and short["aa_p99_ratio"] is None
    assert short["idle"]["p99_us"] is None and short["p99_ratio"] is None


def test_run_interleaves_the_cleanup_with_idle_windows(dsn: str) -> None:
    """The whole benchmark on a tiny dataset: pymemdb's one run paused into windows, both cleanups checked."""
    result = ttl.run(dsn, 2000, iterations=20, batch_size=50, idle_seconds=0.3, windows=3)

    assert result["ok"] and result["windows"] == 3
    pm, naive = result["cleanup"]["pymemdb"], result["cleanup"]["naive"]
    # 500 expired rows in batches of 50, a pause after each third: three cleanup windows, one run
    assert pm["deleted"] == 500 and pm["windows"] == 3 and pm["batches"] >= 10  # never more windows than asked
    assert pm["checks"]["ok"] and naive["checks"]["ok"]
    # each idle window lasts as long as the cleanup window before it; no pause inside a transaction
    assert pm["idle_seconds"] >= pm["seconds"] - 0.02
    assert pm["longest_txn_ms"] < 1000 * pm["seconds"]
    assert pm["wal_bytes_during"] > 0
    for name in ("latest_checkpoint", "pk_lookup"):
        r = pm["reader"][name]
        assert r["idle"]["n"] > 0 and r["during"]["n"] > 0 and r["windows"] == 3
        assert r["aa_method"] == "even idle windows / odd"
        assert r["p99_ratio"] is None  # a few hundred reads: no p99
        assert naive["reader"][name]["aa_method"] == "idle 2nd half / 1st"
    assert pm["waits_idle"]["readers"] and pm["waits"]["readers"]
    # between the windows the cleaner's connection is idle (no transaction open); the bench's own is not counted
    assert pm["waits_idle"]["others"].get("idle", 0) >= 50
    assert ttl.render(result)
