"""AI virtual memory core (seed 03): pages, representations, versions, working set, faults, mutation log.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22

Run-once DDL only; the API is sql/100-pages.sql .. sql/120-vm-context.sql.
Pages are keyed by (session_id, page_id): the seed's ids (msg_042,
claim_db_choice_001) are unique within a session. Every table carries user_id
so row-level security (issue 4) can key on it. An embedding column for hybrid
search comes with issue 7's migration.
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- One row per VM session: turn counter, budget, policies (seeded from
        -- memori.settings vm.* when the session starts), counters.
        create table memori.vm_sessions (
          session_id                 text primary key,
          user_id                    text not null,
          turn                       integer not null default 0,
          max_l0_tokens              integer not null,
          max_l1_pages               integer not null,
          eviction_policy            text not null,
          eviction_threshold         numeric not null,
          pinned_last_turns          integer not null,
          fault_protection_turns     integer not null,
          eviction_cooldown_turns    integer not null,
          faults_allowed             boolean not null default true,
          max_faults_per_turn        integer not null,
          max_fault_tokens_per_turn  integer not null,
          fault_confidence_threshold text not null,
          pack_hits                  bigint not null default 0,
          pack_misses                bigint not null default 0,
          created_at                 timestamptz not null,
          updated_at                 timestamptz not null,
          expires_at                 timestamptz,
          check (turn >= 0),
          check (max_l0_tokens > 0),
          check (max_l1_pages >= 0),
          check (eviction_policy in ('lru', 'importance_weighted_lru', 'modality_aware_lru')),
          check (eviction_threshold > 0 and eviction_threshold <= 1),
          check (pinned_last_turns >= 0 and fault_protection_turns >= 0 and eviction_cooldown_turns >= 0),
          check (max_faults_per_turn >= 0 and max_fault_tokens_per_turn >= 0),
          check (fault_confidence_threshold in ('explicit', 'referenced', 'speculative'))
        );
        create index idx_vm_sessions_user on memori.vm_sessions (user_id);
        create index idx_vm_sessions_expires_at on memori.vm_sessions (expires_at) where expires_at is not null;

        -- The page table: one row per page, its current content (level 0) and place.
        create table memori.pages (
          id                bigint generated always as identity primary key,
          session_id        text not null references memori.vm_sessions on delete cascade,
          user_id           text not null,
          page_id           text not null,
          page_type         text not null default 'transcript',
          modality          text not null default 'text',
          role              text,
          tier              text not null default 'L2',
          compression_level integer not null default 0,
          content           text,
          data              jsonb,
          artifact_ref      text,
          mime_type         text,
          size_bytes        bigint not null default 0,
          tokens            integer not null default 0,
          importance        real not null default 0.5,
          provenance        text[] not null default '{}',
          represents        text,
          segment           text,
          turn              integer not null default 0,
          version           integer not null default 1,
          dirty             boolean not null default false,
          last_flushed      timestamptz,
          created_at        timestamptz not null,
          updated_at        timestamptz not null,
          last_accessed     timestamptz not null,
          access_count      bigint not null default 0,
          last_fault_turn   integer,
          last_evict_turn   integer,
          hint              text,
          dimensions        integer[],
          duration_seconds  numeric,
          expires_at        timestamptz,
          unique (session_id, page_id),
          check (page_type in ('transcript', 'summary', 'artifact', 'claim', 'procedure', 'index')),
          check (modality in ('text', 'image', 'audio', 'video', 'structured')),
          check (role is null or role in ('user', 'assistant', 'tool', 'system')),
          check (tier in ('L0', 'L1', 'L2', 'L3', 'L4')),
          check (compression_level between 0 and 3),
          check (importance >= 0 and importance <= 1),
          check (tokens >= 0 and size_bytes >= 0 and version >= 1),
          check (dimensions is null or cardinality(dimensions) = 2)
        );
        create index idx_pages_user on memori.pages (user_id);
        -- INCLUDE expires_at: the manifest counts unexpired unmapped pages from the index alone
        create index idx_pages_session_tier on memori.pages (session_id, tier) include (expires_at);
        -- the manifest's most important unmapped pages first
        create index idx_pages_session_importance
          on memori.pages (session_id, importance desc, last_accessed desc, page_id);
        -- one summary per segment (VM:CONTEXT packing)
        create index idx_pages_session_summaries on memori.pages (session_id, segment, id) where page_type = 'summary';
        create index idx_pages_expires_at on memori.pages (expires_at) where expires_at is not null;

        -- Levels 1 (reduced) and 2 (abstract) written by a Compressor; level 0 is
        -- the page itself and level 3 (reference) is derived in SQL.
        create table memori.page_representations (
          session_id text not null,
          page_id    text not null,
          user_id    text not null,
          level      integer not null,
          content    text,
          data       jsonb,
          tokens     integer not null,
          version    integer not null,
          created_at timestamptz not null,
          primary key (session_id, page_id, level),
          foreign key (session_id, page_id) references memori.pages (session_id, page_id) on delete cascade,
          check (level in (1, 2, 3)),
          check (tokens >= 0)
        );

        -- Earlier contents of a page, one row per replaced version.
        create table memori.page_versions (
          session_id text not null,
          page_id    text not null,
          user_id    text not null,
          version    integer not null,
          content    text,
          data       jsonb,
          tokens     integer not null,
          created_at timestamptz not null,
          primary key (session_id, page_id, version),
          foreign key (session_id, page_id) references memori.pages (session_id, page_id) on delete cascade
        );

        -- L0: the pages mapped into the model's context, at a level.
        create table memori.working_set (
          session_id       text not null,
          page_id          text not null,
          user_id          text not null,
          level            integer not null,
          tokens           integer not null,
          turn_added       integer not null,
          last_access_turn integer not null,
          pinned           boolean not null default false,
          pin_reason       text,
          added_at         timestamptz not null,
          primary key (session_id, page_id),
          foreign key (session_id, page_id) references memori.pages (session_id, page_id) on delete cascade,
          check (level between 0 and 3),
          check (tokens >= 0)
        );

        -- Every fault asked for, served or refused, with its reason (seed 3.3).
        create table memori.page_faults (
          id           bigint generated always as identity primary key,
          session_id   text not null,
          user_id      text not null,
          page_id      text not null,
          turn         integer not null,
          reason       text not null,
          target_level integer,
          served_level integer,
          outcome      text not null,
          tokens       integer not null default 0,
          source_tier  text,
          evictions    text[] not null default '{}',
          at           timestamptz not null,
          expires_at   timestamptz,
          check (outcome in ('served', 'already_mapped', 'refused', 'error'))
        );
        create index idx_page_faults_session_turn on memori.page_faults (session_id, turn);
        create index idx_page_faults_expires_at on memori.page_faults (expires_at) where expires_at is not null;

        -- The append-only mutation log (seed 2.7): replay what was in L0 at any turn.
        create table memori.page_mutations (
          id            bigint generated always as identity primary key,
          session_id    text not null,
          user_id       text not null,
          page_id       text not null,
          at            timestamptz not null,
          turn          integer not null,
          mutation_type text not null,
          tier_before   text,
          tier_after    text not null,
          level_before  integer,
          level_after   integer,
          tokens_after  integer,
          actor         text not null,
          cause         text,
          expires_at    timestamptz,
          check (mutation_type in ('create', 'fault_in', 'evict', 'compress', 'pin', 'unpin', 'update')),
          check (actor in ('user', 'model', 'tool', 'system'))
        );
        -- replay: the last mutation of each page up to a turn
        create index idx_page_mutations_replay on memori.page_mutations (session_id, page_id, turn, id);
        create index idx_page_mutations_session_turn on memori.page_mutations (session_id, turn);
        create index idx_page_mutations_expires_at on memori.page_mutations (expires_at) where expires_at is not null;

        -- Packed VM:CONTEXT blocks keyed by (session, model, budget, working-set hash).
        create table memori.vm_pack_cache (
          session_id  text not null references memori.vm_sessions on delete cascade,
          user_id     text not null,
          model       text not null,
          budget      integer not null,
          ws_hash     text not null,
          packed      text not null,
          tokens      integer not null,
          created_at  timestamptz not null,
          hits        bigint not null default 0,
          primary key (session_id, model, budget, ws_hash)
        );

        create type memori.vm_eviction as (
          page_id     text,
          action      text,
          level_after integer,
          tier_after  text,
          tokens_freed integer
        );
        create type memori.vm_page_state as (
          page_id text,
          level   integer,
          tokens  integer
        );
        create type memori.page_table_entry as (
          page_id           text,
          tier              text,
          compression_level integer,
          version           integer,
          dirty             boolean,
          last_flushed      timestamptz,
          last_accessed     timestamptz,
          access_count      bigint,
          in_working_set    boolean,
          level             integer,
          pinned            boolean
        );
        create type memori.page_compress_item as (
          page_id   text,
          modality  text,
          page_type text,
          level     integer,
          content   text,
          data      jsonb,
          tokens    integer,
          version   integer
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
