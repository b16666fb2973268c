"""Repair databases installed from a revision file that was edited after it landed (issue 16, item 7).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24

Two landed revision files were changed in place after databases had been
installed from them, so those databases carry the old DDL under the same
revision number:

- 0001 as first landed: ``idx_memories_session_checkpoints`` was
  ``(user_id text_pattern_ops, created_at desc)``, the statistics object
  ``memories_type_stats`` and the cleanup plan cursor columns of
  ``memori.cleanup_runs`` did not exist;
- 0002 as first landed: ``idx_checkpoints_session_time`` ended in ``id``,
  not ``id desc``.

Each step checks the catalog and changes only what differs, so on any other
database this revision does nothing. (Revisions that were re-chained under an
already landed one, 0004, 0006 and 0009, are replayed by the installer before
alembic runs: pymemdb.install.RECHAINED.) Run-once DDL only.
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        do $repair$
        begin
          -- 0002 as first landed: (session_id, created_at desc, id)
          if (select pg_get_indexdef('memori.idx_checkpoints_session_time'::regclass))
             !~ 'created_at DESC, id DESC\\)$' then
            drop index memori.idx_checkpoints_session_time;
            create index idx_checkpoints_session_time on memori.checkpoints (session_id, created_at desc, id desc);
          end if;

          -- 0001 as first landed: the namespace-only checkpoint index
          if (select pg_get_indexdef('memori.idx_memories_session_checkpoints'::regclass))
             ~ '\\(user_id text_pattern_ops, created_at DESC\\)' then
            drop index memori.idx_memories_session_checkpoints;
            create index idx_memories_session_checkpoints on memori.memories
              (user_id text_pattern_ops, owner_id, created_at desc, id desc)
              where metadata->>'type' = 'session_checkpoint';
          end if;
          if not exists (select from pg_statistic_ext
                          where stxnamespace = 'memori'::regnamespace and stxname = 'memories_type_stats') then
            create statistics memori.memories_type_stats on ((metadata->>'type')) from memori.memories;
          end if;
          if not exists (select from pg_attribute
                          where attrelid = 'memori.cleanup_runs'::regclass and attname = 'plan_done'
                            and not attisdropped) then
            alter table memori.cleanup_runs
              add column plan_done       boolean not null default false,
              add column cursor_priority integer,
              add column cursor_expires  timestamptz,
              add column cursor_table    text,
              add column cursor_row_id   text;
          end if;
        end
        $repair$;
        """
    )


def downgrade() -> None:
    pass  # nothing to undo: the repaired objects are what 0001 and 0002 create today
