"""Scoped context and budgets keyed by their user (issue 20): every key of sessions, context entries and windows,
context chunks and optimisations starts with user_id.

Revision ID: 0025
Revises: 0024
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
- projects carry member_ids, project entries project_owner and readers (the
  project's members): Citus runs a policy on the shards, where it may read no
  other table (not even a reference table), so who may read a row is on the
  row. A project entry's writer is a member (FK (project_id, user_id) ->
  project_members) and its project_owner the project's (FK -> projects).
- context_windows: PK (user_id, window_id), FK (user_id, session_id) -> sessions.
- context_chunks, context_optimizations: PK (user_id, id); their session
  indexes lead with user_id.

Existing rows: a session entry or window whose user_id differs from its
session's (only a superuser could write one) takes the session's user.
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        drop trigger if exists context_entries_pxyz on memori.context_entries;

        -- Who may read a project and its entries is on the row (Citus runs a policy on the shards, where it
        -- may read no other table): a project carries its members, a project entry its project's owner and
        -- members (context_set and project_member_add/remove keep them).
        alter table memori.projects add column member_ids text[] not null default '{}';
        update memori.projects p
           set member_ids = coalesce((select array_agg(m.user_id order by m.user_id) from memori.project_members m
                                       where m.project_id = p.project_id), '{}');
        alter table memori.context_entries add column project_owner text, add column readers text[];
        update memori.context_entries e set project_owner = p.owner_id, readers = p.member_ids
          from memori.projects p where e.scope = 'project' and p.project_id = e.project_id;
        -- a project entry of a writer who is no longer a member passes to the project's owner
        update memori.context_entries e set user_id = e.project_owner
         where e.scope = 'project' and not exists (select 1 from memori.project_members m
                                                    where m.project_id = e.project_id and m.user_id = e.user_id);
        alter table memori.context_entries
          add constraint context_entries_project_readers_check
            check ((scope = 'project') = (project_owner is not null and readers is not null)),
          add constraint context_entries_project_member_fkey foreign key (project_id, user_id)
            references memori.project_members (project_id, user_id) on delete cascade,
          add constraint context_entries_project_owner_fkey foreign key (project_id, project_owner)
            references memori.projects (project_id, owner_id) on update cascade on delete cascade;

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

        alter table memori.context_entries drop constraint context_entries_project_owner_fkey,
          drop constraint context_entries_project_member_fkey, drop constraint context_entries_project_readers_check,
          drop column readers, drop column project_owner;
        alter table memori.projects drop column member_ids;
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
