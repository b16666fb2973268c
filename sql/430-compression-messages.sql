-- pymemdb SQL API: conversation compression (seed 04): messages, budget, plan / prompt /
-- apply, the active context, reliability and the session export.
--
-- Configuration and private helpers: sql/400-compression-internals.sql.
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
-- message_add: append a message; the answer says whether to compress now
-- p_session_id: the acting user's conversation, created on first use (also as a memori.sessions row)
-- p_role: 'system', 'user', 'assistant' or 'tool' (else PM004); an assistant message's goal markers are applied
--   (compression.auto_markers)
-- p_content: the message text, may be empty (NULL: PM001); over compression.max_message_bytes bytes: PM003
-- p_tokens: the message's tokens, >= 0 (else PM001); NULL: ceil(characters / compression.chars_per_token)
-- p_tool_calls: the message's tool calls, a JSON array or object (else PM001), or NULL; in session_export
-- p_context_size: the model's context window in tokens, >= 1 (else PM001), kept as the session's; NULL: the
--   session's, else compression.default_context_size (8192)
-- p_system_prompt_tokens: the system prompt's tokens for the budget returned (>= 0, else PM001); NULL: the
--   session's system messages plus its goal block
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
  v_user     text;
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
  perform memori._raise(memori._too_large('message', octet_length(p_content), v_limit,
    'Store large tool output elsewhere and reference it, or raise compression.max_message_bytes.'));
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
  v_user := v_state.user_id;

  update memori.compression_state s
     set last_seq = s.last_seq + 1,
         used_tokens = s.used_tokens + case when p_role = 'system' then 0 else v_tokens end,
         system_tokens = s.system_tokens + case when p_role = 'system' then v_tokens else 0 end,
         context_size = coalesce(p_context_size, s.context_size),
         updated_at = p_now
   where s.user_id = v_user and s.session_id = p_session_id
  returning * into v_state;
  insert into memori.messages (session_id, user_id, seq, role, content, tokens, tool_calls, created_at)
  values (p_session_id, v_user, v_state.last_seq, p_role, p_content, v_tokens, p_tool_calls, p_now)
  returning id into v_id;

  if p_role = 'assistant' and p_content ~ '\[(GOAL|CHECKPOINT|DECISION|ARTIFACT|NEXT)\]'
     and memori._compression_flag('compression.auto_markers', true) then
    perform memori.goal_markers_apply(p_session_id, p_content, v_user, p_now);
    select * into v_state from memori.compression_state s where s.user_id = v_user and s.session_id = p_session_id;
  end if;

  v_budget := memori._compression_budget(v_state, p_context_size, p_system_prompt_tokens, false);
  if v_state.auto_snapshot_version is distinct from v_state.version
     and v_budget.used_tokens > 0
     and v_budget.used_tokens >= floor(greatest(v_budget.available_tokens, 0)
                                       * memori._compression_num('snapshots.auto_threshold', 0.80))
     and memori._compression_flag('snapshots.enabled', true) and memori._compression_flag('snapshots.auto_create', true) then
    v_snapshot := (memori._snapshot_take(v_state, 'auto', jsonb_build_object('trigger', 'auto_threshold'), p_now)).id;
    update memori.compression_state set auto_snapshot_version = version
     where user_id = v_user and session_id = p_session_id;
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
-- compression_budget: the session's budget and whether to compress now
-- p_session_id: an existing conversation of the acting user (message_add starts one), else PM005
-- p_context_size: the model's context window in tokens, >= 1 (else PM001); NULL: the session's (message_add),
--   else compression.default_context_size (8192)
-- p_system_prompt_tokens: the system prompt's tokens, >= 0 (else PM001); NULL: the session's system messages plus
--   its goal block; usable context (context x compression.usable_ratio) not above it: PM070
create or replace function memori.compression_budget(
  p_session_id           text,
  p_context_size         integer default null,
  p_system_prompt_tokens integer default null
) returns memori.compression_budget_state
as $func$
declare
  v_user text := memori._acting_user(null);
begin
  return memori._compression_budget(memori._compression_state(v_user, p_session_id), p_context_size,
                                    p_system_prompt_tokens, true);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_budget(text, integer, integer) is 'Budget of a session: usable, available (usable - system prompt - checkpoints), trigger (80 %), used, should_compress.';

-------------------------------------------------------------------------------
-- compression_plan: what to compress now, persisted for compression_apply
-- p_session_id: an existing conversation of the acting user (message_add starts one), else PM005
-- p_context_size: the model's context window in tokens, as for compression_budget
-- p_system_prompt_tokens: the system prompt's tokens, as for compression_budget (PM070 when too large)
-- p_force: true: plan even when the used tokens are under the trigger (still skipped when compression is
--   disabled or no assistant/tool output is older than the preserved recent tokens)
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
  v_user     text := memori._acting_user(null);
  v_target   integer;
  v_aging    jsonb;
  v_decisions text[];
  v_files    text[];
  v_next     text[];
  v_expires  timestamptz;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  v_state := memori._compression_state(v_user, p_session_id);
  v_budget := memori._compression_budget(v_state, p_context_size, p_system_prompt_tokens, true);
  v_preserve := least(memori._compression_num('compression.preserve_recent_tokens', 2048),
                      floor(greatest(v_budget.available_tokens, 0)
                            * memori._compression_num('compression.preserve_recent_max_share', 0.40)))::integer;

  -- newest backwards: the messages within the last v_preserve tokens stay;
  -- the first one past them is the cutoff. A loop (a cursor: fast-start
  -- plan, a backward index scan) stops there instead of reading the session.
  for v_msg in select m.seq, m.tokens from memori.messages m
                where m.user_id = v_user and m.session_id = p_session_id and m.seq > v_state.compressed_through_seq
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
   where m.user_id = v_user and m.session_id = p_session_id and m.seq > v_state.compressed_through_seq
     and m.seq <= v_cutoff
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

  -- every value computed first: on Citus the INSERT runs on the user's shard, where
  -- memori's functions are not to be called
  v_target := least(memori._compression_num('compression.summary_max_tokens', 1024),
                    greatest(1, ceil(v_src.tokens * memori._compression_num('compression.new_checkpoint_ratio', 0.5))))::integer;
  v_aging := memori._compression_aging(v_user, p_session_id);
  v_decisions := memori._marker_values(v_src.texts, 'DECISION');
  v_files := memori._marker_values(v_src.texts, 'ARTIFACT');
  v_next := memori._marker_values(v_src.texts, 'NEXT');
  v_expires := p_now + make_interval(days => memori._compression_num('compression.plan_retention_days', 7)::integer);
  insert into memori.compression_plans (session_id, user_id, status, reason, state_version, context_size,
                                        system_prompt_tokens, budget, from_seq, to_seq, message_count, source_tokens,
                                        target_tokens, aging, key_decisions, files_modified, next_steps,
                                        created_at, finished_at, expires_at)
  values (p_session_id, v_user, v_status, v_reason, v_state.version, v_budget.context_size,
          v_budget.system_prompt_tokens, to_jsonb(v_budget) || jsonb_build_object('preserve_recent_tokens', v_preserve),
          v_state.compressed_through_seq + 1, v_cutoff, v_src.n, v_src.tokens, v_target, v_aging,
          v_decisions, v_files, v_next, p_now, case when v_status = 'skipped' then p_now end, v_expires)
  returning * into v_plan;
  if v_status = 'skipped' then
    update memori.compression_plans set from_seq = null, to_seq = null, message_count = 0, source_tokens = 0,
                                        target_tokens = 0, aging = '[]'
     where user_id = v_user and id = v_plan.id returning * into v_plan;
    perform memori._event_emit('compression.skipped',
              jsonb_build_object('plan_id', v_plan.id, 'session_id', p_session_id, 'reason', v_reason), p_now);
  end if;
  return v_plan;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.compression_plan(text, integer, integer, timestamptz, boolean) is 'Plan a compression (persisted): the assistant/tool messages for a new checkpoint, its target, and the aging of older checkpoints; skipped under the trigger unless p_force.';

-------------------------------------------------------------------------------
-- compression_prompt: what the summarizer is asked, one row per summary
-- Row 'new': the seed's goal-aware prompt over the plan's assistant output
-- (goal-marker lines removed: goals are never summarised). Then one row per
-- aging item: re-compress older summaries to their targets.
-- p_plan_id: a plan of the acting user (compression_plan) in status planned; missing: PM005, applied, aborted or
--   skipped: PM072
create or replace function memori.compression_prompt(p_plan_id uuid) returns setof memori.compression_request
as $func$
declare
  v_plan   memori.compression_plans;
  v_goal   memori.goals;
  v_state  memori.compression_state;
  v_source text;
  v_header text;
  v_item   jsonb;
  v_user   text := memori._acting_user(null);
  v_roles  text[];
  v_texts  text[];
begin
  select * into v_plan from memori.compression_plans p where p.user_id = v_user and p.id = p_plan_id;
  if not found or v_plan.status <> 'planned' then
    perform memori._compression_plan_for_update(p_plan_id);  -- raises PM005 or PM072
  end if;
  select * into v_state from memori.compression_state s where s.user_id = v_user and s.session_id = v_plan.session_id;
  v_goal := memori._goal_active(v_user, v_plan.session_id);

  -- the messages in one single-shard read; markers are stripped here, not on the shard
  select array_agg(m.role order by m.seq), array_agg(m.content order by m.seq) into v_roles, v_texts
    from memori.messages m
   where m.user_id = v_user and m.session_id = v_plan.session_id and m.seq between v_plan.from_seq and v_plan.to_seq
     and m.role in ('assistant', 'tool') and not v_state.rolled_back @> m.seq;
  select string_agg(x.role || ': ' || memori._strip_markers(x.content), E'\n\n' order by x.n) into v_source
    from unnest(v_roles, v_texts) with ordinality x(role, content, n);
  v_source := coalesce(v_source, '');

  if v_goal.id is not null then
    v_header := concat_ws(E'\n',
      'ACTIVE GOAL: ' || v_goal.description, 'Priority: ' || v_goal.priority, 'Status: ' || v_goal.status, '',
      'COMPLETED CHECKPOINTS:',
      (select string_agg('✅ ' || c.description, E'\n' order by c.position) from memori.goal_checkpoints c
        where c.user_id = v_user and c.goal_id = v_goal.id and c.status = 'completed'), '',
      'IN PROGRESS:',
      (select string_agg('🔄 ' || c.description, E'\n' order by c.position) from memori.goal_checkpoints c
        where c.user_id = v_user and c.goal_id = v_goal.id and c.status = 'in-progress'), '',
      'PENDING:',
      (select string_agg('⏳ ' || c.description, E'\n' order by c.position) from memori.goal_checkpoints c
        where c.user_id = v_user and c.goal_id = v_goal.id and c.status = 'pending'), '',
      'LOCKED DECISIONS:',
      (select string_agg('🔒 ' || d.description, E'\n' order by d.position) from memori.goal_decisions d
        where d.user_id = v_user and d.goal_id = v_goal.id and d.locked), '',
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
     where c.user_id = v_user and c.id in (select (jsonb_array_elements_text(v_item->'checkpoint_ids'))::uuid);
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
-- compression_apply: store a plan's summaries atomically
-- p_plan_id: a plan of the acting user in status planned (missing: PM005, finished: PM072); PM071 when the
--   session changed since it was planned
-- p_new_summary: the summary of the plan's messages (compression_prompt's row new): non-empty text (else PM001),
--   not more tokens than its source (else PM073)
-- p_aged: JSON object, one summary per aging item under its key (compression_prompt): "text" or {"summary":
--   "text", "tokens": n}; {} when the plan has none; keys not the plan's: PM073; not an object or NULL: PM001
-- p_new_tokens: the tokens of p_new_summary, >= 0 (else PM001), not above the plan's source tokens (else
--   PM073); NULL: ceil(characters / compression.chars_per_token)
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
  v_user     text := v_plan.user_id;  -- the acting user's plan (memori._compression_plan_for_update)
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  select * into v_state from memori.compression_state s
   where s.user_id = v_user and s.session_id = v_plan.session_id for update;
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
       where user_id = v_user and id = v_ids[1];
      v_n_aged := v_n_aged + 1;
    else
      insert into memori.compression_checkpoints (session_id, user_id, level, from_seq, to_seq, summary, created_at,
                                                  compressed_at, original_tokens, current_tokens, compression_count,
                                                  compression_number, key_decisions, files_modified, next_steps)
      select v_plan.session_id, v_user, 0, min(c.from_seq), max(c.to_seq), v_aged.summary, min(c.created_at),
             p_now, sum(c.original_tokens), v_aged.tokens, max(c.compression_count) + 1, max(c.compression_number),
             array(select distinct x from memori.compression_checkpoints c2, unnest(c2.key_decisions) x
                    where c2.user_id = v_user and c2.id = any(v_ids)),
             array(select distinct x from memori.compression_checkpoints c2, unnest(c2.files_modified) x
                    where c2.user_id = v_user and c2.id = any(v_ids)),
             '{}'
        from memori.compression_checkpoints c where c.user_id = v_user and c.id = any(v_ids);
      delete from memori.compression_checkpoints where user_id = v_user and id = any(v_ids);
      v_n_merged := v_n_merged + cardinality(v_ids);
    end if;
  end loop;

  insert into memori.compression_checkpoints (session_id, user_id, level, from_seq, to_seq, summary, created_at,
                                              compressed_at, original_tokens, current_tokens, compression_count,
                                              compression_number, key_decisions, files_modified, next_steps)
  values (v_plan.session_id, v_user, 3, v_plan.from_seq, v_plan.to_seq, v_new.summary, p_now, p_now,
          v_plan.source_tokens, v_new.tokens, 1, v_state.compression_count + 1,
          v_plan.key_decisions, v_plan.files_modified, v_plan.next_steps)
  returning id into v_cp;

  -- levels by age: the new one 3, then 2, 1, and 0 for the oldest
  update memori.compression_checkpoints c
     set level = least(c.level, greatest(4 - r.rank_newest, 0)::integer)  -- (Citus misreads a simple CASE here)
    from (select id, row_number() over (order by to_seq desc) as rank_newest
            from memori.compression_checkpoints where user_id = v_user and session_id = v_plan.session_id) r
   where c.user_id = v_user and r.id = c.id;

  update memori.compression_state s
     set compressed_through_seq = v_plan.to_seq,
         used_tokens = s.used_tokens - v_plan.source_tokens,
         compression_count = s.compression_count + 1,
         version = s.version + 1,
         updated_at = p_now
   where s.user_id = v_user and s.session_id = v_plan.session_id;
  perform memori._compression_recount(v_user, v_plan.session_id);
  select * into v_state from memori.compression_state s where s.user_id = v_user and s.session_id = v_plan.session_id;

  update memori.compression_plans set status = 'applied', finished_at = p_now, checkpoint_id = v_cp
   where user_id = v_user and id = p_plan_id;
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
-- p_plan_id: a plan of the acting user in status planned (missing: PM005, finished: PM072); it becomes failed
-- p_error: why the summarizer failed, kept in the plan's error (first 2000 characters); NULL: 'unknown error'
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
   where user_id = v_plan.user_id and id = p_plan_id returning * into v_plan;
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
declare
  v_user   text := memori._acting_user(null);
  -- computed here, not in the query: on Citus the query runs on the user's shard, which
  -- must not start another distributed query
  v_block  text := memori._goal_block(v_user, p_session_id);
  v_tokens integer := memori.token_estimate(v_block, 'compression');
begin
  return query
  with st as (select * from memori.compression_state s where s.user_id = v_user and s.session_id = p_session_id),
  items as (
    select 1 as grp, m.seq::bigint as ord, 'system' as kind, 'system' as role, m.seq::text as ref, m.content, m.tokens
      from memori.messages m, st
     where m.user_id = v_user and m.session_id = p_session_id and m.role = 'system' and not st.rolled_back @> m.seq
    union all
    select 2, 0, 'goal', 'system', g.id::text, v_block, v_tokens
      from memori.goals g where g.user_id = v_user and g.session_id = p_session_id and g.status = 'active'
    union all
    select 3, c.from_seq, 'checkpoint', 'system', c.id::text, c.summary, c.current_tokens
      from memori.compression_checkpoints c where c.user_id = v_user and c.session_id = p_session_id
    union all
    select case when m.seq <= st.compressed_through_seq then 4 else 5 end, m.seq, m.role, m.role, m.seq::text,
           m.content, m.tokens
      from memori.messages m, st
     where m.user_id = v_user and m.session_id = p_session_id and m.role <> 'system' and not st.rolled_back @> m.seq
       and (m.role = 'user' or m.seq > st.compressed_through_seq)
  )
  select (row_number() over (order by i.grp, i.ord))::integer, i.kind, i.role, i.ref, i.content, i.tokens
    from items i order by i.grp, i.ord;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.active_context(text) is 'The context sent to the LLM: system messages, goal block, checkpoints oldest first, older user messages, recent messages.';

-------------------------------------------------------------------------------
-- reliability_score: the seed's model-size factor x compression penalty x confidence
-- p_model_size_b: the model's size in billions of parameters (3 for a 3B model), >= 0 (NULL or less: PM001);
--   its factor: of the largest minimum size it reaches in reliability.model_factors
-- p_compression_count: how many times the conversation was compressed, >= 0 (NULL or less: PM001)
-- p_context_confidence: a factor between 0 and 1 (NULL or outside: PM001); 1 when unsure
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
-- p_session_id: an existing conversation of the acting user (message_add starts one), else PM005
-- p_model_size_b: the model's size in billions of parameters, >= 0 (NULL or less: PM001), as for reliability_score
create or replace function memori.session_reliability(p_session_id text, p_model_size_b numeric)
returns memori.session_reliability_state
as $func$
declare
  v_state memori.compression_state := memori._compression_state(memori._acting_user(null), p_session_id);
  v_r     memori.reliability;
begin
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
-- p_session_id: a conversation of the acting user; NULL result when the user has none of that id
-- p_model: the model name written to the file's "model" field; NULL: JSON null
-- p_provider: the provider name written to the file's "provider" field; NULL: JSON null
create or replace function memori.session_export(
  p_session_id text,
  p_model      text default null,
  p_provider   text default null
) returns jsonb
as $func$
declare
  v_user text := memori._acting_user(null);
begin
  return (select jsonb_build_object(
           'sessionId', s.session_id,
           'startTime', (select min(m.created_at) from memori.messages m where m.user_id = v_user and m.session_id = s.session_id),
           'lastActivity', (select max(m.created_at) from memori.messages m where m.user_id = v_user and m.session_id = s.session_id),
           'model', p_model,
           'provider', p_provider,
           'messages', coalesce((select jsonb_agg(jsonb_build_object(
                                    'role', m.role,
                                    'parts', jsonb_build_array(jsonb_build_object('type', 'text', 'text', m.content)),
                                    'timestamp', m.created_at) order by m.seq)
                                   from memori.messages m where m.user_id = v_user and m.session_id = s.session_id), '[]'),
           'toolCalls', coalesce((select jsonb_agg(tc || jsonb_build_object('timestamp', m.created_at) order by m.seq, n)
                                    from memori.messages m
                                   cross join lateral jsonb_array_elements(case jsonb_typeof(m.tool_calls)
                                                                             when 'array' then m.tool_calls
                                                                             else jsonb_build_array(m.tool_calls) end)
                                                      with ordinality t(tc, n)
                                   where m.user_id = v_user and m.session_id = s.session_id and m.tool_calls is not null), '[]'),
           'metadata', jsonb_build_object(
             'tokenCount', (select coalesce(sum(m.tokens), 0) from memori.messages m
                             where m.user_id = v_user and m.session_id = s.session_id),
             'compressionCount', s.compression_count))
    from memori.compression_state s
   where s.user_id = v_user and s.session_id = p_session_id);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_export(text, text, text) is 'The seed''s session file as JSON: every message uncompressed, tool calls, token and compression counts; NULL for an unknown session.';
