"""Context store (seed 01, part 2): projects, members, sessions, scoped entries, session windows.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

Run-once DDL only; the API is sql/060-context.sql and the row-level security
policies are sql/900-security.sql. Events get the acting user so they can be
isolated like every other user-scoped row.
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- Projects and their members: "who may see a project entry" is data.
        -- (project_id, owner_id) is unique so members can carry the owner
        -- checked by a foreign key: the owner sees and manages the member list
        -- without a policy on project_members that reads projects (which would
        -- make the two policies recursive).
        create table memori.projects (
          project_id text primary key,
          name       text not null,
          owner_id   text not null,
          metadata   jsonb not null default '{}'::jsonb,
          created_at timestamptz not null default now(),
          unique (project_id, owner_id),
          check (jsonb_typeof(metadata) = 'object')
        );

        create table memori.project_members (
          project_id    text not null,
          user_id       text not null,
          project_owner text not null,
          role          text not null default 'member' check (role in ('owner', 'member')),
          added_at      timestamptz not null default now(),
          primary key (project_id, user_id),
          foreign key (project_id, project_owner) references memori.projects (project_id, owner_id)
            on update cascade on delete cascade
        );
        create index idx_project_members_user on memori.project_members (user_id, project_id);

        -- Sessions belong to one user and optionally to a project. Session ids
        -- are global (the seed uses UUIDs).
        create table memori.sessions (
          session_id    text primary key,
          user_id       text not null,
          project_id    text references memori.projects on delete set null,
          start_time    timestamptz not null default now(),
          last_activity timestamptz not null default now(),
          metadata      jsonb not null default '{}'::jsonb,
          expires_at    timestamptz,
          check (jsonb_typeof(metadata) = 'object')
        );
        create index idx_sessions_user on memori.sessions (user_id, last_activity desc);
        create index idx_sessions_expires_at on memori.sessions (expires_at) where expires_at is not null;

        -- Scoped context entries. scope_owner is the id the scope is keyed on
        -- ('' for global, the user, the project or the session), so one unique
        -- index gives "one value per (scope, owner, key)" and resolution is at
        -- most four probes of it. Keys sort bytewise (collation "C") so a
        -- prefix is an index range.
        create table memori.context_entries (
          id          uuid primary key default gen_random_uuid(),
          key         text collate "C" not null,
          value       jsonb not null,
          type        text not null
                      check (type in ('business_context', 'session_context', 'user_preferences', 'temporary_state')),
          scope       text not null check (scope in ('global', 'user', 'project', 'session')),
          user_id     text not null,
          project_id  text references memori.projects on delete cascade,
          session_id  text references memori.sessions on delete cascade,
          ttl         bigint check (ttl is null or ttl > 0),
          expires_at  timestamptz,
          created_at  timestamptz not null default now(),
          updated_at  timestamptz not null default now(),
          pxyz        jsonb not null default '{}'::jsonb,
          scope_owner text not null generated always as (
                        case scope when 'global' then '' when 'user' then user_id
                                   when 'project' then project_id else session_id end) stored,
          check ((scope = 'project') = (project_id is not null)),
          check ((scope = 'session') = (session_id is not null)),
          check ((ttl is null) = (expires_at is null))
        );
        create unique index idx_context_entries_owner_key on memori.context_entries (scope_owner, key, scope);
        create index idx_context_entries_expires_at on memori.context_entries (expires_at) where expires_at is not null;
        create index idx_context_entries_user on memori.context_entries (user_id);
        create index idx_context_entries_session on memori.context_entries (session_id) where session_id is not null;
        create index idx_context_entries_project on memori.context_entries (project_id) where project_id is not null;

        -- Session context windows (seed 01's context_window), at most
        -- context.max_windows per session.
        create table memori.context_windows (
          window_id        uuid primary key default gen_random_uuid(),
          session_id       text not null references memori.sessions on delete cascade,
          user_id          text not null,
          window_type      text not null
                           check (window_type in ('conversation', 'task_execution', 'project_planning',
                                                  'business_analysis')),
          content          jsonb not null,
          priority         integer not null check (priority between 1 and 10),
          retention_policy text not null
                           check (retention_policy in ('session', 'temporary', 'persistent', 'archived')),
          created_at       timestamptz not null default now(),
          expires_at       timestamptz
        );
        -- eviction order: lowest priority, oldest first
        create index idx_context_windows_session
          on memori.context_windows (session_id, priority, created_at, window_id);
        create index idx_context_windows_expires_at on memori.context_windows (expires_at) where expires_at is not null;

        -- The acting user of an event (NULL: a system event, e.g. cleanup), so
        -- users see only their own events.
        alter table memori.events add column user_id text;
        create index idx_events_user_time on memori.events (user_id, occurred_at desc) where user_id is not null;

        -- Named result types of the context API.
        create type memori.context_value as (
          key        text,
          value      jsonb,
          scope      text,
          type       text,
          entry_id   uuid,
          user_id    text,
          project_id text,
          session_id text,
          expires_at timestamptz,
          updated_at timestamptz
        );
        create type memori.context_stat as (
          dimension     text,
          name          text,
          total         bigint,
          active        bigint,
          expiring_soon bigint,
          expired       bigint,
          value_bytes   bigint
        );
        create type memori.session_context as (
          session_id      text,
          user_id         text,
          project_id      text,
          start_time      timestamptz,
          last_activity   timestamptz,
          metadata        jsonb,
          context_windows jsonb
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
