"""Long-term memory store (issue 17): one item table and its embeddings.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24

Run-once DDL only; the API is sql/180-store.sql.

An item is keyed by (user, namespace path, key) and holds a jsonb value, its
times, ``expires_at`` (NULL = permanent) and the ``ttl`` a read may refresh it
by, plus a full-text vector over its indexed text. Embeddings live in a side
table, one per (item, indexed field), in an unconstrained ``vector`` column:
stores with different dimensions share it, and their ANN indexes are partial
expression indexes per dimension, created by ``memori.store_index_ensure``.
Every key includes the user (the table is distributed by user on Citus).
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create table memori.store_items (
          user_id    text not null,
          namespace  text[] not null,
          key        text not null,
          id         bigint generated always as identity,
          value      jsonb not null,
          created_at timestamptz not null,
          updated_at timestamptz not null,
          expires_at timestamptz,              -- NULL: permanent
          ttl        interval,                 -- what a read refreshes expires_at by (NULL: no TTL)
          search_tsv tsvector,                 -- full text of the indexed fields (NULL: not indexed)
          primary key (user_id, namespace, key),
          unique (user_id, id),
          check (cardinality(namespace) >= 1),
          check (ttl is null or ttl > interval '0'),
          check ((ttl is null) = (expires_at is null))
        );
        create index idx_store_items_expires_at on memori.store_items (expires_at) where expires_at is not null;
        -- no GIN index on search_tsv by default: a search ranks the items under its namespace
        -- prefix and filter, and the index would cost about a third of the table
        -- (memori.store_index_ensure(p_method => 'text') creates it for very large namespaces)

        -- one embedding per indexed field of an item; deleted with the item
        create table memori.store_vectors (
          user_id   text not null,
          item_id   bigint not null,
          field     text not null,
          embedding public.vector not null,
          primary key (user_id, item_id, field),
          foreign key (user_id, item_id) references memori.store_items (user_id, id) on delete cascade
        );

        create type memori.store_item as (
          namespace  text[],
          key        text,
          value      jsonb,
          created_at timestamptz,
          updated_at timestamptz,
          expires_at timestamptz,
          ttl        interval
        );

        create type memori.store_search_result as (
          namespace   text[],
          key         text,
          value       jsonb,
          created_at  timestamptz,
          updated_at  timestamptz,
          expires_at  timestamptz,
          ttl         interval,
          score       double precision,   -- vector similarity in the distance's convention; NULL without one
          rank        integer,            -- position in the fused ranking, from 1 (before the offset)
          vector_rank integer,            -- position by vector similarity (NULL: not among the candidates)
          text_rank   integer,            -- position by full-text rank (NULL: no match)
          text_score  real                -- ts_rank_cd of the full-text match
        );

        create type memori.store_get_result as (
          ord        integer,             -- the request's position (1-based) in store_get_many
          namespace  text[],
          key        text,
          value      jsonb,
          created_at timestamptz,
          updated_at timestamptz,
          expires_at timestamptz,
          ttl        interval
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
