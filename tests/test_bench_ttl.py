"""bench ttl's planning breakdown against the installed cleanup plan.

The breakdown times and explains the function cleanup_begin plans with; when
that function's shape changed (one statement per table) the benchmark failed at
its last step, after minutes of work, with nothing to show for it.
"""

from __future__ import annotations

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
