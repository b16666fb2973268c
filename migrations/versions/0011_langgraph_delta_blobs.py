"""LangGraph saver performance (issue 9 follow-up): delta-encoded list blobs, a read stamp.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-22

Run-once DDL only; the API is sql/130-langgraph.sql.

A LangGraph channel that grows by appending (a message list) is stored as the
new tail only: a version of it is the msgpack array of its base version's
items followed by ``items`` more, whose encodings are ``blob``. ``base`` lists
the versions it is built on, root (a full value) first, so a read fetches the
whole chain by key. ``memori.lg_blob_value(...)`` decodes any version in SQL.
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- NULL for a full value; for a delta: the versions it extends, root first
        alter table memori.lg_blobs add column base text[];
        -- a delta's number of appended items (the msgpack encodings in blob)
        alter table memori.lg_blobs add column items integer;
        alter table memori.lg_blobs add constraint lg_blobs_delta_check
          check ((base is null) = (items is null) and (base is null or (items >= 0 and cardinality(base) >= 1)));

        -- what a reader checks its cached copy against: thread key, row version and id of
        -- the checkpoint; the row versions of its pending writes
        alter type memori.lg_tuple add attribute stamp text, add attribute writes_stamp text;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
