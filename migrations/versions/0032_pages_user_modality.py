"""The page search's filters through an index (issue 21): ``pages (user_id, modality, page_type)``.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29

Run-once DDL only; the search is sql/540-vm-search.sql.

A user-scope ``search_pages`` with a selective filter (``p_modality``,
``p_page_types``) counted its matches and ranked them exactly by reading
every page of the user: no index served the filter, so 1,000 images among
100,000 pages cost two scans of all of them. ``idx_pages_user_filters`` on
``(user_id, modality, page_type)`` lets the bounded count and the exact
ranking read only the matching rows (a modality is a prefix; page types are
checked in the index).

It replaces ``idx_pages_user`` on ``(user_id)``, which every lookup by user
can take from the new index (its first column) or from the primary key
``(user_id, id)``: ``memori.pages`` keeps as many indexes as before, so a row
update that changes an indexed column (a page fault's ``last_accessed``)
writes no more index entries. Neither column is changed by an update of a
memori function.
"""

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create index idx_pages_user_filters on memori.pages (user_id, modality, page_type);
        drop index memori.idx_pages_user;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        create index idx_pages_user on memori.pages (user_id);
        drop index memori.idx_pages_user_filters;
        """
    )
