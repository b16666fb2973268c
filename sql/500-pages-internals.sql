-- pymemdb SQL API: the private helpers of the AI virtual memory's page table (sql/500-pages.sql).
-- Sessions, page reads and writes, references, the mutation log; called only by the VM's functions.
-- Installed before 500-pages.sql (file order), so its SQL-language functions find them.

-------------------------------------------------------------------------------
-- _vm_retention: when a new row of a retained VM table expires
create or replace function memori._vm_retention(p_user_id text, p_session_id text, p_table text, p_now timestamptz)
returns timestamptz
as $func$
declare
  v_expires timestamptz;
begin
  -- The policy is read joined to the session's row: on Citus this is one router query on the
  -- user's shard. The reference table read alone goes to its first placement, which is another
  -- worker for half the users (a second node in a call that is otherwise on one).
  select p_now + rp.retention into v_expires
    from memori.vm_sessions s
    left join memori.retention_policies rp on rp.table_name = p_table and rp.kind = '*'
   where s.user_id = p_user_id and s.session_id = p_session_id;
  if not found then
    -- no such session (callers have one): the policy alone
    select p_now + rp.retention into v_expires
      from memori.retention_policies rp where rp.table_name = p_table and rp.kind = '*';
  end if;
  return v_expires;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_retention(text, text, text, timestamptz) is 'Expiry of a new row of a user''s VM session table from its default retention policy (NULL: kept); read on the session''s shard.';

-------------------------------------------------------------------------------
-- _vm_setting: a memori.settings value read beside a user's VM session
create or replace function memori._vm_setting(p_user_id text, p_session_id text, p_key text) returns jsonb
as $func$
declare
  v_value jsonb;
begin
  -- as in _vm_retention: joined to the session's row, the settings read is one router
  -- query on the user's shard, not a second node for the reference table alone
  select st.value into v_value
    from memori.vm_sessions s
    left join memori.settings st on st.key = p_key
   where s.user_id = p_user_id and s.session_id = p_session_id;
  if not found then
    v_value := memori._setting(p_key);  -- no such session (callers have one)
  end if;
  return v_value;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_setting(text, text, text) is 'Value of one memori.settings row (NULL when absent) for a call on a user''s VM session; read on the session''s shard.';

-------------------------------------------------------------------------------
-- _vm_choices: the values of each VM enumeration, in one place
create or replace function memori._vm_choices(p_what text) returns text[]
as $func$
  select case p_what
    when 'page type' then array['transcript', 'summary', 'artifact', 'claim', 'procedure', 'index']
    when 'modality' then array['text', 'image', 'audio', 'video', 'structured']
    when 'role' then array['user', 'assistant', 'tool', 'system']
    when 'eviction policy' then array['lru', 'importance_weighted_lru', 'modality_aware_lru']
    when 'fault confidence threshold' then array['explicit', 'referenced', 'speculative']
    when 'VM prompt mode' then array['strict', 'relaxed', 'passive']
    when 'actor' then array['user', 'model', 'tool', 'system']
  end
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_choices(text) is 'The allowed values of a VM enumeration (page type, modality, role, eviction policy, fault confidence threshold, VM prompt mode).';

-------------------------------------------------------------------------------
-- _vm_check_choice: PM004 unless a value is one of its enumeration's
create or replace function memori._vm_check_choice(p_what text, p_value text, p_null_means text default null)
returns void
as $func$
declare
  v_allowed text[] := memori._vm_choices(p_what);
begin
  if p_value is null and p_null_means is not null then
    return;  -- NULL is allowed: it means p_null_means
  end if;
  if p_value is null or not (p_value = any (v_allowed)) then
    raise exception 'unknown % %', p_what, coalesce(quote_literal(p_value), 'NULL')
      using errcode = 'PM004',
            hint = format('Use one of: %s%s.', array_to_string(v_allowed, ', '), ' (' || p_null_means || ')');
  end if;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_check_choice(text, text, text) is 'PM004 "unknown <what>" unless the value is one of memori._vm_choices(<what>); NULL passes when p_null_means says what it means.';

-------------------------------------------------------------------------------
-- _vm_user: the user whose session a VM call acts on
-- Session ids are unique per user (issue 20), so every statement of a VM call
-- names its user. That is the acting user (memori._acting_user); a call with no
-- user at all (a table owner's, which row-level security does not filter) acts
-- for the one user who has that session id (PM001 when several have it).
create or replace function memori._vm_user(p_session_id text, p_user_id text default null) returns text
as $func$
declare
  v_user text;
  v_n    bigint;
begin
  if p_user_id is not null or nullif(current_setting('memori.user_id', true), '') is not null then
    return memori._acting_user(p_user_id);
  end if;
  select min(user_id), count(*) into v_user, v_n from memori.vm_sessions where session_id = p_session_id;
  if v_n > 1 then
    perform memori._invalid(format('VM session %s exists for %s users: say which', quote_literal(p_session_id), v_n),
                            'Set memori.user_id in the transaction (SET LOCAL memori.user_id = ''<user>''), or pass the user id.');
  end if;
  return v_user;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_user(text, text) is 'The user a VM call acts for: memori._acting_user when a user is given or set, else (an owner''s call) the one user with that session id (NULL when none, PM001 when several).';

-------------------------------------------------------------------------------
-- _vm_session: a session's row, locked; created with the defaults when asked
create or replace function memori._vm_session(
  p_session_id text, p_user_id text, p_create boolean, p_now timestamptz
) returns memori.vm_sessions
as $func$
declare
  v_s    memori.vm_sessions;
  v_user text;
begin
  perform memori._check_identifier('session id', p_session_id);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  v_user := memori._vm_user(p_session_id, p_user_id);
  -- the lock serialises the workers of one session: budgets hold under concurrency
  select * into v_s from memori.vm_sessions where user_id = v_user and session_id = p_session_id for update;
  if found then
    return v_s;
  elsif not p_create then
    raise exception 'no VM session %', quote_literal(p_session_id)
      using errcode = 'PM005', hint = 'Start it with memori.turn_begin or memori.page_create.';
  end if;
  v_user := memori._acting_user(p_user_id);
  -- one session namespace: a VM session is a session of memori.sessions
  -- (created on first use, PM041 when the id is another user's there)
  perform memori._context_session(p_session_id, v_user, null, p_now);
  begin
    insert into memori.vm_sessions (session_id, user_id, max_l0_tokens, max_l1_pages, eviction_policy,
                                    eviction_threshold, pinned_last_turns, fault_protection_turns,
                                    eviction_cooldown_turns, faults_allowed, max_faults_per_turn,
                                    max_fault_tokens_per_turn, fault_confidence_threshold, created_at, updated_at)
    select p_session_id, v_user,
           coalesce(max(value #>> '{}') filter (where key = 'vm.max_l0_tokens'), '128000')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.max_l1_pages'), '100')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.eviction_policy'), 'importance_weighted_lru'),
           coalesce(max(value #>> '{}') filter (where key = 'vm.eviction_threshold'), '0.85')::numeric,
           coalesce(max(value #>> '{}') filter (where key = 'vm.pinned_last_turns'), '3')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.fault_protection_turns'), '2')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.eviction_cooldown_turns'), '3')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.faults_allowed'), 'true')::boolean,
           coalesce(max(value #>> '{}') filter (where key = 'vm.max_faults_per_turn'), '3')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.max_fault_tokens_per_turn'), '8192')::integer,
           coalesce(max(value #>> '{}') filter (where key = 'vm.fault_confidence_threshold'), 'referenced'),
           p_now, p_now
      from memori.settings where key like 'vm.%'
    returning * into v_s;
  exception when unique_violation then
    -- another worker of the same user created it first
    select * into v_s from memori.vm_sessions where user_id = v_user and session_id = p_session_id for update;
  end;
  return v_s;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_session(text, text, boolean, timestamptz) is 'A VM session row of the acting user (memori._vm_user) locked for update, created from the vm.* settings when p_create; PM005 when missing, PM040 when p_user_id is not memori.user_id, PM041 when the session id is another user''s in memori.sessions.';

-------------------------------------------------------------------------------
-- _vm_session_read: a session's row for readers (no lock)
create or replace function memori._vm_session_read(p_session_id text) returns memori.vm_sessions
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
  v_s    memori.vm_sessions;
begin
  select * into v_s from memori.vm_sessions where user_id = v_user and session_id = p_session_id;
  if not found then
    raise exception 'no VM session %', coalesce(quote_literal(p_session_id), 'NULL')
      using errcode = 'PM005', hint = 'Start it with memori.turn_begin or memori.page_create.';
  end if;
  return v_s;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_session_read(text) is 'The acting user''s VM session row without locking it (readers); PM005 when missing.';

-------------------------------------------------------------------------------
-- _page_topics: the topic tags of a text (its most frequent long words)
create or replace function memori._page_topics(p_text text, p_limit integer default 5) returns text
as $func$
  select string_agg(w, ', ' order by n desc, w)
    from (select lower(m[1]) as w, count(*) as n
            from regexp_matches(left(coalesce(p_text, ''), 20000), '([[:alpha:]][[:alnum:]_]{4,})', 'g') m
           group by 1 order by 2 desc, 1 limit p_limit) t
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_topics(text, integer) is 'Topic tags of a text: its most frequent words of 5+ letters (ties alphabetical), comma-separated.';

-------------------------------------------------------------------------------
-- _page_reference: the level-3 representation of a page, derived in SQL
create or replace function memori._page_reference(
  p_page_id text, p_modality text, p_hint text, p_content text, p_duration numeric, p_dimensions integer[]
) returns text
as $func$
  select case p_modality
    when 'image' then format('image:%s', p_page_id)
                      || coalesce(format(' %sx%s', p_dimensions[1], p_dimensions[2]), '')
                      || coalesce(' ' || p_hint, '')
    when 'audio' then format('audio:%s', p_page_id) || coalesce(format(' %ss', round(p_duration)), '')
                      || coalesce(' topics: ' || coalesce(p_hint, memori._page_topics(p_content)), '')
    when 'video' then format('video:%s', p_page_id) || coalesce(format(' %ss', round(p_duration)), '')
                      || coalesce(' ' || p_hint, '')
    else 'topics: ' || coalesce(p_hint, memori._page_topics(p_content), p_page_id)
  end
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_reference(text, text, text, text, numeric, integer[]) is 'Level 3 of a page (seed 1.6): topic tags for text, "image:{id}", "audio:{id} duration + topics", "video:{id}".';

-------------------------------------------------------------------------------
-- _page_write_reference: store a page's derived level-3 representation
create or replace function memori._page_write_reference(p_page memori.pages, p_now timestamptz) returns void
as $func$
declare
  v_ref text := memori._page_reference(p_page.page_id, p_page.modality, p_page.hint, p_page.content,
                                       p_page.duration_seconds, p_page.dimensions);
begin
  insert into memori.page_representations (session_id, page_id, user_id, level, content, tokens, version, created_at)
  values (p_page.session_id, p_page.page_id, p_page.user_id, 3, v_ref, memori.token_estimate(v_ref, 'page'), p_page.version, p_now)
  on conflict (user_id, session_id, page_id, level) do update
     set content = excluded.content, data = null, tokens = excluded.tokens, version = excluded.version,
         created_at = excluded.created_at;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_write_reference(memori.pages, timestamptz) is 'Derive and store level 3 (reference) of a page for its current version.';

-------------------------------------------------------------------------------
-- _vm_log_expiry: before page_mutations rows are written: the actor checked, and their expiry
create or replace function memori._vm_log_expiry(p_s memori.vm_sessions, p_actor text, p_now timestamptz)
returns timestamptz
as $func$
begin
  perform memori._vm_check_choice('actor', p_actor);
  return memori._vm_retention(p_s.user_id, p_s.session_id, 'page_mutations', p_now);  -- here, not on a shard
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_log_expiry(memori.vm_sessions, text, timestamptz) is 'Check the actor of page mutations about to be logged (PM004) and return their expiry from the session''s retention policy.';

-------------------------------------------------------------------------------
-- _page_mutation: append one entry to the mutation log
create or replace function memori._page_mutation(
  p_s memori.vm_sessions, p_page_id text, p_type text, p_tier_before text, p_tier_after text,
  p_level_before integer, p_level_after integer, p_tokens_after integer, p_actor text, p_cause text,
  p_now timestamptz
) returns void
as $func$
begin
  insert into memori.page_mutations (session_id, user_id, page_id, at, turn, mutation_type, tier_before, tier_after,
                                     level_before, level_after, tokens_after, actor, cause, expires_at)
  values (p_s.session_id, p_s.user_id, p_page_id, p_now, p_s.turn, p_type, p_tier_before, p_tier_after,
          p_level_before, p_level_after, p_tokens_after, p_actor, p_cause, memori._vm_log_expiry(p_s, p_actor, p_now));
  -- any change to the working set or a page makes cached packs stale
  delete from memori.vm_pack_cache where user_id = p_s.user_id and session_id = p_s.session_id;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_mutation(memori.vm_sessions, text, text, text, text, integer, integer, integer, text, text, timestamptz) is 'Append a page mutation (at the session''s turn) and drop the session''s cached packs.';

-------------------------------------------------------------------------------
-- _page_row: the row id of a page as a user's session sees it (forks resolved)
create or replace function memori._page_row(p_user_id text, p_session_id text, p_page_id text) returns bigint
as $func$
declare
  v_id bigint;
begin
  -- memori.vm_visible_pages written out as two probes of the user's rows: each is one
  -- shard on Citus (the UNION ALL of the view is planned over every shard there).
  -- The session's own row wins; else the nearest ancestor's row as of the fork.
  select p.id into v_id from memori.pages p
   where p.user_id = p_user_id and p.session_id = p_session_id and p.page_id = p_page_id;
  if found then
    return v_id;
  end if;
  select p.id into v_id
    from memori.vm_forks f
    join memori.pages p on p.user_id = f.user_id and p.session_id = f.ancestor_session_id
                       and p.page_id = p_page_id and p.id <= f.max_page_id
   where f.user_id = p_user_id and f.session_id = p_session_id
   order by f.depth
   limit 1;
  return v_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_row(text, text, text) is 'Row id (memori.pages.id) of the page a user''s session sees under an id: its own row, else the nearest ancestor''s as of the fork; NULL when none.';

-------------------------------------------------------------------------------
-- _page_live: does a user's session see an unexpired page under an id? (forks resolved)
create or replace function memori._page_live(p_user_id text, p_session_id text, p_page_id text, p_now timestamptz)
returns boolean
as $func$
declare
  v_id bigint := memori._page_row(p_user_id, p_session_id, p_page_id);
begin
  -- what page_lookup answers (not NULL) through vm_visible_pages, in probes of the user's rows
  return v_id is not null
         and exists (select 1 from memori.pages p
                      where p.user_id = p_user_id and p.id = v_id and (p.expires_at is null or p.expires_at > p_now));
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_live(text, text, text, timestamptz) is 'Whether a user''s session sees an unexpired page under an id (its own row or an ancestor''s as of the fork).';

-------------------------------------------------------------------------------
-- _page_write: what must happen before a page row of a session changes
-- Called by every VM function before it updates page rows (or their
-- representations); Citus refuses the triggers that did it (issue 20). Two
-- rules: copy-on-write (a fork that still shares the row gets its own copy
-- first, memori._page_cow_push) and the page-table cache notice (pg_notify
-- memori_pages with an opaque tag of the page, delivered at commit: a LISTEN
-- is not subject to row-level security, so it carries no ids).
create or replace function memori._page_write(p_user_id text, p_session_id text, p_page_ids text[]) returns void
as $func$
declare
  v_p record;
begin
  if exists (select 1 from memori.vm_forks f where f.user_id = p_user_id and f.ancestor_session_id = p_session_id) then
    -- a loop, not a function call in the query: on Citus that would run on the shard
    for v_p in
      select p.id, p.page_id from memori.pages p
       where p.user_id = p_user_id and p.session_id = p_session_id and p.page_id = any (p_page_ids)
         and exists (select 1 from memori.vm_forks f
                      where f.user_id = p_user_id and f.ancestor_session_id = p_session_id and f.max_page_id >= p.id)
       order by p.id
    loop
      perform memori._page_cow_push(p_user_id, v_p.id, p_session_id, v_p.page_id);
    end loop;
  end if;
  perform pg_notify('memori_pages', json_build_object('tag', md5(p_session_id || chr(1) || x))::text)
     from unnest(p_page_ids) x;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_write(text, text, text[]) is 'Before a session''s page rows change: copy rows a fork still shares into it (copy-on-write) and pg_notify memori_pages {tag: md5(session_id, page_id)} for page-table caches.';

-------------------------------------------------------------------------------
-- _page_get: a page of a session (PM005 when missing or expired)
create or replace function memori._page_get(p_session_id text, p_page_id text, p_now timestamptz, p_lock boolean)
returns memori.pages
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
  v_id   bigint := memori._page_row(v_user, p_session_id, p_page_id);
  v_p    memori.pages;
begin
  -- resolved through the session's forks; a writer (p_lock) gets its own copy of a shared page
  select * into v_p from memori.pages
   where user_id = v_user and id = v_id and (expires_at is null or expires_at > p_now);
  if not found then
    raise exception 'no page % in session %', coalesce(quote_literal(p_page_id), 'NULL'), quote_literal(p_session_id)
      using errcode = 'PM005',
            hint = 'Page ids are unique within a session; list them with memori.vm_manifest or memori.working_set_list.';
  end if;
  if p_lock then
    if v_p.session_id <> p_session_id then
      v_p := memori._page_copy(v_p.id, p_session_id);
    end if;
    select * into v_p from memori.pages where user_id = v_user and id = v_p.id for update;
  end if;
  return v_p;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_get(text, text, timestamptz, boolean) is 'An unexpired page a session sees (forks resolved); with p_lock the session''s own row, copied from the fork''s ancestor first, locked; PM005 when missing.';

-------------------------------------------------------------------------------
-- _page_check_content: the size limit of page content
create or replace function memori._page_check_content(p_content text, p_data jsonb) returns integer
as $func$
declare
  v_bytes integer := coalesce(octet_length(p_content), 0) + coalesce(octet_length(p_data::text), 0);
  v_limit integer := coalesce((memori._setting('vm.max_content_bytes') #>> '{}')::integer, 1048576);
begin
  if v_bytes > v_limit then
    raise exception 'page content is % bytes; the limit is % bytes', v_bytes, v_limit
      using errcode = 'PM003',
            hint = 'Store large media as an artifact (p_artifact_ref) with a caption as content, or raise memori.settings vm.max_content_bytes.';
  end if;
  return v_bytes;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_check_content(text, jsonb) is 'Bytes of page content plus data; PM003 above vm.max_content_bytes.';

-------------------------------------------------------------------------------
-- _page_check_provenance: every cited page is a live page of the session (PM090)
create or replace function memori._page_check_provenance(p_session_id text, p_provenance text[], p_now timestamptz)
returns void
as $func$
declare
  v_user    text := memori._vm_user(p_session_id);
  v_missing text[];
begin
  if p_provenance is null or cardinality(p_provenance) = 0 then
    perform memori._invalid('provenance is empty: pass the page ids it derives from',
                            'Pass p_provenance => ARRAY[''msg_042'', ''msg_043''].');
  end if;
  select array_agg(x order by o) into v_missing
    from unnest(p_provenance) with ordinality as u(x, o)
   where x is null or not memori._page_live(v_user, p_session_id, x, p_now);  -- a query of unnest, not of a table
  if v_missing is not null then
    raise exception 'provenance page(s) % not in session %', array_to_string(v_missing, ', ', 'NULL'), quote_literal(p_session_id)
      using errcode = 'PM090', detail = format('missing: %s', array_to_string(v_missing, ', ', 'NULL')),
            hint = 'Cite pages of this session (memori.vm_manifest or memori.search_pages lists them); create the source pages first.';
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_check_provenance(text, text[], timestamptz) is 'PM001 for empty provenance, PM090 (listing them) when a cited page is not a live page of the session.';

