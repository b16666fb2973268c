"""AI virtual memory search (issue 7, seed 03 phases 6 and 13): embeddings and full text on pages.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22

Run-once DDL only; the API is sql/140-vm-search.sql. The vector type is
qualified with pgvector's schema (public, where 0001 creates the extension)
because every memori function pins search_path to pg_catalog, memori, pg_temp.
The dimension is recorded in memori.settings (vm.embedding_dim) so the API can
reject query embeddings of another size with a hint instead of pgvector's error.
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- Embedding of a page's content (written by the client's Embedder); NULL: full-text only.
        alter table memori.pages add column embedding public.vector(384);

        -- What full-text search matches: hint (weight A) and content (weight B), the
        -- first 100,000 characters of content (a tsvector holds at most 1 MB).
        alter table memori.pages add column search_tsv tsvector generated always as (
          setweight(to_tsvector('english'::regconfig, coalesce(hint, '')), 'A') ||
          setweight(to_tsvector('english'::regconfig, left(coalesce(content, ''), 100000)), 'B')
        ) stored;

        create index idx_pages_search_tsv on memori.pages using gin (search_tsv);
        -- approximate nearest neighbours for user-scoped search (cosine distance)
        create index idx_pages_embedding_hnsw on memori.pages using hnsw (embedding public.vector_cosine_ops);

        -- the provenance graph walked downwards: which pages derive from a page
        create index idx_pages_provenance on memori.pages using gin (provenance);

        -- memori.search_pages: metadata of a matching page, never its content (seed 03's search result)
        create type memori.page_search_result as (
          page_id         text,
          session_id      text,
          modality        text,
          tier            text,
          levels          integer[],        -- levels a page_fault can map: 0 and the compressed ones written
          hint            text,
          relevance       double precision, -- reciprocal-rank fusion, 1.0 = first in every ranking used
          total_available bigint,           -- pages in scope that match, before the limit
          mode            text              -- 'hybrid' (full text + vectors) or 'full_text'
        );

        -- pages_by_type, page_provenance_chain, pages_top_importance (seed 03 phase 13's page index)
        create type memori.page_index_entry as (
          session_id    text,
          page_id       text,
          page_type     text,
          modality      text,
          tier          text,
          importance    real,
          tokens        integer,
          access_count  bigint,
          last_accessed timestamptz,
          hint          text,
          provenance    text[],
          depth         integer              -- steps from the start page (provenance chain), else NULL
        );

        insert into memori.settings (key, value, description) values
          ('vm.embedding_dim', '384', 'Dimension of memori.pages.embedding (fixed at install by migration 0008).')
        on conflict (key) do nothing;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        delete from memori.settings where key = 'vm.embedding_dim';
        drop type if exists memori.page_index_entry;
        drop type if exists memori.page_search_result;
        drop index if exists memori.idx_pages_provenance;
        drop index if exists memori.idx_pages_embedding_hnsw;
        drop index if exists memori.idx_pages_search_tsv;
        alter table memori.pages drop column if exists search_tsv;
        alter table memori.pages drop column if exists embedding;
        """
    )
