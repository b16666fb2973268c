"""The virtual memory keeps its promises (issue 15): claim supersession, expiry in the page-table entry.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24

Run-once DDL only; the API is sql/100-pages.sql, sql/140-vm-search.sql and
sql/150-vm-lifecycle.sql.

A claim that a newer decision replaces stays a page (history, provenance),
marked with the claim that supersedes it, when and why. The page-table entry a
client caches (its TLB) carries the page's expiry, so a cached entry is never
served at or after it.
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- seed 03, 8.3: last write wins; the superseded claim keeps its provenance
        alter table memori.pages add column superseded_by text;
        alter table memori.pages add column superseded_at timestamptz;
        alter table memori.pages add column supersede_reason text;
        alter table memori.pages add constraint pages_supersede_check
          check ((superseded_by is null) = (superseded_at is null) and superseded_by is distinct from page_id);

        -- a supersession is logged like any other page mutation
        alter table memori.page_mutations drop constraint page_mutations_mutation_type_check;
        alter table memori.page_mutations add constraint page_mutations_mutation_type_check
          check (mutation_type in ('create', 'fault_in', 'evict', 'compress', 'pin', 'unpin', 'update', 'supersede'));

        -- two current claims on one topic that say different things
        create type memori.claim_conflict as (
          session_id      text,
          topic           text,
          claim_id        text,
          content         text,
          created_at      timestamptz,
          other_claim_id  text,
          other_content   text,
          other_created_at timestamptz
        );

        -- the client's page-table cache serves an entry only before the page expires
        alter type memori.page_table_entry add attribute expires_at timestamptz;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
