"""AI virtual memory lifecycle (issue 7, seed 03 phases 7, 10, 11): segments, claims, demand paging, prefetch.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22

Run-once DDL only; the API is sql/150-vm-lifecycle.sql and sql/155-vm-metrics.sql.
A session gets a paging mode (who initiates faults: the model, a runtime
pre-pass, or both) and an open segment (its number and first turn): closing a
segment summarizes its transcript and starts the next one. Closed segments are
kept in memori.vm_segments (they go with their session). Recall signals are
configuration (no user): DBAs add patterns with an INSERT. Pages brought in by
the pre-pass or the prefetcher are recorded in memori.vm_prefetches so the
prefetch hit rate (prefetched pages the model then cited) can be measured.
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- who initiates paging (seed 11.1), and the open segment (seed "infinite conversation")
        alter table memori.vm_sessions
          add column paging_mode text not null default 'hybrid',
          add column segment_seq integer not null default 1,
          add column segment_first_turn integer not null default 0,
          add constraint vm_sessions_paging_mode_check check (paging_mode in ('model', 'runtime', 'hybrid')),
          add constraint vm_sessions_segment_check check (segment_seq >= 1 and segment_first_turn >= 0);

        -- one row per closed segment: its transcript, its summary page, the compression achieved
        create table memori.vm_segments (
          session_id      text not null references memori.vm_sessions on delete cascade,
          seq             integer not null,
          user_id         text not null,
          segment         text not null,
          first_turn      integer not null,
          last_turn       integer not null,
          summary_page_id text not null,
          pages           integer not null,
          evicted         integer not null,
          source_tokens   integer not null,
          summary_tokens  integer not null,
          closed_at       timestamptz not null,
          primary key (session_id, seq),
          unique (session_id, segment),
          check (seq >= 1 and pages >= 0 and evicted >= 0 and source_tokens >= 0 and summary_tokens >= 0)
        );
        create index idx_vm_segments_user on memori.vm_segments (user_id);

        -- the runtime pre-pass's recall signals (seed 11.2): case-insensitive regular expressions
        create table memori.vm_recall_signals (
          pattern     text primary key,
          description text,
          enabled     boolean not null default true,
          created_at  timestamptz not null default now()
        );

        -- pages the pre-pass or the prefetcher faulted in, and whether the model used them
        create table memori.vm_prefetches (
          id         bigint generated always as identity primary key,
          session_id text not null references memori.vm_sessions on delete cascade,
          user_id    text not null,
          page_id    text not null,
          turn       integer not null,
          source     text not null,
          reason     text not null,
          why        text not null,
          tokens     integer not null default 0,
          used_turn  integer,
          at         timestamptz not null,
          expires_at timestamptz,
          check (source in ('prepass', 'prefetch')),
          check (used_turn is null or used_turn >= turn)
        );
        create index idx_vm_prefetches_session_page on memori.vm_prefetches (session_id, page_id, turn);
        create index idx_vm_prefetches_user on memori.vm_prefetches (user_id);
        create index idx_vm_prefetches_expires_at on memori.vm_prefetches (expires_at) where expires_at is not null;

        -- a page vm_prepass / vm_prefetch proposes, why, and what applying it did
        create type memori.vm_prefetch_item as (
          page_id   text,
          page_type text,
          tier      text,
          reason    text,     -- the fault reason: user_requested_recall, speculative, tool_prereq
          why       text,     -- recall_signal, topic:<word>, last_segment_summary, top_claim, procedure:<tool>
          applied   boolean,  -- page_fault was called for it
          outcome   text,     -- served, already_mapped, refused:<reason>, skipped:<why>; NULL when not applied
          tokens    integer
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
