-- pymemdb SQL API, part 5: the checkpoint tracker (seed 01, part 1).
--
-- Typed checkpoints (manual, automatic, milestone) whose priority and
-- retention come from retention policies, so the one retention engine
-- previews and cleans them with everything else. Versions are kept as
-- reverse patches (sql/045-jsonb-diff.sql); milestone criteria are rows.

-------------------------------------------------------------------------------
-- configuration (seed 01's checkpoint config; kept when re-installing)
insert into memori.settings (key, value, description) values
  ('checkpoint.default_retention_days', '90', 'Retention of a checkpoint whose type has none.'),
  ('checkpoint.max_retention_days', '365', 'Largest per-checkpoint retention override (checkpoint_create p_retention_days).'),
  ('checkpoint.preserve_important', 'true', 'Default preserve_important of new checkpoints: manual and milestone ones then survive expiry until unpreserved.'),
  ('checkpoint.batch_size', '100', 'Cleanup batch size the seed configures for checkpoints (memori-cleanup --batch-size).'),
  ('checkpoint.warning_days', '7', 'Checkpoints expiring within this many days are expiring_soon.'),
  ('checkpoint.auto_enabled', 'true', 'Automatic checkpoints on/off.'),
  ('checkpoint.auto_interval_seconds', '1800', 'Least time between two automatic checkpoints of a session.'),
  ('checkpoint.auto_triggers', '["context_change", "task_complete", "session_end"]', 'Triggers that may create an automatic checkpoint.'),
  ('checkpoint.max_versions', '10', 'Versions kept per checkpoint, the current one included.'),
  ('checkpoint.compression_threshold_bytes', '5000', 'Data above this size is reported by checkpoint.compressed (PostgreSQL compresses it with TOAST).'),
  ('checkpoint.max_data_bytes', '1048576', 'Largest checkpoint data (JSON text bytes) the API accepts.'),
  ('checkpoint.query_events', 'true', 'Emit checkpoint.queried on checkpoint_get/checkpoint_query (turn off for hot read paths).')
on conflict (key) do nothing;

insert into memori.milestone_criteria (name, kind, path, item_field, factor, position, description) values
  ('all_tasks_completed', 'all_completed', '{tasks}', 'completed', null, 1,
   'Every task in data.tasks is completed now, and some task was not in the previous checkpoint'),
  ('skill_level_increase', 'increase', '{skill_level}', null, null, 2,
   'data.skill_level is higher than in the previous checkpoint'),
  ('efficiency_improvement_detected', 'ratio_increase', '{efficiency}', null, 1.1, 3,
   'data.efficiency is more than 1.1 times the previous checkpoint''s')
on conflict (name) do nothing;

comment on table memori.checkpoints is 'Typed session checkpoints (seed 01): priority and retention from their type''s policy.';
comment on table memori.checkpoint_versions is 'Earlier versions of checkpoint data, each the reverse patch from the next version.';
comment on table memori.milestone_criteria is 'Milestone criteria as data: kind all_completed / increase / ratio_increase over a JSON path.';

-------------------------------------------------------------------------------
-- _retention_checkpoints: checkpoints in the retention engine's shape
create or replace view memori._retention_checkpoints with (security_invoker = true) as
select c.id,
       c.user_id            as owner,
       c.session_id         as category,
       c.checkpoint_type    as kind,
       c.expires_at,
       c.preserve_important as important
  from memori.checkpoints c;
comment on view memori._retention_checkpoints is 'memori.checkpoints as retention candidates: type as kind, preserve_important as important.';

select memori.retention_register('checkpoints', 'memori.checkpoints', 'memori._retention_checkpoints', 'id',
                                 'Typed session checkpoints (seed 01)', 5, interval '90 days', false);
update memori.retention_tables set event_prefix = 'checkpoint' where table_name = 'checkpoints';

-- Seed 01's type policies: priority, retention, and whether preserve_important protects them.
insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description) values
  ('checkpoints', 'manual',    8, interval '90 days',  true,  'Manual checkpoints (seed 01: priority 8, 90 days)'),
  ('checkpoints', 'automatic', 5, interval '30 days',  false, 'Automatic checkpoints (seed 01: priority 5, 30 days)'),
  ('checkpoints', 'milestone', 10, interval '365 days', true, 'Milestones (seed 01: priority 10, 365 days)')
on conflict (table_name, kind) do nothing;

-------------------------------------------------------------------------------
-- _checkpoint_pxyz: the seed's coordinate of a checkpoint write
-- (the functions that write memori.checkpoints set it; Citus refuses
-- distributed tables with triggers, and the CHECK checkpoints_pxyz_check
-- keeps any other write honest)
create or replace function memori._checkpoint_pxyz(p_operation text, p_type text, p_at timestamptz) returns jsonb
as $func$
  select jsonb_build_object('entity', 'checkpoint', 'operation', p_operation, 'policy', p_type, 'time', p_at)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_pxyz(text, text, timestamptz) is 'checkpoints.pxyz of a write: entity checkpoint, operation (created or updated), policy (the type), time.';

-------------------------------------------------------------------------------
-- _checkpoint_policy: the policy of a checkpoint type
create or replace function memori._checkpoint_policy(p_type text) returns memori.retention_policies
as $func$
declare
  v_policy memori.retention_policies;
begin
  select * into v_policy from memori.retention_policies
   where table_name = 'checkpoints' and kind = p_type and kind <> '*';
  if not found then
    raise exception 'unknown checkpoint type %', coalesce(quote_literal(p_type), 'NULL')
      using errcode = 'PM004',
            hint = 'Use one of: ' || (select string_agg(kind, ', ' order by priority) from memori.retention_policies
                                       where table_name = 'checkpoints' and kind <> '*') || '.';
  end if;
  return v_policy;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_policy(text) is 'The retention policy of a checkpoint type; PM004 for an unknown type.';

-------------------------------------------------------------------------------
-- _check_checkpoint_data: a bounded JSON object
create or replace function memori._check_checkpoint_data(p_data jsonb) returns integer
as $func$
declare
  v_bytes integer;
  v_limit integer := coalesce(memori._setting('checkpoint.max_data_bytes')::integer, 1048576);
begin
  if p_data is null or jsonb_typeof(p_data) <> 'object' then
    perform memori._invalid(format('checkpoint data must be a JSON object, got %s', coalesce(jsonb_typeof(p_data), 'NULL')),
                            'Pass the session state as {"key": value, ...}.');
  end if;
  v_bytes := octet_length(p_data::text);
  perform memori._raise(memori._too_large('checkpoint data', v_bytes, v_limit,
    'Keep large artifacts outside and reference them, or raise memori.settings checkpoint.max_data_bytes.'));
  return v_bytes;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_checkpoint_data(jsonb) is 'Validate checkpoint data (a JSON object within checkpoint.max_data_bytes) and return its size in bytes.';

-------------------------------------------------------------------------------
-- _checkpoint_compressed: tell listeners a large value was stored compressed
create or replace function memori._checkpoint_compressed(p_id uuid, p_raw_bytes integer, p_now timestamptz)
returns void
as $func$
begin
  if p_raw_bytes > coalesce(memori._setting('checkpoint.compression_threshold_bytes')::integer, 5000) then
    perform memori._event_emit('checkpoint.compressed',
              jsonb_build_object('checkpoint_id', p_id, 'raw_bytes', p_raw_bytes,
                                 'stored_bytes', (select pg_column_size(c.data) from memori.checkpoints c where c.id = p_id)),
              p_now);
  end if;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_compressed(uuid, integer, timestamptz) is 'Emit checkpoint.compressed (raw and stored bytes) when data is above the compression threshold.';

-------------------------------------------------------------------------------
-- _checkpoint_item_problem: the first rule a new checkpoint breaks
-- The rules of a new checkpoint, in one place: {sqlstate, message, hint}, or
-- NULL when the item is valid. An SQL CASE, so a list of thousands is checked
-- in one statement.
create or replace function memori._checkpoint_item_problem(
  p_item          jsonb,
  p_known_type    boolean,
  p_max_retention integer,
  p_max_bytes     integer
) returns text[]
as $func$
  select case
    when jsonb_typeof(p_item) is distinct from 'object' then
      array['PM001', 'not a JSON object', 'Each checkpoint is an object with session_id, user_id, type, title, data.']
    when exists (select 1 from jsonb_object_keys(p_item) k
                  where k not in ('session_id', 'user_id', 'type', 'title', 'data', 'description', 'metadata',
                                  'tags', 'retention_days', 'now')) then
      array['PM001',
            'unknown field(s) ' || (select string_agg(k, ', ') from jsonb_object_keys(p_item) k
                                     where k not in ('session_id', 'user_id', 'type', 'title', 'data', 'description',
                                                     'metadata', 'tags', 'retention_days', 'now')),
            'Fields: session_id, user_id, type, title, data, description, metadata, tags, retention_days, now.']
    when not p_known_type then
      array['PM004', format('unknown checkpoint type %s', coalesce(quote_literal(p_item->>'type'), 'NULL')), null]
    when memori._identifier_problem('session id', p_item->>'session_id') is not null then
      array['PM001'] || memori._identifier_problem('session id', p_item->>'session_id')
    when memori._identifier_problem('user id', p_item->>'user_id') is not null then
      array['PM001'] || memori._identifier_problem('user id', p_item->>'user_id')
    when memori._identifier_problem('title', p_item->>'title', 500) is not null then
      array['PM001'] || memori._identifier_problem('title', p_item->>'title', 500)
    when jsonb_typeof(p_item->'data') is distinct from 'object' then
      array['PM001', format('checkpoint data must be a JSON object, got %s', coalesce(jsonb_typeof(p_item->'data'), 'NULL')),
            'Pass the session state as {"key": value, ...}.']
    when octet_length((p_item->'data')::text) > p_max_bytes then
      memori._too_large('checkpoint data', octet_length((p_item->'data')::text), p_max_bytes,
        'Keep large artifacts outside and reference them, or raise memori.settings checkpoint.max_data_bytes.')
    when coalesce(jsonb_typeof(p_item->'description'), 'null') not in ('string', 'null')
         or length(p_item->>'description') > 10000 then
      array['PM001', 'description must be a string of at most 10000 characters', 'Shorten the description; put details in data.']
    when coalesce(jsonb_typeof(p_item->'metadata'), 'null') not in ('object', 'null') then
      array['PM001', format('metadata must be a JSON object, got %s', jsonb_typeof(p_item->'metadata')),
            'Pass metadata as {"key": value}, or omit it.']
    when coalesce(jsonb_typeof(p_item->'tags'), 'null') <> 'null'
         and (jsonb_typeof(p_item->'tags') <> 'array' or jsonb_array_length(p_item->'tags') > 50
              or exists (select 1 from jsonb_array_elements(p_item->'tags') t
                          where jsonb_typeof(t) <> 'string' or btrim(t #>> '{}') = '' or length(t #>> '{}') > 64)) then
      array['PM001', 'tags must be at most 50 non-empty strings of at most 64 characters',
            'Pass tags such as {"release", "api"}.']
    when coalesce(jsonb_typeof(p_item->'retention_days'), 'null') <> 'null'
         and (jsonb_typeof(p_item->'retention_days') <> 'number'
              or (p_item->>'retention_days')::numeric <> trunc((p_item->>'retention_days')::numeric)
              or (p_item->>'retention_days')::numeric not between 1 and p_max_retention) then
      array['PM001', format('retention of %s days is outside 1..%s', p_item->>'retention_days', p_max_retention),
            format('Pass at most %s days (memori.settings checkpoint.max_retention_days), or omit it to use the type''s policy.',
                   p_max_retention)]
    when coalesce(jsonb_typeof(p_item->'now'), 'null') not in ('string', 'null') then
      array['PM001', 'now must be a timestamp string', 'Pass an ISO 8601 time such as 2026-11-22T09:00:00Z, or omit it.']
  end
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_item_problem(jsonb, boolean, integer, integer) is 'The rules of a new checkpoint: {sqlstate, message, hint} of the first one an item breaks, NULL when valid.';

-------------------------------------------------------------------------------
-- _checkpoints_insert: validate a list of new checkpoints, insert them all
create or replace function memori._checkpoints_insert(p_items jsonb, p_now timestamptz, p_in_list boolean)
returns setof memori.checkpoints
as $func$
declare
  v_cfg  record;
  v_bad  record;
  v_rows memori.checkpoints[];
  v_user text := nullif(current_setting('memori.user_id', true), '');
  v_for  text;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  -- the acting-user rule (memori._acting_user) for every item: a checkpoint
  -- without a user is the acting user's; one for another user is PM040
  if v_user is not null and jsonb_typeof(p_items) = 'array' then
    select t.e->>'user_id' into v_for
      from jsonb_array_elements(p_items) with ordinality t(e, n)
     where t.e->>'user_id' <> v_user
     order by t.n
     limit 1;
    if found then
      perform memori._acting_user(v_for);  -- raises PM040
    end if;
    if exists (select 1 from jsonb_array_elements(p_items) e
                where jsonb_typeof(e) = 'object' and e->>'user_id' is null) then
      p_items := (select jsonb_agg(case when jsonb_typeof(t.e) = 'object' and t.e->>'user_id' is null
                                        then t.e || jsonb_build_object('user_id', v_user) else t.e end
                                   order by t.n)
                    from jsonb_array_elements(p_items) with ordinality t(e, n));
    end if;
  end if;
  select coalesce(max(value::text) filter (where key = 'checkpoint.max_retention_days'), '365')::integer as max_retention,
         coalesce(max(value::text) filter (where key = 'checkpoint.default_retention_days'), '90')::integer as default_retention,
         coalesce(max(value::text) filter (where key = 'checkpoint.max_data_bytes'), '1048576')::integer as max_bytes,
         coalesce(max(value::text) filter (where key = 'checkpoint.preserve_important'), 'true')::boolean as preserve
    into v_cfg
    from memori.settings where key like 'checkpoint.%';

  -- the first broken rule, in list order: nothing is written
  select t.n, memori._checkpoint_item_problem(t.e, pol.kind is not null, v_cfg.max_retention, v_cfg.max_bytes) as problem
    into v_bad
    from jsonb_array_elements(p_items) with ordinality t(e, n)
    left join memori.retention_policies pol
      on pol.table_name = 'checkpoints' and pol.kind <> '*' and pol.kind = t.e->>'type'
   where memori._checkpoint_item_problem(t.e, pol.kind is not null, v_cfg.max_retention, v_cfg.max_bytes) is not null
   order by t.n
   limit 1;
  if found then
    raise exception '%', case when p_in_list then format('checkpoint %s of the list: %s', v_bad.n, v_bad.problem[2])
                              else v_bad.problem[2] end
      using errcode = v_bad.problem[1],
            hint = coalesce(v_bad.problem[3],
                            'Use one of: ' || (select string_agg(kind, ', ' order by priority) from memori.retention_policies
                                                where table_name = 'checkpoints' and kind <> '*') || '.');
  end if;

  with inserted as (
    insert into memori.checkpoints (session_id, user_id, checkpoint_type, title, description, data, metadata, tags,
                                    priority, retention_days, preserve_important, created_at, updated_at, expires_at,
                                    pxyz)
    select t.e->>'session_id', t.e->>'user_id', pol.kind, t.e->>'title', t.e->>'description', t.e->'data',
           coalesce(nullif(t.e->'metadata', 'null'::jsonb), '{}'::jsonb),
           coalesce(array(select jsonb_array_elements_text(nullif(t.e->'tags', 'null'::jsonb))), '{}'),
           pol.priority, r.days, v_cfg.preserve, r.at, r.at, r.at + make_interval(days => r.days),
           memori._checkpoint_pxyz('created', pol.kind, r.at)
      from jsonb_array_elements(p_items) with ordinality t(e, n)
      join memori.retention_policies pol
        on pol.table_name = 'checkpoints' and pol.kind <> '*' and pol.kind = t.e->>'type'
     cross join lateral (select coalesce((t.e->>'retention_days')::integer, extract(day from pol.retention)::integer,
                                         v_cfg.default_retention) as days,
                                coalesce((t.e->>'now')::timestamptz, p_now) as at) r
     order by t.n
    returning *
  )
  select array_agg(i) into v_rows from inserted i;  -- in insertion order: the list's order

  perform memori._checkpoints_created(v_rows, p_now);
  return query select * from unnest(v_rows);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoints_insert(jsonb, timestamptz, boolean) is 'Validate a JSON list of new checkpoints (the acting-user rule: no user_id means memori.user_id, another user is PM040; the first broken rule raises, nothing is written), insert them in one statement with their type''s policy, emit their events.';

-------------------------------------------------------------------------------
-- _checkpoints_created: events for checkpoints just inserted
create or replace function memori._checkpoints_created(p_rows memori.checkpoints[], p_now timestamptz) returns void
as $func$
declare
  v_threshold integer := coalesce(memori._setting('checkpoint.compression_threshold_bytes')::integer, 5000);
  v_big       record;
begin
  if cardinality(p_rows) = 1 then
    perform memori._event_emit('checkpoint.created',
              (select jsonb_build_object('checkpoint_id', c.id, 'session_id', c.session_id, 'user_id', c.user_id,
                                         'checkpoint_type', c.checkpoint_type, 'expires_at', c.expires_at)
                 from unnest(p_rows) c), p_now);
  elsif cardinality(p_rows) > 1 then
    -- a batch is one event listing its checkpoints, not one event (and NOTIFY) per row
    perform memori._event_emit('checkpoint.created',
              jsonb_build_object('count', cardinality(p_rows),
                                 'checkpoint_ids', (select jsonb_agg(c.id) from unnest(p_rows) c)), p_now);
  end if;
  -- pg_column_size (the jsonb's own size) is a cheap first filter; the
  -- threshold applies to the JSON text, computed only for candidates
  for v_big in select x.id, x.raw
                 from (select c.id, octet_length(c.data::text) as raw from unnest(p_rows) c
                        where pg_column_size(c.data) > v_threshold / 4) x  -- escapes shrink in jsonb
                where x.raw > v_threshold loop
    perform memori._checkpoint_compressed(v_big.id, v_big.raw, p_now);
  end loop;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoints_created(memori.checkpoints[], timestamptz) is 'Emit checkpoint.created (one event per call: the checkpoint, or count and ids of a batch) and checkpoint.compressed for large data.';

-------------------------------------------------------------------------------
-- checkpoint_create: a typed checkpoint with its type's priority and retention
-- p_session_id: the agent session (checkpoints.session_id), a label of 1-256 printable characters (else PM001),
--   not a memori.sessions row
-- p_type: the checkpoint type, a kind of the 'checkpoints' retention policies: 'manual', 'automatic' or
--   'milestone' as seeded (the hint lists the current ones); it sets priority and retention; else PM004
-- p_title: 1-500 printable characters, else PM001
-- p_data: the state to keep: a JSON object (else PM001) of at most checkpoint.max_data_bytes bytes of JSON text
--   (default 1048576; PM003)
-- p_description: free text of at most 10000 characters (PM001); NULL (default) for none
-- p_metadata: a JSON object (else PM001); NULL is {}
-- p_tags: at most 50 non-empty tags of at most 64 characters each (else PM001); NULL is {}
-- p_retention_days: days from p_now to expiry, an integer from 1 to checkpoint.max_retention_days (default 365;
--   PM001 outside); NULL (default) uses the type's policy, else checkpoint.default_retention_days
create or replace function memori.checkpoint_create(
  p_session_id     text,
  p_user_id        text,
  p_type           text,
  p_title          text,
  p_data           jsonb,
  p_description    text default null,
  p_metadata       jsonb default '{}'::jsonb,
  p_tags           text[] default '{}',
  p_retention_days integer default null,
  p_now            timestamptz default now()
) returns memori.checkpoints
as $func$
  select c from memori._checkpoints_insert(
    jsonb_build_array(jsonb_build_object(
      'session_id', p_session_id, 'user_id', p_user_id, 'type', p_type, 'title', p_title, 'data', p_data,
      'description', p_description, 'metadata', p_metadata, 'tags', to_jsonb(p_tags),
      'retention_days', p_retention_days)),
    p_now, false) c
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_create(text, text, text, text, jsonb, text, jsonb, text[], integer, timestamptz) is 'Create a checkpoint; priority and retention come from its type''s policy unless p_retention_days overrides (up to the maximum).';

-------------------------------------------------------------------------------
-- checkpoint_create_many: many checkpoints in one statement, all or nothing
-- p_checkpoints: a JSON array (else PM001) of at most 10000 objects (PM001) with the keys session_id, user_id,
--   type, title, data, description, metadata, tags, retention_days (checkpoint_create's rules; a missing user_id
--   is memori.user_id) and now (an ISO 8601 time, else p_now); the first broken rule raises, nothing is written
create or replace function memori.checkpoint_create_many(p_checkpoints jsonb, p_now timestamptz default now())
returns setof memori.checkpoints
as $func$
begin
  if p_checkpoints is null or jsonb_typeof(p_checkpoints) <> 'array' then
    perform memori._invalid('checkpoints must be a JSON array of objects',
                            'Pass [{"session_id": ..., "user_id": ..., "type": ..., "title": ..., "data": {...}}, ...].');
  end if;
  if jsonb_array_length(p_checkpoints) > 10000 then
    perform memori._invalid(format('%s checkpoints in one call; the limit is 10000', jsonb_array_length(p_checkpoints)),
                            'Split the list into calls of at most 10000.');
  end if;
  return query select * from memori._checkpoints_insert(p_checkpoints, p_now, true);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_create_many(jsonb, timestamptz) is 'Create up to 10000 checkpoints from a JSON array in one statement (same rules as checkpoint_create); all or nothing, returned in the order given.';

-------------------------------------------------------------------------------
-- _checkpoint_queried: the checkpoint.queried event, unless switched off
create or replace function memori._checkpoint_queried(p_filter jsonb, p_count integer, p_now timestamptz)
returns void
as $func$
begin
  if coalesce(memori._setting('checkpoint.query_events'), 'true'::jsonb) = 'true'::jsonb then
    perform memori._event_emit('checkpoint.queried', p_filter || jsonb_build_object('count', p_count), p_now);
  end if;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_queried(jsonb, integer, timestamptz) is 'Emit checkpoint.queried unless memori.settings checkpoint.query_events is false.';

-------------------------------------------------------------------------------
-- checkpoint_get: one unexpired checkpoint
-- p_id: the checkpoint's id; no row when it does not exist, has expired or is not memori.user_id's (when set)
create or replace function memori.checkpoint_get(p_id uuid, p_now timestamptz default now())
returns setof memori.checkpoints
as $func$
declare
  v_row   memori.checkpoints;
  v_found boolean;
  v_user  text := nullif(current_setting('memori.user_id', true), '');  -- NULL: any user's (owners)
begin
  select * into v_row from memori.checkpoints c
   where (v_user is null or c.user_id = v_user) and c.id = p_id and (c.expires_at is null or c.expires_at > p_now);
  v_found := found;  -- PERFORM below resets FOUND
  perform memori._checkpoint_queried(jsonb_build_object('checkpoint_id', p_id), v_found::integer, p_now);
  if v_found then
    return next v_row;
  end if;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_get(uuid, timestamptz) is 'One checkpoint by id; no row when it does not exist or has expired.';

-------------------------------------------------------------------------------
-- checkpoint_query: by session, user, type, time range and tags, newest first
-- p_session_id: only this session's checkpoints; NULL (default) for every session
-- p_user_id: only this user's checkpoints (a filter, not checked against memori.user_id; row-level security
--   still applies); NULL (default) means memori.user_id, or every user when that is not set
-- p_type: only this checkpoint type ('manual', 'automatic', 'milestone' as seeded; PM004 otherwise);
--   NULL (default) for every type
-- p_from: only checkpoints created at or after this time; NULL (default) for no lower bound
-- p_to: only checkpoints created before this time; NULL (default) for no upper bound; p_from > p_to is PM001
-- p_tags: only checkpoints that have all these tags; NULL (default) for any tags
-- p_include_expired: true also returns expired checkpoints not yet cleaned up; default false
-- p_limit: at most this many checkpoints, newest first, 1 to 10000 (default 50), else PM001
create or replace function memori.checkpoint_query(
  p_session_id      text default null,
  p_user_id         text default null,
  p_type            text default null,
  p_from            timestamptz default null,
  p_to              timestamptz default null,
  p_tags            text[] default null,
  p_include_expired boolean default false,
  p_limit           integer default 50,
  p_now             timestamptz default now()
) returns setof memori.checkpoints
as $func$
declare
  v_count integer;
  v_user  text := coalesce(p_user_id, nullif(current_setting('memori.user_id', true), ''));  -- NULL: every user
begin
  if p_type is not null then
    perform memori._checkpoint_policy(p_type);
  end if;
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    perform memori._invalid(format('limit must be between 1 and 10000, got %s', p_limit), 'Pass a limit such as 50.');
  end if;
  if p_from is not null and p_to is not null and p_from > p_to then
    perform memori._invalid('p_from is after p_to', 'Pass a time range with p_from <= p_to.');
  end if;
  return query
    select * from memori.checkpoints c
     where (p_session_id is null or c.session_id = p_session_id)
       and (v_user is null or c.user_id = v_user)
       and (p_type is null or c.checkpoint_type = p_type)
       and (p_from is null or c.created_at >= p_from)
       and (p_to is null or c.created_at < p_to)
       and (p_tags is null or c.tags @> p_tags)
       and (p_include_expired or c.expires_at is null or c.expires_at > p_now)
     order by c.created_at desc, c.id desc
     limit p_limit;
  get diagnostics v_count = row_count;
  perform memori._checkpoint_queried(
            jsonb_strip_nulls(jsonb_build_object('session_id', p_session_id, 'user_id', p_user_id,
                                                 'checkpoint_type', p_type, 'tags', p_tags)), v_count, p_now);
end
$func$ language plpgsql volatile security invoker
-- optional filters ("p_x is null or col = p_x"): only a plan made for the
-- values given uses the right index; a generic cached plan scans the table
set plan_cache_mode = force_custom_plan
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_query(text, text, text, timestamptz, timestamptz, text[], boolean, integer, timestamptz) is 'Checkpoints by session, user, type, time range [p_from, p_to) and tags (all given), newest first; unexpired unless p_include_expired.';

-------------------------------------------------------------------------------
-- checkpoint_delete
-- p_id: the checkpoint's id; false when none (of memori.user_id, when set) has it; expired ones are deleted too
create or replace function memori.checkpoint_delete(p_id uuid) returns boolean
as $func$
declare
  v_row  memori.checkpoints;
  v_user text := nullif(current_setting('memori.user_id', true), '');  -- NULL: any user's (owners)
begin
  delete from memori.checkpoints c where (v_user is null or c.user_id = v_user) and c.id = p_id returning * into v_row;
  if not found then
    return false;
  end if;
  perform memori._event_emit('checkpoint.deleted',
            jsonb_build_object('checkpoint_id', p_id, 'session_id', v_row.session_id, 'user_id', v_row.user_id));
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_delete(uuid) is 'Delete a checkpoint and its versions; false when there was none.';

-------------------------------------------------------------------------------
-- _checkpoint_not_found: PM005 for a checkpoint id
create or replace function memori._checkpoint_not_found(p_id uuid) returns void
as $func$
begin
  raise exception 'checkpoint % not found', p_id
    using errcode = 'PM005', hint = 'It does not exist or has expired; memori.checkpoint_query lists checkpoints.';
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_not_found(uuid) is 'Raise PM005: the checkpoint does not exist or has expired.';

-------------------------------------------------------------------------------
-- _checkpoint_for_update: an unexpired checkpoint, locked, or PM005
create or replace function memori._checkpoint_for_update(p_id uuid, p_now timestamptz) returns memori.checkpoints
as $func$
declare
  v_row  memori.checkpoints;
  v_user text := nullif(current_setting('memori.user_id', true), '');  -- NULL: any user's (owners)
begin
  select * into v_row from memori.checkpoints c
   where (v_user is null or c.user_id = v_user) and c.id = p_id and (c.expires_at is null or c.expires_at > p_now)
     for update;
  if not found then
    perform memori._checkpoint_not_found(p_id);
  end if;
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._checkpoint_for_update(uuid, timestamptz) is 'Lock an unexpired checkpoint for change; PM005 when missing or expired.';

-------------------------------------------------------------------------------
-- checkpoint_preserve: protect a checkpoint from cleanup after expiry (or not)
-- p_id: the checkpoint's id, expired or not; PM005 when none (of memori.user_id, when set) has it
-- p_preserve: true (default): cleanup keeps it after expiry when its type's policy preserves important rows
--   ('manual' and 'milestone' as seeded); false: cleanup deletes it once expired; NULL raises PM001
create or replace function memori.checkpoint_preserve(p_id uuid, p_preserve boolean default true)
returns memori.checkpoints
as $func$
declare
  v_row  memori.checkpoints;
  v_user text := nullif(current_setting('memori.user_id', true), '');  -- NULL: any user's (owners)
begin
  if p_preserve is null then
    perform memori._invalid('p_preserve must not be NULL', 'Pass true to preserve, false to let cleanup take it.');
  end if;
  update memori.checkpoints c
     set preserve_important = p_preserve,
         -- (not memori._checkpoint_pxyz of the row's columns: Citus refuses STABLE functions of
         -- columns in an UPDATE; the time stays updated_at, which this does not change)
         pxyz = c.pxyz || '{"operation": "updated"}'::jsonb
   where (v_user is null or c.user_id = v_user) and c.id = p_id
  returning * into v_row;
  if not found then
    perform memori._checkpoint_not_found(p_id);
  end if;
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_preserve(uuid, boolean) is 'Set preserve_important: a preserved manual or milestone checkpoint survives cleanup after it expires.';

-------------------------------------------------------------------------------
-- checkpoint_update: new data, the old version kept as a reverse patch
-- p_id: an unexpired checkpoint's id; PM005 when it does not exist, has expired or is not memori.user_id's
-- p_data: the new data, replacing the old as the next version: a JSON object (else PM001) of at most
--   checkpoint.max_data_bytes bytes of JSON text (default 1048576; PM003)
create or replace function memori.checkpoint_update(p_id uuid, p_data jsonb, p_now timestamptz default now())
returns memori.checkpoints
as $func$
declare
  v_old   memori.checkpoints := memori._checkpoint_for_update(p_id, p_now);
  v_bytes integer := memori._check_checkpoint_data(p_data);
  v_keep  integer := greatest(coalesce(memori._setting('checkpoint.max_versions')::integer, 10), 1);
  v_row   memori.checkpoints;
begin
  if v_keep > 1 then
    insert into memori.checkpoint_versions (user_id, checkpoint_id, version, reverse_patch, data_bytes, created_at)
    values (v_old.user_id, p_id, v_old.version, memori._jsonb_diff(p_data, v_old.data), octet_length(v_old.data::text),
            v_old.updated_at);
  end if;
  -- keep the current version and the v_keep - 1 before it
  delete from memori.checkpoint_versions
   where user_id = v_old.user_id and checkpoint_id = p_id and version <= v_old.version + 1 - v_keep;

  update memori.checkpoints
     set data = p_data, version = v_old.version + 1, updated_at = p_now,
         pxyz = memori._checkpoint_pxyz('updated', v_old.checkpoint_type, p_now)
   where user_id = v_old.user_id and id = p_id
  returning * into v_row;
  perform memori._event_emit('checkpoint.updated',
            jsonb_build_object('checkpoint_id', p_id, 'version', v_row.version), p_now);
  perform memori._checkpoint_compressed(p_id, v_bytes, p_now);
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_update(uuid, jsonb, timestamptz) is 'Replace a checkpoint''s data as a new version; earlier versions are kept as reverse patches, at most checkpoint.max_versions in all.';

-------------------------------------------------------------------------------
-- checkpoint_versions: the kept versions, newest first
-- p_id: the checkpoint's id, expired or not; PM005 when none (of memori.user_id, when set) has it
create or replace function memori.checkpoint_versions(p_id uuid) returns setof memori.checkpoint_version
as $func$
declare
  v_user text := nullif(current_setting('memori.user_id', true), '');  -- NULL: any user's (owners)
begin
  select c.user_id into v_user from memori.checkpoints c where (v_user is null or c.user_id = v_user) and c.id = p_id;
  if not found then
    perform memori._checkpoint_not_found(p_id);
  end if;
  return query
    select c.version, c.updated_at, true, octet_length(c.data::text)
      from memori.checkpoints c where c.user_id = v_user and c.id = p_id
    union all
    select v.version, v.created_at, false, v.data_bytes
      from memori.checkpoint_versions v where v.user_id = v_user and v.checkpoint_id = p_id
    order by 1 desc;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_versions(uuid) is 'The kept versions of a checkpoint, newest (current) first, with their data size in bytes.';

-------------------------------------------------------------------------------
-- checkpoint_at_version: a kept version's data, rebuilt exactly
-- p_id: the checkpoint's id, expired or not; PM005 when none (of memori.user_id, when set) has it
-- p_version: a kept version number (checkpoint_versions lists them, the current one included); else, NULL
--   included, PM005
create or replace function memori.checkpoint_at_version(p_id uuid, p_version integer) returns jsonb
as $func$
declare
  v_row   memori.checkpoints;
  v_doc   jsonb;
  v_patch record;
  v_low   integer;
  v_user  text := nullif(current_setting('memori.user_id', true), '');  -- NULL: any user's (owners)
begin
  select * into v_row from memori.checkpoints c where (v_user is null or c.user_id = v_user) and c.id = p_id;
  if not found then
    perform memori._checkpoint_not_found(p_id);
  end if;
  select coalesce(min(version), v_row.version) into v_low from memori.checkpoint_versions
   where user_id = v_row.user_id and checkpoint_id = p_id;
  if p_version is null or p_version < v_low or p_version > v_row.version then
    raise exception 'version % of checkpoint % is not kept', p_version, p_id
      using errcode = 'PM005', hint = format('Kept versions: %s to %s (memori.checkpoint_versions).', v_low, v_row.version);
  end if;
  v_doc := v_row.data;
  for v_patch in
    select reverse_patch from memori.checkpoint_versions
     where user_id = v_row.user_id and checkpoint_id = p_id and version >= p_version
     order by version desc
  loop
    v_doc := memori._jsonb_patch(v_doc, v_patch.reverse_patch);
  end loop;
  return v_doc;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_at_version(uuid, integer) is 'The data of a kept version of a checkpoint, rebuilt from the current data and reverse patches; PM005 for a version not kept.';

-------------------------------------------------------------------------------
-- checkpoint_expiry_status: the seed's checkpoint_expiry_status schema
create or replace view memori.checkpoint_expiry_status with (security_invoker = true) as
select c.id                                                                   as checkpoint_id,
       c.checkpoint_type,
       c.expires_at,
       case when c.expires_at <= now() then 'expired'
            when c.expires_at <= now()
                 + make_interval(days => coalesce(memori._setting('checkpoint.warning_days')::int, 7))
                 then 'expiring_soon'
            else 'active' end                                                 as status,
       round((extract(epoch from c.expires_at - now()) / 86400)::numeric, 3)   as days_until_expiry,
       (c.expires_at <= now() and r.deletable)                                 as should_cleanup
  from memori.checkpoints c
  join memori.retention_candidates r on r.table_name = 'checkpoints' and r.row_id = c.id::text;
comment on view memori.checkpoint_expiry_status is 'Per checkpoint: status (active | expiring_soon | expired), days_until_expiry and should_cleanup, as of now().';

-------------------------------------------------------------------------------
-- checkpoint_stats: counts by type and status, sizes, next expiry
-- p_user_id: count only this user's checkpoints (a filter, not checked against memori.user_id; row-level
--   security still applies); NULL (default) means memori.user_id, or every user when that is not set
create or replace function memori.checkpoint_stats(p_user_id text default null, p_now timestamptz default now())
returns setof memori.checkpoint_stat
as $func$
declare
  -- the user's (one shard on Citus): p_user_id, else memori.user_id, else every user's
  v_user text := coalesce(p_user_id, nullif(current_setting('memori.user_id', true), ''));
  v_soon timestamptz := p_now + make_interval(days => coalesce(memori._setting('checkpoint.warning_days')::int, 7));
  v_type text[]; v_total bigint[]; v_active bigint[]; v_soon_n bigint[]; v_expired bigint[];
  v_preserved bigint[]; v_raw bigint[]; v_stored bigint[]; v_next timestamptz[];
begin
  -- two statements: the checkpoints counted by type (on Citus a query of the distributed
  -- table alone, on the user's shard), then the types (a reference table) joined to the
  -- counts. One statement joining them crashed the coordinator (an outer join of the
  -- reference table with the distributed one), and a delegated call may not run a query
  -- that joins a reference table to a subquery's result ("queries must filter by the
  -- distribution argument")
  select array_agg(k.checkpoint_type), array_agg(k.total), array_agg(k.active), array_agg(k.expiring_soon),
         array_agg(k.expired), array_agg(k.preserved), array_agg(k.raw_bytes), array_agg(k.stored_bytes),
         array_agg(k.next_expiry)
    into v_type, v_total, v_active, v_soon_n, v_expired, v_preserved, v_raw, v_stored, v_next
    from (select c.checkpoint_type,
                 count(*) as total,
                 count(*) filter (where c.expires_at > v_soon) as active,
                 count(*) filter (where c.expires_at > p_now and c.expires_at <= v_soon) as expiring_soon,
                 count(*) filter (where c.expires_at <= p_now) as expired,
                 count(*) filter (where c.preserve_important) as preserved,
                 sum(octet_length(c.data::text))::bigint as raw_bytes,
                 sum(pg_column_size(c.data))::bigint as stored_bytes,
                 min(c.expires_at) filter (where c.expires_at > p_now) as next_expiry
            from memori.checkpoints c
           where v_user is null or c.user_id = v_user
           group by c.checkpoint_type) k;
  return query
  select p.kind, coalesce(k.total, 0), coalesce(k.active, 0), coalesce(k.expiring_soon, 0), coalesce(k.expired, 0),
         coalesce(k.preserved, 0), coalesce(k.raw_bytes, 0), coalesce(k.stored_bytes, 0), k.next_expiry
    from memori.retention_policies p
    left join unnest(v_type, v_total, v_active, v_soon_n, v_expired, v_preserved, v_raw, v_stored, v_next)
           as k(checkpoint_type, total, active, expiring_soon, expired, preserved, raw_bytes, stored_bytes, next_expiry)
      on k.checkpoint_type = p.kind
   where p.table_name = 'checkpoints' and p.kind <> '*'
   order by p.priority desc;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_stats(text, timestamptz) is 'Per checkpoint type: total, active, expiring_soon, expired, preserved, raw and stored bytes of data, next expiry.';

-------------------------------------------------------------------------------
-- _milestone_fired: does one criterion fire between two states?
create or replace function memori._milestone_fired(p_criterion memori.milestone_criteria, p_current jsonb, p_previous jsonb)
returns boolean
as $func$
declare
  v_now  jsonb := p_current #> p_criterion.path;
  v_prev jsonb := p_previous #> p_criterion.path;
begin
  if p_criterion.kind = 'all_completed' then
    -- every item completed now (an empty list is not an accomplishment), some not before
    return jsonb_typeof(v_now) = 'array' and jsonb_array_length(v_now) > 0
       and jsonb_typeof(v_prev) = 'array'
       and not exists (select 1 from jsonb_array_elements(v_now) t
                        where t -> p_criterion.item_field is distinct from 'true'::jsonb)
       and exists (select 1 from jsonb_array_elements(v_prev) t
                    where t -> p_criterion.item_field is distinct from 'true'::jsonb);
  end if;
  if jsonb_typeof(v_now) <> 'number' or jsonb_typeof(v_prev) <> 'number' then
    return false;  -- missing or non-numeric values never fire
  end if;
  if p_criterion.kind = 'increase' then
    return v_now::numeric > v_prev::numeric;
  end if;
  return v_now::numeric > v_prev::numeric * p_criterion.factor;  -- ratio_increase
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._milestone_fired(memori.milestone_criteria, jsonb, jsonb) is 'Evaluate one milestone criterion (all_completed, increase, ratio_increase) on current vs previous data.';

-------------------------------------------------------------------------------
-- checkpoint_detect_milestone: compare with the session's latest checkpoint
-- p_session_id: the agent session (checkpoints.session_id), a label of 1-256 printable characters (else PM001),
--   not a memori.sessions row
-- p_current: the session's current state: a JSON object (else PM001) of at most checkpoint.max_data_bytes bytes
--   (PM003), compared with the data of the session's latest unexpired checkpoint by the enabled
--   memori.milestone_criteria; when one fires it is the new milestone checkpoint's data
create or replace function memori.checkpoint_detect_milestone(
  p_session_id text,
  p_user_id    text,
  p_current    jsonb,
  p_now        timestamptz default now()
) returns setof memori.checkpoints
as $func$
declare
  v_previous  memori.checkpoints;
  v_criterion memori.milestone_criteria;
  v_triggers  text[];
  v_row       memori.checkpoints;
begin
  perform memori._check_identifier('session id', p_session_id);
  p_user_id := memori._acting_user(p_user_id);  -- NULL: memori.user_id; another user: PM040
  perform memori._check_checkpoint_data(p_current);
  select * into v_previous from memori.checkpoints c
   where c.user_id = p_user_id and c.session_id = p_session_id and (c.expires_at is null or c.expires_at > p_now)
   order by c.created_at desc, c.id desc
   limit 1;
  if not found then
    return;  -- nothing to compare with
  end if;
  -- evaluated here, not in the query: on Citus the criteria (a reference table) are read on a
  -- worker, where a whole row of them has the shard's row type, which _milestone_fired does not take
  for v_criterion in select * from memori.milestone_criteria m where m.enabled order by m.position, m.name loop
    if memori._milestone_fired(v_criterion, p_current, v_previous.data) then
      v_triggers := v_triggers || v_criterion.name;
    end if;
  end loop;
  if v_triggers is null then
    return;
  end if;
  perform memori._event_emit('checkpoint.milestone_detected',
            jsonb_build_object('session_id', p_session_id, 'triggers', to_jsonb(v_triggers),
                               'previous_checkpoint_id', v_previous.id), p_now);
  v_row := memori.checkpoint_create(p_session_id, p_user_id, 'milestone', 'Milestone: ' || v_triggers[1], p_current,
                                    p_metadata => jsonb_build_object('triggers', to_jsonb(v_triggers),
                                                                     'previous_checkpoint_id', v_previous.id),
                                    p_now => p_now);
  perform memori._event_emit('checkpoint.milestone_created',
            jsonb_build_object('checkpoint_id', v_row.id, 'session_id', p_session_id,
                               'triggers', to_jsonb(v_triggers)), p_now);
  return next v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_detect_milestone(text, text, jsonb, timestamptz) is 'Evaluate the milestone criteria on the current state against the session''s latest checkpoint; create and return a milestone checkpoint when any fires.';

-------------------------------------------------------------------------------
-- checkpoint_auto: an automatic checkpoint for a configured trigger, at most once per interval
-- p_session_id: the agent session (checkpoints.session_id), a label of 1-256 printable characters (else PM001),
--   not a memori.sessions row
-- p_trigger: what happened, 1-64 printable characters (else PM001); only one listed in the checkpoint.auto_triggers
--   setting ('context_change', 'task_complete', 'session_end' as seeded) creates a checkpoint, another gives
--   reason 'trigger_not_configured'
-- p_data: the automatic checkpoint's data, as in checkpoint_create: a JSON object (else PM001) of at most
--   checkpoint.max_data_bytes bytes (PM003); checked only when a checkpoint is created
create or replace function memori.checkpoint_auto(
  p_session_id text,
  p_user_id    text,
  p_trigger    text,
  p_data       jsonb,
  p_now        timestamptz default now()
) returns memori.checkpoint_auto_result
as $func$
declare
  v_interval interval := make_interval(secs => coalesce(memori._setting('checkpoint.auto_interval_seconds')::int, 1800));
  v_last     timestamptz;
  v_row      memori.checkpoints;
  v_result   memori.checkpoint_auto_result;
begin
  perform memori._check_identifier('session id', p_session_id);
  p_user_id := memori._acting_user(p_user_id);  -- NULL: memori.user_id; another user: PM040
  perform memori._check_identifier('trigger', p_trigger, 64);
  if coalesce(memori._setting('checkpoint.auto_enabled'), 'true'::jsonb) <> 'true'::jsonb then
    v_result := (false, 'disabled', null, null);
    return v_result;
  end if;
  if not coalesce(memori._setting('checkpoint.auto_triggers') ? p_trigger, false) then
    v_result := (false, 'trigger_not_configured', null, null);
    return v_result;
  end if;
  -- one automatic checkpoint per interval even when calls race
  perform pg_advisory_xact_lock(hashtextextended('memori.checkpoint_auto:' || p_user_id || '/' || p_session_id, 0));
  select max(created_at) into v_last from memori.checkpoints
   where user_id = p_user_id and session_id = p_session_id and checkpoint_type = 'automatic';
  if v_last is not null and v_last + v_interval > p_now then
    v_result := (false, 'interval_not_elapsed', v_last + v_interval, null);
    return v_result;
  end if;
  v_row := memori.checkpoint_create(p_session_id, p_user_id, 'automatic', 'Auto: ' || p_trigger, p_data,
                                    p_metadata => jsonb_build_object('trigger', p_trigger), p_now => p_now);
  v_result := (true, 'created', p_now + v_interval, v_row.id);
  return v_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.checkpoint_auto(text, text, text, jsonb, timestamptz) is 'Create an automatic checkpoint for a configured trigger once the interval since the session''s last one has passed; the result says why not otherwise.';
