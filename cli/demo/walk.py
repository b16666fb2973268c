"""`pymemdb demo`: seed 05 end to end in a scratch database, with an injected clock.

Saves session checkpoints for several skills at different times, shows TTL
status, loads the latest checkpoint, jumps the clock eight days, previews and
executes the cleanup, and shows the recorded run. Nothing waits for the
clock: every call takes ``now=`` (the cleanup's rests between its batches,
a fraction of a second here, are real).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console
from rich.table import Table

import pymemdb
from pymemdb.cli._output import rows_table
from pymemdb.cli.demo.compression import compression_chapter
from pymemdb.cli.memories import TTL_COLUMNS, ttl_cells
from pymemdb.cli.scratch import scratch_database
from pymemdb.context import Scope

DEMO_DATABASE = "pymemdb_demo"


def _ttl_table(db: pymemdb.Database, title: str) -> Table:
    table: Table = rows_table(title, TTL_COLUMNS, map(ttl_cells, db.memories.ttl_status()), right=TTL_COLUMNS[1:])
    return table


def _preview_table(db: pymemdb.Database, now: datetime, title: str) -> Table:
    table = Table(title=title)
    for column in ("#", "namespace", "priority", "expires"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason")
    for c in db.cleanup.preview(now=now):
        table.add_row(str(c.seq), c.owner or "-", str(c.priority), f"{c.expires_at:%Y-%m-%d %H:%M}", c.reason)
    return table


def run_demo(dsn: str | None, *, keep: bool = False, console: Console | None = None) -> None:
    out = console or Console()
    with scratch_database(dsn, DEMO_DATABASE, keep=keep) as target, pymemdb.connect(target) as db:
        now = datetime.now(UTC).replace(microsecond=0)
        day = timedelta(days=1)
        out.rule("1. Save session checkpoints (seed 05)")
        saves = [
            ("skill:lead-architect", "Chose PostgreSQL for agent memory", now - 10 * day),
            ("skill:lead-architect", "Reviewed the API contracts", now - 2 * day),
            ("skill:backend-service-builder", "Wired the checkpoint service", now - 6 * day),
            ("skill:api-builder", "Drafted /v1/memories endpoints", now),
            ("skill:frontend-design", "Buttons use the 8px grid", now - 30 * day),
        ]
        for skill, content, at in saves:
            row = db.memories.save_session_checkpoint(skill, "alice", content, {"task": content}, now=at)
            expiry = f"expires {row.expires_at:%Y-%m-%d}" if row.expires_at else "permanent"
            out.print(f"  {at:%Y-%m-%d}  {skill:<30} -> {row.user_id:<32} {expiry}")
        out.print(_ttl_table(db, "memori.ttl_status (now)"))

        out.rule("2. Load the latest checkpoint (expired rows are invisible)")
        for skill in ("skill:lead-architect", "skill:backend-service-builder"):
            latest = db.memories.load_latest_checkpoint(skill, "alice", now=now)
            found = f"({latest.source} namespace) {latest.content!r}" if latest else "none"
            out.print(f"  {skill}: {found}", markup=False)

        later = now + 8 * day
        out.rule(f"3. Jump the clock 8 days to {later:%Y-%m-%d}: preview")
        out.print(_preview_table(db, now, "cleanup_preview (now)"))
        out.print(_preview_table(db, later, "cleanup_preview (now + 8 days)"))
        latest = db.memories.load_latest_checkpoint("skill:lead-architect", "alice", now=later)
        out.print(f"  lead-architect checkpoint 8 days later: {latest.content if latest else 'none (all expired)'}")

        out.rule("4. Execute the cleanup as of now + 8 days")
        summary = db.cleanup.execute(now=later, batch_size=2)
        out.print(f"  run {summary.run_id}: {summary.status}, deleted {summary.deleted} of {summary.planned} "
                  f"planned in {summary.batches} batches ({summary.deleted_by_table})")
        out.print(_preview_table(db, later, "cleanup_preview after execute (now + 8 days)"))

        out.rule("5. What is left, and the recorded run")
        out.print(_ttl_table(db, "memori.ttl_status"))
        for run in db.cleanup.runs(limit=3):
            out.print(f"  cleanup_runs #{run.id}: trigger={run.trigger} status={run.status} "
                      f"planned={run.planned} deleted={run.deleted} batches={run.batches}")
        events = db.events.list(limit=3)
        out.print("  latest events: " + ", ".join(e.event_type for e in events))
        _checkpoint_chapter(db, out, now)
        _context_chapter(db, out, now)
        compression_chapter(db, out, now)
    out.print(f"Done. The demo used database {DEMO_DATABASE}" + (" (kept)." if keep else " (dropped)."))


def _checkpoint_chapter(db: pymemdb.Database, out: Console, now: datetime) -> None:
    """Seed 01: typed checkpoints, versions, a milestone, and cleanup by priority."""
    day = timedelta(days=1)
    out.rule("6. Checkpoints: types, versions, milestones (seed 01)")
    state = {"tasks": [{"name": "schema", "completed": True}, {"name": "api", "completed": False}], "skill_level": 2}
    manual = db.checkpoints.create("sess-1", "alice", "manual", "Schema designed", state, tags=["design"],
                                   now=now - 100 * day)
    auto = db.checkpoints.auto("sess-1", "alice", "task_complete", state, now=now - 40 * day)
    again = db.checkpoints.auto("sess-1", "alice", "context_change", state, now=now - 40 * day + timedelta(minutes=5))
    out.print(f"  manual checkpoint: priority {manual.priority}, expires {manual.expires_at:%Y-%m-%d}")
    out.print(f"  automatic: {auto.reason}; five minutes later: {again.reason} (next allowed "
              f"{again.next_allowed_at:%H:%M})")
    updated = db.checkpoints.update(manual.id, {**state, "skill_level": 3}, now=now - 99 * day)
    out.print(f"  updated to version {updated.version}; version 1 rebuilt from its diff: "
              f"skill_level = {db.checkpoints.at_version(manual.id, 1)['skill_level']}")
    done = {"tasks": [{"name": "schema", "completed": True}, {"name": "api", "completed": True}], "skill_level": 3}
    milestone = db.checkpoints.detect_milestone("sess-1", "alice", done, now=now - 30 * day)
    if milestone:
        out.print(f"  {milestone.title} (priority {milestone.priority}, "
                  f"triggers {milestone.metadata['triggers']})")
    table = Table(title="memori.checkpoint_stats")
    for column in ("type", "total", "active", "expired"):
        table.add_column(column)
    for stat in db.checkpoints.stats(now=now):
        table.add_row(stat.checkpoint_type, str(stat.total), str(stat.active), str(stat.expired))
    out.print(table)
    due = [c for c in db.cleanup.preview(now=now) if c.table_name == "checkpoints"]
    out.print(f"  due now: {[c.kind for c in due]} (the manual one is preserved until released)")
    db.checkpoints.preserve(manual.id, False)
    due = [c for c in db.cleanup.preview(now=now) if c.table_name == "checkpoints"]
    out.print(f"  after releasing it, in deletion order: {[f'{c.kind} (priority {c.priority})' for c in due]}")


def _context_chapter(db: pymemdb.Database, out: Console, now: datetime) -> None:
    """Seed 01, part 2: scoped context resolved most specific first, who sees what, session windows."""
    out.rule("7. Context: four scopes, resolution, membership, windows (seed 01, part 2)")
    alice, bob, carol = db.as_user("alice"), db.as_user("bob"), db.as_user("carol")
    alice.projects.create("launch", "Product launch", now=now)
    alice.projects.member_add("launch", "bob", now=now)
    alice.sessions.set("sess-ctx", project_id="launch", now=now)
    db.context.set("tone", "neutral", type="business_context", scope="global", who=Scope("admin"), now=now)
    alice.context.set("tone", "friendly", type="user_preferences", scope="user", now=now)
    alice.context.set("tone", "formal", type="business_context", scope="project", who=Scope(project_id="launch"),
                      now=now)
    alice.context.set("tone", "terse", type="temporary_state", scope="session", who=Scope(session_id="sess-ctx"),
                      ttl_ms=15 * 60_000, now=now)
    table = Table(title="context_get('tone') by requester")
    for column in ("requester", "value", "from scope"):
        table.add_column(column)
    asks = [("alice in sess-ctx", alice, Scope(session_id="sess-ctx"), now),
            ("alice in sess-ctx, 20 min later", alice, Scope(session_id="sess-ctx"), now + timedelta(minutes=20)),
            ("alice, no session", alice, Scope(), now),
            ("bob in project launch", bob, Scope(project_id="launch"), now),
            ("carol (not a member) asking for launch", carol, Scope(project_id="launch"), now)]
    for label, who, scope, at in asks:
        got = who.context.get("tone", scope, now=at)
        table.add_row(label, repr(got.value) if got else "-", got.scope if got else "-")
    out.print(table)
    for i, priority in enumerate((5, 2, 8, 2, 9, 1, 7, 3, 6, 4, 10)):
        alice.sessions.add_window("sess-ctx", "conversation", {"turn": i}, priority=priority,
                                  now=now + timedelta(seconds=i))
    session = alice.sessions.get("sess-ctx", now=now + timedelta(minutes=1))
    if session:
        kept = sorted(w["content"]["turn"] for w in session.context_windows)
        out.print(f"  11 windows added with priorities 5,2,8,2,9,1,7,3,6,4,10 into a session limited to 10: "
                  f"turns kept {kept} (turn 5, priority 1, was removed)")
