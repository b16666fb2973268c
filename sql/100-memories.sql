-- pymemdb SQL API, part 3: memories and TTL'd session checkpoints (seed 05).
--
-- memori.memories keeps the seed's shape: user_id holds the namespace.
-- Skills with session checkpoints write to session_{short}_{YYYY_MM} (UTC
-- month) with a TTL; permanent skills write to their permanent namespace.

-------------------------------------------------------------------------------
-- seed 05's skills (kept when re-installing; change them with UPDATE/INSERT)
insert into memori.session_skills (skill, short_name, ttl_days, permanent_namespace, description) values
  ('skill:lead-architect',          'lead_architect', 7, null, 'Session checkpoints, 7-day TTL'),
  ('skill:backend-service-builder', 'backend',        7, null, 'Session checkpoints, 7-day TTL'),
  ('skill:api-builder',             'api',            7, null, 'Session checkpoints, 7-day TTL'),
  ('skill:frontend-design',         null, null, 'pt2_project', 'Permanent: UI patterns should persist for consistency'),
  ('skill:skill-creator',           null, null, 'pt2_project', 'Permanent: skill creation knowledge is reusable')
on conflict (skill) do nothing;
-- a handful of rows read on every checkpoint call: give the planner real statistics
-- (not on a Citus reference table: ANALYZE goes to every placement through a connection, which
-- Citus refuses once the INSERT above ran locally on the coordinator's placement; autovacuum
-- keeps the shards' statistics there)
do $analyze$
begin
  if to_regclass('pg_catalog.pg_dist_partition') is not null then
    if exists (select from pg_catalog.pg_dist_partition where logicalrelid = 'memori.session_skills'::regclass) then
      return;
    end if;
  end if;
  analyze memori.session_skills;
end
$analyze$;

comment on table memori.memories is 'Namespaced memories (seed 05): user_id is the namespace, expires_at NULL is permanent, owner_id the owning user (the distribution column; rows written without a user belong to their namespace).';
comment on table memori.session_skills is 'Skills with session checkpoints (short_name, ttl_days) or a permanent namespace (seed 05).';

-------------------------------------------------------------------------------
-- _retention_memories: memories in the retention engine's shape
create or replace view memori._retention_memories with (security_invoker = true) as
select m.id,
       m.user_id                                     as owner,
       m.category,
       coalesce(m.metadata->>'type', '*')            as kind,
       m.expires_at,
       (m.metadata->'important') = 'true'::jsonb     as important,
       m.owner_id                                    -- the owning user: the cleaner deletes by (owner_id, id)
  from memori.memories m;
comment on view memori._retention_memories is 'memori.memories as retention candidates: namespace as owner, metadata.type as kind, metadata.important; owner_id is the owning user (the owner column).';

-- Default policy: priority 5, permanent unless a TTL is given, and
-- metadata.important = true keeps an expired memory.
select memori.retention_register('memories', 'memori.memories', 'memori._retention_memories', 'id',
                                 'Namespaced memories and session checkpoints (seed 05)', 5, null, true,
                                 p_owner_column => 'owner_id');

insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description) values
  ('memories', 'session_checkpoint', 1, null, false,
   'Ephemeral session checkpoints: cleaned first; their TTL comes from memori.session_skills')
on conflict (table_name, kind) do nothing;

-------------------------------------------------------------------------------
-- active_memories: what every read sees (seed 05's TTL filter)
create or replace view memori.active_memories with (security_invoker = true) as
select m.*
  from memori.memories m
 where m.expires_at is null or m.expires_at > now();
comment on view memori.active_memories is 'memori.memories without expired rows (expires_at IS NULL OR expires_at > now()).';

-------------------------------------------------------------------------------
-- _session_skill: look a skill up by its id or short name
create or replace function memori._session_skill(p_skill text) returns memori.session_skills
as $func$
declare
  v_skill memori.session_skills;
begin
  perform memori._check_identifier('skill', p_skill, 128);
  select * into v_skill from memori.session_skills s
   where s.skill = p_skill or s.short_name = p_skill or s.skill = 'skill:' || p_skill
   order by s.skill = p_skill desc, s.short_name is not distinct from p_skill desc  -- id, short name, id without 'skill:'
   limit 1;
  if not found then
    raise exception 'unknown skill %', p_skill
      using errcode = 'PM002',
            hint = 'Known skills: ' || (select string_agg(skill, ', ' order by skill) from memori.session_skills)
                   || '. Add one with INSERT INTO memori.session_skills.';
  end if;
  return v_skill;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._session_skill(text) is 'The memori.session_skills row for a skill id (skill:api-builder) or short name (api); raises PM002.';

-------------------------------------------------------------------------------
-- _skill_namespace_of: the namespace formula of a skill's columns at p_now
-- session_{short}_{YYYY_MM} (UTC month) for a session skill (short name set),
-- else the permanent namespace; NULL p_now gives the permanent namespace (NULL
-- for a session skill). Reads no table, and has no SET clause, so PostgreSQL
-- inlines it: into session_checkpoint_load_latest's hot statement it is the
-- expression, not a call (on Citus too, where that statement runs on the
-- user's shard). Everything in it is schema-qualified for that reason.
create or replace function memori._skill_namespace_of(p_short_name text, p_permanent text, p_now timestamptz)
returns text
language sql stable
begin atomic
  select coalesce('session_' operator(pg_catalog.||) p_short_name operator(pg_catalog.||) '_'
                    operator(pg_catalog.||) pg_catalog.to_char(p_now at time zone 'UTC', 'YYYY_MM'),
                  p_permanent);
end;
comment on function memori._skill_namespace_of(text, text, timestamptz) is 'Namespace of a skill''s short name or permanent namespace at p_now: session_{short}_{YYYY_MM} (UTC month), else the permanent one; inlined.';

-------------------------------------------------------------------------------
-- _skill_namespace: where a skill's checkpoints go at p_now
create or replace function memori._skill_namespace(p_skill memori.session_skills, p_now timestamptz)
returns text
as $func$
  select memori._skill_namespace_of(p_skill.short_name, p_skill.permanent_namespace, p_now)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._skill_namespace(memori.session_skills, timestamptz) is 'Namespace of a resolved skill at p_now: session_{short}_{YYYY_MM} (UTC month) or the permanent namespace.';

-------------------------------------------------------------------------------
-- session_namespace: where a skill's checkpoints go at p_now
-- p_skill: a memori.session_skills skill id ('skill:api-builder'), its short name ('api') or its id without
--   'skill:'; empty or over 128 characters: PM001; unknown: PM002
-- p_now: the clock; its UTC month names a session namespace (session_{short}_{YYYY_MM})
create or replace function memori.session_namespace(p_skill text, p_now timestamptz default now())
returns text
as $func$
  select memori._skill_namespace(memori._session_skill(p_skill), p_now)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_namespace(text, timestamptz) is 'Namespace of a skill''s checkpoints: session_{short}_{YYYY_MM} (UTC month) or the permanent namespace.';

-------------------------------------------------------------------------------
-- _check_content: bounded text payload
create or replace function memori._check_content(p_content text) returns void
as $func$
declare
  v_limit integer := coalesce(memori._setting('memories.max_content_bytes')::integer, 1048576);
begin
  if p_content is null or p_content = '' then
    perform memori._invalid('content must not be empty', 'Pass the checkpoint or memory text as content.');
  end if;
  perform memori._raise(memori._too_large('content', octet_length(p_content), v_limit,
                                          'Store less (summarise, or keep large artifacts outside and reference them), '
                                          'or raise memori.settings memories.max_content_bytes.'));
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_content(text) is 'Reject empty content (PM001) and content over memories.max_content_bytes (PM003).';

-------------------------------------------------------------------------------
-- _check_metadata: a JSON object or NULL
create or replace function memori._check_metadata(p_metadata jsonb) returns jsonb
as $func$
begin
  if p_metadata is not null and jsonb_typeof(p_metadata) <> 'object' then
    perform memori._invalid(format('metadata must be a JSON object, got %s', jsonb_typeof(p_metadata)),
                            'Pass metadata as {"key": value}, or omit it.');
  end if;
  return coalesce(p_metadata, '{}'::jsonb);
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_metadata(jsonb) is 'Return metadata or {} when NULL; PM001 unless a JSON object.';

-------------------------------------------------------------------------------
-- session_checkpoint_save: seed 05's save_checkpoint
-- p_skill: a memori.session_skills skill id ('skill:api-builder'), its short name ('api') or its id without
--   'skill:'; empty or over 128 characters: PM001; unknown: PM002
-- p_content: the checkpoint text: non-empty (PM001), at most memories.max_content_bytes bytes (default 1 MiB; PM003)
-- p_metadata: a JSON object (else PM001; NULL is {}), stored with the keys type, ttl_days, skill and user_id set
-- p_now: the clock: created_at, the UTC month of the namespace and the start of the skill's TTL; NULL raises PM001
create or replace function memori.session_checkpoint_save(
  p_skill    text,
  p_user_id  text,
  p_content  text,
  p_metadata jsonb default '{}'::jsonb,
  p_now      timestamptz default now()
) returns memori.memories
as $func$
declare
  v_skill memori.session_skills := memori._session_skill(p_skill);
  v_row   memori.memories;
  v_user  text;
begin
  v_user := memori._acting_user(p_user_id);  -- NULL: memori.user_id; another user: PM040
  perform memori._check_content(p_content);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;

  insert into memori.memories (user_id, content, category, metadata, created_at, expires_at, owner_id)
  values (memori._skill_namespace(v_skill, p_now),
          p_content,
          'context',
          memori._check_metadata(p_metadata)
            || jsonb_build_object('type', 'session_checkpoint', 'ttl_days', v_skill.ttl_days,
                                  'skill', v_skill.skill, 'user_id', v_user),
          p_now,
          p_now + make_interval(days => v_skill.ttl_days),  -- NULL for permanent skills
          v_user)
  returning * into v_row;
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_checkpoint_save(text, text, text, jsonb, timestamptz) is 'Save a session checkpoint for a skill: session namespace with the skill''s TTL, or the permanent namespace.';

-------------------------------------------------------------------------------
-- _session_checkpoint_current: seed 05's tier 1, the latest checkpoint of the skill's current namespace
-- ONE statement: the skill's namespace (by id, else short name, else id
-- without 'skill:', memori._session_skill's order) from key probes of the
-- skills, each an InitPlan run only when the ones before it found nothing (no
-- join and no sort: 2-3 us less than a join of the skill row ordered by match;
-- docs/benchmarks.md), and one probe of idx_memories_session_checkpoints
-- (namespace, owner). A short name is NULL for a permanent skill. An unknown
-- skill finds nothing here (session_checkpoint_load_latest's later tiers raise
-- PM001/PM002 for it).
-- Inlined on one server (LANGUAGE sql, a string body with every table and
-- function qualified, no SET clause; the caller's search_path parses it, with
-- the caller's rights). On Citus it goes whole to the user's shard (owner_id =
-- p_user, a parameter Citus prunes on), the skills read there from the
-- reference table's copy: one round trip. Citus refuses a SQL function over a
-- distributed table, so where the citus extension is installed the end of
-- this file makes it PL/pgSQL of this statement (memori._as_plpgsql).
-- p_user: the acting user, already resolved (memori._acting_user_inlined)
create or replace function memori._session_checkpoint_current(p_skill text, p_user text, p_now timestamptz)
returns setof memori.session_checkpoint
as $func$
  select m.*, 'current'::text
    from memori.memories m
   where m.owner_id = p_user
     and m.user_id = coalesce(
           (select memori._skill_namespace_of(s.short_name, s.permanent_namespace, p_now)
              from memori.session_skills s where s.skill = p_skill),
           (select memori._skill_namespace_of(s.short_name, s.permanent_namespace, p_now)
              from memori.session_skills s where s.short_name = p_skill),
           (select memori._skill_namespace_of(s.short_name, s.permanent_namespace, p_now)
              from memori.session_skills s where s.skill = 'skill:' || p_skill))
     and m.metadata->>'type' = 'session_checkpoint' and (m.expires_at is null or m.expires_at > p_now)
   order by m.created_at desc, m.id desc
   limit 1
$func$ language sql stable security invoker rows 1;
comment on function memori._session_checkpoint_current(text, text, timestamptz) is 'Seed 05''s tier 1: the latest unexpired session checkpoint of a skill''s current namespace for a resolved user; one statement, inlined (PL/pgSQL on Citus).';

-------------------------------------------------------------------------------
-- _session_checkpoint_fallback: seed 05's tiers 2 and 3, when the current namespace has nothing
-- The skill is resolved (PM001/PM002 with a hint for one that is not) and
-- tiers 2 and 3 run as one statement, the ordered branches of a UNION ALL
-- under LIMIT 1 (tier 3 runs only when tier 2 found nothing).
-- p_user: the acting user, already resolved (memori._acting_user_inlined)
create or replace function memori._session_checkpoint_fallback(p_skill text, p_user text, p_now timestamptz)
returns setof memori.session_checkpoint
as $func$
declare
  v_skill  memori.session_skills := memori._session_skill(p_skill);  -- PM001/PM002 for a skill that is not one
  v_prefix text := 'session_' || v_skill.short_name || '_';  -- NULL for a permanent skill
begin
  return query
    select t.*
      from ( -- (2) the legacy namespace named by the user
            (select m.*, 'legacy'::text
               from memori.memories m
              where m.owner_id = p_user and m.user_id = p_user
                and m.metadata->>'type' = 'session_checkpoint' and (m.expires_at is null or m.expires_at > p_now)
              order by m.created_at desc, m.id desc
              limit 1)
            union all
            -- (3) earlier months of the skill's session namespace (none for a permanent skill)
            (select m.*, 'previous'::text
               from memori.memories m
              where m.owner_id = p_user and v_prefix is not null
                and m.user_id ~>=~ v_prefix and m.user_id ~<~ (v_prefix || chr(1114111))  -- index range
                and m.user_id ~ ('^' || v_prefix || '[0-9]{4}_[0-9]{2}$')
                and m.metadata->>'type' = 'session_checkpoint' and (m.expires_at is null or m.expires_at > p_now)
              order by m.created_at desc, m.id desc
              limit 1)
          ) t
     limit 1;
end
$func$ language plpgsql stable security invoker rows 1
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._session_checkpoint_fallback(text, text, timestamptz) is 'Seed 05''s tiers 2 and 3: the latest unexpired session checkpoint of the legacy user namespace, else of an earlier month of the skill''s session namespace; PM001/PM002 for an unknown skill.';

-------------------------------------------------------------------------------
-- session_checkpoint_load_latest: seed 05's load_latest_checkpoint
-- Tiers, first hit wins: (1) the current namespace, (2) the legacy namespace
-- named by the user id, (3) any earlier session_{short}_YYYY_MM namespace.
-- Only the user's own rows (owner_id; rows written without a user belong to
-- their namespace); expired rows never come back. The user is the acting
-- user: p_user_id NULL means memori.user_id, another one is PM040.
--
-- A hot path (pymemdb bench ttl). A hit in the current namespace, the common
-- case, is one statement (memori._session_checkpoint_current). Tiers 2 and 3
-- are a PL/pgSQL function (memori._session_checkpoint_fallback), the second
-- branch of a UNION ALL under LIMIT 1: the executor sets up one function scan
-- node for it and runs it only when tier 1 found nothing.
-- LANGUAGE sql with a string body (every table and function qualified) and no
-- SET clause: PostgreSQL inlines it, the acting-user check and tier 1 into the
-- caller's statement (a PL/pgSQL wrapper cost 9-10 us, its SET clause 2.5-3.4
-- and the acting-user call 6 more; docs/benchmarks.md, the seed-05 read's
-- floor). On Citus it reads no table itself (tier 1 is PL/pgSQL there), and
-- runs on the coordinator: Citus's forced delegation refuses a statement
-- reading a reference table beside the user's rows (memori.distribute_functions()).
-- Errors, in order: PM001 bad user id or PM040 another user (memori._acting_user_inlined);
-- PM001 or PM002 (unknown skill) from memori._session_skill, when tier 1 found nothing.
-- p_skill: a memori.session_skills skill id ('skill:api-builder'), its short name ('api') or its id without
--   'skill:'; empty or over 128 characters: PM001; unknown: PM002
create or replace function memori.session_checkpoint_load_latest(
  p_skill   text,
  p_user_id text,
  p_now     timestamptz default now()
) returns setof memori.session_checkpoint
as $func$
  select t.*
    from (select c.* from memori._session_checkpoint_current(p_skill, memori._acting_user_inlined(p_user_id), p_now) c
          union all
          select e.*
            from memori._session_checkpoint_fallback(p_skill, memori._acting_user_inlined(p_user_id), p_now) e) t
   limit 1
$func$ language sql stable security invoker rows 1;
comment on function memori.session_checkpoint_load_latest(text, text, timestamptz) is 'Latest unexpired session checkpoint of a skill for a user: current namespace, then legacy user namespace, then earlier session namespaces; source says which.';

-------------------------------------------------------------------------------
-- memory_save: a memory in any namespace, with an optional TTL
-- p_namespace: the namespace (memories.user_id), 1-256 printable characters, else PM001
-- p_content: the memory text: non-empty (PM001), at most memories.max_content_bytes bytes (default 1 MiB; PM003)
-- p_category: free label, 1-64 printable characters (PM001 otherwise); default 'context'
-- p_metadata: a JSON object (else PM001; NULL is {}); its "type" is the retention kind (its policy applies),
--   "important": true keeps an expired memory when that policy preserves important rows (the default does)
-- p_ttl: lifetime from p_now (expires_at = p_now + p_ttl); NULL (default) keeps it forever; not positive: PM001
-- p_owner_id: the owning user, under the acting-user rule (NULL: memori.user_id; another user: PM040);
--   when both are NULL the memory belongs to its namespace (owner_id = p_namespace)
create or replace function memori.memory_save(
  p_namespace text,
  p_content   text,
  p_category  text default 'context',
  p_metadata  jsonb default '{}'::jsonb,
  p_ttl       interval default null,
  p_owner_id  text default null,
  p_now       timestamptz default now()
) returns memori.memories
as $func$
declare
  v_row   memori.memories;
  v_owner text;
begin
  perform memori._check_identifier('namespace', p_namespace);
  perform memori._check_identifier('category', p_category, 64);
  perform memori._check_content(p_content);
  if p_ttl is not null and p_ttl <= interval '0' then
    perform memori._invalid(format('ttl must be positive, got %s', p_ttl), 'Pass a positive interval such as ''7 days'', or NULL for a permanent memory.');
  end if;
  -- the acting-user rule: no owner means memori.user_id, another user is PM040; without
  -- either the memory belongs to its namespace (seed 05's rule: the namespace is the user)
  if p_owner_id is not null or nullif(current_setting('memori.user_id', true), '') is not null then
    v_owner := memori._acting_user(p_owner_id);
  else
    v_owner := p_namespace;
  end if;
  insert into memori.memories (user_id, content, category, metadata, created_at, expires_at, owner_id)
  values (p_namespace, p_content, p_category, memori._check_metadata(p_metadata), p_now, p_now + p_ttl, v_owner)
  returning * into v_row;
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.memory_save(text, text, text, jsonb, interval, text, timestamptz) is 'Save a memory in a namespace; p_ttl NULL keeps it forever; the owner is the acting user (p_owner_id, else memori.user_id; PM040 when they differ), else the namespace.';

-------------------------------------------------------------------------------
-- memory_list: newest unexpired memories of a namespace
-- p_namespace: the namespace (memories.user_id), 1-256 printable characters, else PM001
-- p_limit: at most this many memories, newest first, 1 to 10000 (default 50), else PM001
create or replace function memori.memory_list(
  p_namespace text,
  p_limit     integer default 50,
  p_now       timestamptz default now()
) returns setof memori.memories
as $func$
begin
  perform memori._check_identifier('namespace', p_namespace);
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    perform memori._invalid(format('limit must be between 1 and 10000, got %s', p_limit), 'Pass a limit such as 50.');
  end if;
  return query
    select * from memori.memories m
     where m.user_id = p_namespace and (m.expires_at is null or m.expires_at > p_now)
     order by m.created_at desc, m.id desc
     limit p_limit;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.memory_list(text, integer, timestamptz) is 'Newest unexpired memories of a namespace.';

-------------------------------------------------------------------------------
-- ttl_status: seed 05's "active vs expired by namespace"
create or replace view memori.ttl_status with (security_invoker = true) as
select m.user_id,
       count(*) filter (where m.expires_at is null)    as permanent,
       count(*) filter (where m.expires_at > now())    as active_ttl,
       count(*) filter (where m.expires_at <= now())   as expired,
       m.user_id like 'session\_%'                      as is_session
  from memori.memories m
 group by m.user_id;
comment on view memori.ttl_status is 'Per namespace: permanent, active TTL and expired (not yet cleaned) memories, as of now().';

-------------------------------------------------------------------------------
-- ttl_next_expiry: seed 05's "next expiration"
create or replace view memori.ttl_next_expiry with (security_invoker = true) as
select m.user_id,
       min(m.expires_at) as next_expiry,
       max(m.expires_at) as latest_expiry,
       count(*)          as active_ttl
  from memori.memories m
 where m.expires_at is not null and m.expires_at > now()
 group by m.user_id;
comment on view memori.ttl_next_expiry is 'Per namespace: next and latest expiry of memories with an active TTL.';

-------------------------------------------------------------------------------
-- On a Citus server: seed 05's tier 1 as PL/pgSQL of its statement (memori._as_plpgsql)
do $do$
begin
  if exists (select from pg_catalog.pg_extension where extname = 'citus') then
    perform memori._as_plpgsql('memori._session_checkpoint_current(text, text, timestamptz)');
  end if;
end
$do$;
