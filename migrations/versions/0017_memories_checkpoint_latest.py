"""Seed 05's latest-checkpoint read as an index probe (issue 16 item 5).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-24

Run-once DDL only. Seed 05 reads the newest checkpoint of a namespace with
``WHERE user_id = $1 AND metadata->>'type' = 'session_checkpoint' AND (expires_at
IS NULL OR expires_at > NOW()) ORDER BY created_at DESC LIMIT 1``.
idx_memories_session_checkpoints has owner_id after user_id (pymemdb's per-user
reads need it), so that statement read and sorted the whole namespace (295 ms
for a current session namespace of 87,000 rows at 1M rows). This index walks
one namespace newest first: the statement stops at the first unexpired row.
It also serves session_checkpoint_load_latest's legacy tier (``ORDER BY
created_at DESC, id DESC``) without a sort. ~53 bytes a checkpoint (48 MB at
1M rows, 900,000 of them checkpoints).

idx_memories_checkpoint_unowned is the same key for checkpoints without owner
(written by the seed's own client, before pymemdb): the current-namespace tier
of session_checkpoint_load_latest probes them newest first instead of sorting
what ``owner_id IS NULL`` finds in idx_memories_session_checkpoints. It holds
only those rows (empty where every row has an owner).
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create index idx_memories_checkpoint_latest on memori.memories
          (user_id, created_at desc, id desc)
          where metadata->>'type' = 'session_checkpoint';
        create index idx_memories_checkpoint_unowned on memori.memories
          (user_id, created_at desc, id desc)
          where metadata->>'type' = 'session_checkpoint' and owner_id is null;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
