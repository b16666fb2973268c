-- pymemdb SQL API, part 18: shared memory regions (seed 03, 10.5 memory isolation).
--
-- Pages follow the per-user row-level isolation of every user-scoped table
-- (sql/900-security.sql): a user sees and writes only their own pages. A
-- shared region is the one way a page crosses users: its owner gives it a
-- scope ('pages': exactly the pages put in it; 'session': every page of the
-- sessions put in it, later ones included) and an access list of user ids.
-- A listed user may read (never write) the region's pages and their
-- representations: the policies region_read on memori.pages and
-- memori.page_representations say so. Revoking a user, removing a page or
-- dropping the region takes the access away at once.

comment on table memori.vm_regions is 'Shared regions: an owner''s named set of pages (scope pages) or sessions (scope session) that listed users may read.';
comment on table memori.vm_region_members is 'The access list of a shared region: users who may read its pages.';
comment on table memori.vm_region_pages is 'What a shared region holds: pages (page_id) or whole sessions (page_id = '''').';

-------------------------------------------------------------------------------
-- _region_member: is the acting user on the access list of a region of p_owner?
-- The row-level-security policies member_read of memori.vm_regions and
-- memori.vm_region_pages call it: on a Citus cluster a policy may not hold a
-- subquery, but may call a function, and this one reads only
-- memori.vm_region_members, a reference table (a copy on every node). The
-- policy runs on the shards, so the read is a query nested in a shard's query,
-- which Citus refuses unless allowed; it is safe here: a reference table is
-- read from the node's own copy. The member row's region_owner must be the
-- owner of the region or the entry: rows a user forges in their own name
-- grant nothing.
create or replace function memori._region_member(p_region_id text, p_owner text) returns boolean
as $func$
  select exists (select 1 from memori.vm_region_members m
                  where m.region_id = p_region_id and m.region_owner = p_owner
                    and m.user_id = current_setting('memori.user_id', true))
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp
set citus.allow_nested_distributed_execution = on;
comment on function memori._region_member(text, text) is 'Whether memori.user_id is on the access list of region p_region_id owned by p_owner (the region policies'' check; reads the reference table vm_region_members only).';

-------------------------------------------------------------------------------
-- _region_page_shared: is another user's page (or its session) in a region the acting user is on?
-- The policies region_read of memori.pages and memori.page_representations call
-- it for rows that are not the acting user's. It reads the page owner's
-- region entries (memori.vm_region_pages, co-located with the pages: on a
-- cluster the same shard's node) and the reference table vm_region_members,
-- a query nested in the shard's, allowed as in _region_member.
create or replace function memori._region_page_shared(p_owner text, p_session_id text, p_page_id text)
returns boolean
as $func$
  select exists (select 1 from memori.vm_region_pages rp
                   join memori.vm_region_members m on m.region_id = rp.region_id and m.region_owner = rp.user_id
                  where rp.user_id = p_owner and rp.session_id = p_session_id
                    and (rp.page_id = '' or rp.page_id = p_page_id)
                    and m.user_id = current_setting('memori.user_id', true))
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp
set citus.allow_nested_distributed_execution = on;
comment on function memori._region_page_shared(text, text, text) is 'Whether a page of p_owner (or its whole session) is in a region whose access list holds memori.user_id (the region_read policies'' check).';

-------------------------------------------------------------------------------
-- _region_owned: a region of the acting user, locked unless asked not to
-- The lock serialises changes of the region row and its access list (grant, revoke, drop).
-- Putting and removing entries does not take it: an entry's foreign key to the region
-- holds the region for the entry's insert, and a drop cascades to the entries. On a
-- cluster the lock is a write-lock of a reference table (on its first placement):
-- without it the entry functions run on the owner's shard alone, delegated too.
create or replace function memori._region_owned(p_region_id text, p_user_id text, p_lock boolean default true)
returns memori.vm_regions
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
  v_r    memori.vm_regions;
begin
  perform memori._check_identifier('region id', p_region_id);
  -- read first, lock after the owner check: FOR UPDATE would hide a region the user only reads
  select * into v_r from memori.vm_regions where region_id = p_region_id;
  if not found then
    raise exception 'no region %', quote_literal(p_region_id)
      using errcode = 'PM005', hint = 'Create it with memori.region_create (region ids are unique across users).';
  end if;
  if v_r.user_id <> v_user then
    raise exception 'region % belongs to another user', quote_literal(p_region_id)
      using errcode = 'PM095', hint = 'Only the owner of a region changes it; ask them to share with you.';
  end if;
  if p_lock then
    perform 1 from memori.vm_regions where region_id = p_region_id for update;
  end if;
  return v_r;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._region_owned(text, text, boolean) is 'A region of the acting user, locked FOR UPDATE unless p_lock is false; PM005 when missing (or invisible), PM095 when another user''s.';

-------------------------------------------------------------------------------
-- region_create: a new shared region
-- p_region_id: the region's id, unique across all users (PM096 when taken); non-empty, no control characters
--   (PM001)
-- p_scope: 'pages' (exactly the pages put in it) or 'session' (every page of the sessions put in it, later
--   ones included); else PM004
-- p_description: free text shown by region_list; NULL: none
create or replace function memori.region_create(
  p_region_id   text,
  p_scope       text default 'pages',
  p_description text default null,
  p_user_id     text default null,
  p_now         timestamptz default now()
) returns memori.vm_regions
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
  v_r    memori.vm_regions;
begin
  perform memori._check_identifier('region id', p_region_id);
  if p_scope is null or p_scope not in ('pages', 'session') then
    raise exception 'unknown region scope %', coalesce(quote_literal(p_scope), 'NULL')
      using errcode = 'PM004', hint = 'Use ''pages'' (the pages put in it) or ''session'' (whole sessions).';
  end if;
  begin
    insert into memori.vm_regions (region_id, user_id, scope, description, created_at)
    values (p_region_id, v_user, p_scope, p_description, p_now)
    returning * into v_r;
  exception when unique_violation then
    raise exception 'region % already exists', quote_literal(p_region_id)
      using errcode = 'PM096', hint = 'Region ids are unique across users: pick another one.';
  end;
  perform memori._event_emit('region.created', jsonb_build_object('region_id', p_region_id, 'scope', p_scope), p_now);
  return v_r;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_create(text, text, text, text, timestamptz) is 'Create a shared region owned by the acting user, scope pages or session; PM096 when the id is taken.';

-------------------------------------------------------------------------------
-- _region_member_event: the event of an access-list change, when there was one
create or replace function memori._region_member_event(
  p_rows integer, p_event text, p_region_id text, p_member_id text, p_now timestamptz
) returns boolean
as $func$
begin
  if p_rows > 0 then
    perform memori._event_emit(p_event, jsonb_build_object('region_id', p_region_id, 'member', p_member_id), p_now);
  end if;
  return p_rows > 0;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._region_member_event(integer, text, text, text, timestamptz) is 'Emit region.granted or region.revoked when the access list changed (p_rows > 0); returns whether it did.';

-------------------------------------------------------------------------------
-- region_grant: let a user read a region
-- p_region_id: a region of the acting user (PM005 when missing, PM095 when another user's)
-- p_member_id: the user given read access: non-empty (PM001), not the owner (PM001); already listed: false
create or replace function memori.region_grant(
  p_region_id text, p_member_id text, p_user_id text default null, p_now timestamptz default now()
) returns boolean
as $func$
declare
  v_r memori.vm_regions := memori._region_owned(p_region_id, p_user_id);
  v_n integer;
begin
  perform memori._check_identifier('member id', p_member_id);
  if p_member_id = v_r.user_id then
    perform memori._invalid('the owner reads a region without being listed', 'Grant it to another user.');
  end if;
  insert into memori.vm_region_members (region_id, user_id, region_owner, granted_at)
  values (v_r.region_id, p_member_id, v_r.user_id, p_now)
  on conflict do nothing;
  get diagnostics v_n = row_count;
  return memori._region_member_event(v_n, 'region.granted', v_r.region_id, p_member_id, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_grant(text, text, text, timestamptz) is 'Add a user to a region''s access list (read only); true when added, false when already listed. Owner only (PM095).';

-------------------------------------------------------------------------------
-- region_revoke: take a user off a region's access list
-- p_region_id: a region of the acting user (PM005 when missing, PM095 when another user's)
-- p_member_id: the user taken off the access list; not listed: false
create or replace function memori.region_revoke(
  p_region_id text, p_member_id text, p_user_id text default null, p_now timestamptz default now()
) returns boolean
as $func$
declare
  v_r memori.vm_regions := memori._region_owned(p_region_id, p_user_id);
  v_n integer;
begin
  delete from memori.vm_region_members where region_id = v_r.region_id and user_id = p_member_id;
  get diagnostics v_n = row_count;
  return memori._region_member_event(v_n, 'region.revoked', v_r.region_id, p_member_id, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_revoke(text, text, text, timestamptz) is 'Remove a user from a region''s access list; true when they were listed. Owner only (PM095).';

-------------------------------------------------------------------------------
-- region_page_put: put a page (scope pages) or a session (scope session) in a region
-- p_region_id: a region of the acting user (PM005 when missing, PM095 when another user's)
-- p_session_id: a VM session of the region's owner (PM005 when missing, PM041 when another user's): the
--   session shared whole (scope 'session') or the page's session (scope 'pages')
-- p_page_id: the page shared (PM005 when missing or expired): required in scope 'pages', NULL in scope
--   'session' (else PM097); already in the region: false
create or replace function memori.region_page_put(
  p_region_id  text,
  p_session_id text,
  p_page_id    text default null,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns boolean
as $func$
declare
  v_r memori.vm_regions := memori._region_owned(p_region_id, p_user_id, false);
  v_s memori.vm_sessions := memori._vm_session_read(p_session_id);
  v_p memori.pages;
  v_n integer;
begin
  if v_s.user_id <> v_r.user_id then
    raise exception 'session % belongs to another user', quote_literal(p_session_id)
      using errcode = 'PM041', hint = 'Share only your own sessions and pages.';
  end if;
  if v_r.scope = 'pages' and p_page_id is null then
    raise exception 'region % shares pages: name one', quote_literal(p_region_id)
      using errcode = 'PM097', hint = 'Pass p_page_id, or share whole sessions through a region of scope ''session''.';
  end if;
  if v_r.scope = 'session' and p_page_id is not null then
    raise exception 'region % shares whole sessions, not pages', quote_literal(p_region_id)
      using errcode = 'PM097', hint = 'Omit p_page_id, or put the page in a region of scope ''pages''.';
  end if;
  if p_page_id is not null then
    -- a fork's shared page is stored in its ancestor: the region names the row readers will find
    v_p := memori._page_get(p_session_id, p_page_id, p_now, false);
  end if;
  insert into memori.vm_region_pages (region_id, user_id, session_id, page_id, added_at)
  values (v_r.region_id, v_r.user_id, coalesce(v_p.session_id, p_session_id), coalesce(p_page_id, ''), p_now)
  on conflict do nothing;
  get diagnostics v_n = row_count;
  return v_n > 0;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_page_put(text, text, text, text, timestamptz) is 'Put one of the owner''s pages (scope pages) or sessions (scope session, p_page_id NULL) in a region; PM097 on a scope mismatch.';

-------------------------------------------------------------------------------
-- region_page_remove: take a page or session out of a region
-- p_region_id: a region of the acting user (PM005 when missing, PM095 when another user's)
-- p_session_id: the session of the entry taken out (for a fork's page, the fork or the ancestor holding it)
-- p_page_id: the page taken out; NULL: the whole-session entry; not in the region: false
create or replace function memori.region_page_remove(
  p_region_id text, p_session_id text, p_page_id text default null, p_user_id text default null
) returns boolean
as $func$
declare
  v_r    memori.vm_regions := memori._region_owned(p_region_id, p_user_id, false);
  v_held text;  -- the session whose row a fork's shared page is (region_page_put names that one)
  v_id   bigint;
  v_n    integer;
begin
  -- the row the session sees under the id, in probes of the owner's rows (one shard on Citus)
  v_id := memori._page_row(v_r.user_id, p_session_id, p_page_id);
  select p.session_id into v_held from memori.pages p where p.user_id = v_r.user_id and p.id = v_id;
  delete from memori.vm_region_pages
   where user_id = v_r.user_id and region_id = v_r.region_id and page_id = coalesce(p_page_id, '')
     and session_id in (p_session_id, v_held);
  get diagnostics v_n = row_count;
  return v_n > 0;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_page_remove(text, text, text, text) is 'Take a page (or a whole session, p_page_id NULL) out of a region; true when it was in. Owner only (PM095).';

-------------------------------------------------------------------------------
-- region_pages: read a region's pages (owner or listed user)
-- p_region_id: a region the acting user owns or is listed on (PM095 otherwise, and when missing)
-- p_limit: most pages returned, 1 to 10000 (else PM001)
create or replace function memori.region_pages(
  p_region_id text,
  p_user_id   text default null,
  p_limit     integer default 100,
  p_now       timestamptz default now()
) returns setof memori.region_page
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
  v_r    memori.vm_regions;
begin
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    perform memori._invalid(format('limit %s is outside 1..10000', coalesce(p_limit::text, 'NULL')),
                            'Ask for 1 to 10,000 pages.');
  end if;
  select * into v_r from memori.vm_regions where region_id = p_region_id;
  -- the same answer for a missing region and one the user is not on: nothing to learn by probing
  if not found or (v_r.user_id <> v_user
                   and not exists (select 1 from memori.vm_region_members m
                                    where m.region_id = p_region_id and m.user_id = v_user)) then
    raise exception 'no region % shared with %', quote_literal(p_region_id), quote_literal(v_user)
      using errcode = 'PM095', hint = 'Ask the region''s owner to grant you access (memori.region_grant).';
  end if;
  -- a region's entries and pages are its owner's (forged entries name their writer): one
  -- user's rows, on a cluster the owner's shard, whoever reads
  return query
    select v_r.region_id, p.user_id, p.session_id, p.page_id, p.page_type, p.modality, p.content, p.data,
           p.tokens, p.importance, p.hint, p.version, p.updated_at
      from memori.vm_region_pages rp
      join memori.pages p on p.user_id = v_r.user_id and p.session_id = rp.session_id
                         and (rp.page_id = '' or p.page_id = rp.page_id)
     where rp.user_id = v_r.user_id and rp.region_id = v_r.region_id
       and (p.expires_at is null or p.expires_at > p_now)
     order by p.session_id, p.id
     limit p_limit;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_pages(text, text, integer, timestamptz) is 'The unexpired pages of a region with their content, for its owner or a listed user; PM095 otherwise.';

-------------------------------------------------------------------------------
-- region_list: the regions the acting user owns or is listed on
create or replace function memori.region_list(p_user_id text default null)
returns table (region_id text, owner text, scope text, description text, members text[], entries bigint,
               created_at timestamptz)
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_ids     text[];
  v_entries jsonb := '{}';
  v_owner   record;
begin
  v_ids := array(select r.region_id from memori.vm_regions r
                  where r.user_id = v_user
                     or exists (select 1 from memori.vm_region_members m
                                 where m.region_id = r.region_id and m.region_owner = r.user_id and m.user_id = v_user));
  -- the entries of each region are its owner's rows (forged entries name their writer), counted
  -- owner by owner: on a cluster one statement on each owner's shard, so a user who reads only
  -- their own regions stays on one shard; regions shared by others are multi-shard by design
  for v_owner in
    select r.user_id, array_agg(r.region_id) as ids from memori.vm_regions r
     where r.region_id = any (v_ids) group by r.user_id
  loop
    select v_entries || coalesce(jsonb_object_agg(c.region_id, c.n), '{}') into v_entries
      from (select rp.region_id, count(*) as n
              from memori.vm_region_pages rp
             where rp.user_id = v_owner.user_id and rp.region_id = any (v_owner.ids)
             group by rp.region_id) c;
  end loop;
  return query
    select r.region_id, r.user_id, r.scope, r.description,
           case when r.user_id = v_user
                then coalesce((select array_agg(m.user_id order by m.user_id) from memori.vm_region_members m
                                where m.region_id = r.region_id), '{}') end,
           coalesce((v_entries ->> r.region_id)::bigint, 0),
           r.created_at
      from memori.vm_regions r
     where r.region_id = any (v_ids)
     order by r.region_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_list(text) is 'Regions the acting user owns (with the access list) or may read (members NULL), with how many entries each holds.';

-------------------------------------------------------------------------------
-- region_drop: delete a region (its access list and entries go with it)
-- p_region_id: a region of the acting user (PM005 when missing, PM095 when another user's)
create or replace function memori.region_drop(p_region_id text, p_user_id text default null,
                                              p_now timestamptz default now())
returns boolean
as $func$
declare
  v_r memori.vm_regions := memori._region_owned(p_region_id, p_user_id);
begin
  delete from memori.vm_regions where region_id = v_r.region_id;
  perform memori._event_emit('region.dropped', jsonb_build_object('region_id', v_r.region_id), p_now);
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.region_drop(text, text, timestamptz) is 'Delete a region with its access list and entries; owner only (PM095).';
