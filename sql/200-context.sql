-- pymemdb SQL API, part 6: the context store (seed 01, part 2).
--
-- Entries live at four scopes (global, user, project, session); a read
-- resolves a key to the most specific visible, unexpired entry (session >
-- project > user > global). Who may see a project or session entry is data
-- (memori.project_members, memori.sessions); row-level security
-- (sql/900-security.sql) makes the same rules a database guarantee for
-- direct table access. The acting user is p_user_id, else the transaction's
-- memori.user_id setting (the client sets it per transaction).
--
-- Which entries a requester sees is one rule, memori._context_visible (the
-- user's own entries, then the shared ones). Scope specificity (session 4 >
-- project 3 > user 2 > global 1) is another, memori._context_scope_rank: a
-- SQL-standard body without SET, inlined into each query (a function with a
-- pinned search_path is not inlined and would run once per candidate row).

-------------------------------------------------------------------------------
-- configuration (kept when re-installing)
insert into memori.settings (key, value, description) values
  ('context.max_windows', '10', 'maxContextWindows: context windows kept per session; adding one more removes the lowest-priority (oldest first among equals).'),
  ('context.max_value_bytes', '1048576', 'Largest context value (JSON text bytes) the API accepts.'),
  ('context.max_key_length', '512', 'Longest context key, in characters.'),
  ('context.default_ttl_ms', '{"temporary_state": 3600000}', 'TTL in milliseconds applied per entry type when context_set gets none (types not listed are permanent).'),
  ('context.temporary_window_ttl_ms', '3600000', 'Lifetime of a context window with retention policy temporary, in milliseconds.'),
  ('context.search_max_rows', '10000', 'Largest p_limit of context_search.')
on conflict (key) do nothing;

comment on table memori.projects is 'Projects: a name and an owner; project-scoped context is visible to the members.';
comment on table memori.project_members is 'Members of a project (the owner is one); project_owner is checked against memori.projects by a foreign key.';
comment on table memori.sessions is 'Sessions (seed 01 session_context): one user, optionally a project; start time, last activity, metadata.';
comment on table memori.context_entries is 'Scoped context entries (seed 01): one value per (scope, owner, key), TTL in milliseconds, resolved most specific first.';
comment on table memori.context_windows is 'Context windows of a session (seed 01 context_window): type, content, priority 1..10, retention policy.';

-------------------------------------------------------------------------------
-- retention: entries, windows and sessions are cleaned by the one engine
create or replace view memori._retention_context_entries with (security_invoker = true) as
select e.id,
       e.user_id   as owner,
       e.scope     as category,
       e.type      as kind,
       e.expires_at,
       false       as important
  from memori.context_entries e;
comment on view memori._retention_context_entries is 'memori.context_entries as retention candidates: scope as category, entry type as kind.';

create or replace view memori._retention_context_windows with (security_invoker = true) as
select w.window_id        as id,
       w.user_id          as owner,
       w.session_id       as category,
       w.retention_policy as kind,
       w.expires_at,
       false              as important
  from memori.context_windows w;
comment on view memori._retention_context_windows is 'memori.context_windows as retention candidates: session as category, retention policy as kind.';

create or replace view memori._retention_sessions with (security_invoker = true) as
select s.session_id                   as id,
       s.user_id                      as owner,
       coalesce(s.project_id, '')     as category,
       'session'::text                as kind,
       s.expires_at,
       false                          as important
  from memori.sessions s;
comment on view memori._retention_sessions is 'memori.sessions as retention candidates (deleting a session deletes its entries and windows).';

select memori.retention_register('context_entries', 'memori.context_entries', 'memori._retention_context_entries', 'id',
                                 'Scoped context entries (seed 01, part 2)', 4, null, false);
select memori.retention_register('context_windows', 'memori.context_windows', 'memori._retention_context_windows',
                                 'window_id', 'Session context windows (seed 01, part 2)', 2, null, false);
select memori.retention_register('sessions', 'memori.sessions', 'memori._retention_sessions', 'session_id',
                                 'Sessions; deleting one deletes its context entries and windows', 3, null, false);
update memori.retention_tables set event_prefix = 'context' where table_name = 'context_entries';

-- Temporary state goes first, business context last.
insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description) values
  ('context_entries', 'temporary_state',  1, null, false, 'Temporary state: cleaned first once its TTL has passed'),
  ('context_entries', 'session_context',  3, null, false, 'Session context entries'),
  ('context_entries', 'user_preferences', 6, null, false, 'User preferences'),
  ('context_entries', 'business_context', 7, null, false, 'Business context: cleaned last')
on conflict (table_name, kind) do nothing;

-------------------------------------------------------------------------------
-- project_create: a project owned by the acting user (who becomes a member)
-- p_project_id: the new project's id, global across users (use UUIDs): 1-256 printable characters; an empty,
--   malformed or already taken id raises PM001
-- p_name: the project's name, 1-512 printable characters, else PM001
-- p_metadata: a JSON object (else PM001); NULL is {}
create or replace function memori.project_create(
  p_project_id text,
  p_name       text,
  p_user_id    text default null,
  p_metadata   jsonb default '{}'::jsonb,
  p_now        timestamptz default now()
) returns memori.projects
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_project memori.projects;
begin
  perform memori._check_identifier('project id', p_project_id);
  perform memori._check_identifier('project name', p_name, 512);
  begin
    insert into memori.projects (project_id, name, owner_id, metadata, created_at, member_ids)
    values (p_project_id, p_name, v_user, memori._check_metadata(coalesce(p_metadata, '{}'::jsonb)), p_now,
            array[v_user])
    returning * into v_project;
  exception when unique_violation then
    raise exception 'project % already exists', quote_literal(p_project_id)
      using errcode = 'PM001', hint = 'Choose another project id (project ids are global: use UUIDs).';
  end;
  insert into memori.project_members (project_id, user_id, project_owner, role, added_at)
  values (p_project_id, v_user, v_user, 'owner', p_now);
  return v_project;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.project_create(text, text, text, jsonb, timestamptz) is 'Create a project owned by the acting user, who becomes its first member.';

-------------------------------------------------------------------------------
-- project_member_add: the owner adds a member
-- p_project_id: a project the acting user owns; PM041 when it does not exist or is another user's
-- p_member_id: the user to add, 1-256 printable characters (else PM001); adding a member again changes nothing
create or replace function memori.project_member_add(
  p_project_id text,
  p_member_id  text,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns memori.project_members
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_project memori.projects := memori._project_owned(p_project_id, v_user);
  v_member  memori.project_members;
begin
  perform memori._check_identifier('member id', p_member_id);
  perform pg_advisory_xact_lock(hashtextextended('memori.project:' || p_project_id, 0));
  insert into memori.project_members (project_id, user_id, project_owner, role, added_at)
  values (v_project.project_id, p_member_id, v_project.owner_id, 'member', p_now)
  on conflict (project_id, user_id) do update set added_at = memori.project_members.added_at
  returning * into v_member;
  perform memori._project_members_sync(v_project.project_id, v_user);
  return v_member;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.project_member_add(text, text, text, timestamptz) is 'Add a member to a project the acting user owns (idempotent).';

-------------------------------------------------------------------------------
-- project_member_remove: the owner removes a member (not themselves)
-- p_project_id: a project the acting user owns; PM041 when it does not exist or is another user's
-- p_member_id: the user to remove (false when not a member); the owner cannot be removed (PM001); the project
--   entries the member wrote last become the owner's
create or replace function memori.project_member_remove(
  p_project_id text,
  p_member_id  text,
  p_user_id    text default null
) returns boolean
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_project memori.projects := memori._project_owned(p_project_id, v_user);
  v_entry   memori.context_entries;
  v_found   boolean;
begin
  if p_member_id = v_project.owner_id then
    perform memori._invalid('the owner cannot be removed from the project',
                            'Delete the project instead, or keep the owner as a member.');
  end if;
  perform pg_advisory_xact_lock(hashtextextended('memori.project:' || p_project_id, 0));
  -- the project entries the member wrote last stay, now the owner's (a
  -- project entry's writer is a member: its foreign key to project_members)
  for v_entry in delete from memori.context_entries e
                  where e.user_id = p_member_id and e.scope = 'project' and e.project_id = p_project_id
                 returning * loop
    insert into memori.context_entries (id, key, value, type, scope, user_id, project_id, ttl, expires_at,
                                        created_at, updated_at, pxyz, project_owner, readers)
    values (v_entry.id, v_entry.key, v_entry.value, v_entry.type, v_entry.scope, v_user, v_entry.project_id,
            v_entry.ttl, v_entry.expires_at, v_entry.created_at, v_entry.updated_at, v_entry.pxyz,
            v_entry.project_owner, v_entry.readers);
  end loop;
  delete from memori.project_members m where m.project_id = p_project_id and m.user_id = p_member_id;
  v_found := found;
  perform memori._project_members_sync(p_project_id, v_user);
  return v_found;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.project_member_remove(text, text, text) is 'Remove a member from a project the acting user owns; true when one was removed.';

-------------------------------------------------------------------------------
-- project_member_list: members of a project the acting user owns
-- p_project_id: a project the acting user owns; PM041 when it does not exist or is another user's
create or replace function memori.project_member_list(p_project_id text, p_user_id text default null)
returns setof memori.project_members
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_project memori.projects := memori._project_owned(p_project_id, v_user);
begin
  return query select * from memori.project_members m where m.project_id = v_project.project_id
                order by m.role desc, m.user_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.project_member_list(text, text) is 'Members of a project the acting user owns, the owner first.';

-------------------------------------------------------------------------------
-- context_set: store (upsert) a value at one scope; TTL recomputed every time
-- p_key: the entry's key, 1 to context.max_key_length (default 512) printable characters, else PM001
-- p_value: any JSON value but NULL (PM001) of at most context.max_value_bytes bytes of JSON text (default 1048576;
--   PM003)
-- p_type: 'business_context', 'session_context', 'user_preferences' or 'temporary_state' (else PM004): the
--   entry's retention kind; it selects the default TTL
-- p_scope: 'global' (memori_admin only, else PM041), 'user', 'project' or 'session'; else PM004
-- p_project_id: the project of a 'project' entry: required then (PM001), forbidden at other scopes (PM001);
--   the acting user must be a member (PM041)
-- p_session_id: the acting user's context session (memori.sessions) of a 'session' entry, created on first use:
--   required then (PM001), forbidden at other scopes (PM001)
-- p_ttl_ms: lifetime in milliseconds from p_now, recomputed on every set; not positive: PM001; NULL (default) uses
--   the type's context.default_ttl_ms (seeded: temporary_state 3600000), no entry there: permanent
create or replace function memori.context_set(
  p_key        text,
  p_value      jsonb,
  p_type       text,
  p_scope      text,
  p_user_id    text default null,
  p_project_id text default null,
  p_session_id text default null,
  p_ttl_ms     bigint default null,
  p_now        timestamptz default now()
) returns memori.context_entries
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_ttl     bigint := p_ttl_ms;
  v_project text;
  v_session text;
  v_owner   text;
  v_readers text[];
  v_prev    memori.context_entries;
  v_entry   memori.context_entries;
  v_updated jsonb := memori._context_pxyz('update', p_scope, p_now);
begin
  perform memori._check_identifier('key', p_key, coalesce(memori._setting('context.max_key_length')::int, 512));
  perform memori._check_context_enum('scope', p_scope, array['global', 'user', 'project', 'session']);
  perform memori._check_context_enum('context type', p_type,
                                     array['business_context', 'session_context', 'user_preferences', 'temporary_state']);
  perform memori._check_context_value('context value', p_value);
  if p_ttl_ms is not null and p_ttl_ms <= 0 then
    perform memori._invalid(format('TTL must be a positive number of milliseconds, got %s', p_ttl_ms),
                            'Pass a TTL such as 3600000 (one hour), or NULL for the type''s default.');
  end if;
  v_ttl := coalesce(p_ttl_ms, (memori._setting('context.default_ttl_ms')->>p_type)::bigint);

  -- scope/owner consistency: exactly the owner the scope is keyed on
  if p_scope in ('global', 'user') and (p_project_id is not null or p_session_id is not null) then
    perform memori._invalid(format('a %s entry takes no project or session', p_scope),
                            'Use scope project or session, or leave p_project_id and p_session_id NULL.');
  elsif p_scope = 'project' then
    if p_project_id is null then
      perform memori._invalid('a project entry needs a project', 'Pass p_project_id (memori.project_create makes one).');
    end if;
    if p_session_id is not null then
      perform memori._invalid('a project entry takes no session', 'Leave p_session_id NULL, or use scope session.');
    end if;
    perform memori._require_project_member(p_project_id, v_user);
    v_project := p_project_id;
    -- the project's owner and members go on the entry (row-level security reads them there);
    -- project_member_add/remove change them under the exclusive lock
    perform pg_advisory_xact_lock_shared(hashtextextended('memori.project:' || p_project_id, 0));
    select p.owner_id, p.member_ids into v_owner, v_readers from memori.projects p where p.project_id = p_project_id;
  elsif p_scope = 'session' then
    if p_session_id is null then
      perform memori._invalid('a session entry needs a session', 'Pass p_session_id.');
    end if;
    if p_project_id is not null then
      perform memori._invalid('a session entry takes no project (the session has one)', 'Leave p_project_id NULL.');
    end if;
    v_session := (memori._context_session(p_session_id, v_user, null, p_now)).session_id;
  end if;
  if p_scope = 'global' and exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_admin')
     and not pg_catalog.pg_has_role(current_user, 'memori_admin', 'member') then
    raise exception 'only memori_admin writes global context entries'
      using errcode = 'PM041', hint = 'Use scope user, project or session, or ask an administrator.';
  end if;

  -- One value per (scope, owner, key). A global or project entry is written
  -- by any admin or member and keyed by its writer (user_id leads every key:
  -- Citus places the row with its writer), so no index keeps it single across
  -- users: setting it takes a lock on the key and moves it from its previous
  -- writer (same id, created_at and history of operations).
  if p_scope in ('global', 'project') then
    perform pg_advisory_xact_lock(hashtextextended(
      format('memori.context_entry:%s:%s:%s', p_scope, coalesce(v_project, ''), p_key), 0));
    delete from memori.context_entries e
     where e.scope_owner = coalesce(v_project, '') and e.key = p_key and e.scope = p_scope and e.user_id <> v_user
    returning * into v_prev;
  end if;

  insert into memori.context_entries as e
         (id, key, value, type, scope, user_id, project_id, session_id, ttl, expires_at, created_at, updated_at,
          pxyz, project_owner, readers)
  values (coalesce(v_prev.id, gen_random_uuid()), p_key, p_value, p_type, p_scope, v_user, v_project, v_session,
          v_ttl, p_now + make_interval(secs => v_ttl / 1000.0),
          -- an expired entry set again is a new entry
          case when v_prev.id is null or v_prev.expires_at <= p_now then p_now else v_prev.created_at end, p_now,
          case when v_prev.id is null then memori._context_pxyz('store', p_scope, p_now) else v_updated end,
          v_owner, v_readers)
  on conflict (user_id, scope_owner, key, scope) do update
     set value      = excluded.value,
         type       = excluded.type,
         ttl        = excluded.ttl,
         expires_at = excluded.expires_at,
         updated_at = excluded.updated_at,
         readers    = excluded.readers,
         pxyz       = v_updated,  -- (a value: Citus wants no stable function calls in DO UPDATE SET)
         -- an expired entry set again is a new entry
         created_at = case when e.expires_at <= excluded.updated_at then excluded.created_at else e.created_at end
  returning * into v_entry;
  return v_entry;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_set(text, jsonb, text, text, text, text, text, bigint, timestamptz) is 'Store a context value at one scope (upsert); TTL in ms recomputed on every set, defaulting per type (context.default_ttl_ms).';

-------------------------------------------------------------------------------
-- context_get: a key resolved across scopes, most specific visible entry first
-- p_key: the key to resolve (exact match)
-- p_project_id: a project whose entries are visible if the acting user is a member (else they are not, silently);
--   NULL (default): the session's project
-- p_session_id: the acting user's context session whose entries are visible; NULL (default) for none
create or replace function memori.context_get(
  p_key        text,
  p_user_id    text default null,
  p_project_id text default null,
  p_session_id text default null,
  p_now        timestamptz default now()
) returns setof memori.context_value
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  return query
    select e.key::text, e.value, e.scope, e.type, e.id, e.user_id, e.project_id, e.session_id, e.expires_at, e.updated_at
      from memori._context_visible(v_user, p_project_id, p_session_id, p_key, p_key || chr(1)) e
     where e.key = p_key
       and (e.expires_at is null or e.expires_at > p_now)
     order by memori._context_scope_rank(e.scope) desc
     limit 1;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_get(text, text, text, text, timestamptz) is 'Resolve a key: the most specific visible, unexpired entry (session > project > user > global) and the scope it came from.';

-------------------------------------------------------------------------------
-- context_resolve: every visible key, resolved, as one merged view
-- p_project_id: a project whose entries are visible if the acting user is a member (else they are not, silently);
--   NULL (default): the session's project
-- p_session_id: the acting user's context session whose entries are visible; NULL (default) for none
-- p_prefix: only keys that start with this text (case-sensitive); NULL (default) for every key
create or replace function memori.context_resolve(
  p_user_id    text default null,
  p_project_id text default null,
  p_session_id text default null,
  p_prefix     text default null,
  p_now        timestamptz default now()
) returns setof memori.context_value
as $func$
declare
  v_user  text := memori._acting_user(p_user_id);
  v_lo    text collate "C" := coalesce(p_prefix, '');
  v_hi    text collate "C" := memori._context_prefix_upper(p_prefix);
begin
  return query
    select distinct on (e.key)
           e.key::text, e.value, e.scope, e.type, e.id, e.user_id, e.project_id, e.session_id, e.expires_at, e.updated_at
      from memori._context_visible(v_user, p_project_id, p_session_id, v_lo, v_hi) e
     where (e.expires_at is null or e.expires_at > p_now)
     order by e.key, memori._context_scope_rank(e.scope) desc;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_resolve(text, text, text, text, timestamptz) is 'Every visible key (optionally with a prefix) resolved to its most specific unexpired entry, ordered by key.';

-------------------------------------------------------------------------------
-- context_delete: remove the entry at one scope
-- p_key: the key of the entry to delete (exact match)
-- p_scope: the scope of the entry: 'global' (row-level security lets memori_admin delete it, not memori_app),
--   'user', 'project' or 'session'; else PM004
-- p_project_id: the project, required for scope 'project' (PM001); the acting user must be a member (PM041)
-- p_session_id: the acting user's context session, required for scope 'session' (PM001)
create or replace function memori.context_delete(
  p_key        text,
  p_scope      text,
  p_user_id    text default null,
  p_project_id text default null,
  p_session_id text default null
) returns boolean
as $func$
declare
  v_user  text := memori._acting_user(p_user_id);
  v_owner text;
begin
  v_owner := memori._context_scope_owner(p_scope, v_user, p_project_id, p_session_id,
                                         'deleting a %1$s entry needs its %1$s');
  if p_scope in ('user', 'session') then
    delete from memori.context_entries e
     where e.user_id = v_user and e.scope_owner = v_owner and e.key = p_key and e.scope = p_scope;
  else  -- a shared entry: written by any member (or admin)
    delete from memori.context_entries e where e.scope_owner = v_owner and e.key = p_key and e.scope = p_scope;
  end if;
  return found;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_delete(text, text, text, text, text) is 'Delete the entry of a key at one scope; true when one was deleted.';

-------------------------------------------------------------------------------
-- context_search: visible entries by key pattern, contained value, scopes, types
-- p_project_id: a project whose entries are visible if the acting user is a member (else they are not, silently);
--   NULL (default): the session's project
-- p_session_id: the acting user's context session whose entries are visible; NULL (default) for none
-- p_key_pattern: a LIKE pattern the key must match (% any text, _ one character; case-sensitive); NULL (default): any
-- p_value_contains: JSON the value must contain (jsonb @>), e.g. '{"lang": "en"}'; NULL (default): any value
-- p_scopes: only these scopes, each 'global', 'user', 'project' or 'session' (else PM004); NULL (default): all
-- p_types: only these types, each 'business_context', 'session_context', 'user_preferences' or 'temporary_state'
--   (else PM004); NULL (default): all
-- p_limit: at most this many entries, 1 to context.search_max_rows (default 10000; PM001 outside); default 100
create or replace function memori.context_search(
  p_user_id        text default null,
  p_project_id     text default null,
  p_session_id     text default null,
  p_key_pattern    text default null,
  p_value_contains jsonb default null,
  p_scopes         text[] default null,
  p_types          text[] default null,
  p_limit          integer default 100,
  p_now            timestamptz default now()
) returns setof memori.context_value
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
  v_max  integer := coalesce(memori._setting('context.search_max_rows')::int, 10000);
  v_x    text;
begin
  if p_limit is null or p_limit < 1 or p_limit > v_max then
    perform memori._invalid(format('limit must be between 1 and %s, got %s', v_max, coalesce(p_limit::text, 'NULL')),
                            'Pass a limit such as 100.');
  end if;
  foreach v_x in array coalesce(p_scopes, '{}') loop
    perform memori._check_context_enum('scope', v_x, array['global', 'user', 'project', 'session']);
  end loop;
  foreach v_x in array coalesce(p_types, '{}') loop
    perform memori._check_context_enum('context type', v_x,
                                       array['business_context', 'session_context', 'user_preferences', 'temporary_state']);
  end loop;
  return query
    select e.key::text, e.value, e.scope, e.type, e.id, e.user_id, e.project_id, e.session_id, e.expires_at, e.updated_at
      from memori._context_visible(v_user, p_project_id, p_session_id, '', null) e
     where (e.expires_at is null or e.expires_at > p_now)
       and (p_key_pattern is null or e.key like p_key_pattern)
       and (p_value_contains is null or e.value @> p_value_contains)
       and (p_scopes is null or e.scope = any (p_scopes))
       and (p_types is null or e.type = any (p_types))
     order by e.key, memori._context_scope_rank(e.scope) desc
     limit p_limit;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_search(text, text, text, text, jsonb, text[], text[], integer, timestamptz) is 'Visible unexpired entries at every scope (not resolved) matching a LIKE key pattern, a contained JSON value, scopes and types.';

-------------------------------------------------------------------------------
-- context_expiring_soon: visible entries that expire within an interval
-- p_within: entries expiring after p_now and at most this long after it (default 1 hour); not positive or
--   NULL: PM001
-- p_project_id: a project whose entries are visible if the acting user is a member (else they are not, silently);
--   NULL (default): the session's project
-- p_session_id: the acting user's context session whose entries are visible; NULL (default) for none
create or replace function memori.context_expiring_soon(
  p_within     interval default interval '1 hour',
  p_user_id    text default null,
  p_project_id text default null,
  p_session_id text default null,
  p_now        timestamptz default now()
) returns setof memori.context_value
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  if p_within is null or p_within <= interval '0' then
    perform memori._invalid('the interval must be positive', 'Pass an interval such as ''1 hour''.');
  end if;
  return query
    select e.key::text, e.value, e.scope, e.type, e.id, e.user_id, e.project_id, e.session_id, e.expires_at, e.updated_at
      from memori._context_visible(v_user, p_project_id, p_session_id, '', null) e
     where e.expires_at > p_now and e.expires_at <= p_now + p_within
     order by e.expires_at, e.key;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_expiring_soon(interval, text, text, text, timestamptz) is 'Visible entries not yet expired that expire within p_within (seed: one hour), soonest first.';

-------------------------------------------------------------------------------
-- context_cleanup_by_scope: delete the acting user's entries at one scope
-- p_scope: whose entries to delete: 'global' (every global entry: row-level security lets memori_admin, not
--   memori_app, delete them), 'user' (the acting user's), 'project' or 'session'; else PM004
-- p_project_id: the project, required for scope 'project' (PM001); the acting user must be a member (PM041)
-- p_session_id: the acting user's context session, required for scope 'session' (PM001)
-- p_expired_only: true deletes only entries expired at p_now; false (default) deletes every entry of the scope
create or replace function memori.context_cleanup_by_scope(
  p_scope        text,
  p_user_id      text default null,
  p_project_id   text default null,
  p_session_id   text default null,
  p_expired_only boolean default false,
  p_now          timestamptz default now()
) returns integer
as $func$
declare
  v_user  text := memori._acting_user(p_user_id);
  v_owner text;
  v_count integer;
begin
  v_owner := memori._context_scope_owner(p_scope, v_user, p_project_id, p_session_id,
                                         'cleaning %1$s entries needs the %1$s');
  if p_scope in ('user', 'session') then
    delete from memori.context_entries e
     where e.user_id = v_user and e.scope_owner = v_owner and e.scope = p_scope
       and (not p_expired_only or e.expires_at <= p_now);
  else  -- shared entries: written by any member (or admin)
    delete from memori.context_entries e
     where e.scope_owner = v_owner and e.scope = p_scope and (not p_expired_only or e.expires_at <= p_now);
  end if;
  get diagnostics v_count = row_count;
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_cleanup_by_scope(text, text, text, text, boolean, timestamptz) is 'Delete every entry (or only the expired ones) of one scope owner: the user, a project, a session, or global (admin); returns the count.';

-------------------------------------------------------------------------------
-- context_prune_old: delete the acting user's entries not updated for a while
-- p_older_than: delete the acting user's non-global entries last updated before p_now - p_older_than; a
--   positive interval such as '90 days', else (NULL too) PM001
create or replace function memori.context_prune_old(
  p_older_than interval,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns integer
as $func$
declare
  v_user  text := memori._acting_user(p_user_id);
  v_count integer;
begin
  if p_older_than is null or p_older_than <= interval '0' then
    perform memori._invalid('the age must be a positive interval', 'Pass an interval such as ''90 days''.');
  end if;
  delete from memori.context_entries e
   where e.user_id = v_user and e.scope <> 'global' and e.updated_at < p_now - p_older_than;
  get diagnostics v_count = row_count;
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_prune_old(interval, text, timestamptz) is 'Delete the acting user''s non-global entries not updated within p_older_than; returns the count (expired entries are the retention engine''s).';

-------------------------------------------------------------------------------
-- context_stats: visible entries by scope and by type
-- p_project_id: a project whose entries are visible if the acting user is a member (else they are not, silently);
--   NULL (default): the session's project
-- p_session_id: the acting user's context session whose entries are visible; NULL (default) for none
-- p_within: entries expiring within this interval after p_now count as expiring_soon, not active (default 1 hour)
create or replace function memori.context_stats(
  p_user_id    text default null,
  p_project_id text default null,
  p_session_id text default null,
  p_within     interval default interval '1 hour',
  p_now        timestamptz default now()
) returns setof memori.context_stat
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  return query
    with visible as (select * from memori._context_visible(v_user, p_project_id, p_session_id, '', null)),
    dims as (
      select 'scope'::text as dimension, s as name, ord from unnest(array['global', 'user', 'project', 'session']) with ordinality u(s, ord)
      union all
      select 'type', t, 4 + ord from unnest(array['business_context', 'session_context', 'user_preferences', 'temporary_state'])
             with ordinality u(t, ord)
    )
    select d.dimension, d.name,
           count(v.id),
           count(v.id) filter (where v.expires_at is null or v.expires_at > p_now + p_within),
           count(v.id) filter (where v.expires_at > p_now and v.expires_at <= p_now + p_within),
           count(v.id) filter (where v.expires_at <= p_now),
           coalesce(sum(pg_column_size(v.value)), 0)::bigint
      from dims d
      left join visible v on (d.dimension = 'scope' and v.scope = d.name) or (d.dimension = 'type' and v.type = d.name)
     group by d.dimension, d.name, d.ord
     order by d.ord;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_stats(text, text, text, interval, timestamptz) is 'Visible entries per scope and per type: total, active, expiring within p_within, expired, stored value bytes.';

-------------------------------------------------------------------------------
-- business_context_get: the user's business context (with user_id), or NULL
create or replace function memori.business_context_get(p_user_id text default null, p_now timestamptz default now())
returns jsonb
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  return (select e.value || jsonb_build_object('user_id', v_user)
            from memori.context_entries e
           where e.user_id = v_user and e.scope_owner = v_user and e.key = 'business_context' and e.scope = 'user'
             and (e.expires_at is null or e.expires_at > p_now));
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.business_context_get(text, timestamptz) is 'The acting user''s business context (seed shape, with user_id), NULL when none.';

-------------------------------------------------------------------------------
-- business_context_set: replace the user's business context
-- p_context: the whole business context, a JSON object (else PM001) with only the fields current_project and
--   active_workflow (strings), focus_mode ('deep_work', 'collaboration', 'planning', 'execution'; else PM004),
--   business_objectives (an array), context_variables and workspace_settings (objects), else PM001; a "user_id"
--   field is ignored; at most context.max_value_bytes bytes (PM003)
create or replace function memori.business_context_set(
  p_context jsonb,
  p_user_id text default null,
  p_now     timestamptz default now()
) returns jsonb
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  perform memori.context_set('business_context', memori._business_context_check(p_context - 'user_id'),
                             'business_context', 'user', v_user, null, null, null, p_now);
  return memori.business_context_get(v_user, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.business_context_set(jsonb, text, timestamptz) is 'Replace the acting user''s business context (validated against the seed''s shape).';

-------------------------------------------------------------------------------
-- business_context_update: merge fields into the user's business context
-- p_fields: a JSON object (else PM001) of top-level fields that replace those of the current business context
--   (created when absent); the result must pass business_context_set's rules; a "user_id" field is ignored
create or replace function memori.business_context_update(
  p_fields  jsonb,
  p_user_id text default null,
  p_now     timestamptz default now()
) returns jsonb
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_current jsonb;
begin
  if p_fields is null or jsonb_typeof(p_fields) <> 'object' then
    perform memori._invalid('fields must be a JSON object', 'Pass {"focus_mode": "planning"}.');
  end if;
  -- serialise updates of this user's business context (the row may not exist
  -- yet, so a row lock alone would let two first updates overwrite each other)
  perform pg_advisory_xact_lock(hashtextextended('memori.business_context:' || v_user, 0));
  select e.value into v_current
    from memori.context_entries e
   where e.user_id = v_user and e.scope_owner = v_user and e.key = 'business_context' and e.scope = 'user'
     and (e.expires_at is null or e.expires_at > p_now);
  return memori.business_context_set(coalesce(v_current, '{}'::jsonb) || (p_fields - 'user_id'), v_user, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.business_context_update(jsonb, text, timestamptz) is 'Merge top-level fields into the acting user''s business context (creating it when absent).';

-------------------------------------------------------------------------------
-- session_context_set: create or update the acting user's session
-- p_session_id: the acting user's context session (memori.sessions; ids are per user), 1-256 printable characters
--   (else PM001), created on first use
-- p_project_id: the session's project, set when given (the acting user must be a member, else PM041); NULL
--   (default) keeps the current one
-- p_metadata: replaces the session's metadata: a JSON object (else PM001); NULL (default) keeps it
create or replace function memori.session_context_set(
  p_session_id text,
  p_user_id    text default null,
  p_project_id text default null,
  p_metadata   jsonb default null,
  p_now        timestamptz default now()
) returns memori.session_context
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_session memori.sessions := memori._context_session(p_session_id, v_user, p_project_id, p_now);
begin
  if p_project_id is not null and v_session.project_id is distinct from p_project_id then
    perform memori._require_project_member(p_project_id, v_user);
  end if;
  update memori.sessions s
     set project_id    = coalesce(p_project_id, s.project_id),
         metadata      = case when p_metadata is null then s.metadata else memori._check_metadata(p_metadata) end,
         last_activity = greatest(s.last_activity, p_now)
   where s.user_id = v_user and s.session_id = v_session.session_id
  returning * into v_session;
  return memori._session_context(v_session, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_context_set(text, text, text, jsonb, timestamptz) is 'Create or update the acting user''s session (project, metadata replaced when given); returns it with its windows.';

-------------------------------------------------------------------------------
-- session_context_get: the acting user's session with its windows
-- p_session_id: the acting user's context session (memori.sessions; ids are per user); no row when unknown
create or replace function memori.session_context_get(
  p_session_id text,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns setof memori.session_context
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_session memori.sessions;
begin
  -- (the row first, then its windows: on Citus a whole-row value of a shard is of the shard's row type)
  select * into v_session from memori.sessions s where s.user_id = v_user and s.session_id = p_session_id;
  if found then
    return next memori._session_context(v_session, p_now);
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_context_get(text, text, timestamptz) is 'The acting user''s session with its unexpired windows (no row when unknown).';

-------------------------------------------------------------------------------
-- session_context_add_window: add a window, keeping at most context.max_windows
-- p_session_id: the acting user's context session (memori.sessions; ids are per user), 1-256 printable characters
--   (else PM001), created on first use
-- p_window_type: 'conversation', 'task_execution', 'project_planning' or 'business_analysis'; else PM004
-- p_content: a JSON object (else PM001) of at most context.max_value_bytes bytes of JSON text (default 1048576;
--   PM003)
-- p_priority: 1 (removed first when the session has context.max_windows windows) to 10 (last); default 5;
--   else PM001
-- p_retention_policy: 'session' (default), 'temporary' (expires context.temporary_window_ttl_ms after p_now,
--   default 3600000), 'persistent' or 'archived'; the retention kind; else PM004
create or replace function memori.session_context_add_window(
  p_session_id       text,
  p_window_type      text,
  p_content          jsonb,
  p_priority         integer default 5,
  p_retention_policy text default 'session',
  p_user_id          text default null,
  p_now              timestamptz default now()
) returns memori.context_windows
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_max     integer := coalesce(memori._setting('context.max_windows')::int, 10);
  v_session memori.sessions;
  v_window  memori.context_windows;
  v_removed uuid[];
begin
  perform memori._check_context_enum('window type', p_window_type,
                                     array['conversation', 'task_execution', 'project_planning', 'business_analysis']);
  perform memori._check_context_enum('retention policy', p_retention_policy,
                                     array['session', 'temporary', 'persistent', 'archived']);
  if p_priority is null or p_priority < 1 or p_priority > 10 then
    perform memori._invalid(format('window priority must be between 1 and 10, got %s', coalesce(p_priority::text, 'NULL')),
                            'Pass 1 (first to go) .. 10 (last to go).');
  end if;
  perform memori._check_context_value('window content', p_content);
  if jsonb_typeof(p_content) <> 'object' then
    perform memori._invalid('window content must be a JSON object', 'Pass {"messages": [...]} or similar.');
  end if;
  v_session := memori._context_session(p_session_id, v_user, null, p_now);  -- locks the session

  -- expired windows do not count; the seed removes the lowest priority first
  -- (oldest first among equals) until the new one fits
  with live as (
    select w.window_id, w.priority, w.created_at,
           (w.expires_at is not null and w.expires_at <= p_now) as expired
      from memori.context_windows w
     where w.user_id = v_user and w.session_id = v_session.session_id
  ), victims as (
    select window_id from live where expired
    union all
    select window_id from (
      select window_id from live where not expired
       order by priority, created_at, window_id
       limit greatest((select count(*) from live where not expired) - (v_max - 1), 0)) lowest
  )
  , gone as (delete from memori.context_windows w
              where w.user_id = v_user and w.window_id in (select v.window_id from victims v) returning w.window_id)
  select coalesce(array_agg(window_id), '{}') into v_removed from gone;

  insert into memori.context_windows (session_id, user_id, window_type, content, priority, retention_policy,
                                      created_at, expires_at)
  values (v_session.session_id, v_user, p_window_type, p_content, p_priority, p_retention_policy, p_now,
          case when p_retention_policy = 'temporary'
               then p_now + make_interval(secs => coalesce(memori._setting('context.temporary_window_ttl_ms')::bigint,
                                                           3600000) / 1000.0) end)
  returning * into v_window;

  update memori.sessions s set last_activity = greatest(s.last_activity, p_now)
   where s.user_id = v_user and s.session_id = v_session.session_id;

  perform memori._event_emit('context.window_added',
                             jsonb_build_object('session_id', v_session.session_id, 'window_id', v_window.window_id,
                                                'type', p_window_type, 'priority', p_priority,
                                                'removed_window_ids', to_jsonb(v_removed)), p_now);
  return v_window;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_context_add_window(text, text, jsonb, integer, text, text, timestamptz) is 'Add a context window to the acting user''s session, first removing the lowest-priority (oldest among equals) beyond context.max_windows; emits context.window_added.';

-------------------------------------------------------------------------------
-- session_context_remove_window: remove one window
-- p_session_id: the acting user's context session (memori.sessions) the window belongs to
-- p_window_id: the window's id (context_windows.window_id); false when that session has no such window
create or replace function memori.session_context_remove_window(
  p_session_id text,
  p_window_id  uuid,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns boolean
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  delete from memori.context_windows w
   where w.user_id = v_user and w.window_id = p_window_id and w.session_id = p_session_id;
  if not found then
    return false;
  end if;
  update memori.sessions s set last_activity = greatest(s.last_activity, p_now)
   where s.user_id = v_user and s.session_id = p_session_id;
  perform memori._event_emit('context.window_removed',
                             jsonb_build_object('session_id', p_session_id, 'window_id', p_window_id), p_now);
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_context_remove_window(text, uuid, text, timestamptz) is 'Remove a window from the acting user''s session; true when one was removed; emits context.window_removed.';
