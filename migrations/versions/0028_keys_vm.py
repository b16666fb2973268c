"""The virtual memory's keys include the user (issue 20): every VM table can be distributed by user_id.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-25

Run-once DDL only; the API is sql/500-570. On Citus every primary key, unique
constraint and foreign key of a distributed table must contain its distribution
column, user_id, so session ids, page row ids, fault and mutation ids become
unique per user rather than globally:

- vm_sessions PK (user_id, session_id); pages PK (user_id, id) and UNIQUE
  (user_id, session_id, page_id), FK (user_id, session_id) -> vm_sessions;
- page_versions, page_representations, working_set: PK (user_id, session_id,
  page_id, ...), FK (user_id, session_id, page_id) -> pages;
- page_mutations, page_faults, vm_prefetches: PK (user_id, id);
- vm_forks, vm_segments, vm_pack_cache, vm_prefetches, vm_region_pages: PK and
  UNIQUE with user_id first, FK (user_id, session_id) -> vm_sessions.

Every ON DELETE stays CASCADE, and the constraints keep their names. Every
table already carries user_id (NOT NULL); a child row whose user_id differs from
its parent's (possible only through an owner's direct writes) is realigned to
the parent first, so the new foreign keys hold.

Citus refuses tables with triggers. The four triggers of the pages (pages_notify,
pages_cow, page_representations_cow, page_mutations_append_only) are dropped
here; their rules move into the functions that write the tables and into
privileges (sql/500-pages.sql, 515-vm-log.sql, 560-vm-fork.sql, 900-security.sql).
vm_regions, vm_region_members and vm_recall_signals are reference tables: their
keys stay.
"""

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        drop trigger if exists pages_notify on memori.pages;
        drop trigger if exists pages_cow on memori.pages;
        drop trigger if exists page_representations_cow on memori.page_representations;
        drop trigger if exists page_mutations_append_only on memori.page_mutations;

        do $realign$
        declare
          v_t text;
        begin
          -- children take their parent's user, so the new foreign keys hold; then their
          -- foreign keys go (they depend on the parents' keys) and come back after the keys.
          -- No format(): the psql script (pymemdb init --sql) doubles every percent sign
          foreach v_t in array array['pages', 'vm_forks', 'vm_segments', 'vm_pack_cache', 'vm_prefetches',
                                     'vm_region_pages'] loop
            execute 'update memori.' || quote_ident(v_t) || ' c set user_id = s.user_id from memori.vm_sessions s '
                    'where s.session_id = c.session_id and c.user_id <> s.user_id';
          end loop;
          foreach v_t in array array['page_versions', 'page_representations', 'working_set'] loop
            execute 'update memori.' || quote_ident(v_t) || ' c set user_id = p.user_id from memori.pages p '
                    'where p.session_id = c.session_id and p.page_id = c.page_id and c.user_id <> p.user_id';
            execute 'alter table memori.' || quote_ident(v_t)
                    || ' drop constraint ' || quote_ident(v_t || '_session_id_page_id_fkey');
          end loop;
          foreach v_t in array array['pages', 'vm_forks', 'vm_segments', 'vm_pack_cache', 'vm_prefetches',
                                     'vm_region_pages'] loop
            execute 'alter table memori.' || quote_ident(v_t)
                    || ' drop constraint ' || quote_ident(v_t || '_session_id_fkey');
          end loop;
        end
        $realign$;

        alter table memori.vm_sessions
          drop constraint vm_sessions_pkey,
          add constraint vm_sessions_pkey primary key (user_id, session_id);
        alter table memori.pages
          drop constraint pages_pkey,
          drop constraint pages_session_id_page_id_key,
          add constraint pages_pkey primary key (user_id, id),
          add constraint pages_session_id_page_id_key unique (user_id, session_id, page_id);
        alter table memori.page_versions
          drop constraint page_versions_pkey,
          add constraint page_versions_pkey primary key (user_id, session_id, page_id, version);
        alter table memori.page_representations
          drop constraint page_representations_pkey,
          add constraint page_representations_pkey primary key (user_id, session_id, page_id, level);
        alter table memori.working_set
          drop constraint working_set_pkey,
          add constraint working_set_pkey primary key (user_id, session_id, page_id);
        alter table memori.page_mutations
          drop constraint page_mutations_pkey,
          add constraint page_mutations_pkey primary key (user_id, id);
        alter table memori.page_faults
          drop constraint page_faults_pkey,
          add constraint page_faults_pkey primary key (user_id, id);
        alter table memori.vm_forks
          drop constraint vm_forks_pkey,
          drop constraint vm_forks_session_id_ancestor_session_id_key,
          add constraint vm_forks_pkey primary key (user_id, session_id, depth),
          add constraint vm_forks_session_id_ancestor_session_id_key
            unique (user_id, session_id, ancestor_session_id);
        alter table memori.vm_segments
          drop constraint vm_segments_pkey,
          drop constraint vm_segments_session_id_segment_key,
          add constraint vm_segments_pkey primary key (user_id, session_id, seq),
          add constraint vm_segments_session_id_segment_key unique (user_id, session_id, segment);
        alter table memori.vm_pack_cache
          drop constraint vm_pack_cache_pkey,
          add constraint vm_pack_cache_pkey primary key (user_id, session_id, model, budget, ws_hash);
        alter table memori.vm_prefetches
          drop constraint vm_prefetches_pkey,
          add constraint vm_prefetches_pkey primary key (user_id, id);
        alter table memori.vm_region_pages
          drop constraint vm_region_pages_pkey,
          add constraint vm_region_pages_pkey primary key (user_id, region_id, session_id, page_id);

        do $fkeys$
        declare
          v_t text;
        begin
          -- ON DELETE CASCADE as before, with the user
          foreach v_t in array array['pages', 'vm_forks', 'vm_segments', 'vm_pack_cache', 'vm_prefetches',
                                     'vm_region_pages'] loop
            execute 'alter table memori.' || quote_ident(v_t)
                    || ' add constraint ' || quote_ident(v_t || '_session_id_fkey') || ' foreign key (user_id, session_id)'
                       ' references memori.vm_sessions (user_id, session_id) on delete cascade';
          end loop;
          foreach v_t in array array['page_versions', 'page_representations', 'working_set'] loop
            execute 'alter table memori.' || quote_ident(v_t) || ' add constraint '
                    || quote_ident(v_t || '_session_id_page_id_fkey')
                    || ' foreign key (user_id, session_id, page_id)'
                       ' references memori.pages (user_id, session_id, page_id) on delete cascade';
          end loop;
        end
        $fkeys$;
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
