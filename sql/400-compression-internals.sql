-- pymemdb SQL API: conversation compression (seed 04), configuration and private helpers.
--
-- The 4xx band is compression: this file (settings, table comments,
-- retention, and the private helpers every other 4xx file calls), then
-- 410 goals, 420 snapshots, 430 messages and compression (with the
-- reliability score and the session export). Installed in that order: `language sql` bodies are checked
-- when they are created, so a helper comes before its callers.

-------------------------------------------------------------------------------
-- configuration (seed 04's defaults; kept when re-installing)
insert into memori.settings (key, value, description) values
  ('compression.enabled', 'true', 'Compression on/off: compression_plan skips every plan when false.'),
  ('compression.usable_ratio', '0.85', 'Usable context = context size x this (seed 04: 6800 of an 8K model).'),
  ('compression.trigger_ratio', '0.80', 'Compress when used tokens reach this share of the available budget.'),
  ('compression.preserve_recent_tokens', '2048', 'Most recent conversation tokens never put into a new checkpoint (seed: preserveRecent).'),
  ('compression.preserve_recent_max_share', '0.40', 'Cap of the preserved recent tokens as a share of the available budget (small contexts).'),
  ('compression.summary_max_tokens', '1024', 'Largest target of a new checkpoint summary (seed: summaryMaxTokens).'),
  ('compression.new_checkpoint_ratio', '0.50', 'Target of a new checkpoint as a share of its source tokens (at most summary_max_tokens).'),
  ('compression.aging_ratios', '[0.60, 0.50, 0.40]', 'Aging targets of existing checkpoints, newest first, as shares of their current tokens; the last repeats.'),
  ('compression.max_checkpoints', '4', 'Most checkpoints a session keeps: beyond it the oldest are merged into one ultra checkpoint.'),
  ('compression.ultra_tokens', '400', 'Target of a merged (ultra) checkpoint.'),
  ('compression.min_checkpoint_tokens', '50', 'Aging never targets fewer tokens than this.'),
  ('compression.default_context_size', '8192', 'Context size used by message_add when neither the call nor the session gave one.'),
  ('compression.chars_per_token', '4', 'Token estimate of text whose caller gave no count: ceil(characters / this).'),
  ('compression.max_message_bytes', '1048576', 'Largest message content accepted, in bytes.'),
  ('compression.auto_markers', 'true', 'message_add applies goal markers ([GOAL], [DECISION], ...) found in assistant messages.'),
  ('compression.plan_retention_days', '7', 'Persisted plans expire after this many days.'),
  ('snapshots.enabled', 'true', 'Snapshots on/off (manual snapshot_create still works; auto-snapshots need it).'),
  ('snapshots.auto_create', 'true', 'Take an automatic snapshot when usage passes snapshots.auto_threshold of the available budget.'),
  ('snapshots.auto_threshold', '0.80', 'Share of the available budget at which message_add takes an auto-snapshot (once per compression state).'),
  ('reliability.model_factors', '[[70, 0.95], [30, 0.85], [13, 0.70], [7, 0.50], [0, 0.30]]', 'Reliability model factor by model size in billions: first [min_size, factor] that applies.'),
  ('reliability.compression_penalty', '0.15', 'Reliability lost per compression.'),
  ('reliability.penalty_floor', '0.30', 'The compression factor never goes below this.')
on conflict (key) do nothing;

comment on table memori.messages is 'Full conversation history per session (seed 04): append-only, never compressed.';
comment on table memori.compression_state is 'Per session: compressed_through_seq, rolled-back ranges, token counters and the state version plans are made at.';
comment on table memori.compression_checkpoints is 'Compressed summaries of LLM output (seed 04 CompressionCheckpoint): level 3 recent .. 0 ultra.';
comment on table memori.compression_plans is 'Persisted compression plans: source messages, targets, aging; applied once at their state version.';
comment on table memori.goals is 'Session goals (never compressed): description, priority, status, next steps.';
comment on table memori.goal_checkpoints is 'Progress steps of a goal: pending, in-progress, completed.';
comment on table memori.goal_decisions is 'Decisions of a goal; locked ones are never compressed or changed by markers.';
comment on table memori.goal_artifacts is 'Files a goal created or modified.';
comment on table memori.snapshots is 'Immutable snapshots of a session''s active state (checkpoints, goals, markers); retention-managed.';

-------------------------------------------------------------------------------
-- retention: plans and snapshots expire; history, checkpoints and goals do not
create or replace view memori._retention_compression_plans with (security_invoker = true) as
select p.id, p.user_id as owner, p.session_id as category, p.status as kind, p.expires_at, false as important
  from memori.compression_plans p;
comment on view memori._retention_compression_plans is 'memori.compression_plans as retention candidates: status as kind.';

create or replace view memori._retention_snapshots with (security_invoker = true) as
select s.id, s.user_id as owner, s.session_id as category, s.kind, s.expires_at, false as important
  from memori.snapshots s;
comment on view memori._retention_snapshots is 'memori.snapshots as retention candidates: manual, auto or pre_restore as kind.';

select memori.retention_register('compression_plans', 'memori.compression_plans', 'memori._retention_compression_plans',
                                 'id', 'Compression plans (seed 04)', 1, interval '7 days');
select memori.retention_register('snapshots', 'memori.snapshots', 'memori._retention_snapshots', 'id',
                                 'Session snapshots (seed 04)', 4, interval '30 days');
insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description) values
  ('snapshots', 'manual',      6, interval '90 days', false, 'Snapshots taken on request'),
  ('snapshots', 'auto',        3, interval '14 days', false, 'Automatic snapshots at snapshots.auto_threshold'),
  ('snapshots', 'pre_restore', 4, interval '30 days', false, 'The state a restore replaced')
on conflict (table_name, kind) do nothing;

-------------------------------------------------------------------------------
-- _compression_num: a numeric setting with a default
create or replace function memori._compression_num(p_key text, p_default numeric) returns numeric
as $func$
  select coalesce((select value #>> '{}' from memori.settings where key = p_key)::numeric, p_default)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_num(text, numeric) is 'A numeric memori.settings value, or the default when absent.';

-------------------------------------------------------------------------------
-- _compression_flag: a boolean setting with a default
create or replace function memori._compression_flag(p_key text, p_default boolean) returns boolean
as $func$
  select coalesce((select value #>> '{}' from memori.settings where key = p_key)::boolean, p_default)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_flag(text, boolean) is 'A boolean memori.settings value, or the default when absent.';

-------------------------------------------------------------------------------
-- _strip_markers: text without goal-marker lines (they live in the goal block)
create or replace function memori._strip_markers(p_text text) returns text
as $func$
  select btrim(regexp_replace(p_text, '^[ \t]*\[(GOAL|CHECKPOINT|DECISION|ARTIFACT|NEXT)\][^\n]*(\n|$)', '', 'gn'), E' \n\t')
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._strip_markers(text) is 'Remove goal-marker lines ([GOAL], [DECISION], ...) from text: goals are never summarised.';

-------------------------------------------------------------------------------
-- _marker_lines: the bracketed marker lines of a text, in order
create or replace function memori._marker_lines(p_text text)
returns table (n bigint, marker text, body text, line text)
as $func$
  select l.n, upper(m[1]), m[2], btrim(l.line)
    from regexp_split_to_table(coalesce(p_text, ''), E'\r?\n') with ordinality l(line, n)
   cross join lateral regexp_match(l.line, '^\s*\[([A-Za-z][A-Za-z _-]*)\]\s*(.*?)\s*$') m
   where m is not null
   order by l.n
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._marker_lines(text) is 'Lines of a text that start with a [MARKER]: position, upper-case marker, body, line.';

-------------------------------------------------------------------------------
-- _marker_values: bodies of one marker kind found in messages' text
create or replace function memori._marker_values(p_texts text[], p_marker text) returns text[]
as $func$
  select coalesce(array_agg(distinct m.body order by m.body), '{}')
    from unnest(p_texts) t(txt) cross join lateral memori._marker_lines(t.txt) m
   where m.marker = p_marker and m.body <> ''
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._marker_values(text[], text) is 'Distinct bodies of one marker ([DECISION], [ARTIFACT], [NEXT]) in a list of texts.';

-------------------------------------------------------------------------------
-- _compression_session: a session's state row, created on first use, locked
create or replace function memori._compression_session(
  p_session_id text,
  p_user_id    text,
  p_now        timestamptz,
  p_create     boolean default true
) returns memori.compression_state
as $func$
declare
  -- the acting user (memori._acting_user: PM040 when p_user_id is not memori.user_id, which is the
  -- default); session ids are unique per user, every statement names the user
  v_user  text := memori._acting_user(p_user_id);
  v_state memori.compression_state;
begin
  perform memori._check_identifier('session id', p_session_id);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  select * into v_state from memori.compression_state s
   where s.user_id = v_user and s.session_id = p_session_id for update;
  if not found then
    if not p_create then
      perform memori._compression_state(v_user, p_session_id);  -- raises PM005
    end if;
    -- one session namespace: the conversation is a session of memori.sessions
    -- (created on first use, PM041 when the id is another user's)
    perform memori._context_session(p_session_id, v_user, null, p_now);
    insert into memori.compression_state (session_id, user_id, created_at, updated_at)
    values (p_session_id, v_user, p_now, p_now)
    on conflict (user_id, session_id) do nothing;
    select * into v_state from memori.compression_state s
     where s.user_id = v_user and s.session_id = p_session_id for update;
  end if;
  return v_state;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_session(text, text, timestamptz, boolean) is 'The acting user''s compression_state row of a session, locked (created on first use; PM005 instead when p_create is false).';

-------------------------------------------------------------------------------
-- _compression_state: a session's state row, or PM005 when it has no messages
create or replace function memori._compression_state(p_user_id text, p_session_id text) returns memori.compression_state
as $func$
declare
  v_state memori.compression_state;
begin
  select * into v_state from memori.compression_state s where s.user_id = p_user_id and s.session_id = p_session_id;
  if not found then
    raise exception 'session % has no messages', p_session_id
      using errcode = 'PM005', hint = 'Add messages with memori.message_add first; check the session id.';
  end if;
  return v_state;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_state(text, text) is 'A user''s compression_state row of a session (not locked); PM005 when the session has no messages.';

-------------------------------------------------------------------------------
-- _compression_budget: the seed's dynamic budget for a state
create or replace function memori._compression_budget(
  p_state                memori.compression_state,
  p_context_size         integer,
  p_system_prompt_tokens integer,
  p_strict               boolean
) returns memori.compression_budget_state
as $func$
declare
  v_ctx       integer := coalesce(p_context_size, p_state.context_size,
                                  memori._compression_num('compression.default_context_size', 8192)::integer);
  v_usable    integer;
  v_system    integer := coalesce(p_system_prompt_tokens, p_state.system_tokens + p_state.goal_tokens)::integer;
  v_available integer;
  v_trigger   integer;
  v_result    memori.compression_budget_state;
begin
  if v_ctx is null or v_ctx < 1 then
    perform memori._invalid(format('context size must be a positive number of tokens, got %s', coalesce(v_ctx::text, 'NULL')),
                            'Pass the model''s context size, e.g. 8192.');
  end if;
  if v_system < 0 then
    perform memori._invalid(format('system prompt tokens must be >= 0, got %s', v_system),
                            'Pass the system prompt''s token count, or omit it to use the session''s system messages.');
  end if;
  v_usable := floor(v_ctx * memori._compression_num('compression.usable_ratio', 0.85))::integer;
  if p_strict and v_usable <= v_system then
    raise exception 'context of % tokens (% usable) is not larger than the system prompt (% tokens)', v_ctx, v_usable, v_system
      using errcode = 'PM070',
            detail = format('usable = context size x compression.usable_ratio = %s', v_usable),
            hint = 'Use a larger context size or a shorter system prompt.';
  end if;
  v_available := v_usable - v_system - p_state.checkpoint_tokens::integer;
  v_trigger := greatest(floor(v_available * memori._compression_num('compression.trigger_ratio', 0.80)), 0)::integer;
  v_result := row(p_state.session_id, v_ctx, v_usable, v_system, p_state.checkpoint_tokens::integer, v_available,
                  v_trigger, p_state.used_tokens::integer, v_available - p_state.used_tokens::integer,
                  p_state.used_tokens > 0 and p_state.used_tokens >= v_trigger,
                  p_state.checkpoint_count, p_state.compression_count);
  return v_result;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_budget(memori.compression_state, integer, integer, boolean) is 'Seed 04 budget: usable = context x 0.85, available = usable - system prompt - checkpoints, trigger = 80 % of available.';

-------------------------------------------------------------------------------
-- _compression_recount: token counters of a session from its history
create or replace function memori._compression_recount(p_user_id text, p_session_id text) returns void
as $func$
  update memori.compression_state s
     set used_tokens = x.used, system_tokens = x.sys,
         checkpoint_tokens = (select coalesce(sum(c.current_tokens), 0) from memori.compression_checkpoints c
                               where c.user_id = p_user_id and c.session_id = p_session_id),
         checkpoint_count = (select count(*) from memori.compression_checkpoints c
                              where c.user_id = p_user_id and c.session_id = p_session_id)
    from (select coalesce(sum(m.tokens) filter (where m.role = 'system'), 0) as sys,
                 coalesce(sum(m.tokens) filter (where m.role = 'user'
                                                   or (m.role in ('assistant', 'tool')
                                                       and m.seq > st.compressed_through_seq)), 0) as used
            from memori.compression_state st
            join memori.messages m on m.user_id = st.user_id and m.session_id = st.session_id
                                  and not st.rolled_back @> m.seq
           where st.user_id = p_user_id and st.session_id = p_session_id) x
   where s.user_id = p_user_id and s.session_id = p_session_id
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_recount(text, text) is 'Recompute a session''s used, system and checkpoint token counters from messages and checkpoints.';

-------------------------------------------------------------------------------
-- _compression_aging: how existing checkpoints age when one more is added
-- Newest existing first: ratios from compression.aging_ratios (the last one
-- repeats); ultra checkpoints (level 0) only change by merging; the oldest
-- are merged into one ultra checkpoint when there would be more than
-- compression.max_checkpoints.
create or replace function memori._compression_aging(p_user_id text, p_session_id text) returns jsonb
as $func$
declare
  -- settings and the session's checkpoints read first (one single-shard read on
  -- Citus); the rules below then run here, not on a worker
  v_ratios jsonb := coalesce(memori._setting('compression.aging_ratios'), '[0.6, 0.5, 0.4]');
  v_max_n  integer := greatest(memori._compression_num('compression.max_checkpoints', 4)::integer, 2);
  v_ultra  integer := memori._compression_num('compression.ultra_tokens', 400)::integer;
  v_min    integer := memori._compression_num('compression.min_checkpoint_tokens', 50)::integer;
  v_cps    jsonb;
  v_result jsonb;
begin
  select coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'level', c.level, 'from_seq', c.from_seq, 'to_seq', c.to_seq,
                                               'current_tokens', c.current_tokens)), '[]')
    into v_cps
    from memori.compression_checkpoints c where c.user_id = p_user_id and c.session_id = p_session_id;
  with cfg as (
    select v_ratios as ratios, v_max_n as max_n, v_ultra as ultra, v_min as min_tokens
  ), cps as (
    select c.*, row_number() over (order by c.to_seq desc) as rank_newest, count(*) over () as n
      from jsonb_to_recordset(v_cps) c(id uuid, level integer, from_seq integer, to_seq integer, current_tokens integer)
  ), marked as (
    -- merged: the oldest (n + 1) - max + 1 checkpoints when n + 1 > max
    select cps.*, (cps.n + 1 > cfg.max_n and cps.rank_newest > cfg.max_n - 2) as merged,
           ((cfg.ratios ->> (least(cps.rank_newest::integer, jsonb_array_length(cfg.ratios)) - 1))::numeric) as ratio
      from cps, cfg
  )
  select coalesce(jsonb_agg(item order by ord), '[]'::jsonb) into v_result
    from (
      select m.rank_newest as ord,
             jsonb_build_object('key', m.id::text, 'action', 'age', 'checkpoint_ids', jsonb_build_array(m.id),
                                'level', least(m.level, case m.rank_newest when 1 then 2 when 2 then 1 else 0 end),
                                'source_tokens', m.current_tokens,
                                'target_tokens', greatest(cfg.min_tokens, ceil(m.current_tokens * m.ratio)::integer)) as item
        from marked m, cfg
       where not m.merged and m.level > 0
         and greatest(cfg.min_tokens, ceil(m.current_tokens * m.ratio)::integer) < m.current_tokens
      union all
      select max(m.rank_newest) + 1,
             jsonb_build_object('key', 'merge', 'action', 'merge',
                                'checkpoint_ids', jsonb_agg(m.id order by m.from_seq), 'level', 0,
                                'source_tokens', sum(m.current_tokens),
                                'target_tokens', least(max(cfg.ultra), sum(m.current_tokens)))
        from marked m, cfg
       where m.merged
      having count(*) > 0
    ) x;
  return v_result;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_aging(text, text) is 'The aging items of a new compression: [{key, action age|merge, checkpoint_ids, level, source_tokens, target_tokens}].';

-------------------------------------------------------------------------------
-- _compression_plan_for_update: a plan, locked, or PM005
create or replace function memori._compression_plan_for_update(p_plan_id uuid) returns memori.compression_plans
as $func$
declare
  v_user text := memori._acting_user(null);
  v_plan memori.compression_plans;
begin
  select * into v_plan from memori.compression_plans p where p.user_id = v_user and p.id = p_plan_id for update;
  if not found then
    raise exception 'compression plan % not found', p_plan_id
      using errcode = 'PM005', hint = 'Make a plan with memori.compression_plan; plans expire after compression.plan_retention_days.';
  end if;
  if v_plan.status <> 'planned' then
    raise exception 'compression plan % is %', p_plan_id, v_plan.status
      using errcode = 'PM072',
            detail = coalesce(v_plan.reason, v_plan.error, format('finished at %s', v_plan.finished_at)),
            hint = 'A plan is applied (or aborted) once: make a new plan with memori.compression_plan.';
  end if;
  return v_plan;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_plan_for_update(uuid) is 'The acting user''s compression plan locked for update; PM005 when missing, PM072 when not in status planned.';

-------------------------------------------------------------------------------
-- _summary_of: text and tokens of one summary argument (a string or {summary, tokens})
create or replace function memori._summary_of(p_key text, p_value jsonb, p_source_tokens integer)
returns table (summary text, tokens integer)
as $func$
declare
  v_text   text;
  v_tokens integer;
begin
  if jsonb_typeof(p_value) = 'string' then
    v_text := p_value #>> '{}';
  elsif jsonb_typeof(p_value) = 'object' and jsonb_typeof(p_value->'summary') = 'string' then
    v_text := p_value->>'summary';
    if jsonb_typeof(p_value->'tokens') = 'number' then
      v_tokens := (p_value->>'tokens')::integer;
    end if;
  end if;
  if v_text is null or btrim(v_text) = '' then
    perform memori._invalid(format('summary %s is empty or not text', p_key),
                            'Pass each summary as a non-empty string, or {"summary": "...", "tokens": n}.');
  end if;
  if v_tokens < 0 then
    perform memori._invalid(format('summary %s has negative tokens', p_key), 'Omit tokens to estimate them from the text.');
  end if;
  v_tokens := coalesce(v_tokens, memori.token_estimate(v_text, 'compression'));
  if v_tokens > p_source_tokens then
    raise exception 'summary % is % tokens, longer than its source of % tokens', p_key, v_tokens, p_source_tokens
      using errcode = 'PM073', hint = 'A summary must not be longer than what it replaces: summarize again with the plan''s target.';
  end if;
  return query select v_text, v_tokens;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._summary_of(text, jsonb, integer) is 'Validate one summary (non-empty, not longer than its source, else PM073) and return its text and tokens.';
