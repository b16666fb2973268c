"""A cleanup batch says how long to rest before the next one (issue 21): ``cleanup_batch_result.pause_ms``.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-29

Run-once DDL only; the rule is ``memori._cleanup_pause_ms`` in sql/010-retention.sql.

A cleaner that deletes batch after batch takes a core for the whole run, and
the application's reads wait for it: on 2 cores a reader's p99 went 2.9-3.9x
its idle p99 during a cleanup of 250,000 rows. ``cleanup.work_share`` bounds
the share of a run's time spent in batches: ``cleanup_batch`` measures its own
time and returns the rest that share leaves (at least
``cleanup.batch_pause_ms``; 0 for the last batch), which the client, the CLI,
``cleanup_run`` and a psql user driving a run by hand sleep between batches.
"""

from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter type memori.cleanup_batch_result add attribute pause_ms double precision;")


def downgrade() -> None:
    op.execute("alter type memori.cleanup_batch_result drop attribute pause_ms;")
