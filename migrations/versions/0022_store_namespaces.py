"""Store namespaces in a per-user dictionary; items and embeddings keyed by (user, namespace id, key) (issue 17).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-25

Run-once DDL only; the API is sql/810-store.sql.

Storage was 1.11x LangGraph's PostgresStore, all of it in the items table:
the ``text[]`` namespace (53 bytes in the row and again in the primary key)
and the ``(user_id, id)`` index the embeddings' foreign key needed (42 bytes
an item). Now:

- ``memori.store_namespaces`` holds each user's namespaces once, numbered per
  user (``integer``, 1, 2, ... in the order they appear); an item stores the
  number. A namespace is deleted with its items (``on delete cascade``);
  emptied entries otherwise stay (reads skip namespaces without live items).
- Embeddings reference their item by the items' primary key
  ``(user_id, ns_id, key)`` and go with it by the cascade, so no second unique
  index is needed on the items. ``id`` stays (the retention engine's row id,
  ties in orderings) with an index only over the rows that can expire, which
  is all the cleaner looks up.
- Columns are ordered fixed-width first (no alignment padding) and the tables
  are rebuilt, which also drops the slot of 0021's dropped ``search_tsv``.

Existing rows are copied; ANN and full-text indexes created by
``memori.store_index_ensure`` on the old tables are created again on the new.
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create temporary table store_index_defs on commit drop as
        select c.relname as name, pg_catalog.pg_get_indexdef(i.indexrelid) as def
          from pg_catalog.pg_index i
          join pg_catalog.pg_class c on c.oid = i.indexrelid
         where i.indrelid in ('memori.store_items'::regclass, 'memori.store_vectors'::regclass)
           and c.relname like any (array['idx_store_vectors_%', 'idx_store_items_search_tsv']);

        -- the old tables step aside (their index names are taken by the new ones)
        alter table memori.store_vectors rename to store_vectors_0021;
        alter table memori.store_items rename to store_items_0021;
        alter index memori.store_vectors_pkey rename to store_vectors_0021_pkey;
        alter index memori.store_items_pkey rename to store_items_0021_pkey;
        alter index memori.idx_store_items_expires_at rename to idx_store_items_0021_expires_at;
        alter sequence memori.store_items_id_seq rename to store_items_0021_id_seq;
        do $drop$
        declare
          v_name text;
        begin
          for v_name in select d.name from store_index_defs d loop
            execute format('drop index memori.%I', v_name);
          end loop;
        end
        $drop$;

        create table memori.store_namespaces (
          user_id   text not null,
          id        integer not null,           -- per user: 1, 2, ... (memori._store_ns_create)
          namespace text[] not null,
          primary key (user_id, id),
          unique (user_id, namespace),
          check (cardinality(namespace) >= 1)
        );

        -- fixed-width columns first: no padding between them
        create table memori.store_items (
          user_id     text not null,
          ns_id       integer not null,
          id          bigint generated always as identity,
          created_at  timestamptz not null,
          updated_at  timestamptz not null,
          expires_at  timestamptz,              -- NULL: permanent
          ttl         interval,                 -- what a read refreshes expires_at by (NULL: no TTL)
          key         text not null,
          text_fields text,                     -- what full text covers (migration 0021)
          value       jsonb not null,
          primary key (user_id, ns_id, key),
          foreign key (user_id, ns_id) references memori.store_namespaces (user_id, id) on delete cascade,
          check (ttl is null or ttl > interval '0'),
          check ((ttl is null) = (expires_at is null))
        );
        create index idx_store_items_expires_at on memori.store_items (expires_at) where expires_at is not null;
        -- the retention engine deletes by id, and only rows that can expire
        create index idx_store_items_expiring_id on memori.store_items (id) where expires_at is not null;

        create table memori.store_vectors (
          user_id   text not null,
          ns_id     integer not null,
          key       text not null,
          field     text not null,
          embedding public.vector not null,
          primary key (user_id, ns_id, key, field),
          foreign key (user_id, ns_id, key) references memori.store_items (user_id, ns_id, key) on delete cascade
        );

        insert into memori.store_namespaces (user_id, id, namespace)
        select s.user_id, row_number() over (partition by s.user_id order by s.namespace), s.namespace
          from (select distinct o.user_id, o.namespace from memori.store_items_0021 o) s;

        insert into memori.store_items (user_id, ns_id, id, created_at, updated_at, expires_at, ttl, key, text_fields, value)
        overriding system value
        select o.user_id, d.id, o.id, o.created_at, o.updated_at, o.expires_at, o.ttl, o.key, o.text_fields, o.value
          from memori.store_items_0021 o
          join memori.store_namespaces d on d.user_id = o.user_id and d.namespace = o.namespace
         order by o.user_id, d.id, o.key;
        select pg_catalog.setval(pg_catalog.pg_get_serial_sequence('memori.store_items', 'id'),
                                 coalesce((select max(o.id) from memori.store_items_0021 o), 0) + 1, false);

        insert into memori.store_vectors (user_id, ns_id, key, field, embedding)
        select o.user_id, i.ns_id, i.key, v.field, v.embedding
          from memori.store_vectors_0021 v
          join memori.store_items_0021 o on o.user_id = v.user_id and o.id = v.item_id
          join memori.store_items i on i.user_id = o.user_id and i.id = o.id
         order by 1, 2, 3, 4;

        -- the retention view moves to the new table (sql/810-store.sql owns its definition)
        create or replace view memori._retention_store_items with (security_invoker = true) as
        select i.id, i.user_id as owner,
               (select d.namespace[1] from memori.store_namespaces d where d.user_id = i.user_id and d.id = i.ns_id)
                 as category,
               '*'::text as kind, i.expires_at, false as important
          from memori.store_items i;

        drop table memori.store_vectors_0021;
        drop table memori.store_items_0021;

        do $recreate$
        declare
          v_def text;
        begin
          for v_def in select d.def from store_index_defs d loop
            execute v_def;
          end loop;
        end
        $recreate$;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
