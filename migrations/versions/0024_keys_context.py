"""Scoped context and budgets keyed by their user (issue 20): every key of sessions, context entries and windows,
context chunks and optimisations starts with user_id.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-25

Run-once DDL only; the API is sql/200-context*.sql and sql/300-budget*.sql, the
policies sql/900-security.sql. Citus distributes a table by user_id only when
every primary key, unique index and foreign key of it includes user_id, and
refuses triggers:

- sessions: PK (user_id, session_id). Session ids become unique per user, not
  globally (two users may both have a session "s1").
- context_entries: PK (user_id, id); the one-value-per-(scope, owner, key)
  index is (user_id, scope_owner, key, scope): a global or project entry is
  kept once per key by context_set (it moves to its last writer), which no
  index can say across shards; a non-unique index on (scope_owner, key) finds
  them. FK (user_id, session_id) -> sessions: a session entry is on one of its
  user's sessions (the policies no longer look that up). The pxyz trigger is
  gone: context_set fills pxyz.
- context_windows: PK (user_id, window_id), FK (user_id, session_id) -> sessions.
- context_chunks, context_optimizations: PK (user_id, id); their session
  indexes lead with user_id.

Existing rows: a session entry or window whose user_id differs from its
session's (only a superuser could write one) takes the session's user.
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        drop trigger if exists context_entries_pxyz on memori.context_entries;

        alter table memori.context_entries drop constraint context_entries_session_id_fkey;
        alter table memori.context_windows drop constraint context_windows_session_id_fkey;

        update memori.context_entries e set user_id = s.user_id
          from memori.sessions s where s.session_id = e.session_id and e.user_id <> s.user_id;
        update memori.context_windows w set user_id = s.user_id
          from memori.sessions s where s.session_id = w.session_id and w.user_id <> s.user_id;

        alter table memori.sessions drop constraint sessions_pkey,
          add constraint sessions_pkey primary key (user_id, session_id);

        alter table memori.context_entries drop constraint context_entries_pkey,
          add constraint context_entries_pkey primary key (user_id, id),
          add constraint context_entries_session_id_fkey foreign key (user_id, session_id)
            references memori.sessions (user_id, session_id) on delete cascade;
        drop index memori.idx_context_entries_owner_key;
        create unique index idx_context_entries_owner_key on memori.context_entries (user_id, scope_owner, key, scope);
        create index idx_context_entries_shared on memori.context_entries (scope_owner, key)
          where scope in ('global', 'project');
        drop index memori.idx_context_entries_user;
        drop index memori.idx_context_entries_session;
        create index idx_context_entries_session on memori.context_entries (user_id, session_id)
          where session_id is not null;

        alter table memori.context_windows drop constraint context_windows_pkey,
          add constraint context_windows_pkey primary key (user_id, window_id),
          add constraint context_windows_session_id_fkey foreign key (user_id, session_id)
            references memori.sessions (user_id, session_id) on delete cascade;
        drop index memori.idx_context_windows_session;
        create index idx_context_windows_session
          on memori.context_windows (user_id, session_id, priority, created_at, window_id);

        alter table memori.context_chunks drop constraint context_chunks_pkey,
          add constraint context_chunks_pkey primary key (user_id, id);
        drop index memori.idx_context_chunks_rank;
        create index idx_context_chunks_rank on memori.context_chunks (user_id, session_id, seq)
          include (id, chunk_type, tokens, ts_us, rag_boost, business_boost, revenue_boost, business, expires_at);
        drop index memori.idx_context_chunks_user;

        alter table memori.context_optimizations drop constraint context_optimizations_pkey,
          add constraint context_optimizations_pkey primary key (user_id, id);
        drop index memori.idx_context_optimizations_session_time;
        create index idx_context_optimizations_session_time
          on memori.context_optimizations (user_id, session_id, created_at desc) where session_id is not null;
        """
    )


def downgrade() -> None:
    # fails when two users share a session id (unique per user since this revision)
    op.execute(
        """
        drop index memori.idx_context_optimizations_session_time;
        create index idx_context_optimizations_session_time
          on memori.context_optimizations (session_id, created_at desc) where session_id is not null;
        alter table memori.context_optimizations drop constraint context_optimizations_pkey,
          add constraint context_optimizations_pkey primary key (id);

        drop index memori.idx_context_chunks_rank;
        create index idx_context_chunks_rank on memori.context_chunks (session_id, seq)
          include (id, chunk_type, tokens, ts_us, rag_boost, business_boost, revenue_boost, business, expires_at);
        create index idx_context_chunks_user on memori.context_chunks (user_id);
        alter table memori.context_chunks drop constraint context_chunks_pkey,
          add constraint context_chunks_pkey primary key (id);

        alter table memori.context_windows drop constraint context_windows_session_id_fkey;
        alter table memori.context_entries drop constraint context_entries_session_id_fkey;
        alter table memori.sessions drop constraint sessions_pkey, add constraint sessions_pkey primary key (session_id);

        drop index memori.idx_context_windows_session;
        create index idx_context_windows_session
          on memori.context_windows (session_id, priority, created_at, window_id);
        alter table memori.context_windows drop constraint context_windows_pkey,
          add constraint context_windows_pkey primary key (window_id),
          add constraint context_windows_session_id_fkey foreign key (session_id)
            references memori.sessions on delete cascade;

        drop index memori.idx_context_entries_session;
        create index idx_context_entries_session on memori.context_entries (session_id) where session_id is not null;
        create index idx_context_entries_user on memori.context_entries (user_id);
        drop index memori.idx_context_entries_shared;
        drop index memori.idx_context_entries_owner_key;
        create unique index idx_context_entries_owner_key on memori.context_entries (scope_owner, key, scope);
        alter table memori.context_entries drop constraint context_entries_pkey,
          add constraint context_entries_pkey primary key (id),
          add constraint context_entries_session_id_fkey foreign key (session_id)
            references memori.sessions on delete cascade;
        """
    )
