"""Core rooms: named result types for the cleanup preview summary and the cleanup job (issue 19).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25

Run-once DDL only; the functions are sql/010-retention.sql
(cleanup_preview_summary) and sql/020-schedule.sql (cleanup_job), which
returned anonymous tables of these columns before (sql/005-retired.sql
drops those forms so the new ones can be created).
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create type memori.cleanup_group_result as (
          table_name text, owner text, category text, rows bigint,
          oldest_expiry timestamptz, newest_expiry timestamptz, min_priority integer);
        comment on type memori.cleanup_group_result is
          'A line of memori.cleanup_preview_summary: rows a cleanup would delete per table, owner and category.';
        create type memori.cleanup_job_result as (
          job_id bigint, job_name text, schedule text, command text, active boolean,
          last_status text, last_start timestamptz, last_message text, next_run timestamptz);
        comment on type memori.cleanup_job_result is
          'memori.cleanup_job: the pg_cron cleanup job, its last run and its next run.';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        drop function if exists memori.cleanup_preview_summary(timestamptz, integer);
        drop function if exists memori.cleanup_job(text, timestamptz);
        drop type if exists memori.cleanup_group_result;
        drop type if exists memori.cleanup_job_result;
        """
    )
