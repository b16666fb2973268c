"""Compression keys include the owning user (issue 20): messages, state, plans, checkpoints, snapshots, goals.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-25

Run-once DDL only; the API is sql/400-compression-internals.sql .. 430.

On a Citus cluster every primary key and unique constraint of a distributed
table must contain the distribution column (``user_id``), and a foreign key
between distributed tables must pair it. Session ids become unique per user,
not globally:

- ``messages``: primary key ``(user_id, id)``, unique ``(user_id, session_id, seq)``;
- ``compression_state``: primary key ``(user_id, session_id)``;
- ``compression_plans``, ``compression_checkpoints``, ``snapshots``, ``goals``:
  primary key ``(user_id, id)``; ``uq_goals_active`` (one active goal per
  session) is per ``(user_id, session_id)``;
- ``goal_checkpoints``, ``goal_decisions``, ``goal_artifacts`` already carry
  ``user_id``: it is set from their goal (the functions always wrote the
  goal's user; a row that says otherwise follows its goal), their keys start
  with it and their foreign key becomes ``(user_id, goal_id) -> goals
  (user_id, id) on delete cascade``.

Constraint names are kept. The ``user_id`` indexes the new keys start with
(``idx_messages_user``, ``idx_compression_state_user``) are dropped: the keys
serve them.
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


# the goal parts: table, unique constraint, its columns after user_id
PARTS = (
    ("goal_checkpoints", "goal_checkpoints_goal_id_description_key", "goal_id, description"),
    ("goal_decisions", "goal_decisions_goal_id_description_key", "goal_id, description"),
    ("goal_artifacts", "goal_artifacts_goal_id_path_action_key", "goal_id, path, action"),
)


def upgrade() -> None:
    for table, _, _ in PARTS:  # a part belongs to its goal's user; its old foreign key goes first
        op.execute(
            f"""
            update memori.{table} x set user_id = g.user_id
              from memori.goals g where g.id = x.goal_id and x.user_id is distinct from g.user_id;
            alter table memori.{table} drop constraint {table}_goal_id_fkey
            """
        )
    op.execute(
        """
        alter table memori.messages drop constraint messages_pkey,
          add constraint messages_pkey primary key (user_id, id),
          drop constraint messages_session_id_seq_key,
          add constraint messages_session_id_seq_key unique (user_id, session_id, seq);
        drop index memori.idx_messages_user;

        alter table memori.compression_state drop constraint compression_state_pkey,
          add constraint compression_state_pkey primary key (user_id, session_id);
        drop index memori.idx_compression_state_user;

        alter table memori.compression_plans drop constraint compression_plans_pkey,
          add constraint compression_plans_pkey primary key (user_id, id);
        alter table memori.compression_checkpoints drop constraint compression_checkpoints_pkey,
          add constraint compression_checkpoints_pkey primary key (user_id, id);
        alter table memori.snapshots drop constraint snapshots_pkey,
          add constraint snapshots_pkey primary key (user_id, id);

        alter table memori.goals drop constraint goals_pkey,
          add constraint goals_pkey primary key (user_id, id);
        drop index memori.uq_goals_active;
        create unique index uq_goals_active on memori.goals (user_id, session_id) where status = 'active';
        """
    )
    for table, unique, columns in PARTS:
        op.execute(
            f"""
            alter table memori.{table} drop constraint {table}_pkey,
              add constraint {table}_pkey primary key (user_id, id),
              drop constraint {unique},
              add constraint {unique} unique (user_id, {columns}),
              add constraint {table}_goal_id_fkey foreign key (user_id, goal_id)
                references memori.goals (user_id, id) on delete cascade
            """
        )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
