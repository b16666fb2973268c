"""LangGraph checkpointer (issue 9): threads, checkpoints, channel blobs and pending writes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22

Run-once DDL only; the API is sql/120-langgraph.sql and the LangGraph saver
is pymemdb.integrations.langgraph.
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- One row per (user, LangGraph thread_id): the same thread_id of two
        -- users is two threads. Children hang off its bigint key, so a
        -- thread's rows go with it (delete_thread, idle expiry) by cascade.
        create table memori.lg_threads (
          id         bigint generated always as identity primary key,
          user_id    text not null,
          thread_id  text not null,
          policy     text not null,          -- retention policy kind of the saver that wrote it last
          uses_delta boolean not null default false,  -- a DeltaChannel graph: history is never expired piecemeal
          created_at timestamptz not null,
          updated_at timestamptz not null,
          expires_at timestamptz,            -- updated_at + the policy's idle retention (NULL: kept)
          unique (user_id, thread_id)
        );
        create index idx_lg_threads_expires_at on memori.lg_threads (expires_at) where expires_at is not null;

        -- Checkpoints without their non-primitive channel values (those are
        -- blobs). checkpoint_id is LangGraph's uuid6: uuid order is its order.
        create table memori.lg_checkpoints (
          id            bigint generated always as identity primary key,
          thread        bigint not null references memori.lg_threads on delete cascade,
          checkpoint_id uuid not null,
          parent_id     uuid,
          expires_at    timestamptz,         -- NULL while latest of its namespace; superseded: + policy retention
          checkpoint_ns text not null,
          user_id       text not null,
          policy        text not null,       -- the saver's policy when it was written (the engine's kind)
          checkpoint    jsonb not null,
          metadata      jsonb not null,
          unique (thread, checkpoint_ns, checkpoint_id)
        );
        create index idx_lg_checkpoints_expires_at on memori.lg_checkpoints (expires_at) where expires_at is not null;
        -- the unexpired latest checkpoints a put supersedes: one entry per namespace,
        -- where the (thread, ns, id) key would walk the namespace's whole history
        create index idx_lg_checkpoints_latest on memori.lg_checkpoints (thread, checkpoint_ns, checkpoint_id)
          where expires_at is null;

        -- Channel values by version, shared by every checkpoint of the
        -- namespace that carries that version.
        create table memori.lg_blobs (
          id            bigint generated always as identity primary key,
          thread        bigint not null references memori.lg_threads on delete cascade,
          expires_at    timestamptz,         -- NULL while the latest checkpoint uses it
          checkpoint_ns text not null,
          channel       text not null,
          version       text not null,
          user_id       text not null,
          policy        text not null,
          type          text not null,
          blob          bytea,
          unique (thread, checkpoint_ns, channel, version)
        );
        create index idx_lg_blobs_expires_at on memori.lg_blobs (expires_at) where expires_at is not null;

        -- Pending writes of a checkpoint. No foreign key to the checkpoint: a
        -- run saves a step's writes in the background, and they may commit
        -- before the checkpoint does. They expire with their checkpoint (the
        -- engine deletes both) and go with it when it is pruned or deleted
        -- (a trigger, sql/120-langgraph.sql).
        create table memori.lg_writes (
          id            bigint generated always as identity unique,
          thread        bigint not null references memori.lg_threads on delete cascade,
          checkpoint_id uuid not null,
          expires_at    timestamptz,         -- its checkpoint's, once that is superseded
          idx           integer not null,
          checkpoint_ns text not null,
          task_id       text not null,
          task_path     text not null default '',
          user_id       text not null,
          policy        text not null,
          channel       text not null,
          type          text,
          blob          bytea not null,
          primary key (thread, checkpoint_ns, checkpoint_id, task_id, idx)
        );
        create index idx_lg_writes_expires_at on memori.lg_writes (expires_at) where expires_at is not null;

        -- Large values (a thread's message list) are compressed by TOAST: lz4
        -- is faster than the default pglz at a similar ratio.
        do $lz4$
        begin
          alter table memori.lg_blobs alter column blob set compression lz4;
          alter table memori.lg_writes alter column blob set compression lz4;
          alter table memori.lg_checkpoints alter column checkpoint set compression lz4,
                                            alter column metadata set compression lz4;
        exception when feature_not_supported then
          raise notice 'pymemdb: this server has no lz4; LangGraph state uses pglz compression';
        end
        $lz4$;

        create type memori.lg_tuple as (
          thread_id        text,
          checkpoint_ns    text,
          checkpoint_id    uuid,
          parent_id        uuid,
          checkpoint       jsonb,
          metadata         jsonb,
          blob_channels    text[],
          blob_types       text[],
          blob_values      bytea[],
          write_task_ids   text[],
          write_channels   text[],
          write_types      text[],
          write_values     bytea[],
          write_task_paths text[],
          write_idx        integer[]
        );
        create type memori.lg_prune_result as (
          threads     integer,
          checkpoints integer,
          blobs       integer
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
