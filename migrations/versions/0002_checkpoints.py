"""Checkpoints (seed 01, part 1): typed checkpoints, versions as diffs, milestone criteria.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Run-once DDL only; the API is sql/050-checkpoints.sql. Released: frozen by
tests/frozen_revisions.txt.
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- Tables registered with the engine may name an event prefix: the engine
        -- then emits <prefix>.expired, .expiring_soon, .cleaned_up and
        -- .cleanup_batch_completed for them.
        alter table memori.retention_tables add column event_prefix text;

        create table memori.checkpoints (
          id                 uuid primary key default gen_random_uuid(),
          session_id         text not null,
          user_id            text not null,
          checkpoint_type    text not null,
          title              text not null,
          description        text,
          data               jsonb not null,
          metadata           jsonb not null default '{}'::jsonb,
          tags               text[] not null default '{}',
          priority           integer not null,
          retention_days     integer not null,
          preserve_important boolean not null default true,
          version            integer not null default 1,
          created_at         timestamptz not null default now(),
          updated_at         timestamptz not null default now(),
          expires_at         timestamptz,
          pxyz               jsonb not null default '{}'::jsonb,
          check (jsonb_typeof(data) = 'object'),
          check (jsonb_typeof(metadata) = 'object'),
          check (retention_days > 0),
          check (version >= 1)
        );
        -- latest per session (and the session's history), newest first
        create index idx_checkpoints_session_time on memori.checkpoints (session_id, created_at desc, id desc);
        create index idx_checkpoints_user_time on memori.checkpoints (user_id, created_at desc);
        create index idx_checkpoints_type_time on memori.checkpoints (checkpoint_type, created_at desc);
        create index idx_checkpoints_expires_at on memori.checkpoints (expires_at) where expires_at is not null;
        create index idx_checkpoints_tags on memori.checkpoints using gin (tags);

        -- Earlier versions of a checkpoint's data, each stored as the patch that
        -- turns the next version's data back into this one.
        create table memori.checkpoint_versions (
          checkpoint_id uuid not null references memori.checkpoints on delete cascade,
          version       integer not null,
          reverse_patch jsonb not null,
          data_bytes    integer not null,
          created_at    timestamptz not null,
          primary key (checkpoint_id, version)
        );

        -- Milestone criteria as data: how to compare the current state with the
        -- previous checkpoint's data.
        create table memori.milestone_criteria (
          name        text primary key,
          kind        text not null check (kind in ('all_completed', 'increase', 'ratio_increase')),
          path        text[] not null,
          item_field  text,
          factor      numeric,
          position    integer not null,
          enabled     boolean not null default true,
          description text not null default '',
          check (kind <> 'all_completed' or item_field is not null),
          check (kind <> 'ratio_increase' or factor > 0)
        );

        create type memori.checkpoint_auto_result as (
          created         boolean,
          reason          text,
          next_allowed_at timestamptz,
          checkpoint_id   uuid
        );
        create type memori.checkpoint_version as (
          version    integer,
          created_at timestamptz,
          is_current boolean,
          bytes      integer
        );
        create type memori.checkpoint_stat as (
          checkpoint_type text,
          total           bigint,
          active          bigint,
          expiring_soon   bigint,
          expired         bigint,
          preserved       bigint,
          raw_bytes       bigint,
          stored_bytes    bigint,
          next_expiry     timestamptz
        );

        -- PostgreSQL compresses large values itself (TOAST). lz4 is faster than
        -- the default pglz at a similar ratio; servers built without it keep pglz.
        do $lz4$
        begin
          alter table memori.checkpoints alter column data set compression lz4;
        exception when feature_not_supported then
          raise notice 'pymemdb: this server has no lz4; checkpoint data uses pglz compression';
        end
        $lz4$;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
