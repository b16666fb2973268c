"""Page search: say whether total_available is exact (issue 21).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-24

Run-once DDL only; the API is sql/140-vm-search.sql. User-scoped
search_pages counts matches exactly only when asked (p_exact_total);
otherwise the count stops after vm.search_exact_max + 1 pages and the new
column says so.
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- true: total_available is the exact number of matches; false: a lower bound
        -- (the count stopped after vm.search_exact_max + 1 matching pages)
        alter type memori.page_search_result add attribute total_exact boolean;
        """
    )


def downgrade() -> None:
    op.execute("alter type memori.page_search_result drop attribute if exists total_exact")
