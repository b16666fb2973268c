"""The virtual memory's typed results (issue 19 item 5): memori.vm_metrics_result and memori.vm_turn_result.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-25

Run-once DDL only; the API is sql/520-vm-context.sql, sql/555-vm-metrics.sql and
sql/550-vm-lifecycle.sql. vm_metrics and vm_turn_start returned jsonb; their
results have a fixed shape, so they become named composite types. Counts keyed
by a value (pages by tier, faults by reason, ...) stay jsonb maps, and the
pre-pass's items stay a jsonb list of memori.vm_prefetch_item objects. The old
jsonb functions are dropped here: a function cannot change its result type in
place, and sql/ re-creates them.
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        drop function if exists memori.vm_metrics(text, timestamptz);
        drop function if exists memori._vm_metrics_lifecycle(memori.vm_sessions, timestamptz);
        drop function if exists memori.vm_turn_start(text, text, text, text, timestamptz);

        create type memori.vm_metrics_result as (
          session_id             text,
          turn                   integer,
          paging_mode            text,
          -- L0, the working set
          l0_tokens              bigint,
          max_l0_tokens          integer,
          tokens_available       bigint,
          l0_utilization         double precision,
          l0_tokens_by_modality  jsonb,             -- {modality: tokens}
          working_set_pages      bigint,
          pinned_pages           bigint,
          pages_by_tier          jsonb,             -- {tier: pages}
          dirty_pages            bigint,
          -- faults, by outcome and reason, and per turn
          faults                 bigint,
          faults_served          bigint,
          faults_already_mapped  bigint,
          faults_refused         bigint,
          faults_errors          bigint,
          fault_tokens           bigint,
          faults_by_reason       jsonb,             -- {reason: faults}
          faults_per_turn        double precision,  -- served faults per turn
          faults_max_per_turn    bigint,
          faults_this_turn       bigint,
          mutations              jsonb,             -- {mutation_type: count}
          evictions_from_l0      bigint,
          evictions_to_l2        bigint,
          evictions_by_cause     jsonb,             -- {cause: evictions}
          -- segments and claims
          segments_closed        bigint,
          segment_open           text,
          segment_source_tokens  bigint,
          segment_summary_tokens bigint,
          compression_ratio      double precision,  -- source tokens per summary token of closed segments
          claims                 bigint,
          claims_in_l0           bigint,
          -- the seed's thrash index, now and in the worst window
          thrash_index           double precision,
          thrash_index_max       double precision,
          thrash_index_max_turn  integer,
          thrash_window_turns    integer,
          -- prefetch and the pack cache
          prefetched             bigint,
          prefetch_used          bigint,
          prefetch_by_source     jsonb,             -- {source: prefetches}
          prefetch_hit_rate      double precision,
          pack_hits              bigint,
          pack_misses            bigint,
          pack_hit_rate          double precision
        );

        create type memori.vm_turn_result as (
          turn        integer,
          page_id     text,   -- the user's message as a transcript page
          segment     text,   -- the open segment
          paging_mode text,
          prefetch    jsonb   -- [memori.vm_prefetch_item as JSON]: the pre-pass's pages (runtime, hybrid)
        );
        """
    )


def downgrade() -> None:
    op.execute(
        """
        drop function if exists memori.vm_metrics(text, timestamptz);
        drop function if exists memori._vm_metrics_lifecycle(memori.vm_sessions, timestamptz, memori.vm_metrics_result);
        drop function if exists memori.vm_turn_start(text, text, text, text, timestamptz);
        drop type if exists memori.vm_metrics_result;
        drop type if exists memori.vm_turn_result;
        """
    )
