"""Conversation compression (seed 04): full message history, compression checkpoints and plans, goals, snapshots.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

Run-once DDL only; the API is sql/080-compression.sql. Released: frozen by
tests/frozen_revisions.txt.
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- The full, never-compressed history. Append-only for the app role:
        -- compression and restore never change a message, they move the
        -- session's markers (compression_state) instead.
        create table memori.messages (
          id          bigint generated always as identity primary key,
          session_id  text not null,
          user_id     text not null,
          seq         integer not null,
          role        text not null check (role in ('system', 'user', 'assistant', 'tool')),
          content     text not null,
          tokens      integer not null check (tokens >= 0),
          tool_calls  jsonb,
          created_at  timestamptz not null,
          unique (session_id, seq)
        );
        create index idx_messages_user on memori.messages (user_id, session_id);

        -- Per session: where compression stands. version changes whenever the
        -- compressed state changes (apply, restore): a plan made at another
        -- version is stale. Token counters are kept incrementally so
        -- message_add answers the budget without summing the history.
        create table memori.compression_state (
          session_id             text primary key,
          user_id                text not null,
          last_seq               integer not null default 0,
          compressed_through_seq integer not null default 0,
          rolled_back            int4multirange not null default '{}',
          used_tokens            bigint not null default 0,
          system_tokens          bigint not null default 0,
          goal_tokens            bigint not null default 0,
          checkpoint_tokens      bigint not null default 0,
          checkpoint_count       integer not null default 0,
          compression_count      integer not null default 0,
          version                integer not null default 0,
          context_size           integer,
          auto_snapshot_version  integer,
          created_at             timestamptz not null,
          updated_at             timestamptz not null
        );
        create index idx_compression_state_user on memori.compression_state (user_id);

        -- The seed's CompressionCheckpoint. level: 3 recent, 2 old, 1 ancient, 0 ultra (merged).
        create table memori.compression_checkpoints (
          id                 uuid primary key default gen_random_uuid(),
          session_id         text not null,
          user_id            text not null,
          level              integer not null check (level between 0 and 3),
          from_seq           integer not null,
          to_seq             integer not null,
          summary            text not null,
          created_at         timestamptz not null,
          compressed_at      timestamptz,
          original_tokens    integer not null check (original_tokens >= 0),
          current_tokens     integer not null check (current_tokens >= 0),
          compression_count  integer not null default 1,
          compression_number integer,
          key_decisions      text[] not null default '{}',
          files_modified     text[] not null default '{}',
          next_steps         text[] not null default '{}',
          check (from_seq <= to_seq)
        );
        create index idx_compression_checkpoints_session on memori.compression_checkpoints (session_id, from_seq);
        create index idx_compression_checkpoints_user on memori.compression_checkpoints (user_id);

        -- Persisted plans: what compression_apply may do, made at one state version.
        create table memori.compression_plans (
          id                    uuid primary key default gen_random_uuid(),
          session_id            text not null,
          user_id               text not null,
          status                text not null check (status in ('planned', 'applied', 'skipped', 'failed')),
          reason                text,
          state_version         integer not null,
          context_size          integer not null,
          system_prompt_tokens  integer not null,
          budget                jsonb not null,
          from_seq              integer,
          to_seq                integer,
          message_count         integer not null default 0,
          source_tokens         integer not null default 0,
          target_tokens         integer not null default 0,
          aging                 jsonb not null default '[]'::jsonb,
          key_decisions         text[] not null default '{}',
          files_modified        text[] not null default '{}',
          next_steps            text[] not null default '{}',
          checkpoint_id         uuid,
          error                 text,
          created_at            timestamptz not null,
          finished_at           timestamptz,
          expires_at            timestamptz
        );
        create index idx_compression_plans_session on memori.compression_plans (session_id, created_at desc);
        create index idx_compression_plans_user on memori.compression_plans (user_id);
        create index idx_compression_plans_expires_at on memori.compression_plans (expires_at)
          where expires_at is not null;

        -- Goals (never compressed) with checkpoints, decisions and artifacts.
        create table memori.goals (
          id           uuid primary key default gen_random_uuid(),
          session_id   text not null,
          user_id      text not null,
          description  text not null,
          priority     text not null default 'medium' check (priority in ('high', 'medium', 'low')),
          status       text not null default 'active' check (status in ('active', 'paused', 'completed')),
          next_steps   text[] not null default '{}',
          created_at   timestamptz not null,
          completed_at timestamptz
        );
        create index idx_goals_session on memori.goals (session_id, created_at);
        create index idx_goals_user on memori.goals (user_id);
        -- at most one active goal per session
        create unique index uq_goals_active on memori.goals (session_id) where status = 'active';

        create table memori.goal_checkpoints (
          id          uuid primary key default gen_random_uuid(),
          goal_id     uuid not null references memori.goals on delete cascade,
          user_id     text not null,
          description text not null,
          status      text not null check (status in ('pending', 'in-progress', 'completed')),
          position    integer not null,
          created_at  timestamptz not null,
          updated_at  timestamptz not null,
          unique (goal_id, description)
        );
        create index idx_goal_checkpoints_user on memori.goal_checkpoints (user_id);

        create table memori.goal_decisions (
          id          uuid primary key default gen_random_uuid(),
          goal_id     uuid not null references memori.goals on delete cascade,
          user_id     text not null,
          description text not null,
          locked      boolean not null default false,
          position    integer not null,
          created_at  timestamptz not null,
          unique (goal_id, description)
        );
        create index idx_goal_decisions_user on memori.goal_decisions (user_id);

        create table memori.goal_artifacts (
          id          uuid primary key default gen_random_uuid(),
          goal_id     uuid not null references memori.goals on delete cascade,
          user_id     text not null,
          path        text not null,
          action      text not null check (action in ('created', 'modified')),
          position    integer not null,
          created_at  timestamptz not null,
          unique (goal_id, path, action)
        );
        create index idx_goal_artifacts_user on memori.goal_artifacts (user_id);

        -- Immutable snapshots of a session's active state, retention-managed.
        create table memori.snapshots (
          id               uuid primary key default gen_random_uuid(),
          session_id       text not null,
          user_id          text not null,
          kind             text not null check (kind in ('manual', 'auto', 'pre_restore')),
          created_at       timestamptz not null,
          token_count      bigint not null,
          message_count    integer not null,
          checkpoint_count integer not null,
          metadata         jsonb not null default '{}'::jsonb,
          state            jsonb not null,
          expires_at       timestamptz,
          check (jsonb_typeof(metadata) = 'object')
        );
        create index idx_snapshots_session on memori.snapshots (session_id, created_at desc);
        create index idx_snapshots_user on memori.snapshots (user_id);
        create index idx_snapshots_expires_at on memori.snapshots (expires_at) where expires_at is not null;

        create type memori.compression_budget_state as (
          session_id           text,
          context_size         integer,
          usable_tokens        integer,
          system_prompt_tokens integer,
          checkpoint_tokens    integer,
          available_tokens     integer,
          trigger_tokens       integer,
          used_tokens          integer,
          free_tokens          integer,
          should_compress      boolean,
          checkpoint_count     integer,
          compression_count    integer
        );
        create type memori.message_added as (
          message_id           bigint,
          session_id           text,
          seq                  integer,
          role                 text,
          tokens               integer,
          created_at           timestamptz,
          context_size         integer,
          usable_tokens        integer,
          system_prompt_tokens integer,
          checkpoint_tokens    integer,
          available_tokens     integer,
          trigger_tokens       integer,
          used_tokens          integer,
          should_compress      boolean,
          auto_snapshot_id     uuid
        );
        create type memori.compression_request as (
          key           text,
          action        text,
          level         integer,
          source_tokens integer,
          target_tokens integer,
          source        text,
          prompt        text
        );
        create type memori.compression_applied as (
          plan_id            uuid,
          checkpoint_id      uuid,
          compression_number integer,
          message_count      integer,
          source_tokens      integer,
          summary_tokens     integer,
          aged               integer,
          merged             integer,
          checkpoint_tokens  integer,
          used_tokens        integer
        );
        create type memori.context_item as (
          position integer,
          kind     text,
          role     text,
          ref      text,
          content  text,
          tokens   integer
        );
        create type memori.goal_marker_result as (
          goal_id              uuid,
          goals_created        integer,
          checkpoints_updated  integer,
          decisions_added      integer,
          artifacts_recorded   integer,
          next_steps           text[],
          unknown              text[]
        );
        create type memori.reliability as (
          score               numeric,
          percent             integer,
          level               text,
          icon                text,
          model_factor        numeric,
          compression_penalty numeric
        );
        create type memori.session_reliability_state as (
          session_id          text,
          model_size_b        numeric,
          compression_count   integer,
          score               numeric,
          percent             integer,
          level               text,
          icon                text,
          warning             text
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
