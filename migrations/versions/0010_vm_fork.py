"""AI virtual memory copy-on-write fork, garbage collection and shared regions (issue 7, seed 03 phase 10).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-22

Run-once DDL only; the API is sql/160-vm-fork.sql, sql/165-vm-gc.sql and
sql/170-vm-regions.sql. A fork stores its whole ancestor chain (one row per
ancestor, flattened) so resolving a session's pages is one join, not a
recursive walk: memori.vm_visible_pages (sql/100) is the only place that reads it.
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- A forked session sees its ancestors' pages as of the fork: the pages of
        -- ancestor_session_id with id <= max_page_id that no closer session overrides.
        -- depth 1 is the parent, 2 the grandparent... No foreign key to the ancestor:
        -- a fork outlives its parent (the parent's shared rows are copied down first).
        create table memori.vm_forks (
          session_id          text not null references memori.vm_sessions on delete cascade,
          ancestor_session_id text not null,
          user_id             text not null,
          depth               integer not null,
          max_page_id         bigint not null,
          forked_at           timestamptz not null,
          primary key (session_id, depth),
          unique (session_id, ancestor_session_id),
          check (depth >= 1)
        );
        -- copy-on-write in the ancestor: which forks still share a page row
        create index idx_vm_forks_ancestor on memori.vm_forks (ancestor_session_id, max_page_id);

        -- memori.vm_gc marks a page by setting expires_at (the retention engine deletes it)
        -- and stamps when, so it only ever unmarks its own marks.
        alter table memori.pages add column gc_marked_at timestamptz;
        create index idx_pages_gc_marked on memori.pages (gc_marked_at) where gc_marked_at is not null;

        -- Shared regions: the only way pages cross users. The owner lists pages
        -- (scope 'pages') or whole sessions (scope 'session') and the users who may read them.
        create table memori.vm_regions (
          region_id   text primary key,
          user_id     text not null,                 -- the owner
          scope       text not null,
          description text,
          created_at  timestamptz not null,
          check (scope in ('pages', 'session'))
        );
        create index idx_vm_regions_user on memori.vm_regions (user_id);

        create table memori.vm_region_members (
          region_id    text not null references memori.vm_regions on delete cascade,
          user_id      text not null,                -- the member (reader)
          region_owner text not null,
          granted_at   timestamptz not null,
          primary key (region_id, user_id)
        );
        create index idx_vm_region_members_user on memori.vm_region_members (user_id, region_id);

        create table memori.vm_region_pages (
          region_id  text not null references memori.vm_regions on delete cascade,
          user_id    text not null,                  -- the owner (of the region and the page)
          session_id text not null references memori.vm_sessions on delete cascade,
          page_id    text not null default '',       -- '' = the whole session (scope 'session')
          added_at   timestamptz not null,
          primary key (region_id, session_id, page_id)
        );
        -- the policy on pages: is this page (or its session) in a region?
        create index idx_vm_region_pages_page on memori.vm_region_pages (session_id, page_id);

        create type memori.session_fork_result as (
          session_id        text,
          source_session_id text,
          depth             integer,        -- ancestors of the new session (1 = a fork of an unforked session)
          shared_pages      bigint,         -- pages the fork sees without a copy
          working_set_pages integer,        -- mapped pages copied with the working set
          forked_at         timestamptz
        );
        create type memori.vm_gc_result as (
          live_sessions bigint,
          reachable     bigint,       -- page rows reachable from a live session
          marked        bigint,       -- newly marked: expire at now + vm.gc_grace
          unmarked      bigint,       -- marked earlier, reachable again: kept
          already_marked bigint,      -- marked earlier, still unreachable
          expires_at    timestamptz   -- when this run's marks expire
        );
        create type memori.region_page as (
          region_id  text,
          owner      text,
          session_id text,
          page_id    text,
          page_type  text,
          modality   text,
          content    text,
          data       jsonb,
          tokens     integer,
          importance real,
          hint       text,
          version    integer,
          updated_at timestamptz
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
