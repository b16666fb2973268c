"""The working set carries what the eviction order reads from a page (issue 21).

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29

Run-once DDL only; the writers are sql/505-vm-working-set.sql (``_vm_map``),
sql/560-vm-fork.sql (``session_fork``) and sql/550-vm-lifecycle.sql (a
superseded claim), the reader ``_vm_candidates``.

Every eviction ranked the session's whole working set joined to
``memori.pages`` (one index probe per mapped page: ~400 with an 8k-token L0
full of level-3 references, 0.6-1.1 ms a call, a third of an evicting fault's
server time). The page columns the order reads (type, modality, importance,
superseded, the turns of its last eviction and fault) do not change while the
page is mapped, except a supersede, so they are copied into its working-set
row when it is mapped and the order reads the working set alone.
"""

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        alter table memori.working_set
          add column page_type text,
          add column modality text,
          add column importance double precision,
          add column superseded boolean not null default false,
          add column last_evict_turn integer,
          add column last_fault_turn integer;
        update memori.working_set w
           set page_type = p.page_type, modality = p.modality, importance = p.importance,
               superseded = p.superseded_by is not null, last_evict_turn = p.last_evict_turn,
               last_fault_turn = p.last_fault_turn
          from memori.pages p
         where p.user_id = w.user_id and p.session_id = w.session_id and p.page_id = w.page_id;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        alter table memori.working_set
          drop column page_type, drop column modality, drop column importance, drop column superseded,
          drop column last_evict_turn, drop column last_fault_turn;
        """
    )
