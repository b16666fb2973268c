-- pymemdb SQL API, part 8: conversation compression (seed 04).
--
-- The full history (memori.messages) is append-only and never compressed.
-- What is sent to the LLM is derived from it and from a per-session marker
-- row (memori.compression_state): messages up to compressed_through_seq that
-- are LLM output (assistant, tool) are represented by compression
-- checkpoints; user and system messages always stay; rolled_back hides the
-- messages a snapshot restore stepped back over (they stay in the history).
--
-- The database plans (compression_plan: which messages, which targets, how
-- the older checkpoints age), a pluggable summarizer writes the text
-- (compression_prompt renders the seed's goal-aware prompt), and
-- compression_apply stores the result atomically, refusing a stale plan.

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
-- _compression_tokens: kept for callers in other rooms; memori.token_estimate is the estimate
create or replace function memori._compression_tokens(p_text text) returns integer
as $func$
begin
  return memori.token_estimate(p_text, 'compression');
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_tokens(text) is 'Deprecated alias of memori.token_estimate(text, ''compression'').';

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
-- _compression_user: the acting user of a call (argument, else memori.user_id)
create or replace function memori._compression_user(p_user_id text) returns text
as $func$
  select coalesce(p_user_id, nullif(current_setting('memori.user_id', true), ''))
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_user(text) is 'p_user_id, else the memori.user_id setting, else NULL.';

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
  v_user  text := memori._compression_user(p_user_id);
  v_state memori.compression_state;
begin
  perform memori._check_identifier('session id', p_session_id);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  select * into v_state from memori.compression_state s where s.session_id = p_session_id for update;
  if not found then
    if not p_create then
      raise exception 'session % has no messages', p_session_id
        using errcode = 'PM005', hint = 'Add messages with memori.message_add first; check the session id.';
    end if;
    if v_user is null then
      perform memori._invalid('no user for a new session',
                              'Pass p_user_id, or set memori.user_id (SET memori.user_id = ''alice'').');
    end if;
    perform memori._check_identifier('user id', v_user);
    -- one session namespace: the conversation is a session of memori.sessions
    -- (created on first use, PM041 when the id is another user's)
    perform memori._context_session(p_session_id, v_user, null, p_now);
    insert into memori.compression_state (session_id, user_id, created_at, updated_at)
    values (p_session_id, v_user, p_now, p_now)
    on conflict (session_id) do nothing;
    select * into v_state from memori.compression_state s where s.session_id = p_session_id for update;
    if not found then
      raise exception 'session % belongs to another user', p_session_id
        using errcode = 'PM041', hint = 'Session ids are unique across users: use another session id.';
    end if;
  end if;
  if v_user is not null and v_state.user_id <> v_user then
    raise exception 'session % belongs to another user', p_session_id
      using errcode = 'PM041', hint = 'Session ids are unique across users: use another session id.';
  end if;
  return v_state;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_session(text, text, timestamptz, boolean) is 'The session''s compression_state row, locked (created for the acting user on first use); PM041 for another user''s session.';

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
-- compression_budget: the session's budget and whether to compress now
create or replace function memori.compression_budget(
  p_session_id           text,
  p_context_size         integer default null,
  p_system_prompt_tokens integer default null
) returns memori.compression_budget_state
as $func$
declare
  v_state memori.compression_state;
begin
  select * into v_state from memori.compression_state s where s.session_id = p_session_id;
  if not found then
    raise exception 'session % has no messages', p_session_id
      using errcode = 'PM005', hint = 'Add messages with memori.message_add first; check the session id.';
  end if;
  return memori._compression_budget(v_state, p_context_size, p_system_prompt_tokens, true);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_budget(text, integer, integer) is 'Budget of a session: usable, available (usable - system prompt - checkpoints), trigger (80 %), used, should_compress.';

-------------------------------------------------------------------------------
-- _compression_recount: token counters of a session from its history
create or replace function memori._compression_recount(p_session_id text) returns void
as $func$
  update memori.compression_state s
     set used_tokens = x.used, system_tokens = x.sys,
         checkpoint_tokens = (select coalesce(sum(c.current_tokens), 0) from memori.compression_checkpoints c
                               where c.session_id = s.session_id),
         checkpoint_count = (select count(*) from memori.compression_checkpoints c where c.session_id = s.session_id)
    from (select coalesce(sum(m.tokens) filter (where m.role = 'system'), 0) as sys,
                 coalesce(sum(m.tokens) filter (where m.role = 'user'
                                                   or (m.role in ('assistant', 'tool')
                                                       and m.seq > st.compressed_through_seq)), 0) as used
            from memori.compression_state st
            join memori.messages m on m.session_id = st.session_id and not st.rolled_back @> m.seq
           where st.session_id = p_session_id) x
   where s.session_id = p_session_id
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_recount(text) is 'Recompute a session''s used, system and checkpoint token counters from messages and checkpoints.';

-------------------------------------------------------------------------------
-- _goal_active: the session's active goal (NULL when none)
create or replace function memori._goal_active(p_session_id text) returns memori.goals
as $func$
  select g from memori.goals g where g.session_id = p_session_id and g.status = 'active'
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_active(text) is 'The active goal of a session, or NULL.';

-------------------------------------------------------------------------------
-- goal_block: the never-compressed goal section of the system prompt
create or replace function memori.goal_block(p_session_id text) returns text
as $func$
  select concat_ws(E'\n',
           'ACTIVE GOAL: ' || g.description,
           'Priority: ' || g.priority,
           'Status: ' || g.status,
           (select 'Checkpoints:' || string_agg(E'\n' ||
                     case c.status when 'completed' then '✅ ' || c.description
                                   when 'in-progress' then '🔄 ' || c.description || ' (IN PROGRESS)'
                                   else '⏳ ' || c.description end, '' order by c.position)
              from memori.goal_checkpoints c where c.goal_id = g.id),
           (select 'Decisions:' || string_agg(E'\n' ||
                     case when d.locked then '🔒 ' || d.description || ' (locked)' else '- ' || d.description end,
                     '' order by d.position)
              from memori.goal_decisions d where d.goal_id = g.id),
           (select 'Artifacts:' || string_agg(E'\n- ' || initcap(a.action) || ': ' || a.path, '' order by a.position)
              from memori.goal_artifacts a where a.goal_id = g.id),
           case when cardinality(g.next_steps) > 0
                then 'Next steps:' || (select string_agg(E'\n- ' || s, '' order by o) from unnest(g.next_steps) with ordinality x(s, o))
           end)
    from memori.goals g
   where g.session_id = p_session_id and g.status = 'active'
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_block(text) is 'The active goal rendered for the system prompt (checkpoints, decisions, artifacts, next steps); NULL without an active goal.';

-------------------------------------------------------------------------------
-- _goal_tokens_refresh: remember the goal block's size for the budget
create or replace function memori._goal_tokens_refresh(p_session_id text) returns void
as $func$
  update memori.compression_state
     set goal_tokens = memori.token_estimate(memori.goal_block(p_session_id), 'compression')
   where session_id = p_session_id
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_tokens_refresh(text) is 'Store the estimated tokens of the session''s goal block (part of the system prompt budget).';

-------------------------------------------------------------------------------
-- _goal_start: a new active goal (the current active one is paused)
create or replace function memori._goal_start(
  p_state       memori.compression_state,
  p_description text,
  p_priority    text,
  p_now         timestamptz
) returns memori.goals
as $func$
declare
  v_goal memori.goals;
begin
  update memori.goals set status = 'paused' where session_id = p_state.session_id and status = 'active';
  insert into memori.goals (session_id, user_id, description, priority, status, created_at)
  values (p_state.session_id, p_state.user_id, p_description, p_priority, 'active', p_now)
  returning * into v_goal;
  return v_goal;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_start(memori.compression_state, text, text, timestamptz) is 'Insert an active goal, pausing the session''s current active goal.';

-------------------------------------------------------------------------------
-- goal_create: set the session's active goal
create or replace function memori.goal_create(
  p_session_id  text,
  p_description text,
  p_priority    text default 'medium',
  p_user_id     text default null,
  p_now         timestamptz default now()
) returns memori.goals
as $func$
declare
  v_state memori.compression_state := memori._compression_session(p_session_id, p_user_id, p_now);
  v_goal  memori.goals;
begin
  perform memori._check_identifier('goal description', p_description, 2000);
  if p_priority is null or p_priority not in ('high', 'medium', 'low') then
    raise exception 'unknown goal priority %', coalesce(quote_literal(p_priority), 'NULL')
      using errcode = 'PM004', hint = 'Use one of: high, medium, low.';
  end if;
  v_goal := memori._goal_start(v_state, p_description, p_priority, p_now);
  perform memori._goal_tokens_refresh(p_session_id);
  perform memori._event_emit('goal.created', jsonb_build_object('goal_id', v_goal.id, 'session_id', p_session_id), p_now);
  return v_goal;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_create(text, text, text, text, timestamptz) is 'Start a goal (high/medium/low priority) as the session''s active goal; the previous active goal is paused.';

-------------------------------------------------------------------------------
-- goal_list: a session's goals, oldest first
create or replace function memori.goal_list(p_session_id text) returns setof memori.goals
as $func$
  select * from memori.goals g where g.session_id = p_session_id order by g.created_at, g.id
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_list(text) is 'Every goal of a session (active, paused, completed), oldest first.';

-------------------------------------------------------------------------------
-- goal_markers_apply: update the goal structure from model output markers
-- [GOAL] text [- HIGH|MEDIUM|LOW] [- COMPLETED|PAUSED]
-- [CHECKPOINT] text - COMPLETED|IN PROGRESS|PENDING
-- [DECISION] text [- LOCKED]        (a locked decision stays locked)
-- [ARTIFACT] Created|Modified path
-- [NEXT] text                       (the [NEXT] lines of one call replace the next steps)
-- Anything else in brackets at the start of a line, or a known marker that
-- does not parse, is returned in `unknown`: reported, not guessed.
create or replace function memori.goal_markers_apply(
  p_session_id text,
  p_text       text,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns memori.goal_marker_result
as $func$
declare
  v_state   memori.compression_state := memori._compression_session(p_session_id, p_user_id, p_now);
  v_goal    memori.goals := memori._goal_active(p_session_id);
  v_line    record;
  v_m       text[];
  v_status  text;
  v_next    text[] := '{}';
  v_unknown text[] := '{}';
  v_created integer := 0;
  v_cps     integer := 0;
  v_decs    integer := 0;
  v_arts    integer := 0;
begin
  for v_line in select * from memori._marker_lines(p_text) loop
    case v_line.marker
    when 'GOAL' then
      v_m := regexp_match(v_line.body, '^(.+?)(?:\s+-\s+(HIGH|MEDIUM|LOW)(?:\s+PRIORITY)?)?(?:\s+-\s+(COMPLETED|PAUSED|ACTIVE))?$', 'i');
      if v_m is null or btrim(v_m[1]) = '' then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      if v_goal.id is null or v_goal.description <> v_m[1] then
        select * into v_goal from memori.goals g
         where g.session_id = p_session_id and g.description = v_m[1] order by g.created_at desc limit 1;
        if found then  -- an earlier goal comes back
          update memori.goals set status = 'paused' where session_id = p_session_id and status = 'active' and id <> v_goal.id;
          update memori.goals set status = 'active', completed_at = null where id = v_goal.id returning * into v_goal;
        else
          v_goal := memori._goal_start(v_state, v_m[1], coalesce(lower(v_m[2]), 'medium'), p_now);
          v_created := v_created + 1;
        end if;
      end if;
      if v_m[2] is not null then
        update memori.goals set priority = lower(v_m[2]) where id = v_goal.id returning * into v_goal;
      end if;
      if upper(v_m[3]) in ('COMPLETED', 'PAUSED') then
        update memori.goals set status = lower(v_m[3]),
                                completed_at = case when upper(v_m[3]) = 'COMPLETED' then p_now end
         where id = v_goal.id;
        v_goal := null;  -- later markers of this text need a new [GOAL]
      end if;
    when 'CHECKPOINT' then
      v_m := regexp_match(v_line.body, '^(.+?)\s+-\s+(COMPLETED|IN[ -]PROGRESS|PENDING)$', 'i');
      if v_m is null or v_goal.id is null then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      v_status := case upper(v_m[2]) when 'COMPLETED' then 'completed' when 'PENDING' then 'pending' else 'in-progress' end;
      insert into memori.goal_checkpoints (goal_id, user_id, description, status, position, created_at, updated_at)
      values (v_goal.id, v_goal.user_id, v_m[1], v_status,
              (select coalesce(max(position), 0) + 1 from memori.goal_checkpoints where goal_id = v_goal.id), p_now, p_now)
      on conflict (goal_id, description) do update set status = excluded.status, updated_at = excluded.updated_at;
      v_cps := v_cps + 1;
    when 'DECISION' then
      v_m := regexp_match(v_line.body, '^(.+?)(\s+-\s+LOCKED)?$', 'i');
      if v_m is null or v_goal.id is null then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      insert into memori.goal_decisions (goal_id, user_id, description, locked, position, created_at)
      values (v_goal.id, v_goal.user_id, v_m[1], v_m[2] is not null,
              (select coalesce(max(position), 0) + 1 from memori.goal_decisions where goal_id = v_goal.id), p_now)
      on conflict (goal_id, description) do update set locked = goal_decisions.locked or excluded.locked;
      v_decs := v_decs + 1;
    when 'ARTIFACT' then
      v_m := regexp_match(v_line.body, '^(Created|Modified)\s+(\S.*)$', 'i');
      if v_m is null or v_goal.id is null then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      insert into memori.goal_artifacts (goal_id, user_id, path, action, position, created_at)
      values (v_goal.id, v_goal.user_id, v_m[2], lower(v_m[1]),
              (select coalesce(max(position), 0) + 1 from memori.goal_artifacts where goal_id = v_goal.id), p_now)
      on conflict (goal_id, path, action) do nothing;
      v_arts := v_arts + 1;
    when 'NEXT' then
      if btrim(v_line.body) = '' or v_goal.id is null then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      v_next := v_next || v_line.body;
      update memori.goals set next_steps = v_next where id = v_goal.id;
    else
      v_unknown := v_unknown || v_line.line;
    end case;
  end loop;
  perform memori._goal_tokens_refresh(p_session_id);
  return row(v_goal.id, v_created, v_cps, v_decs, v_arts, v_next, v_unknown)::memori.goal_marker_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_markers_apply(text, text, text, timestamptz) is 'Parse [GOAL]/[CHECKPOINT]/[DECISION]/[ARTIFACT]/[NEXT] markers from model output and update the goal; unparsed lines are returned in unknown.';

-------------------------------------------------------------------------------
-- _snapshot_take: an immutable copy of a session's active state
create or replace function memori._snapshot_take(
  p_state    memori.compression_state,
  p_kind     text,
  p_metadata jsonb,
  p_now      timestamptz
) returns memori.snapshots
as $func$
declare
  v_row       memori.snapshots;
  v_retention interval;
begin
  select coalesce(pk.retention, pd.retention) into v_retention
    from memori.retention_policies pd
    left join memori.retention_policies pk on pk.table_name = pd.table_name and pk.kind = p_kind
   where pd.table_name = 'snapshots' and pd.kind = '*';
  -- Messages are append-only and never deleted, so the snapshot names them
  -- by sequence (last_seq and the rolled-back ranges); checkpoints and goals,
  -- which compression and markers change, are copied whole.
  insert into memori.snapshots (session_id, user_id, kind, created_at, token_count, message_count, checkpoint_count,
                                metadata, state, expires_at)
  select p_state.session_id, p_state.user_id, p_kind, p_now,
         p_state.used_tokens + p_state.system_tokens + p_state.goal_tokens + p_state.checkpoint_tokens,
         (select count(*) from memori.messages m where m.session_id = p_state.session_id and m.seq <= p_state.last_seq
             and not p_state.rolled_back @> m.seq),
         p_state.checkpoint_count,
         coalesce(p_metadata, '{}'::jsonb),
         jsonb_build_object(
           'state', jsonb_build_object('last_seq', p_state.last_seq,
                                       'compressed_through_seq', p_state.compressed_through_seq,
                                       'rolled_back', p_state.rolled_back::text,
                                       'compression_count', p_state.compression_count,
                                       'context_size', p_state.context_size,
                                       'version', p_state.version),
           'checkpoints', coalesce((select jsonb_agg(to_jsonb(c) order by c.from_seq)
                                      from memori.compression_checkpoints c where c.session_id = p_state.session_id), '[]'),
           'goals', coalesce((select jsonb_agg(to_jsonb(g) order by g.created_at)
                                from memori.goals g where g.session_id = p_state.session_id), '[]'),
           'goal_checkpoints', coalesce((select jsonb_agg(to_jsonb(x)) from memori.goal_checkpoints x
                                           join memori.goals g on g.id = x.goal_id
                                          where g.session_id = p_state.session_id), '[]'),
           'goal_decisions', coalesce((select jsonb_agg(to_jsonb(x)) from memori.goal_decisions x
                                         join memori.goals g on g.id = x.goal_id
                                        where g.session_id = p_state.session_id), '[]'),
           'goal_artifacts', coalesce((select jsonb_agg(to_jsonb(x)) from memori.goal_artifacts x
                                         join memori.goals g on g.id = x.goal_id
                                        where g.session_id = p_state.session_id), '[]'),
           -- the virtual memory's pages and working set (sql/525-vm-snapshot.sql), NULL without one
           'vm', memori._vm_snapshot_state(p_state.session_id)),
         p_now + v_retention
  returning * into v_row;
  perform memori._event_emit(case p_kind when 'auto' then 'snapshot.auto_created' else 'snapshot.created' end,
            jsonb_build_object('snapshot_id', v_row.id, 'session_id', v_row.session_id, 'kind', p_kind), p_now);
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._snapshot_take(memori.compression_state, text, jsonb, timestamptz) is 'Store a snapshot (kind manual, auto or pre_restore) of a session: markers by sequence, checkpoints and goals whole, page versions and the working set.';

-------------------------------------------------------------------------------
-- message_add: append a message; the answer says whether to compress now
create or replace function memori.message_add(
  p_session_id           text,
  p_role                 text,
  p_content              text,
  p_tokens               integer default null,
  p_tool_calls           jsonb default null,
  p_now                  timestamptz default now(),
  p_user_id              text default null,
  p_context_size         integer default null,
  p_system_prompt_tokens integer default null
) returns memori.message_added
as $func$
declare
  v_state    memori.compression_state;
  v_tokens   integer;
  v_id       bigint;
  v_budget   memori.compression_budget_state;
  v_snapshot uuid;
  v_limit    integer := memori._compression_num('compression.max_message_bytes', 1048576)::integer;
begin
  if p_role is null or p_role not in ('system', 'user', 'assistant', 'tool') then
    raise exception 'unknown message role %', coalesce(quote_literal(p_role), 'NULL')
      using errcode = 'PM004', hint = 'Use one of: system, user, assistant, tool.';
  end if;
  if p_content is null then
    perform memori._invalid('message content must not be NULL', 'Pass the message text (it may be empty).');
  end if;
  if octet_length(p_content) > v_limit then
    raise exception 'message is % bytes; the limit is % bytes', octet_length(p_content), v_limit
      using errcode = 'PM003', hint = 'Store large tool output elsewhere and reference it, or raise compression.max_message_bytes.';
  end if;
  if p_tokens < 0 then
    perform memori._invalid(format('tokens must be >= 0, got %s', p_tokens),
                            'Pass the message''s token count, or omit it to estimate it from the text.');
  end if;
  if p_tool_calls is not null and jsonb_typeof(p_tool_calls) not in ('array', 'object') then
    perform memori._invalid('tool calls must be a JSON array or object', 'Pass [{"id": ..., "name": ..., "args": {...}}].');
  end if;
  if p_context_size is not null and p_context_size < 1 then
    perform memori._invalid(format('context size must be a positive number of tokens, got %s', p_context_size),
                            'Pass the model''s context size, e.g. 8192, or omit it.');
  end if;
  v_tokens := coalesce(p_tokens, memori.token_estimate(p_content, 'compression'));
  v_state := memori._compression_session(p_session_id, p_user_id, p_now);

  update memori.compression_state s
     set last_seq = s.last_seq + 1,
         used_tokens = s.used_tokens + case when p_role = 'system' then 0 else v_tokens end,
         system_tokens = s.system_tokens + case when p_role = 'system' then v_tokens else 0 end,
         context_size = coalesce(p_context_size, s.context_size),
         updated_at = p_now
   where s.session_id = p_session_id
  returning * into v_state;
  insert into memori.messages (session_id, user_id, seq, role, content, tokens, tool_calls, created_at)
  values (p_session_id, v_state.user_id, v_state.last_seq, p_role, p_content, v_tokens, p_tool_calls, p_now)
  returning id into v_id;

  if p_role = 'assistant' and p_content ~ '\[(GOAL|CHECKPOINT|DECISION|ARTIFACT|NEXT)\]'
     and memori._compression_flag('compression.auto_markers', true) then
    perform memori.goal_markers_apply(p_session_id, p_content, v_state.user_id, p_now);
    select * into v_state from memori.compression_state s where s.session_id = p_session_id;
  end if;

  v_budget := memori._compression_budget(v_state, p_context_size, p_system_prompt_tokens, false);
  if v_state.auto_snapshot_version is distinct from v_state.version
     and v_budget.used_tokens > 0
     and v_budget.used_tokens >= floor(greatest(v_budget.available_tokens, 0)
                                       * memori._compression_num('snapshots.auto_threshold', 0.80))
     and memori._compression_flag('snapshots.enabled', true) and memori._compression_flag('snapshots.auto_create', true) then
    v_snapshot := (memori._snapshot_take(v_state, 'auto', jsonb_build_object('trigger', 'auto_threshold'), p_now)).id;
    update memori.compression_state set auto_snapshot_version = version where session_id = p_session_id;
  end if;

  return row(v_id, p_session_id, v_state.last_seq, p_role, v_tokens, p_now,
             v_budget.context_size, v_budget.usable_tokens, v_budget.system_prompt_tokens, v_budget.checkpoint_tokens,
             v_budget.available_tokens, v_budget.trigger_tokens, v_budget.used_tokens, v_budget.should_compress,
             v_snapshot)::memori.message_added;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.message_add(text, text, text, integer, jsonb, timestamptz, text, integer, integer) is 'Append a message to the session''s full history (tokens estimated when not given) and return its sequence with the session''s budget state.';

-------------------------------------------------------------------------------
-- _compression_aging: how existing checkpoints age when one more is added
-- Newest existing first: ratios from compression.aging_ratios (the last one
-- repeats); ultra checkpoints (level 0) only change by merging; the oldest
-- are merged into one ultra checkpoint when there would be more than
-- compression.max_checkpoints.
create or replace function memori._compression_aging(p_session_id text) returns jsonb
as $func$
  with cfg as (
    select coalesce((select value from memori.settings where key = 'compression.aging_ratios'), '[0.6, 0.5, 0.4]') as ratios,
           greatest(memori._compression_num('compression.max_checkpoints', 4)::integer, 2) as max_n,
           memori._compression_num('compression.ultra_tokens', 400)::integer as ultra,
           memori._compression_num('compression.min_checkpoint_tokens', 50)::integer as min_tokens
  ), cps as (
    select c.*, row_number() over (order by c.to_seq desc) as rank_newest, count(*) over () as n
      from memori.compression_checkpoints c where c.session_id = p_session_id
  ), marked as (
    -- merged: the oldest (n + 1) - max + 1 checkpoints when n + 1 > max
    select cps.*, (cps.n + 1 > cfg.max_n and cps.rank_newest > cfg.max_n - 2) as merged,
           ((cfg.ratios ->> (least(cps.rank_newest::integer, jsonb_array_length(cfg.ratios)) - 1))::numeric) as ratio
      from cps, cfg
  )
  select coalesce(jsonb_agg(item order by ord), '[]'::jsonb)
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
    ) x
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._compression_aging(text) is 'The aging items of a new compression: [{key, action age|merge, checkpoint_ids, level, source_tokens, target_tokens}].';

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
-- compression_plan: what to compress now, persisted for compression_apply
create or replace function memori.compression_plan(
  p_session_id           text,
  p_context_size         integer default null,
  p_system_prompt_tokens integer default null,
  p_now                  timestamptz default now(),
  p_force                boolean default false
) returns memori.compression_plans
as $func$
declare
  v_state    memori.compression_state;
  v_budget   memori.compression_budget_state;
  v_preserve integer;
  v_cutoff   integer;
  v_msg      record;
  v_kept     bigint := 0;
  v_src      record;
  v_status   text := 'planned';
  v_reason   text;
  v_plan     memori.compression_plans;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  select * into v_state from memori.compression_state s where s.session_id = p_session_id;
  if not found then
    raise exception 'session % has no messages', p_session_id
      using errcode = 'PM005', hint = 'Add messages with memori.message_add first; check the session id.';
  end if;
  v_budget := memori._compression_budget(v_state, p_context_size, p_system_prompt_tokens, true);
  v_preserve := least(memori._compression_num('compression.preserve_recent_tokens', 2048),
                      floor(greatest(v_budget.available_tokens, 0)
                            * memori._compression_num('compression.preserve_recent_max_share', 0.40)))::integer;

  -- newest backwards: the messages within the last v_preserve tokens stay;
  -- the first one past them is the cutoff. A loop (a cursor: fast-start
  -- plan, a backward index scan) stops there instead of reading the session.
  for v_msg in select m.seq, m.tokens from memori.messages m
                where m.session_id = p_session_id and m.seq > v_state.compressed_through_seq
                  and m.role <> 'system' and not v_state.rolled_back @> m.seq
                order by m.seq desc loop
    v_kept := v_kept + v_msg.tokens;
    if v_kept > v_preserve then
      v_cutoff := v_msg.seq;
      exit;
    end if;
  end loop;

  select count(*)::integer as n, coalesce(sum(m.tokens), 0)::integer as tokens,
         -- only texts with markers are parsed (the regex test is cheap, the line split is not)
         coalesce(array_agg(m.content) filter (where strpos(m.content, '[') > 0
                                                    and m.content ~ '\[(DECISION|ARTIFACT|NEXT)\]'), '{}') as texts
    into v_src
    from memori.messages m
   where m.session_id = p_session_id and m.seq > v_state.compressed_through_seq and m.seq <= v_cutoff
     and m.role in ('assistant', 'tool') and not v_state.rolled_back @> m.seq;

  if not memori._compression_flag('compression.enabled', true) then
    v_status := 'skipped'; v_reason := 'compression is disabled (compression.enabled)';
  elsif not v_budget.should_compress and not coalesce(p_force, false) then
    v_status := 'skipped';
    v_reason := format('used %s tokens is under the trigger of %s', v_budget.used_tokens, v_budget.trigger_tokens);
  elsif v_src.n = 0 or v_src.tokens = 0 then
    v_status := 'skipped';
    v_reason := format('no assistant output older than the %s most recent tokens', v_preserve);
  end if;

  insert into memori.compression_plans (session_id, user_id, status, reason, state_version, context_size,
                                        system_prompt_tokens, budget, from_seq, to_seq, message_count, source_tokens,
                                        target_tokens, aging, key_decisions, files_modified, next_steps,
                                        created_at, finished_at, expires_at)
  select p_session_id, v_state.user_id, v_status, v_reason, v_state.version, v_budget.context_size,
         v_budget.system_prompt_tokens, to_jsonb(v_budget) || jsonb_build_object('preserve_recent_tokens', v_preserve),
         v_state.compressed_through_seq + 1, v_cutoff, v_src.n, v_src.tokens,
         least(memori._compression_num('compression.summary_max_tokens', 1024),
               greatest(1, ceil(v_src.tokens * memori._compression_num('compression.new_checkpoint_ratio', 0.5))))::integer,
         memori._compression_aging(p_session_id),
         memori._marker_values(v_src.texts, 'DECISION'), memori._marker_values(v_src.texts, 'ARTIFACT'),
         memori._marker_values(v_src.texts, 'NEXT'),
         p_now, case when v_status = 'skipped' then p_now end,
         p_now + make_interval(days => memori._compression_num('compression.plan_retention_days', 7)::integer)
  returning * into v_plan;
  if v_status = 'skipped' then
    update memori.compression_plans set from_seq = null, to_seq = null, message_count = 0, source_tokens = 0,
                                        target_tokens = 0, aging = '[]'
     where id = v_plan.id returning * into v_plan;
    perform memori._event_emit('compression.skipped',
              jsonb_build_object('plan_id', v_plan.id, 'session_id', p_session_id, 'reason', v_reason), p_now);
  end if;
  return v_plan;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_plan(text, integer, integer, timestamptz, boolean) is 'Plan a compression (persisted): the assistant/tool messages for a new checkpoint, its target, and the aging of older checkpoints; skipped under the trigger unless p_force.';

-------------------------------------------------------------------------------
-- _compression_plan_for_update: a plan, locked, or PM005
create or replace function memori._compression_plan_for_update(p_plan_id uuid) returns memori.compression_plans
as $func$
declare
  v_plan memori.compression_plans;
begin
  select * into v_plan from memori.compression_plans p where p.id = p_plan_id for update;
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
comment on function memori._compression_plan_for_update(uuid) is 'A compression plan locked for update; PM005 when missing, PM072 when not in status planned.';

-------------------------------------------------------------------------------
-- compression_prompt: what the summarizer is asked, one row per summary
-- Row 'new': the seed's goal-aware prompt over the plan's assistant output
-- (goal-marker lines removed: goals are never summarised). Then one row per
-- aging item: re-compress older summaries to their targets.
create or replace function memori.compression_prompt(p_plan_id uuid) returns setof memori.compression_request
as $func$
declare
  v_plan   memori.compression_plans;
  v_goal   memori.goals;
  v_state  memori.compression_state;
  v_source text;
  v_header text;
  v_item   jsonb;
begin
  select * into v_plan from memori.compression_plans p where p.id = p_plan_id;
  if not found or v_plan.status <> 'planned' then
    perform memori._compression_plan_for_update(p_plan_id);  -- raises PM005 or PM072
  end if;
  select * into v_state from memori.compression_state s where s.session_id = v_plan.session_id;
  v_goal := memori._goal_active(v_plan.session_id);

  select string_agg(m.role || ': ' || memori._strip_markers(m.content), E'\n\n' order by m.seq) into v_source
    from memori.messages m
   where m.session_id = v_plan.session_id and m.seq between v_plan.from_seq and v_plan.to_seq
     and m.role in ('assistant', 'tool') and not v_state.rolled_back @> m.seq;
  v_source := coalesce(v_source, '');

  if v_goal.id is not null then
    v_header := concat_ws(E'\n',
      'ACTIVE GOAL: ' || v_goal.description, 'Priority: ' || v_goal.priority, 'Status: ' || v_goal.status, '',
      'COMPLETED CHECKPOINTS:',
      (select string_agg('✅ ' || c.description, E'\n' order by c.position) from memori.goal_checkpoints c
        where c.goal_id = v_goal.id and c.status = 'completed'), '',
      'IN PROGRESS:',
      (select string_agg('🔄 ' || c.description, E'\n' order by c.position) from memori.goal_checkpoints c
        where c.goal_id = v_goal.id and c.status = 'in-progress'), '',
      'PENDING:',
      (select string_agg('⏳ ' || c.description, E'\n' order by c.position) from memori.goal_checkpoints c
        where c.goal_id = v_goal.id and c.status = 'pending'), '',
      'LOCKED DECISIONS:',
      (select string_agg('🔒 ' || d.description, E'\n' order by d.position) from memori.goal_decisions d
        where d.goal_id = v_goal.id and d.locked), '',
      '---', '',
      'Summarize the following conversation, focusing on progress toward the goal:');
    return next row('new', 'new', 3, v_plan.source_tokens, v_plan.target_tokens, v_source,
      v_header || E'\n' || v_source || E'\n\n' ||
      E'PRESERVE:\n- Decisions made toward the goal\n- Checkpoints completed\n- Files created/modified\n'
      '- Blockers encountered\n- Technical details relevant to the goal\n- Next steps planned\n\n'
      'SUMMARIZE AGGRESSIVELY:\n- Off-topic discussions\n- Exploratory conversations\n'
      '- Debugging steps that succeeded\n- Repeated information\n\n'
      'Provide a concise summary that maintains essential information for continuing work on the goal, '
      || format('in at most %s tokens.', v_plan.target_tokens))::memori.compression_request;
  else
    return next row('new', 'new', 3, v_plan.source_tokens, v_plan.target_tokens, v_source,
      E'Summarize the following conversation history, preserving key decisions, code changes, and important context:\n\n'
      || v_source || E'\n\n'
      || format('Provide a concise summary that maintains essential information, in at most %s tokens.',
                v_plan.target_tokens))::memori.compression_request;
  end if;

  for v_item in select * from jsonb_array_elements(v_plan.aging) loop
    select string_agg(c.summary, E'\n\n' order by c.from_seq) into v_source
      from memori.compression_checkpoints c
     where c.id in (select (jsonb_array_elements_text(v_item->'checkpoint_ids'))::uuid);
    return next row(v_item->>'key', v_item->>'action', (v_item->>'level')::integer, (v_item->>'source_tokens')::integer,
      (v_item->>'target_tokens')::integer, coalesce(v_source, ''),
      case (v_item->>'level')::integer
        when 2 then 'Compress this summary of earlier conversation to a moderate summary: main points only, code by reference.'
        when 1 then 'Compress this summary of older conversation to a brief summary: critical information only, no code details.'
        else 'Compress these summaries of the oldest conversation into a minimal summary: essential context only.'
      end || format(' Use at most %s tokens.', v_item->>'target_tokens') || E'\n\n' || coalesce(v_source, ''))::memori.compression_request;
  end loop;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_prompt(uuid) is 'The summaries a plan needs: key, action (new, age, merge), level, source and target tokens, source text, and the goal-aware prompt.';

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

-------------------------------------------------------------------------------
-- compression_apply: store a plan's summaries atomically
create or replace function memori.compression_apply(
  p_plan_id     uuid,
  p_new_summary text,
  p_aged        jsonb default '{}'::jsonb,
  p_now         timestamptz default now(),
  p_new_tokens  integer default null
) returns memori.compression_applied
as $func$
declare
  v_plan     memori.compression_plans := memori._compression_plan_for_update(p_plan_id);
  v_state    memori.compression_state;
  v_new      record;
  v_aged     record;
  v_item     jsonb;
  v_expected text[];
  v_given    text[];
  v_cp       uuid;
  v_n_aged   integer := 0;
  v_n_merged integer := 0;
  v_ids      uuid[];
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  select * into v_state from memori.compression_state s where s.session_id = v_plan.session_id for update;
  if v_state.version <> v_plan.state_version then
    raise exception 'compression plan % is stale: the session changed since it was planned', p_plan_id
      using errcode = 'PM071',
            detail = format('planned at state version %s, the session is at %s', v_plan.state_version, v_state.version),
            hint = 'Another compression or a restore was applied meanwhile: make a new plan with memori.compression_plan.';
  end if;
  if p_aged is null or jsonb_typeof(p_aged) <> 'object' then
    perform memori._invalid('aged summaries must be a JSON object', 'Pass {"<key>": "summary", ...} for the plan''s aging items, or {}.');
  end if;
  if p_new_tokens < 0 then
    perform memori._invalid(format('tokens must be >= 0, got %s', p_new_tokens), 'Omit p_new_tokens to estimate them from the text.');
  end if;
  select * into v_new from memori._summary_of('new', to_jsonb(p_new_summary), v_plan.source_tokens);
  if p_new_tokens is not null then
    if p_new_tokens > v_plan.source_tokens then
      raise exception 'summary new is % tokens, longer than its source of % tokens', p_new_tokens, v_plan.source_tokens
        using errcode = 'PM073', hint = 'A summary must not be longer than what it replaces: summarize again with the plan''s target.';
    end if;
    v_new.tokens := p_new_tokens;
  end if;
  v_expected := array(select i->>'key' from jsonb_array_elements(v_plan.aging) i order by 1);
  v_given := array(select k from jsonb_object_keys(p_aged) k order by 1);
  if v_expected <> v_given then
    raise exception 'aged summaries do not match the plan: expected keys %, got %', v_expected, v_given
      using errcode = 'PM073', hint = 'Pass one summary per aging item of the plan (memori.compression_prompt lists them).';
  end if;

  -- age and merge the older checkpoints
  for v_item in select * from jsonb_array_elements(v_plan.aging) loop
    select * into v_aged from memori._summary_of(v_item->>'key', p_aged->(v_item->>'key'), (v_item->>'source_tokens')::integer);
    v_ids := array(select (jsonb_array_elements_text(v_item->'checkpoint_ids'))::uuid);
    if v_item->>'action' = 'age' then
      update memori.compression_checkpoints
         set summary = v_aged.summary, current_tokens = v_aged.tokens, compressed_at = p_now,
             compression_count = compression_count + 1
       where id = v_ids[1];
      v_n_aged := v_n_aged + 1;
    else
      insert into memori.compression_checkpoints (session_id, user_id, level, from_seq, to_seq, summary, created_at,
                                                  compressed_at, original_tokens, current_tokens, compression_count,
                                                  compression_number, key_decisions, files_modified, next_steps)
      select v_plan.session_id, v_plan.user_id, 0, min(c.from_seq), max(c.to_seq), v_aged.summary, min(c.created_at),
             p_now, sum(c.original_tokens), v_aged.tokens, max(c.compression_count) + 1, max(c.compression_number),
             array(select distinct x from memori.compression_checkpoints c2, unnest(c2.key_decisions) x where c2.id = any(v_ids)),
             array(select distinct x from memori.compression_checkpoints c2, unnest(c2.files_modified) x where c2.id = any(v_ids)),
             '{}'
        from memori.compression_checkpoints c where c.id = any(v_ids);
      delete from memori.compression_checkpoints where id = any(v_ids);
      v_n_merged := v_n_merged + cardinality(v_ids);
    end if;
  end loop;

  insert into memori.compression_checkpoints (session_id, user_id, level, from_seq, to_seq, summary, created_at,
                                              compressed_at, original_tokens, current_tokens, compression_count,
                                              compression_number, key_decisions, files_modified, next_steps)
  values (v_plan.session_id, v_plan.user_id, 3, v_plan.from_seq, v_plan.to_seq, v_new.summary, p_now, p_now,
          v_plan.source_tokens, v_new.tokens, 1, v_state.compression_count + 1,
          v_plan.key_decisions, v_plan.files_modified, v_plan.next_steps)
  returning id into v_cp;

  -- levels by age: the new one 3, then 2, 1, and 0 for the oldest
  update memori.compression_checkpoints c
     set level = least(c.level, case r.rank_newest when 1 then 3 when 2 then 2 when 3 then 1 else 0 end)
    from (select id, row_number() over (order by to_seq desc) as rank_newest
            from memori.compression_checkpoints where session_id = v_plan.session_id) r
   where r.id = c.id;

  update memori.compression_state s
     set compressed_through_seq = v_plan.to_seq,
         used_tokens = s.used_tokens - v_plan.source_tokens,
         compression_count = s.compression_count + 1,
         version = s.version + 1,
         updated_at = p_now
   where s.session_id = v_plan.session_id;
  perform memori._compression_recount(v_plan.session_id);
  select * into v_state from memori.compression_state s where s.session_id = v_plan.session_id;

  update memori.compression_plans set status = 'applied', finished_at = p_now, checkpoint_id = v_cp where id = p_plan_id;
  perform memori._event_emit('compression.compressed',
            jsonb_build_object('plan_id', p_plan_id, 'session_id', v_plan.session_id, 'checkpoint_id', v_cp,
                               'compression_number', v_state.compression_count, 'source_tokens', v_plan.source_tokens,
                               'summary_tokens', v_new.tokens, 'aged', v_n_aged, 'merged', v_n_merged,
                               'checkpoint_tokens', v_state.checkpoint_tokens), p_now);
  return row(p_plan_id, v_cp, v_state.compression_count, v_plan.message_count, v_plan.source_tokens, v_new.tokens,
             v_n_aged, v_n_merged, v_state.checkpoint_tokens::integer, v_state.used_tokens::integer)::memori.compression_applied;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_apply(uuid, text, jsonb, timestamptz, integer) is 'Apply a plan atomically: age/merge older checkpoints, add the new one, move the session''s markers; PM071 stale, PM072 applied twice, PM073 bad summaries.';

-------------------------------------------------------------------------------
-- compression_abort: record that a plan's summarizer failed
create or replace function memori.compression_abort(
  p_plan_id uuid,
  p_error   text,
  p_now     timestamptz default now()
) returns memori.compression_plans
as $func$
declare
  v_plan memori.compression_plans := memori._compression_plan_for_update(p_plan_id);
begin
  update memori.compression_plans set status = 'failed', error = left(coalesce(p_error, 'unknown error'), 2000),
                                      finished_at = p_now
   where id = p_plan_id returning * into v_plan;
  perform memori._event_emit('compression.error',
            jsonb_build_object('plan_id', p_plan_id, 'session_id', v_plan.session_id, 'error', v_plan.error), p_now);
  return v_plan;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_abort(uuid, text, timestamptz) is 'Mark a plan failed (its summarizer failed; nothing else changes) and emit compression.error.';

-------------------------------------------------------------------------------
-- active_context: what is sent to the LLM, in the seed's order
-- System messages, the active goal block, checkpoints oldest first, the
-- user messages whose replies are in checkpoints, then the recent
-- conversation (user and uncompressed assistant/tool messages) in order.
create or replace function memori.active_context(p_session_id text) returns setof memori.context_item
as $func$
  with st as (select * from memori.compression_state s where s.session_id = p_session_id),
  items as (
    select 1 as grp, m.seq::bigint as ord, 'system' as kind, 'system' as role, m.seq::text as ref, m.content, m.tokens
      from memori.messages m, st
     where m.session_id = p_session_id and m.role = 'system' and not st.rolled_back @> m.seq
    union all
    select 2, 0, 'goal', 'system', g.id::text, memori.goal_block(p_session_id),
           memori.token_estimate(memori.goal_block(p_session_id), 'compression')
      from memori.goals g where g.session_id = p_session_id and g.status = 'active'
    union all
    select 3, c.from_seq, 'checkpoint', 'system', c.id::text, c.summary, c.current_tokens
      from memori.compression_checkpoints c where c.session_id = p_session_id
    union all
    select case when m.seq <= st.compressed_through_seq then 4 else 5 end, m.seq, m.role, m.role, m.seq::text,
           m.content, m.tokens
      from memori.messages m, st
     where m.session_id = p_session_id and m.role <> 'system' and not st.rolled_back @> m.seq
       and (m.role = 'user' or m.seq > st.compressed_through_seq)
  )
  select (row_number() over (order by grp, ord))::integer, kind, role, ref, content, tokens
    from items order by grp, ord
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.active_context(text) is 'The context sent to the LLM: system messages, goal block, checkpoints oldest first, older user messages, recent messages.';

-------------------------------------------------------------------------------
-- snapshot_create: an immutable snapshot of the session's active state
create or replace function memori.snapshot_create(
  p_session_id text,
  p_metadata   jsonb default '{}'::jsonb,
  p_now        timestamptz default now()
) returns memori.snapshots
as $func$
declare
  v_state memori.compression_state := memori._compression_session(p_session_id, null, p_now, false);
begin
  if p_metadata is not null and jsonb_typeof(p_metadata) <> 'object' then
    perform memori._invalid('snapshot metadata must be a JSON object', 'Pass {"model": "llama3.2:3b", ...}, or omit it.');
  end if;
  return memori._snapshot_take(v_state, 'manual', p_metadata, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.snapshot_create(text, jsonb, timestamptz) is 'Snapshot a session''s active state (message markers, checkpoints, goals, page versions and working set); immutable, retention-managed.';

-------------------------------------------------------------------------------
-- snapshot_list: a session's unexpired snapshots, newest first
create or replace function memori.snapshot_list(p_session_id text, p_now timestamptz default now())
returns setof memori.snapshots
as $func$
  select * from memori.snapshots s
   where s.session_id = p_session_id and (s.expires_at is null or s.expires_at > p_now)
   order by s.created_at desc, s.id
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.snapshot_list(text, timestamptz) is 'Unexpired snapshots of a session, newest first.';

-------------------------------------------------------------------------------
-- snapshot_restore: bring a session's active state back to a snapshot
-- Nothing is lost: the replaced state is snapshotted first (kind
-- pre_restore, returned), and messages added after the snapshot stay in the
-- history, hidden from the active context as a rolled-back range.
create or replace function memori.snapshot_restore(p_snapshot_id uuid, p_now timestamptz default now())
returns memori.snapshots
as $func$
declare
  v_snap  memori.snapshots;
  v_state memori.compression_state;
  v_s     jsonb;
  v_pre   memori.snapshots;
  v_rb    int4multirange;
  v_vm    jsonb;
begin
  select * into v_snap from memori.snapshots s
   where s.id = p_snapshot_id and (s.expires_at is null or s.expires_at > p_now);
  if not found then
    raise exception 'snapshot % not found', p_snapshot_id
      using errcode = 'PM005', hint = 'It does not exist or has expired; memori.snapshot_list lists a session''s snapshots.';
  end if;
  v_state := memori._compression_session(v_snap.session_id, null, p_now, false);
  v_pre := memori._snapshot_take(v_state, 'pre_restore', jsonb_build_object('restoring', p_snapshot_id), p_now);
  v_s := v_snap.state;

  delete from memori.compression_checkpoints where session_id = v_snap.session_id;
  insert into memori.compression_checkpoints
  select * from jsonb_populate_recordset(null::memori.compression_checkpoints, v_s->'checkpoints');
  delete from memori.goals where session_id = v_snap.session_id;  -- cascades to their parts
  insert into memori.goals select * from jsonb_populate_recordset(null::memori.goals, v_s->'goals');
  insert into memori.goal_checkpoints select * from jsonb_populate_recordset(null::memori.goal_checkpoints, v_s->'goal_checkpoints');
  insert into memori.goal_decisions select * from jsonb_populate_recordset(null::memori.goal_decisions, v_s->'goal_decisions');
  insert into memori.goal_artifacts select * from jsonb_populate_recordset(null::memori.goal_artifacts, v_s->'goal_artifacts');

  -- what the snapshot had rolled back, plus everything added after it
  v_rb := (v_s->'state'->>'rolled_back')::int4multirange;
  if v_state.last_seq > (v_s->'state'->>'last_seq')::integer then
    v_rb := v_rb + int4multirange(int4range((v_s->'state'->>'last_seq')::integer + 1, v_state.last_seq + 1));
  end if;
  update memori.compression_state
     set compressed_through_seq = (v_s->'state'->>'compressed_through_seq')::integer,
         rolled_back = v_rb,
         compression_count = (v_s->'state'->>'compression_count')::integer,
         version = version + 1,
         updated_at = p_now
   where session_id = v_snap.session_id;
  perform memori._compression_recount(v_snap.session_id);
  perform memori._goal_tokens_refresh(v_snap.session_id);
  v_vm := memori._vm_snapshot_restore(v_snap.session_id, v_s->'vm', p_now);
  perform memori._event_emit('snapshot.restored',
            jsonb_build_object('snapshot_id', p_snapshot_id, 'session_id', v_snap.session_id,
                               'pre_restore_snapshot_id', v_pre.id, 'vm', v_vm), p_now);
  return v_pre;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.snapshot_restore(uuid, timestamptz) is 'Restore a session''s active state (and its pages and working set) from a snapshot; returns the snapshot of the replaced state. History is kept.';

-------------------------------------------------------------------------------
-- reliability_score: the seed's model-size factor x compression penalty x confidence
create or replace function memori.reliability_score(
  p_model_size_b       numeric,
  p_compression_count  integer,
  p_context_confidence numeric default 1
) returns memori.reliability
as $func$
declare
  v_factor  numeric;
  v_penalty numeric;
  v_score   numeric;
  v_percent numeric;
begin
  if p_model_size_b is null or p_model_size_b < 0 then
    perform memori._invalid(format('model size must be >= 0 billion parameters, got %s', coalesce(p_model_size_b::text, 'NULL')),
                            'Pass the model size in billions, e.g. 3 for llama3.2:3b.');
  end if;
  if p_compression_count is null or p_compression_count < 0 then
    perform memori._invalid(format('compression count must be >= 0, got %s', coalesce(p_compression_count::text, 'NULL')),
                            'Pass how many times the conversation was compressed.');
  end if;
  if p_context_confidence is null or p_context_confidence < 0 or p_context_confidence > 1 then
    perform memori._invalid(format('context confidence must be between 0 and 1, got %s', coalesce(p_context_confidence::text, 'NULL')),
                            'Pass 1 when unsure.');
  end if;
  select (f->>1)::numeric into v_factor
    from jsonb_array_elements(coalesce(memori._setting('reliability.model_factors'),
                                       '[[70, 0.95], [30, 0.85], [13, 0.70], [7, 0.50], [0, 0.30]]')) f
   where p_model_size_b >= (f->>0)::numeric
   order by (f->>0)::numeric desc limit 1;
  v_factor := coalesce(v_factor, 0.30);
  v_penalty := greatest(1.0 - p_compression_count * memori._compression_num('reliability.compression_penalty', 0.15),
                        memori._compression_num('reliability.penalty_floor', 0.30));
  v_score := v_factor * v_penalty * p_context_confidence;
  v_percent := v_score * 100;
  return row(round(v_score, 4), round(v_percent)::integer,
             case when v_percent >= 85 then 'high' when v_percent >= 60 then 'medium' when v_percent >= 40 then 'low'
                  else 'critical' end,
             case when v_percent >= 85 then '🟢' when v_percent >= 60 then '🟡' when v_percent >= 40 then '🟠' else '🔴' end,
             v_factor, v_penalty)::memori.reliability;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.reliability_score(numeric, integer, numeric) is 'Seed 04 reliability: model factor x max(1 - 0.15 x compressions, 0.30) x confidence; level high >= 85, medium >= 60, low >= 40, else critical.';

-------------------------------------------------------------------------------
-- session_reliability: a session's reliability, with the seed's warning when low
create or replace function memori.session_reliability(p_session_id text, p_model_size_b numeric)
returns memori.session_reliability_state
as $func$
declare
  v_state memori.compression_state;
  v_r     memori.reliability;
begin
  select * into v_state from memori.compression_state s where s.session_id = p_session_id;
  if not found then
    raise exception 'session % has no messages', p_session_id
      using errcode = 'PM005', hint = 'Add messages with memori.message_add first; check the session id.';
  end if;
  v_r := memori.reliability_score(p_model_size_b, v_state.compression_count);
  return row(p_session_id, p_model_size_b, v_state.compression_count, v_r.score, v_r.percent, v_r.level, v_r.icon,
             case when v_r.level in ('low', 'critical') then
               format(E'⚠️ Context Compression Warning\nYour model (%sB) has compressed the conversation %s times.\n'
                      'Small models may lose context accuracy after multiple compressions.\n\nRecommendations:\n'
                      '- Continue if making good progress\n- Start new conversation if seeing hallucinations\n'
                      '- Use larger model for complex long-term tasks', p_model_size_b, v_state.compression_count)
             end)::memori.session_reliability_state;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_reliability(text, numeric) is 'Reliability of a session for a model size (billions), with the seed''s warning text when low or critical.';

-------------------------------------------------------------------------------
-- session_export: the seed's session file (full, uncompressed history)
create or replace function memori.session_export(
  p_session_id text,
  p_model      text default null,
  p_provider   text default null
) returns jsonb
as $func$
  select jsonb_build_object(
           'sessionId', s.session_id,
           'startTime', (select min(m.created_at) from memori.messages m where m.session_id = s.session_id),
           'lastActivity', (select max(m.created_at) from memori.messages m where m.session_id = s.session_id),
           'model', p_model,
           'provider', p_provider,
           'messages', coalesce((select jsonb_agg(jsonb_build_object(
                                    'role', m.role,
                                    'parts', jsonb_build_array(jsonb_build_object('type', 'text', 'text', m.content)),
                                    'timestamp', m.created_at) order by m.seq)
                                   from memori.messages m where m.session_id = s.session_id), '[]'),
           'toolCalls', coalesce((select jsonb_agg(tc || jsonb_build_object('timestamp', m.created_at) order by m.seq, n)
                                    from memori.messages m
                                   cross join lateral jsonb_array_elements(case jsonb_typeof(m.tool_calls)
                                                                             when 'array' then m.tool_calls
                                                                             else jsonb_build_array(m.tool_calls) end)
                                                      with ordinality t(tc, n)
                                   where m.session_id = s.session_id and m.tool_calls is not null), '[]'),
           'metadata', jsonb_build_object(
             'tokenCount', (select coalesce(sum(m.tokens), 0) from memori.messages m where m.session_id = s.session_id),
             'compressionCount', s.compression_count))
    from memori.compression_state s
   where s.session_id = p_session_id
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_export(text, text, text) is 'The seed''s session file as JSON: every message uncompressed, tool calls, token and compression counts; NULL for an unknown session.';
