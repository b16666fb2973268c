"""Foundation: pgvector, settings, the retention engine's tables, memories (seed 05), events.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Run-once DDL only. Functions, views, policies and grants live in sql/ and are
re-applied after every upgrade. Released: frozen by tests/test_migrations.py.
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # pgvector is required (pages and search build on it). Fail with our own
    # SQLSTATE and a hint instead of PostgreSQL's "could not open extension
    # control file".
    op.execute(
        """
        do $pgvector$
        begin
          if not exists (select 1 from pg_catalog.pg_available_extensions where name = 'vector') then
            raise exception 'pgvector is not available on this PostgreSQL server'
              using errcode = 'PM010',
                    detail = 'pymemdb needs the "vector" extension (pgvector >= 0.5).',
                    hint = 'Install pgvector for this server (e.g. apt install postgresql-NN-pgvector), '
                           'or use the embedded server: unset PYMEMDB_DSN and run pymemdb init.';
          end if;
        end
        $pgvector$;
        create extension if not exists vector;
        """
    )

    op.execute(
        """
        create schema if not exists memori;

        -- Settings: config is data, a DBA changes it with an UPDATE.
        create table memori.settings (
          key         text primary key,
          value       jsonb not null,
          description text not null
        );

        -- Registry of retention-managed tables. Each names a view that exposes
        -- its rows in the engine's shape (id, owner, category, kind, expires_at,
        -- important); registering a table is a row here plus that view.
        create table memori.retention_tables (
          table_name     text primary key,
          relation       regclass not null,
          candidate_view regclass not null,
          id_column      name not null,
          description    text not null
        );

        -- Policies per kind of row. kind '*' is the table's default.
        create table memori.retention_policies (
          table_name         text not null references memori.retention_tables on delete cascade,
          kind               text not null,
          priority           integer not null,
          retention          interval,
          preserve_important boolean not null default false,
          cleanup_enabled    boolean not null default true,
          description        text not null default '',
          primary key (table_name, kind),
          check (retention is null or retention > interval '0')
        );

        -- Seed 05: skills with session (TTL) namespaces and permanent ones.
        create table memori.session_skills (
          skill               text primary key,
          short_name          text unique,
          ttl_days            integer,
          permanent_namespace text,
          description         text not null default '',
          check (short_name ~ '^[a-z0-9_]+$'),
          check (ttl_days is null or ttl_days > 0),
          -- a skill is either session-scoped with a TTL, or permanent with a namespace
          check ((short_name is not null and ttl_days is not null and permanent_namespace is null)
              or (short_name is null and ttl_days is null and permanent_namespace is not null))
        );

        -- Seed 05: namespaced memories; user_id holds the namespace.
        -- owner_id is ours: the agent user that wrote the row (NULL for rows
        -- written by older clients), so per-user reads never mix users.
        create table memori.memories (
          id         bigint generated always as identity primary key,
          user_id    text not null,
          content    text not null,
          category   text not null default 'context',
          metadata   jsonb not null default '{}'::jsonb,
          created_at timestamptz not null default now(),
          expires_at timestamptz,
          owner_id   text,
          check (jsonb_typeof(metadata) = 'object')
        );

        -- The seed's TTL index, verbatim: serves the read filter on TTL rows,
        -- ttl_next_expiry, and cleanup's range scan `expires_at <= $now`.
        create index idx_memories_expires_at on memori.memories (expires_at)
          where expires_at is not null;
        -- The seed's second index (`... WHERE expires_at <= NOW()`) cannot be
        -- built: index predicates must be immutable and now() is not. The
        -- index above already answers `expires_at <= now()` with a range scan,
        -- so nothing is lost.

        -- Latest checkpoint of a user in a namespace: one index probe per
        -- owner (the user's own rows, and legacy rows without owner). A
        -- monthly session namespace holds every user's checkpoints, so the
        -- owner must be in the key. text_pattern_ops also serves the legacy
        -- `user_id LIKE 'session_x_%'`.
        create index idx_memories_session_checkpoints on memori.memories
          (user_id text_pattern_ops, owner_id, created_at desc, id desc)
          where metadata->>'type' = 'session_checkpoint';
        -- The planner has no statistics for metadata->>'type' without this
        -- (it would guess 0.5 % where most rows are checkpoints).
        create statistics memori.memories_type_stats on ((metadata->>'type')) from memori.memories;

        -- Events: append-only, retained by the engine, also sent with pg_notify.
        create table memori.events (
          id          bigint generated always as identity primary key,
          event_type  text not null,
          occurred_at timestamptz not null default now(),
          payload     jsonb not null default '{}'::jsonb,
          expires_at  timestamptz
        );
        create index idx_events_expires_at on memori.events (expires_at) where expires_at is not null;
        create index idx_events_type_time on memori.events (event_type, occurred_at desc);

        -- Cleanup runs, one row per run whatever triggered it.
        create table memori.cleanup_runs (
          id               bigint generated always as identity primary key,
          trigger          text not null check (trigger in ('cli', 'cron', 'sql')),
          status           text not null default 'running'
                           check (status in ('running', 'succeeded', 'failed', 'abandoned')),
          as_of            timestamptz not null,
          batch_size       integer not null,
          max_rows         integer,
          started_at       timestamptz not null default clock_timestamp(),
          finished_at      timestamptz,
          planned          integer not null default 0,
          next_seq         integer not null default 1,
          deleted          integer not null default 0,
          batches          integer not null default 0,
          deleted_by_table jsonb not null default '{}'::jsonb,
          error            text,
          backend_pid      integer not null default pg_backend_pid(),
          session_lock     boolean not null default false,
          -- the plan is written in chunks: the key of the last planned row,
          -- and whether every due row is planned
          plan_done        boolean not null default false,
          cursor_priority  integer,
          cursor_expires   timestamptz,
          cursor_table     text,
          cursor_row_id    text
        );
        create index idx_cleanup_runs_started on memori.cleanup_runs (started_at desc);

        -- A run's plan: the rows it will delete, in deletion order. Unlogged:
        -- it is rebuilt by the next run if lost in a crash, and writing it
        -- costs no WAL.
        create unlogged table memori.cleanup_queue (
          run_id             bigint not null,
          seq                integer not null,
          table_name         text not null,
          row_id             text not null,
          preserve_important boolean not null,
          primary key (run_id, seq)
        );

        -- One row per install or upgrade (pymemdb init): lets a re-run with
        -- unchanged SQL be a no-op and tells a DBA what is installed.
        create table memori.installs (
          id               bigint generated always as identity primary key,
          pymemdb_version  text not null,
          alembic_revision text not null,
          sql_sha256       text not null,
          installed_at     timestamptz not null default now(),
          installed_by     text not null default current_user
        );

        -- Named result types of the SQL API.
        create type memori.cleanup_candidate as (
          seq        integer,
          batch      integer,
          table_name text,
          row_id     text,
          owner      text,
          category   text,
          kind       text,
          priority   integer,
          expires_at timestamptz,
          reason     text
        );
        create type memori.cleanup_summary as (
          run_id           bigint,
          status           text,
          trigger          text,
          as_of            timestamptz,
          planned          integer,
          deleted          integer,
          batches          integer,
          deleted_by_table jsonb,
          seconds          numeric,
          error            text
        );
        create type memori.cleanup_batch_result as (
          run_id           bigint,
          batch            integer,
          deleted          integer,
          deleted_by_table jsonb,
          remaining        integer,
          done             boolean
        );
        create type memori.session_checkpoint as (
          id         bigint,
          user_id    text,
          content    text,
          category   text,
          metadata   jsonb,
          created_at timestamptz,
          expires_at timestamptz,
          owner_id   text,
          source     text
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
