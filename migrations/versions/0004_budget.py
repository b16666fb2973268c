"""Context window manager (seed 02): chunk types, token budgets and boosts as data, stored chunks, optimisations.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

Run-once DDL only; the API and the seed's default configuration are
sql/070-budget.sql. Released: frozen by tests/frozen_revisions.txt.
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- Base priority per chunk type; category names the per-category budget
        -- (token_budgets.category) that caps the type when category budgets are on.
        create table memori.chunk_types (
          chunk_type    text primary key,
          base_priority integer not null,
          category      text not null,
          description   text not null default ''
        );

        -- The seed's token budgets (maxOverall, maxHistory, ...). A row with a
        -- category caps the chunk types of that category.
        create table memori.token_budgets (
          name        text primary key,
          tokens      integer not null check (tokens >= 0),
          category    text unique,
          description text not null default ''
        );

        -- Business boost tables: factor (urgency, client_tier, deal_status,
        -- relationship) and value -> boost points.
        create table memori.priority_boosts (
          factor      text not null check (factor in ('urgency', 'client_tier', 'deal_status', 'relationship')),
          value       text not null,
          boost       double precision not null,
          primary key (factor, value)
        );

        -- Context chunks stored per session, ranked by context_optimize_stored.
        -- rag_boost and business_boost are computed from metadata when a chunk
        -- is stored, so ranking reads only the index below, never the content.
        create table memori.context_chunks (
          id             uuid primary key default gen_random_uuid(),
          seq            bigint generated always as identity,  -- insertion order: the original index
          session_id     text not null,
          user_id        text not null,
          chunk_type     text not null references memori.chunk_types on update cascade,
          content        text not null,
          tokens         integer not null check (tokens >= 0),
          ts             timestamptz,
          ts_us          bigint,  -- ts as microseconds since 1970: exact ages with integer arithmetic
          metadata       jsonb not null default '{}'::jsonb,
          rag_boost      double precision not null default 0,
          business_boost double precision not null default 0,
          revenue_boost  double precision not null default 0,
          business       boolean not null default false,
          created_at     timestamptz not null default now(),
          expires_at     timestamptz,
          check (jsonb_typeof(metadata) = 'object')
        );
        -- the ranking scan: every column the selection needs, so it is index-only
        create index idx_context_chunks_rank on memori.context_chunks (session_id, seq)
          include (id, chunk_type, tokens, ts_us, rag_boost, business_boost, revenue_boost, business, expires_at);
        create index idx_context_chunks_user on memori.context_chunks (user_id);
        create index idx_context_chunks_expires_at on memori.context_chunks (expires_at) where expires_at is not null;

        -- The boosts of one chunk (chunk_priority's parts).
        create type memori.chunk_score as (
          ts             timestamptz,
          recency        double precision,
          rag            double precision,
          business       double precision,
          revenue        double precision,
          is_business    boolean,
          priority       double precision
        );
        create type memori.chunk_added as (
          id         uuid,
          chunk_type text,
          tokens     integer,
          expires_at timestamptz
        );

        -- One row per persisted optimisation (the seed's context_optimizations entity).
        create table memori.context_optimizations (
          id               uuid primary key default gen_random_uuid(),
          user_id          text not null,
          session_id       text,
          source           text not null check (source in ('request', 'stored')),
          chunks_count     integer not null,
          optimized_count  integer not null,
          dropped_count    integer not null,
          conflicts_count  integer not null,
          tokens_used      integer not null,
          tokens_available integer not null,
          reserved_tokens  integer not null,
          metrics          jsonb not null,
          options          jsonb not null default '{}'::jsonb,
          pxyz             jsonb not null default '{}'::jsonb,
          created_at       timestamptz not null default now(),
          expires_at       timestamptz
        );
        create index idx_context_optimizations_user_time on memori.context_optimizations (user_id, created_at desc);
        create index idx_context_optimizations_session_time
          on memori.context_optimizations (session_id, created_at desc) where session_id is not null;
        create index idx_context_optimizations_expires_at
          on memori.context_optimizations (expires_at) where expires_at is not null;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
