"""Keys of memories, events and checkpoints lead with their user, for Citus (issue 20).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-25

Run-once DDL only; the API is sql/100-memories.sql, sql/030-events.sql,
sql/000-core.sql and sql/110-checkpoints.sql; the policies are
sql/900-security.sql. docs/scale-out.md ("Memories, events and checkpoints")
says what is single-shard.

- ``memori.memories`` is distributed by ``owner_id`` (``user_id`` is seed 05's
  namespace). Rows without an owner get their namespace as owner (seed 05 made
  the namespace the user), so ``owner_id`` is NOT NULL and the primary key is
  ``(owner_id, id)``. The index of ownerless checkpoints has nothing left to
  index and goes.
- ``memori.events``: system events (no user) get the reserved system user
  ``''`` (the empty id: every user id is checked non-blank, so no user can take
  it; Citus refuses NULL distribution values). ``user_id`` is NOT NULL with
  ``''`` as default, the primary key is ``(user_id, id)`` and the per-user
  index skips system events as it skipped NULLs.
- ``memori.checkpoints``: primary key ``(user_id, id)``. Its trigger
  ``checkpoints_pxyz`` (Citus refuses tables with triggers) is gone: the
  functions that write checkpoints set ``pxyz`` (``memori._checkpoint_pxyz``),
  and the CHECK ``checkpoints_pxyz_check`` refuses a row whose coordinate is
  missing or does not match its type (a forged one, or a direct INSERT
  without it).
- ``memori.checkpoint_versions`` gets ``user_id`` (from its checkpoint), the
  primary key ``(user_id, checkpoint_id, version)`` and the foreign key
  ``(user_id, checkpoint_id) -> checkpoints (user_id, id)``, on delete cascade.
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- memories: distributed by the owner
        update memori.memories set owner_id = user_id where owner_id is null;
        alter table memori.memories alter column owner_id set not null;
        alter table memori.memories drop constraint memories_pkey;
        alter table memori.memories add constraint memories_pkey primary key (owner_id, id);
        drop index memori.idx_memories_checkpoint_unowned;

        -- events: system events belong to the system user ''
        update memori.events set user_id = '' where user_id is null;
        alter table memori.events alter column user_id set default '';
        alter table memori.events alter column user_id set not null;
        alter table memori.events drop constraint events_pkey;
        alter table memori.events add constraint events_pkey primary key (user_id, id);
        drop index memori.idx_events_user_time;
        create index idx_events_user_time on memori.events (user_id, occurred_at desc) where user_id <> '';

        -- checkpoints and their versions: keyed by the user
        alter table memori.checkpoint_versions add column user_id text;
        update memori.checkpoint_versions v set user_id = c.user_id
          from memori.checkpoints c where c.id = v.checkpoint_id;
        alter table memori.checkpoint_versions alter column user_id set not null;
        alter table memori.checkpoint_versions drop constraint checkpoint_versions_checkpoint_id_fkey;
        alter table memori.checkpoint_versions drop constraint checkpoint_versions_pkey;
        alter table memori.checkpoints drop constraint checkpoints_pkey;
        alter table memori.checkpoints add constraint checkpoints_pkey primary key (user_id, id);
        alter table memori.checkpoint_versions
          add constraint checkpoint_versions_pkey primary key (user_id, checkpoint_id, version);
        alter table memori.checkpoint_versions
          add constraint checkpoint_versions_checkpoint_id_fkey foreign key (user_id, checkpoint_id)
              references memori.checkpoints (user_id, id) on delete cascade;
        drop trigger if exists checkpoints_pxyz on memori.checkpoints;  -- created by sql/, not a revision
        drop function if exists memori._checkpoint_pxyz();
        alter table memori.checkpoints add constraint checkpoints_pxyz_check
          check (pxyz->>'entity' = 'checkpoint' and pxyz->>'operation' in ('created', 'updated')
                 and pxyz->>'policy' = checkpoint_type and pxyz ? 'time');
        """
    )


def downgrade() -> None:
    raise NotImplementedError("0024 is not reversible: system events and ownerless memories lost their NULLs")
