"""The LangGraph saver's keys carry the user (issue 20): its tables distribute by user_id on Citus.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-25

Run-once DDL only; the API is sql/800-langgraph.sql. Every key of lg_threads,
lg_checkpoints, lg_blobs and lg_writes starts with user_id, and the children's
foreign keys to their thread are (user_id, thread) -> lg_threads (user_id, id),
still ON DELETE CASCADE: Citus needs the distribution column in every unique
constraint and foreign key of co-located tables. The children already carry
user_id (0007); it is re-derived from the thread here in case a row disagrees.
The trigger lg_checkpoints_writes_gone goes (Citus refuses tables with
triggers): the functions that delete checkpoints (lg_threads_prune,
lg_runs_delete) delete their pending writes in the same statement. Names of
constraints and indexes are kept.
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        drop trigger if exists lg_checkpoints_writes_gone on memori.lg_checkpoints;
        drop function if exists memori._lg_writes_gone();

        alter table memori.lg_checkpoints drop constraint lg_checkpoints_thread_fkey;
        alter table memori.lg_blobs drop constraint lg_blobs_thread_fkey;
        alter table memori.lg_writes drop constraint lg_writes_thread_fkey;

        update memori.lg_checkpoints c set user_id = t.user_id
          from memori.lg_threads t where t.id = c.thread and c.user_id <> t.user_id;
        update memori.lg_blobs b set user_id = t.user_id
          from memori.lg_threads t where t.id = b.thread and b.user_id <> t.user_id;
        update memori.lg_writes w set user_id = t.user_id
          from memori.lg_threads t where t.id = w.thread and w.user_id <> t.user_id;

        alter table memori.lg_threads
          drop constraint lg_threads_pkey,
          add constraint lg_threads_pkey primary key (user_id, id);

        alter table memori.lg_checkpoints
          drop constraint lg_checkpoints_pkey,
          drop constraint lg_checkpoints_thread_checkpoint_ns_checkpoint_id_key,
          add constraint lg_checkpoints_pkey primary key (user_id, id),
          add constraint lg_checkpoints_thread_checkpoint_ns_checkpoint_id_key
            unique (user_id, thread, checkpoint_ns, checkpoint_id),
          add constraint lg_checkpoints_thread_fkey foreign key (user_id, thread)
            references memori.lg_threads (user_id, id) on delete cascade;
        drop index memori.idx_lg_checkpoints_latest;
        create index idx_lg_checkpoints_latest on memori.lg_checkpoints (user_id, thread, checkpoint_ns, checkpoint_id)
          where expires_at is null;

        alter table memori.lg_blobs
          drop constraint lg_blobs_pkey,
          drop constraint lg_blobs_thread_checkpoint_ns_channel_version_key,
          add constraint lg_blobs_pkey primary key (user_id, id),
          add constraint lg_blobs_thread_checkpoint_ns_channel_version_key
            unique (user_id, thread, checkpoint_ns, channel, version),
          add constraint lg_blobs_thread_fkey foreign key (user_id, thread)
            references memori.lg_threads (user_id, id) on delete cascade;

        alter table memori.lg_writes
          drop constraint lg_writes_pkey,
          drop constraint lg_writes_id_key,
          add constraint lg_writes_pkey primary key (user_id, thread, checkpoint_ns, checkpoint_id, task_id, idx),
          add constraint lg_writes_id_key unique (user_id, id),
          add constraint lg_writes_thread_fkey foreign key (user_id, thread)
            references memori.lg_threads (user_id, id) on delete cascade;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
