"""memori.pages.search_tsv becomes a column the page functions write (issue 21).

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-29

Run-once DDL only; the writer is ``memori.page_search_vector`` in
sql/540-vm-search.sql, called by ``page_create`` and ``page_update``.

PostgreSQL recomputes a stored generated column on every UPDATE of a row,
whichever columns the UPDATE sets. ``search_tsv`` parsed the page's hint and
up to 100,000 characters of content each time a page moved between tiers,
was counted as accessed, or changed level: about 90 µs of a 120 µs page-row
update (10 rows: 1.27 ms with the expression, 0.31–0.40 ms without), and a
page fault that evicts writes two page rows per victim. ``DROP EXPRESSION``
keeps every stored value and the GIN index. On a Citus cluster, which refuses
``DROP EXPRESSION`` on a distributed table, the values move to a new column
of the same name.
"""

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        do $upgrade$
        declare
          v_distributed boolean := false;
        begin
          if pg_catalog.to_regclass('pg_catalog.pg_dist_partition') is not null then
            -- (dynamic: without Citus the catalog table does not exist to plan against)
            execute 'select exists (select 1 from pg_catalog.pg_dist_partition'
                    ' where logicalrelid = ''memori.pages''::regclass)' into v_distributed;
          end if;
          if not v_distributed then
            -- one server, or a cluster before memori.distribute(): the stored values stay, nothing is rewritten
            alter table memori.pages alter column search_tsv drop expression;
          else
            -- Citus 14 refuses DROP EXPRESSION on a distributed table: a new column takes the values
            -- (the column moves to the end of the row; every reader names its columns)
            alter table memori.pages add column search_tsv_written tsvector;
            update memori.pages set search_tsv_written = search_tsv;
            drop view if exists memori.vm_visible_pages;  -- sql/500-pages.sql creates it again after this
            alter table memori.pages drop column search_tsv;  -- and its GIN index
            alter table memori.pages rename column search_tsv_written to search_tsv;
            create index idx_pages_search_tsv on memori.pages using gin (search_tsv);
          end if;
        end
        $upgrade$;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        drop index if exists memori.idx_pages_search_tsv;
        alter table memori.pages drop column search_tsv;
        alter table memori.pages add column search_tsv tsvector generated always as (
          setweight(to_tsvector('english'::regconfig, coalesce(hint, '')), 'A') ||
          setweight(to_tsvector('english'::regconfig, left(coalesce(content, ''), 100000)), 'B')
        ) stored;
        create index idx_pages_search_tsv on memori.pages using gin (search_tsv);
        """
    )
