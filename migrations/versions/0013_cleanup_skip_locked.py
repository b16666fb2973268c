"""Cleanup never waits for a writer (issue 16): rows locked by a writer are skipped and retried.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24

Run-once DDL only; the API is sql/010-retention.sql.

A cleanup batch locks its rows ``FOR UPDATE SKIP LOCKED``: a row a writer
holds stays in the run's plan with ``attempts`` counted and is tried again
once the plan is done; after ``cleanup.skip_retries`` attempts it is left to
the next run (``cleanup_runs.skipped``). ``retried`` counts batches retried
after a deadlock or lock timeout.
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- how many times a planned row was skipped because another transaction held it
        alter table memori.cleanup_queue add column attempts smallint not null default 0;
        -- rows a run left to the next one (still locked after every attempt), and batches it
        -- retried after a deadlock or lock timeout
        alter table memori.cleanup_runs add column skipped integer not null default 0,
                                        add column retried integer not null default 0;
        alter type memori.cleanup_batch_result add attribute skipped integer;
        alter type memori.cleanup_summary add attribute skipped integer;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        alter type memori.cleanup_summary drop attribute skipped;
        alter type memori.cleanup_batch_result drop attribute skipped;
        alter table memori.cleanup_runs drop column retried, drop column skipped;
        alter table memori.cleanup_queue drop column attempts;
        """
    )
