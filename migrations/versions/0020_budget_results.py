"""The context window manager's typed result (issue 19): memori.optimization_result.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-25

Run-once DDL only; the API is sql/300-budget.sql. context_optimize and
context_optimize_stored returned jsonb; their result has a fixed shape, so it
becomes a named composite type (the lists and the metrics stay jsonb
documents). The error_* columns are set only with {"on_error": "report"}: the
failure is then recorded (context.optimization.failed) and returned instead of
raised, so the event survives.
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create type memori.optimization_result as (
          optimized_chunks       jsonb,    -- [{id, type, tokens, priority, token_span, original_index[, content]}]
          dropped_chunk_ids      jsonb,    -- ids in priority order
          total_tokens_used      integer,
          tokens_remaining       integer,
          tokens_available       integer,
          reserved_tokens        integer,
          chunks_dropped         integer,
          conflicts              jsonb,    -- the first max_conflicts [{chunk1, chunk2, conflict_type, resolution, budget}]
          conflicts_count        integer,
          requires_summarization jsonb,    -- ids of allocated chunks above budget.summary_threshold
          optimization_metrics   jsonb,    -- {prioritization_score, business_relevance_boost, recency_boost}
          optimization_id        uuid,     -- NULL unless persisted
          error_sqlstate         text,     -- the error_* columns: only with {"on_error": "report"}
          error_message          text,
          error_detail           text,
          error_hint             text
        );
        """
    )


def downgrade() -> None:
    op.execute(
        """
        drop function if exists memori.context_optimize(jsonb, integer, jsonb, timestamptz);
        drop function if exists memori.context_optimize_stored(text, integer, jsonb, timestamptz);
        drop function if exists memori._budget_failed(jsonb, jsonb, text, text, text, text, timestamptz);
        drop type if exists memori.optimization_result;
        """
    )
