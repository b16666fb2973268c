"""Store items keep which fields are full-text indexed, not the full-text vector (issue 17).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-25

Run-once DDL only; the API is sql/810-store.sql.

The stored ``search_tsv`` was a fifth of an item's bytes (104 of 504 per item
in ``pymemdb bench store``) and its computation part of every put. An item
now records only *what* is indexed, ``text_fields``: NULL (not indexed), ``$``
(the whole value), the field paths joined by newlines, or a literal text
(first character U+0002, from ``store_put(p_text => ...)``). Searches derive
the vector with ``memori._store_item_tsv(value, text_fields)``, over the few
matching items or through the optional GIN expression index
(``memori.store_index_ensure(p_method => 'text')``).

Items written before this revision keep full text over their whole value
(``$``): which fields had been indexed is not recoverable from a tsvector.
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        alter table memori.store_items add column text_fields text;
        update memori.store_items set text_fields = '$' where search_tsv is not null;
        -- drops the optional GIN index on it too; store_index_ensure('text') recreates one on the expression
        alter table memori.store_items drop column search_tsv;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
