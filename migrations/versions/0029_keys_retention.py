"""The retention engine across shards (issue 20 items 2, 4, 6): names instead of OIDs, the owner in the plan.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-25

Run-once DDL only; the API is sql/010-retention.sql.

- ``memori.retention_tables.relation`` and ``.candidate_view`` were
  ``regclass``: OIDs are node-local, and on a Citus cluster the registry is a
  reference table read on the workers too. They become qualified names
  (``text``, ``schema.name`` quoted as ``format('%I.%I')`` quotes), resolved
  with ``to_regclass`` where used. The foreign key from
  ``retention_policies`` is on ``table_name`` and stays.
- ``retention_tables.owner_column``: the column of the owning user in each
  table (its distribution column: ``user_id``; ``owner_id`` for memories).
- ``memori.cleanup_queue.owner``: each planned row's owner (that column's
  value), so a batch locks and deletes by ``(owner, id)``: on a cluster, one
  shard's rows per statement (Citus refuses ``DELETE ... USING`` the local
  queue and a multi-shard ``FOR UPDATE``).
- ``memori._cleanup_plan`` returns the owner too: a function cannot change its
  result type in place, so it is dropped here and sql/ re-creates it.
"""

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        drop function if exists memori._cleanup_plan(timestamptz, integer, integer, timestamptz, text, text);

        -- (an OID that names no table any more, left by a rebuilt table, gets the conventional
        -- name: sql/ registers every table again right after)
        create function pg_temp.memori_qualified(p_rel regclass, p_default text) returns text
        language sql stable as $$
          select coalesce((select pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname)
                             from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
                            where c.oid = p_rel), p_default)
        $$;
        alter table memori.retention_tables
          alter column relation type text
            using pg_temp.memori_qualified(relation, 'memori.' || pg_catalog.quote_ident(table_name)),
          alter column candidate_view type text
            using pg_temp.memori_qualified(candidate_view, 'memori.' || pg_catalog.quote_ident('_retention_' || table_name)),
          add column owner_column name not null default 'user_id';
        -- seed 05: memories.user_id is the namespace; the owning user is owner_id
        update memori.retention_tables set owner_column = 'owner_id' where table_name = 'memories';

        -- a run's plan is rebuilt by the next run: no backfill, the running plans (if any) are dropped
        truncate memori.cleanup_queue;
        alter table memori.cleanup_queue add column owner text;
        drop function pg_temp.memori_qualified(regclass, text);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        drop function if exists memori._cleanup_plan(timestamptz, integer, integer, timestamptz, text, text);
        truncate memori.cleanup_queue;
        alter table memori.cleanup_queue drop column owner;
        alter table memori.retention_tables
          drop column owner_column,
          alter column relation type regclass using relation::regclass,
          alter column candidate_view type regclass using candidate_view::regclass;
        """
    )
