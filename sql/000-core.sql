-- pymemdb SQL API, part 0: settings, argument checks and events.
-- Idempotent: re-applied after every install or upgrade, in file order.

-------------------------------------------------------------------------------
-- settings (seeded defaults; a DBA changes them with UPDATE, re-install keeps them)
insert into memori.settings (key, value, description) values
  ('cleanup.enabled', 'true', 'Master switch: false makes cleanup_preview empty and cleanup runs delete nothing.'),
  ('cleanup.lock_timeout_ms', '2000', 'lock_timeout of each cleanup batch (its rows are locked with SKIP LOCKED; this bounds other waits); a batch that waits longer is retried at half size.'),
  ('cleanup.plan_chunk_rows', '50000', 'A cleanup run plans this many rows per transaction (keeps planning transactions short).'),
  ('cleanup.batch_pause_ms', '5', 'Least pause between cleanup batches (CLI, client and cleanup_run), leaving CPU and I/O to the workload.'),
  ('cleanup.work_share', '0.03', 'Largest share of a cleanup run''s time spent in batches (above 0, at most 1; a session may SET memori.cleanup_work_share): after a batch of t ms the run rests t * (1 - share) / share ms, at least cleanup.batch_pause_ms, leaving the cores to the workload.'),
  ('cleanup.statement_timeout_ms', '5000', 'statement_timeout the CLI sets on each cleanup batch transaction.'),
  ('retention.warning_days', '7', 'Rows expiring within this many days are reported as expiring_soon.'),
  ('memories.max_content_bytes', '1048576', 'Largest memories.content accepted by the SQL API, in bytes (UTF-8).'),
  ('events.notify', 'true', 'Send every event with pg_notify on channel memori_events as well as storing it.')
on conflict (key) do nothing;

comment on table memori.settings is 'Configuration as data: change with UPDATE; re-installing keeps your values.';
comment on table memori.installs is 'One row per install or upgrade: package version, alembic revision, checksum of the sql/ files.';

-------------------------------------------------------------------------------
-- _setting
create or replace function memori._setting(p_key text) returns jsonb
as $func$
  select value from memori.settings where key = p_key
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._setting(text) is 'Value of one memori.settings row (NULL when absent).';

-------------------------------------------------------------------------------
-- setting_get: one setting, for clients (they never read memori.settings themselves)
-- p_key: the memori.settings key, e.g. 'cleanup.enabled' (exact match)
-- p_default: what is returned when no row has that key (default NULL)
create or replace function memori.setting_get(p_key text, p_default jsonb default null) returns jsonb
as $func$
  select coalesce((select s.value from memori.settings s where s.key = p_key), p_default)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.setting_get(text, jsonb) is 'Value of a memori.settings key, or p_default when the key is absent (clients read settings through this).';

-------------------------------------------------------------------------------
-- _invalid: raise PM001 invalid_argument with a hint
create or replace function memori._invalid(p_message text, p_hint text) returns void
as $func$
begin
  raise exception '%', p_message using errcode = 'PM001', hint = p_hint;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._invalid(text, text) is 'Raise PM001 (invalid argument) with a message and a hint.';

-------------------------------------------------------------------------------
-- _setting_rule_book: what each memori.settings value must be, by key
-- One list of every key pymemdb reads, with its kind and bounds, for the CHECK
-- below and memori.setting_rules(). Kinds: boolean; integer and number (min /
-- max inclusive, NULL: unbounded); positive (a number above 0); share (above 0,
-- at most 1); interval (a JSON string such as "7 days", of at least min
-- seconds); regex; strings (an array of strings); shares (a non-empty array of
-- shares); factors ([size, factor] pairs); ms_by_type (an object of whole
-- milliseconds >= 1); count_or_all (an integer >= 0 or "all"); choice (one of
-- the '|'-separated choices).
create or replace function memori._setting_rule_book() returns jsonb
as $func$
  select jsonb_object_agg(v.key, jsonb_build_object(
           'kind', v.kind, 'min', v.lo, 'max', v.hi, 'choices', v.choices,
           'rule', case v.kind
             when 'boolean' then 'true or false'
             when 'integer' then 'a whole number' || b.bounds
             when 'number' then 'a number' || b.bounds
             when 'positive' then 'a number above 0'
             when 'share' then 'a number above 0 and at most 1'
             when 'interval' then 'an interval as a JSON string such as "7 days"'
                                  || case when v.lo > 0 then ', at least ' || v.lo || ' s' when v.lo = 0 then ', not negative' else '' end
             when 'regex' then 'a regular expression as a JSON string'
             when 'strings' then 'a JSON array of strings'
             when 'shares' then 'a non-empty JSON array of numbers above 0 and at most 1'
             when 'factors' then 'a JSON array of [model size in billions >= 0, factor from 0 to 1] pairs'
             when 'ms_by_type' then 'a JSON object of entry type: TTL in milliseconds (a whole number >= 1)'
             when 'count_or_all' then 'a whole number >= 0 or "all"'
             when 'choice' then 'one of "' || replace(v.choices, '|', '", "') || '" (a JSON string)'
           end))
    from (values
      ('budget.business_max_boost',              'number',       0::numeric, null::numeric, null::text),
      ('budget.density_business',                'positive',  null, null, null),
      ('budget.density_code',                    'positive',  null, null, null),
      ('budget.density_general',                 'positive',  null, null, null),
      ('budget.max_chunks',                      'integer',      1, null, null),
      ('budget.max_conflicts',                   'integer',      0, null, null),
      ('budget.max_content_bytes',               'integer',      1, null, null),
      ('budget.max_dropped_ids',                 'count_or_all', null, null, null),
      ('budget.max_stored_chunks',               'integer',      1, null, null),
      ('budget.persist',                         'boolean',   null, null, null),
      ('budget.rag_boost_scale',                 'number',       0, null, null),
      ('budget.recency_business_decay_rate',     'number',       0, null, null),
      ('budget.recency_decay_rate',              'number',       0, null, null),
      ('budget.recency_linear_max',              'number',       0, null, null),
      ('budget.recency_max_boost',               'number',       0, null, null),
      ('budget.revenue_max_boost',               'number',       0, null, null),
      ('budget.revenue_scale',                   'positive',  null, null, null),
      ('budget.summary_threshold',               'integer',      0, null, null),
      ('checkpoint.auto_enabled',                'boolean',   null, null, null),
      ('checkpoint.auto_interval_seconds',       'integer',      0, null, null),
      ('checkpoint.auto_triggers',               'strings',   null, null, null),
      ('checkpoint.batch_size',                  'integer',      1, null, null),
      ('checkpoint.compression_threshold_bytes', 'integer',      0, null, null),
      ('checkpoint.default_retention_days',      'integer',      0, null, null),
      ('checkpoint.max_data_bytes',              'integer',      1, null, null),
      ('checkpoint.max_retention_days',          'integer',      1, null, null),
      ('checkpoint.max_versions',                'integer',      1, null, null),
      ('checkpoint.preserve_important',          'boolean',   null, null, null),
      ('checkpoint.query_events',                'boolean',   null, null, null),
      ('checkpoint.warning_days',                'integer',      0, null, null),
      ('cleanup.batch_pause_ms',                 'number',       0, null, null),
      ('cleanup.enabled',                        'boolean',   null, null, null),
      ('cleanup.lock_retries',                   'integer',      0, null, null),
      ('cleanup.lock_timeout_ms',                'integer',      1, null, null),
      ('cleanup.plan_chunk_rows',                'integer',      1, null, null),
      ('cleanup.skip_retries',                   'integer',      0, null, null),
      ('cleanup.skip_retry_pause_ms',            'number',       0, null, null),
      ('cleanup.statement_timeout_ms',           'integer',      0, null, null),
      ('cleanup.work_share',                     'share',     null, null, null),
      ('compression.aging_ratios',               'shares',    null, null, null),
      ('compression.auto_markers',               'boolean',   null, null, null),
      ('compression.chars_per_token',            'positive',  null, null, null),
      ('compression.default_context_size',       'integer',      1, null, null),
      ('compression.enabled',                    'boolean',   null, null, null),
      ('compression.max_checkpoints',            'integer',      2, null, null),
      ('compression.max_message_bytes',          'integer',      1, null, null),
      ('compression.min_checkpoint_tokens',      'integer',      0, null, null),
      ('compression.new_checkpoint_ratio',       'share',     null, null, null),
      ('compression.plan_retention_days',        'integer',      0, null, null),
      ('compression.preserve_recent_max_share',  'number',       0,    1, null),
      ('compression.preserve_recent_tokens',     'integer',      0, null, null),
      ('compression.summary_max_tokens',         'integer',      1, null, null),
      ('compression.trigger_ratio',              'share',     null, null, null),
      ('compression.ultra_tokens',               'integer',      1, null, null),
      ('compression.usable_ratio',               'share',     null, null, null),
      ('context.default_ttl_ms',                 'ms_by_type', null, null, null),
      ('context.max_key_length',                 'integer',      1, null, null),
      ('context.max_value_bytes',                'integer',      1, null, null),
      ('context.max_windows',                    'integer',      1, null, null),
      ('context.search_max_rows',                'integer',      1, null, null),
      ('context.temporary_window_ttl_ms',        'integer',      1, null, null),
      ('events.notify',                          'boolean',   null, null, null),
      ('mcp.token_default_ttl',                  'interval',     1, null, null),
      ('mcp.token_max_ttl',                      'interval',     1, null, null),
      ('mcp.token_touch_interval',               'interval',     0, null, null),
      ('memories.max_content_bytes',             'integer',      1, null, null),
      ('reliability.compression_penalty',        'number',       0,    1, null),
      ('reliability.model_factors',              'factors',   null, null, null),
      ('reliability.penalty_floor',              'number',       0,    1, null),
      ('retention.warning_days',                 'integer',      0, null, null),
      ('snapshots.auto_create',                  'boolean',   null, null, null),
      ('snapshots.auto_threshold',               'share',     null, null, null),
      ('snapshots.enabled',                      'boolean',   null, null, null),
      ('store.search_candidates',                'integer',      1, null, null),
      ('store.search_exact_max',                 'integer',      0, null, null),
      ('vm.autopin_pattern',                     'regex',     null, null, null),
      ('vm.claim_max_tokens',                    'integer',      1, null, null),
      ('vm.embedding_dim',                       'integer',      1, 16000, null),
      ('vm.eviction_cooldown_turns',             'integer',      0, null, null),
      ('vm.eviction_policy',                     'choice',    null, null, 'lru|importance_weighted_lru|modality_aware_lru'),
      ('vm.eviction_threshold',                  'share',     null, null, null),
      ('vm.fault_confidence_threshold',          'choice',    null, null, 'explicit|referenced|speculative'),
      ('vm.fault_protection_turns',              'integer',      0, null, null),
      ('vm.faults_allowed',                      'boolean',   null, null, null),
      ('vm.gc_grace',                            'interval',     0, null, null),
      ('vm.max_content_bytes',                   'integer',      1, null, null),
      ('vm.max_fault_tokens_per_turn',           'integer',      0, null, null),
      ('vm.max_faults_per_turn',                 'integer',      0, null, null),
      ('vm.max_fork_depth',                      'integer',      1, null, null),
      ('vm.max_l0_tokens',                       'integer',      1, null, null),
      ('vm.max_l1_pages',                        'integer',      0, null, null),
      ('vm.pinned_last_turns',                   'integer',      0, null, null),
      ('vm.prepass_max_faults',                  'integer',      0, null, null),
      ('vm.prepass_stopwords',                   'strings',   null, null, null),
      ('vm.prepass_topics',                      'integer',      0, null, null),
      ('vm.prepass_useful_level',                'integer',      0,    3, null),
      ('vm.search_candidates',                   'integer',      1, null, null),
      ('vm.search_ef_search',                    'integer',      1, 1000, null),
      ('vm.search_exact_max',                    'integer',      0, null, null),
      ('vm.thrash_window_turns',                 'integer',      1, null, null)
    ) v(key, kind, lo, hi, choices)
   cross join lateral (select case when v.lo is not null and v.hi is not null then ' from ' || v.lo || ' to ' || v.hi
                                   when v.lo is not null then ' >= ' || v.lo else '' end as bounds) b
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._setting_rule_book() is 'The rule of every memori.settings key pymemdb reads, as a JSON object by key: kind, min, max, choices and the rule in words.';

-------------------------------------------------------------------------------
-- setting_rules: what each memori.settings value must be, for a DBA before an UPDATE
create or replace function memori.setting_rules()
returns table (key text, kind text, min_value numeric, max_value numeric, choices text, rule text)
as $func$
  select b.key, b.value->>'kind', (b.value->>'min')::numeric, (b.value->>'max')::numeric, b.value->>'choices',
         b.value->>'rule'
    from jsonb_each(memori._setting_rule_book()) b
   order by b.key
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.setting_rules() is 'What each memori.settings value must be (kind, bounds, choices, and the rule in words): an UPDATE that breaks its rule is refused with PM001.';

-------------------------------------------------------------------------------
-- _setting_valid: a memori.settings value checked against its rule when it is written
-- The CHECK constraint settings_value_valid calls it with the rule book
-- (Citus refuses triggers on reference tables, which memori.settings is on a
-- cluster; the constraint names both functions, and neither calls another of
-- ours, so both exist on every node that checks a row). A key without a rule
-- (not one pymemdb reads) is not checked. The constraint is NOT VALID: rows
-- written before it are not checked again, and their readers still check or
-- clamp what they read. Immutable: a value's validity never changes.
create or replace function memori._setting_valid(p_key text, p_value jsonb, p_book jsonb) returns boolean
as $func$
declare
  v_rule jsonb := p_book -> p_key;
  v_kind text := v_rule ->> 'kind';
  v_min  numeric := (v_rule ->> 'min')::numeric;
  v_max  numeric := (v_rule ->> 'max')::numeric;
  v_num  numeric := case when jsonb_typeof(p_value) = 'number' then (p_value #>> '{}')::numeric end;
  v_text text := case when jsonb_typeof(p_value) = 'string' then p_value #>> '{}' end;
  v_ok   boolean;
  v_secs numeric;
begin
  if v_rule is null then
    return true;
  end if;
  if v_kind = 'interval' and v_text is not null then
    begin
      v_secs := extract(epoch from v_text::interval);
    exception when others then  -- not an interval: refused below
      v_secs := null;
    end;
  elsif v_kind = 'regex' and v_text is not null then
    begin
      perform '' ~ v_text;
      v_secs := 0;  -- a valid regular expression
    exception when invalid_regular_expression then
      v_secs := null;
    end;
  end if;
  v_ok := case v_kind
    when 'boolean' then jsonb_typeof(p_value) = 'boolean'
    when 'integer' then v_num = trunc(v_num) and v_num >= coalesce(v_min, v_num) and v_num <= coalesce(v_max, v_num)
    when 'number' then v_num >= coalesce(v_min, v_num) and v_num <= coalesce(v_max, v_num)
    when 'positive' then v_num > 0
    when 'share' then v_num > 0 and v_num <= 1
    when 'interval' then v_secs >= coalesce(v_min, v_secs) and v_secs <= coalesce(v_max, v_secs)
    when 'regex' then v_secs = 0
    when 'strings' then jsonb_typeof(p_value) = 'array'
                        and not jsonb_path_exists(p_value, 'strict $[*] ? (@.type() != "string")')
    when 'shares' then jsonb_typeof(p_value) = 'array' and jsonb_array_length(p_value) > 0
                       and not jsonb_path_exists(p_value, 'strict $[*] ? (@.type() != "number" || @ <= 0 || @ > 1)')
    when 'factors' then jsonb_typeof(p_value) = 'array'
                        and not jsonb_path_exists(p_value, 'strict $[*] ? (@.type() != "array" || @.size() != 2)')
                        and not jsonb_path_exists(p_value, 'strict $[*] ? (@[0].type() != "number" || @[0] < 0
                                                                  || @[1].type() != "number" || @[1] < 0 || @[1] > 1)')
    when 'ms_by_type' then jsonb_typeof(p_value) = 'object'
                           and not jsonb_path_exists(p_value, 'strict $.* ? (@.type() != "number" || @ < 1 || @ != @.floor())')
    when 'count_or_all' then p_value = '"all"'::jsonb or (v_num = trunc(v_num) and v_num >= 0)
    when 'choice' then v_text = any (string_to_array(v_rule ->> 'choices', '|'))
  end;
  if v_ok is not true then
    raise exception 'memori.settings %: % is not %', p_key, coalesce(p_value::text, 'NULL'), v_rule ->> 'rule'
      using errcode = 'PM001',
            hint = format('Write %s: update memori.settings set value = ''<json>'' where key = %L '
                          '(memori.setting_rules() lists every rule).', v_rule ->> 'rule', p_key);
  end if;
  return true;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._setting_valid(text, jsonb, jsonb) is 'CHECK of memori.settings.value: true, or PM001 naming the key and its rule (memori.setting_rules()) when the value breaks it; keys without a rule pass.';

do $check$
begin
  if not exists (select from pg_catalog.pg_constraint
                  where conrelid = 'memori.settings'::regclass and conname = 'settings_value_valid') then
    -- NOT VALID: an install or upgrade never fails on a value written before the rules
    alter table memori.settings
      add constraint settings_value_valid check (memori._setting_valid(key, value, memori._setting_rule_book())) not valid;
  end if;
end
$check$;

-------------------------------------------------------------------------------
-- _identifier_problem: why a required identifier is invalid (NULL when valid)
create or replace function memori._identifier_problem(p_name text, p_value text, p_max_length integer default 256)
returns text[]
as $func$
  select case
    when p_value is null or btrim(p_value) = '' then
      array[format('%s must not be empty', p_name), format('Pass a non-empty %s.', p_name)]
    when length(p_value) > p_max_length then
      array[format('%s is %s characters long; the limit is %s', p_name, length(p_value), p_max_length),
            format('Use a shorter %s.', p_name)]
    when p_value ~ '[[:cntrl:]]' then
      array[format('%s contains control characters', p_name),
            format('Remove tabs, newlines and other control characters from %s.', p_name)]
  end
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._identifier_problem(text, text, integer) is 'The rule for identifier arguments (non-empty, bounded, no control characters): {message, hint} when broken, else NULL.';

-------------------------------------------------------------------------------
-- _check_identifier: a required, printable, bounded text argument
create or replace function memori._check_identifier(p_name text, p_value text, p_max_length integer default 256)
returns text
as $func$
declare
  v_problem text[] := memori._identifier_problem(p_name, p_value, p_max_length);
begin
  if v_problem is not null then
    perform memori._invalid(v_problem[1], v_problem[2]);
  end if;
  return p_value;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_identifier(text, text, integer) is 'Validate an identifier argument (non-empty, bounded, no control characters); raises PM001.';

-------------------------------------------------------------------------------
-- _check_cap: every row cap of the API (NULL = no cap, else >= 0)
create or replace function memori._check_cap(p_name text, p_value integer) returns void
as $func$
begin
  if p_value is not null and p_value < 0 then
    perform memori._invalid(format('%s must be NULL (no cap) or >= 0, got %s', p_name, p_value),
                            format('Omit %s for no cap, or pass 0 or a positive number of rows.', p_name));
  end if;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_cap(text, integer) is 'Validate a row cap: NULL (no cap) or >= 0; raises PM001 naming the argument.';

-------------------------------------------------------------------------------
-- _check_batch: batch size and row cap of the retention engine
create or replace function memori._check_batch(p_batch_size integer, p_max_rows integer) returns void
as $func$
begin
  if p_batch_size is null or p_batch_size < 1 or p_batch_size > 100000 then
    perform memori._invalid(format('batch size must be between 1 and 100000, got %s', coalesce(p_batch_size::text, 'NULL')),
                            'Use a batch size such as 1000: small batches keep each transaction short.');
  end if;
  perform memori._check_cap('max rows', p_max_rows);
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_batch(integer, integer) is 'Validate cleanup batch size (1..100000) and row cap (NULL or >= 0); raises PM001.';

-------------------------------------------------------------------------------
-- _too_large: the PM003 problem of a payload over its byte limit
create or replace function memori._too_large(p_what text, p_bytes bigint, p_limit bigint, p_hint text) returns text[]
as $func$
  select case when p_bytes > p_limit
              then array['PM003', format('%s is %s bytes; the limit is %s bytes', p_what, p_bytes, p_limit), p_hint] end
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._too_large(text, bigint, bigint, text) is 'The problem {PM003, message, hint} of a payload of p_bytes over p_limit bytes; NULL within the limit.';

-------------------------------------------------------------------------------
-- _raise: raise a problem {sqlstate, message, hint}
create or replace function memori._raise(p_problem text[]) returns void
as $func$
begin
  if p_problem is not null then
    raise exception '%', p_problem[2] using errcode = p_problem[1], hint = p_problem[3];
  end if;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._raise(text[]) is 'Raise a problem {sqlstate, message, hint} such as _too_large returns; nothing when it is NULL.';

-------------------------------------------------------------------------------
-- _event_message: the NOTIFY text of a stored event
-- (signatures before revision 0003 had no user: an upgrade drops them)
drop function if exists memori._event_message(bigint, text, timestamptz, jsonb);
drop function if exists memori._event_notify(bigint, text, timestamptz, jsonb);
create or replace function memori._event_message(p_id bigint, p_event_type text, p_at timestamptz, p_payload jsonb,
                                                 p_user_id text default null)
returns text
as $func$
  -- LISTEN is not subject to row-level security: every listener in the
  -- database gets every notification. A user's event is therefore sent
  -- without its body (private: true); listeners read it from memori.events
  -- by id, where RLS shows it to that user only. NOTIFY payloads are also
  -- limited to 8000 bytes: large bodies are sent the same way (truncated).
  select case when p_user_id <> ''  -- '' is the system user
              then jsonb_build_object('id', p_id, 'type', p_event_type, 'occurred_at', p_at, 'private', true)::text
              when octet_length(m) > 7900
              then jsonb_build_object('id', p_id, 'type', p_event_type, 'occurred_at', p_at, 'truncated', true)::text
              else m end
    from (select jsonb_build_object('id', p_id, 'type', p_event_type, 'occurred_at', p_at,
                                    'payload', p_payload)::text as m) x
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._event_message(bigint, text, timestamptz, jsonb, text) is 'The pg_notify text of an event: without its body for a user''s event (private) or over NOTIFY''s limit (truncated).';

-------------------------------------------------------------------------------
-- _event_notify: tell LISTEN memori_events about a stored event
create or replace function memori._event_notify(p_id bigint, p_event_type text, p_at timestamptz, p_payload jsonb,
                                                p_user_id text default null)
returns void
as $func$
begin
  if coalesce(memori._setting('events.notify'), 'true'::jsonb) = 'true'::jsonb then
    perform pg_notify('memori_events', memori._event_message(p_id, p_event_type, p_at, p_payload, p_user_id));
  end if;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._event_notify(bigint, text, timestamptz, jsonb, text) is 'pg_notify one stored event on channel memori_events, unless events.notify is false.';

-------------------------------------------------------------------------------
-- _event_retention: how long events of a type are kept
create or replace function memori._event_retention(p_event_type text) returns interval
as $func$
  select retention
    from memori.retention_policies
   where table_name = 'events' and kind in (p_event_type, '*')
   order by (kind = p_event_type) desc
   limit 1
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._event_retention(text) is 'Retention of events of a type: its own policy, else the events default (NULL: kept).';

-------------------------------------------------------------------------------
-- _event_emit_many: store events of one type and tell listeners
create or replace function memori._event_emit_many(p_event_type text, p_payloads jsonb[], p_now timestamptz default now())
returns void
as $func$
declare
  v_retention interval;
  v_notify    boolean := coalesce(memori._setting('events.notify'), 'true'::jsonb) = 'true'::jsonb;
  v_sent      bigint;
  v_user      text := coalesce(current_setting('memori.user_id', true), '');  -- '': the system user
begin
  v_retention := memori._event_retention(p_event_type);
  with stored as (
    insert into memori.events (event_type, occurred_at, payload, expires_at, user_id)
    select p_event_type, p_now, coalesce(x, '{}'::jsonb), p_now + v_retention, v_user from unnest(p_payloads) x
    returning id, payload
  )
  select count(pg_notify('memori_events', memori._event_message(stored.id, p_event_type, p_now, stored.payload, v_user)))
         filter (where v_notify)
    into v_sent
    from stored;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._event_emit_many(text, jsonb[], timestamptz) is 'Append events of one type, as the acting user (memori.user_id, else the system user ''''), to memori.events (expiring per their retention policy) and pg_notify each.';

-------------------------------------------------------------------------------
-- _event_emit: store an event and tell listeners
create or replace function memori._event_emit(p_event_type text, p_payload jsonb, p_now timestamptz default now())
returns bigint
as $func$
declare
  v_id        bigint;
  v_retention interval;
  v_user      text := coalesce(current_setting('memori.user_id', true), '');  -- '': the system user
begin
  v_retention := memori._event_retention(p_event_type);
  insert into memori.events (event_type, occurred_at, payload, expires_at, user_id)
  values (p_event_type, p_now, coalesce(p_payload, '{}'::jsonb), p_now + v_retention, v_user)
  returning id into v_id;
  perform memori._event_notify(v_id, p_event_type, p_now, p_payload, v_user);
  return v_id;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._event_emit(text, jsonb, timestamptz) is 'Append an event, as the acting user (memori.user_id, else the system user ''''), to memori.events (expiring per its retention policy) and pg_notify it on channel memori_events.';

-------------------------------------------------------------------------------
-- _acting_user: the user a call acts for
create or replace function memori._acting_user(p_user_id text) returns text
as $func$
declare
  v_setting text := nullif(current_setting('memori.user_id', true), '');
begin
  if p_user_id is null then
    if v_setting is null then
      perform memori._invalid('no acting user: pass p_user_id or set memori.user_id',
                              'Call set_config(''memori.user_id'', ''<user>'', true) in the transaction, or pass the user id.');
    end if;
    return v_setting;
  end if;
  if v_setting is not null and v_setting <> p_user_id then
    raise exception 'this transaction acts for user %, not %', quote_literal(v_setting), quote_literal(p_user_id)
      using errcode = 'PM040',
            hint = 'Pass the same user as memori.user_id, or set memori.user_id to the user this call is for.';
  end if;
  -- the rule of memori._identifier_problem, as plain expressions: this runs on every call
  if btrim(p_user_id) = '' or length(p_user_id) > 256 or p_user_id ~ '[[:cntrl:]]' then
    perform memori._check_identifier('user id', p_user_id);
  end if;
  return p_user_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._acting_user(text) is 'The acting user: p_user_id (which must equal memori.user_id when that is set), else memori.user_id; PM001 when neither, PM040 when they differ.';

-------------------------------------------------------------------------------
-- _acting_user_inlined: memori._acting_user as an expression, for inlined reads
-- A valid user id that is memori.user_id, or comes without it, is the answer
-- (the rule of memori._identifier_problem as plain expressions: the regular
-- expression costs ~2 us); anything else goes to memori._acting_user, which
-- returns memori.user_id for NULL or raises PM001 / PM040. No table, no SET
-- clause: PostgreSQL inlines it into the inlined read that names it
-- (session_checkpoint_load_latest), where an index condition computes it once.
create or replace function memori._acting_user_inlined(p_user_id text)
returns text
language sql stable
begin atomic
  select case when p_user_id is not null and pg_catalog.btrim(p_user_id) <> '' and pg_catalog.length(p_user_id) <= 256
                   and p_user_id !~ '[[:cntrl:]]'
                   and coalesce(nullif(pg_catalog.current_setting('memori.user_id', true), ''), p_user_id) = p_user_id
              then p_user_id
              else memori._acting_user(p_user_id) end;
end;
comment on function memori._acting_user_inlined(text) is 'memori._acting_user as an inlined expression: a valid p_user_id that is memori.user_id (or comes without it) is returned as is; otherwise memori._acting_user decides (PM001, PM040).';

-------------------------------------------------------------------------------
-- _as_plpgsql: an inlined read re-created as PL/pgSQL of the same statement, for Citus
-- A few hot reads are LANGUAGE sql functions of one statement with a string
-- body and no SET clause, so that one server inlines them into the caller's
-- query (a PL/pgSQL call costs 10-20 us more than its statement;
-- docs/benchmarks.md). Citus refuses SQL functions over distributed tables,
-- inlined or not ("parameterized queries for SQL functions referencing
-- distributed tables are not supported"), even called with constants, and
-- routes a statement on the user's value as a parameter. Where the citus
-- extension is installed, the file that creates such a read calls this after
-- it: the function becomes PL/pgSQL whose one statement is the SQL body, with
-- v_user (set once from p_acting) wherever the body says p_acting, the same
-- signature, result, row estimate, comment and grants (CREATE OR REPLACE keeps
-- them) and a pinned search_path. Nothing happens to a function that is not
-- LANGUAGE sql (already converted). Tests call it on one server to run the
-- reads in the form Citus has.
-- p_fn: the read (a stable set-returning LANGUAGE sql function)
-- p_acting: the expression of the acting user exactly as the body writes it (memori._lg_acting(p_user_id)),
--   or NULL when the body takes the user as a plain argument
create or replace function memori._as_plpgsql(p_fn regprocedure, p_acting text default null)
returns boolean
as $func$
declare
  v_proc      pg_proc;
  v_statement text;
begin
  select p.* into v_proc from pg_proc p where p.oid = p_fn;
  if v_proc.prolang <> (select l.oid from pg_language l where l.lanname = 'sql') then
    return false;
  end if;
  if not v_proc.proretset or v_proc.provolatile <> 's' or v_proc.prosqlbody is not null then
    raise exception '%: not a stable set-returning LANGUAGE sql function with a string body', p_fn;
  end if;
  v_statement := rtrim(v_proc.prosrc, e' \n;');
  if p_acting is not null then
    if strpos(v_statement, p_acting) = 0 then
      raise exception '%: its body does not name the acting user as %', p_fn, p_acting;
    end if;
    v_statement := replace(v_statement, p_acting, 'v_user');
  end if;
  execute format($create$
    create or replace function %s.%I(%s) returns %s
    as %L language plpgsql stable security invoker rows %s
    set search_path = pg_catalog, memori, pg_temp$create$,
    v_proc.pronamespace::regnamespace::text, v_proc.proname,
    pg_get_function_arguments(p_fn), pg_get_function_result(p_fn),
    case when p_acting is null then format(e'begin\n  return query\n%s;\nend', v_statement)
         else format(e'declare\n  v_user text := %s;\nbegin\n  return query\n%s;\nend', p_acting, v_statement) end,
    v_proc.prorows);
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._as_plpgsql(regprocedure, text) is 'Re-create an inlined read (stable set-returning LANGUAGE sql) as PL/pgSQL of the same statement, the acting user p_acting in a variable: the form Citus needs. False when it is not LANGUAGE sql.';

-------------------------------------------------------------------------------
-- _content_kind: the 'auto' heuristic of token_estimate
create or replace function memori._content_kind(p_text text) returns text
as $func$
  -- code: a fenced block, or at least 5% of the non-space characters are
  -- code punctuation ({}[]();=<>); business: money or a business word;
  -- anything else is general text.
  select case
    when p_text ~ '```'
         or length(regexp_replace(p_text, '[^][{}();=<>]', '', 'g'))
            >= 0.05 * greatest(length(regexp_replace(p_text, '\s', '', 'g')), 1) then 'code'
    when p_text ~* '(\$\s?[0-9]|\m(revenue|client|customer|deal|invoice|contract|pricing|quarter|roi|sales|budget)s?\M)'
      then 'business'
    else 'general' end
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._content_kind(text) is 'Guess code, business or general for token_estimate(..., ''auto''): code punctuation >= 5% or a fenced block, money or business words.';

-------------------------------------------------------------------------------
-- token_estimate: the one token estimate of the API (seeds 02, 03, 04)
-- Every concern that estimates the tokens of a text calls this; the content
-- kind selects its seed's ratio:
--   general 3.8, business 4.2, code 3.5 characters a token (seed 02, settings
--   budget.density_*), auto guesses one of them (memori._content_kind);
--   compression: characters / compression.chars_per_token (seed 04, 4);
--   page: one token per 4 bytes, at least 1 for non-empty text (seed 03).
-- The result is an exact ceiling (numeric division). PL/pgSQL: on hot paths
-- (a page per row) its simple expressions are cheaper than a SQL function's
-- executor start per call (0.3 s against 0.8 s for 20k pages).
-- p_text: the text to estimate; NULL gives 0 for 'page' and 'compression', NULL for the other kinds
-- p_kind: 'general' (default), 'business', 'code', 'auto' (guesses one of those three), 'compression'
--   or 'page'; anything else, NULL included, raises PM004
create or replace function memori.token_estimate(p_text text, p_kind text default 'general') returns integer
as $func$
declare
  v_kind text := p_kind;
begin
  if p_kind = 'page' then
    return case when p_text is null or p_text = '' then 0 else greatest(1, ceil(octet_length(p_text) / 4.0)::integer) end;
  elsif p_kind = 'compression' then
    return ceil(coalesce(char_length(p_text), 0)
                / coalesce((memori._setting('compression.chars_per_token') #>> '{}')::numeric, 4))::integer;
  elsif p_kind = 'auto' then
    v_kind := memori._content_kind(p_text);
  elsif p_kind is null or p_kind not in ('general', 'business', 'code') then
    raise exception 'unknown content type %', coalesce(quote_literal(p_kind), 'NULL')
      using errcode = 'PM004',
            hint = 'Use one of: general (3.8 chars/token), business (4.2), code (3.5), auto, compression, page.';
  end if;
  return ceil(char_length(p_text)::numeric
              / coalesce((memori._setting('budget.density_' || v_kind) #>> '{}')::numeric,
                         case v_kind when 'general' then 3.8 when 'business' then 4.2 else 3.5 end))::integer;
end
$func$ language plpgsql stable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.token_estimate(text, text) is 'The token estimate of every concern (an exact ceiling): general (3.8 chars/token), business (4.2), code (3.5) or auto (seed 02, budget.density_*); compression (characters / compression.chars_per_token, seed 04); page (4 bytes a token, at least 1 for non-empty text, seed 03).';
