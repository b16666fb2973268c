-- pymemdb SQL API: the context store's private helpers (seed 01, part 2).
--
-- The public functions are in sql/200-context.sql. This file is installed
-- just before it ("200-context-internals" sorts before "200-context.sql"):
-- the language sql helpers here are resolved when created, and the public
-- language sql functions need them then.

-------------------------------------------------------------------------------
-- _check_context_enum: a value from a fixed set (PM004 lists the set)
create or replace function memori._check_context_enum(p_what text, p_value text, p_allowed text[]) returns text
as $func$
begin
  if p_value is null or not (p_value = any(p_allowed)) then
    raise exception 'unknown % %', p_what, coalesce(quote_literal(p_value), 'NULL')
      using errcode = 'PM004',
            hint = format('Use one of: %s.', array_to_string(p_allowed, ', '));
  end if;
  return p_value;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_context_enum(text, text, text[]) is 'Raise PM004 (listing the allowed values) unless the value is one of them.';

-------------------------------------------------------------------------------
-- _check_context_value: a bounded JSON value
create or replace function memori._check_context_value(p_what text, p_value jsonb) returns jsonb
as $func$
declare
  v_limit bigint := coalesce(memori._setting('context.max_value_bytes')::bigint, 1048576);
  v_bytes bigint;
begin
  if p_value is null then
    perform memori._invalid(format('%s must not be NULL', p_what), 'Pass a JSON value; to remove an entry use context_delete.');
  end if;
  v_bytes := octet_length(p_value::text);
  perform memori._raise(memori._too_large(p_what, v_bytes, v_limit,
    'Keep large artifacts outside and reference them, or raise memori.settings context.max_value_bytes.'));
  return p_value;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_context_value(text, jsonb) is 'Validate a context value or window content: not NULL, at most context.max_value_bytes (PM003).';

-------------------------------------------------------------------------------
-- _is_project_member: may the user see the project's entries?
create or replace function memori._is_project_member(p_project_id text, p_user_id text) returns boolean
as $func$
  select exists (select 1 from memori.project_members m
                  where m.project_id = p_project_id and m.user_id = p_user_id)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._is_project_member(text, text) is 'True when the user is a member (or the owner) of the project.';

-------------------------------------------------------------------------------
-- _require_project_member: PM041 unless the user is a member of the project
create or replace function memori._require_project_member(p_project_id text, p_user_id text) returns void
as $func$
begin
  if not memori._is_project_member(p_project_id, p_user_id) then
    raise exception 'user % is not a member of project %', quote_literal(p_user_id), quote_literal(p_project_id)
      using errcode = 'PM041', hint = 'Ask the project owner to add the user (memori.project_member_add).';
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._require_project_member(text, text) is 'Raise PM041 unless the user is a member (or the owner) of the project.';

-------------------------------------------------------------------------------
-- _context_scope_owner: the owner a change at one scope is keyed on
-- p_missing is the message when the scope's owner is not given (%1$s: the scope).
create or replace function memori._context_scope_owner(
  p_scope text, p_user_id text, p_project_id text, p_session_id text, p_missing text
) returns text
as $func$
declare
  v_owner text;
begin
  perform memori._check_context_enum('scope', p_scope, array['global', 'user', 'project', 'session']);
  v_owner := case p_scope when 'global' then '' when 'user' then p_user_id
                          when 'project' then p_project_id when 'session' then p_session_id end;
  if v_owner is null then
    perform memori._invalid(format(p_missing, p_scope), format('Pass p_%s_id.', p_scope));
  end if;
  if p_scope = 'project' then
    perform memori._require_project_member(p_project_id, p_user_id);
  end if;
  return v_owner;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._context_scope_owner(text, text, text, text, text) is 'The scope_owner of a scope (PM004 for an unknown scope, PM001 when its id is missing, PM041 for a project the user is not a member of).';

-------------------------------------------------------------------------------
-- _context_scope_rank: how specific a scope is: session 4 > project 3 > user 2 > global 1
-- The order a key resolves in (context_get, context_resolve, context_search). A
-- SQL-standard body without SET, so PostgreSQL inlines it into each query: a
-- function with a pinned search_path is not inlined and would run once per
-- candidate row (docs/benchmarks.md, bench context).
create or replace function memori._context_scope_rank(p_scope text) returns integer
language sql immutable
begin atomic
  select case when p_scope operator(pg_catalog.=) 'session' then 4 when p_scope operator(pg_catalog.=) 'project' then 3
              when p_scope operator(pg_catalog.=) 'user' then 2 else 1 end;
end;
comment on function memori._context_scope_rank(text) is 'How specific a context scope is (session 4 > project 3 > user 2 > global 1): the order a key resolves in.';

-------------------------------------------------------------------------------
-- _context_session: the acting user's session, created on first use
-- Session ids are unique per user (a key (user_id, session_id)): another
-- user's session of the same id is another session.
create or replace function memori._context_session(
  p_session_id text,
  p_user_id    text,
  p_project_id text,
  p_now        timestamptz
) returns memori.sessions
as $func$
declare
  v_session memori.sessions;
begin
  perform memori._check_identifier('session id', p_session_id);
  -- lock: window limits and last_activity are per session
  select * into v_session from memori.sessions s
   where s.user_id = p_user_id and s.session_id = p_session_id for update;
  if not found then
    if p_project_id is not null then
      perform memori._require_project_member(p_project_id, p_user_id);
    end if;
    insert into memori.sessions as s (session_id, user_id, project_id, start_time, last_activity)
    values (p_session_id, p_user_id, p_project_id, p_now, p_now)
    on conflict (user_id, session_id) do nothing;
    select * into v_session from memori.sessions s
     where s.user_id = p_user_id and s.session_id = p_session_id for update;
  end if;
  return v_session;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._context_session(text, text, text, timestamptz) is 'The acting user''s session, locked, created on first use; PM041 for a project the user is not in.';

-------------------------------------------------------------------------------
-- _context_pxyz: the seed's coordinate of an entry stored or updated
-- (context_set writes it; Citus distributes no table with a trigger)
create or replace function memori._context_pxyz(p_operation text, p_scope text, p_time timestamptz) returns jsonb
as $func$
  select jsonb_build_object('entity', 'context_store_entry', 'operation', p_operation, 'scope', p_scope, 'time', p_time)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._context_pxyz(text, text, timestamptz) is 'context_entries.pxyz of an entry: entity, operation (store or update), scope, time.';

-------------------------------------------------------------------------------
-- _project_owned: the acting user's own project, or PM041
create or replace function memori._project_owned(p_project_id text, p_user_id text) returns memori.projects
as $func$
declare
  v_project memori.projects;
begin
  perform memori._check_identifier('project id', p_project_id);
  select * into v_project from memori.projects p where p.project_id = p_project_id and p.owner_id = p_user_id;
  if not found then
    raise exception 'project % does not exist or is not owned by %', quote_literal(p_project_id), quote_literal(p_user_id)
      using errcode = 'PM041', hint = 'Only the project owner manages its members.';
  end if;
  return v_project;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._project_owned(text, text) is 'The project when the user owns it; PM041 otherwise.';

-------------------------------------------------------------------------------
-- _project_members_sync: a project's member list onto the project and its entries
-- Row-level security reads who may see a project or a project entry on the
-- row itself (on Citus a policy runs on the shards and reads no other table).
-- Called by the owner under the project's exclusive advisory lock; the
-- entries are every writer's: one statement on every shard, by design.
create or replace function memori._project_members_sync(p_project_id text, p_user_id text) returns text[]
as $func$
declare
  v_members text[];
begin
  select coalesce(array_agg(m.user_id order by m.user_id), '{}') into v_members
    from memori.project_members m where m.project_id = p_project_id;
  update memori.projects p set member_ids = v_members where p.project_id = p_project_id and p.owner_id = p_user_id;
  update memori.context_entries e set readers = v_members
   where e.scope = 'project' and e.project_id = p_project_id and e.readers is distinct from v_members;
  return v_members;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._project_members_sync(text, text) is 'Copy a project''s member list (project_members) to projects.member_ids and to its entries'' readers; the owner calls it.';

-------------------------------------------------------------------------------
-- _context_prefix_upper: the smallest key after every key with the prefix
create or replace function memori._context_prefix_upper(p_prefix text) returns text
as $func$
  select case when p_prefix is null or p_prefix = '' or ascii(right(p_prefix, 1)) >= 1114111 then null
              else left(p_prefix, -1) || chr(ascii(right(p_prefix, 1)) + 1) end
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._context_prefix_upper(text) is 'Exclusive upper bound of the keys starting with a prefix (bytewise order), NULL when unbounded.';

-------------------------------------------------------------------------------
-- _context_visible: every visible entry of a requester with a key in
-- [p_lo, p_hi) (p_hi NULL: unbounded), expired ones too
-- The one visibility rule of every read (context_get, context_resolve,
-- context_search, context_expiring_soon, context_stats). The requester may
-- see the project given (else the session's project) only as a member, and
-- the session only when it is the user's. Two statements: the user's own
-- entries (user and session scope: keyed by the user, one shard on Citus)
-- and the shared ones (global and project entries, written by any user:
-- every shard on Citus, by design). PL/pgSQL, not an inlined SQL function:
-- Citus refuses a set-returning SQL function over a distributed table.
create or replace function memori._context_visible(
  p_user_id    text,
  p_project_id text,
  p_session_id text,
  p_lo         text,
  p_hi         text
) returns setof memori.context_entries
as $func$
declare
  v_project text := p_project_id;
begin
  return query
    select e.* from memori.context_entries e
     where e.user_id = p_user_id and e.scope_owner = any (array[p_user_id, p_session_id])
       and e.key >= p_lo collate "C" and (p_hi is null or e.key < p_hi collate "C")
       and case e.scope when 'user' then e.scope_owner = p_user_id
                        when 'session' then e.scope_owner = p_session_id else false end;
  if v_project is null and p_session_id is not null then
    select s.project_id into v_project from memori.sessions s
     where s.user_id = p_user_id and s.session_id = p_session_id;
  end if;
  if v_project is not null and not memori._is_project_member(v_project, p_user_id) then
    v_project := null;
  end if;
  return query
    select e.* from memori.context_entries e
     where e.scope_owner = any (array['', v_project]) and e.scope in ('global', 'project')
       and e.key >= p_lo collate "C" and (p_hi is null or e.key < p_hi collate "C")
       and case e.scope when 'global' then e.scope_owner = '' else e.scope_owner = v_project end;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._context_visible(text, text, text, text, text) is 'Entries the seed''s matches_scope lets a requester see (membership and session ownership checked) with a key in [p_lo, p_hi), expired ones included.';

-------------------------------------------------------------------------------
-- _business_context_check: the seed's business_context shape
create or replace function memori._business_context_check(p_context jsonb) returns jsonb
as $func$
declare
  v_unknown text;
begin
  if p_context is null or jsonb_typeof(p_context) <> 'object' then
    perform memori._invalid('business context must be a JSON object',
                            'Pass {"focus_mode": "deep_work", "business_objectives": [...], ...}.');
  end if;
  select string_agg(k, ', ' order by k) into v_unknown
    from jsonb_object_keys(p_context) k
   where k not in ('current_project', 'active_workflow', 'focus_mode', 'business_objectives',
                   'context_variables', 'workspace_settings');
  if v_unknown is not null then
    perform memori._invalid(format('unknown business context field(s): %s', v_unknown),
                            'Fields: current_project, active_workflow, focus_mode, business_objectives, context_variables, workspace_settings.');
  end if;
  if p_context ? 'focus_mode' and p_context->'focus_mode' <> 'null'::jsonb then
    perform memori._check_context_enum('focus mode', p_context->>'focus_mode',
                                       array['deep_work', 'collaboration', 'planning', 'execution']);
  end if;
  if jsonb_typeof(p_context->'business_objectives') not in ('array', 'null') then
    perform memori._invalid('business_objectives must be an array', 'Pass ["objective", ...].');
  end if;
  if jsonb_typeof(p_context->'context_variables') not in ('object', 'null')
     or jsonb_typeof(p_context->'workspace_settings') not in ('object', 'null') then
    perform memori._invalid('context_variables and workspace_settings must be objects', 'Pass {"name": value, ...}.');
  end if;
  if jsonb_typeof(p_context->'current_project') not in ('string', 'null')
     or jsonb_typeof(p_context->'active_workflow') not in ('string', 'null') then
    perform memori._invalid('current_project and active_workflow must be strings', 'Pass the project id and workflow name as text.');
  end if;
  return memori._check_context_value('business context', p_context);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._business_context_check(jsonb) is 'Validate the seed''s business_context shape (known fields, focus_mode enum, field types); PM001/PM004.';

-------------------------------------------------------------------------------
-- _session_context: a session with its live windows, in the seed's shape
create or replace function memori._session_context(p_session memori.sessions, p_now timestamptz)
returns memori.session_context
as $func$
  select p_session.session_id, p_session.user_id, p_session.project_id, p_session.start_time,
         p_session.last_activity, p_session.metadata,
         coalesce((select jsonb_agg(jsonb_build_object(
                             'window_id', w.window_id, 'type', w.window_type, 'content', w.content,
                             'priority', w.priority, 'retention_policy', w.retention_policy,
                             'created_at', w.created_at, 'expires_at', w.expires_at)
                           order by w.priority desc, w.created_at, w.window_id)
                     from memori.context_windows w
                    where w.user_id = p_session.user_id and w.session_id = p_session.session_id
                      and (w.expires_at is null or w.expires_at > p_now)), '[]'::jsonb)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._session_context(memori.sessions, timestamptz) is 'A session and its unexpired windows (highest priority first) as memori.session_context.';

