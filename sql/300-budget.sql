-- pymemdb SQL API, part 7: the context window manager (seed 02).
--
-- Before an LLM call an agent has more candidate context than tokens. These
-- functions pick what goes in, inside the database: each chunk gets tokens
-- (given or estimated) and a priority (base priority of its type + recency,
-- RAG and business boosts), chunks are sorted by priority, then timestamp,
-- then original index, and a greedy walk allocates every chunk that still
-- fits. Chunk types, budgets, boost tables and densities are rows.
--
-- Priorities are double precision, computed in a fixed order
-- (((base + recency) + rag) + business), as the seed's TypeScript does with
-- JavaScript numbers; token estimates are exact (numeric) ceilings.

-------------------------------------------------------------------------------
-- configuration (seed 02's JSON; kept when re-installing)
insert into memori.chunk_types (chunk_type, base_priority, category, description) values
  ('system_prompt',          200, 'system',  'The system prompt'),
  ('current_user_prompt',    190, 'prompt',  'The user''s current prompt'),
  ('critical_rag_document',  180, 'rag',     'A retrieved document marked critical'),
  ('tool_output',            170, 'tool',    'Output of a tool call'),
  ('tool_input',             160, 'tool',    'Input of a tool call'),
  ('chat_history_user',      150, 'history', 'An earlier user message'),
  ('chat_history_assistant', 140, 'history', 'An earlier assistant message'),
  ('rag_memory_commit',      130, 'rag',     'A retrieved memory'),
  ('rag_document_chunk',     120, 'rag',     'A retrieved document chunk'),
  ('rag_ebook_chunk',        110, 'rag',     'A retrieved e-book chunk'),
  ('rag_generic_chunk',      100, 'rag',     'Any other retrieved chunk')
on conflict (chunk_type) do nothing;

insert into memori.token_budgets (name, tokens, category, description) values
  ('maxOverall',      32000, null,       'Largest context window (CLI default for --tokens)'),
  ('maxHistory',       8000, 'history',  'Cap of chat history chunks (category budgets)'),
  ('maxBusinessData',  8000, 'business', 'Cap of chunk types of category business (none by default)'),
  ('maxClientData',    6000, 'client',   'Cap of chunk types of category client (none by default)'),
  ('maxRagResults',    4000, 'rag',      'Cap of RAG chunks (category budgets)'),
  ('maxSystemPrompt',  2000, 'system',   'Default reserve, and cap of system prompts (category budgets)')
on conflict (name) do nothing;

insert into memori.priority_boosts (factor, value, boost) values
  ('urgency', 'critical', 25), ('urgency', 'high', 15), ('urgency', 'medium', 5), ('urgency', 'low', 0),
  ('client_tier', 'enterprise', 12), ('client_tier', 'midMarket', 8), ('client_tier', 'smallBusiness', 4),
  ('client_tier', 'startup', 2),
  ('deal_status', 'negotiation', 18), ('deal_status', 'proposal', 12), ('deal_status', 'qualified', 8),
  ('deal_status', 'prospecting', 4), ('deal_status', 'closed', 1),
  ('relationship', 'mature', 15), ('relationship', 'established', 10), ('relationship', 'developing', 6),
  ('relationship', 'initial', 3)
on conflict (factor, value) do nothing;

insert into memori.settings (key, value, description) values
  ('budget.revenue_scale', '10000', 'Revenue impact per boost point (seed 02: $10K = 1 point).'),
  ('budget.revenue_max_boost', '20', 'Largest revenue impact boost.'),
  ('budget.business_max_boost', '20', 'Cap of the total business boost.'),
  ('budget.rag_boost_scale', '20', 'RAG boost = metadata.rag_match_metadata.relevance times this.'),
  ('budget.recency_linear_max', '20', 'Linear recency boost = max(0, this - age in days).'),
  ('budget.recency_max_boost', '15', 'Exponential recency boost at age 0 (recency_mode exponential).'),
  ('budget.recency_decay_rate', '0.05', 'Exponential recency decay per day.'),
  ('budget.recency_business_decay_rate', '0.02', 'Exponential recency decay per day of chunks with business metadata.'),
  ('budget.density_general', '3.8', 'Characters per token of general text.'),
  ('budget.density_business', '4.2', 'Characters per token of business prose.'),
  ('budget.density_code', '3.5', 'Characters per token of code.'),
  ('budget.summary_threshold', '500', 'Allocated chunks above this many tokens are listed in requires_summarization.'),
  ('budget.max_conflicts', '100', 'Most conflicts listed in a result (conflicts_count is always the total).'),
  ('budget.max_dropped_ids', '1000', 'Most dropped chunk ids listed in a result (chunks_dropped is always the total); p_options max_dropped_ids "all" lists every one.'),
  ('budget.max_chunks', '10000', 'Most chunks context_optimize accepts in one call.'),
  ('budget.max_stored_chunks', '100000', 'Most unexpired stored chunks context_optimize_stored ranks for one session.'),
  ('budget.max_content_bytes', '1048576', 'Largest stored chunk content, in bytes (UTF-8).'),
  ('budget.persist', 'true', 'Default of p_options.persist: record each optimisation and emit its events.')
on conflict (key) do nothing;

comment on table memori.chunk_types is 'Chunk types (seed 02): base priority and the category whose budget caps them.';
comment on table memori.token_budgets is 'Token budgets (seed 02): maxSystemPrompt is the default reserve; rows with a category cap it.';
comment on table memori.priority_boosts is 'Business boost points per factor and value (seed 02''s priorityBoosts).';
comment on table memori.context_chunks is 'Context chunks stored per session, ranked by context_optimize_stored from an index.';
comment on table memori.context_optimizations is 'One row per persisted optimisation: counts, tokens, metrics (seed 02).';

-------------------------------------------------------------------------------
-- _retention_context_chunks: stored chunks in the retention engine's shape
create or replace view memori._retention_context_chunks with (security_invoker = true) as
select c.id,
       c.user_id    as owner,
       c.session_id as category,
       c.chunk_type as kind,
       c.expires_at,
       false        as important
  from memori.context_chunks c;
comment on view memori._retention_context_chunks is 'memori.context_chunks as retention candidates: session as category, chunk type as kind.';

select memori.retention_register('context_chunks', 'memori.context_chunks', 'memori._retention_context_chunks', 'id',
                                 'Context chunks stored per session (seed 02)', 2, interval '30 days');

-------------------------------------------------------------------------------
-- _retention_context_optimizations: optimisation records in the engine's shape
create or replace view memori._retention_context_optimizations with (security_invoker = true) as
select o.id,
       o.user_id  as owner,
       o.session_id as category,
       o.source   as kind,
       o.expires_at,
       false      as important
  from memori.context_optimizations o;
comment on view memori._retention_context_optimizations is 'memori.context_optimizations as retention candidates: source as kind.';

select memori.retention_register('context_optimizations', 'memori.context_optimizations',
                                 'memori._retention_context_optimizations', 'id',
                                 'Persisted context optimisations (seed 02)', 1, interval '90 days');

-------------------------------------------------------------------------------
-- estimate_tokens: the seed's token estimate
-- p_text: the text to estimate; NULL gives NULL
-- p_content_type: 'general' (3.8 characters a token), 'business' (4.2), 'code' (3.5) or 'auto' (guessed from the
--   text); densities from memori.settings budget.density_*; any other value or NULL: PM004
create or replace function memori.estimate_tokens(p_text text, p_content_type text default 'general')
returns integer
as $func$
begin
  if p_content_type is null or p_content_type not in ('general', 'business', 'code', 'auto') then
    raise exception 'unknown content type %', coalesce(quote_literal(p_content_type), 'NULL')
      using errcode = 'PM004', hint = 'Use one of: general (3.8 chars/token), business (4.2), code (3.5), auto.';
  end if;
  return memori.token_estimate(p_text, p_content_type);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.estimate_tokens(text, text) is 'Estimated tokens: ceil(length / chars per token) of general (3.8), business (4.2) or code (3.5) text; auto guesses the kind.';

-------------------------------------------------------------------------------
-- business_boost: the seed's business relevance boost
-- p_metadata: a chunk's metadata: revenueImpact (a number, a point per budget.revenue_scale), urgency, clientTier,
--   dealStatus, relationship (values of memori.priority_boosts; snake_case keys too); other keys ignored; NULL: 0
create or replace function memori.business_boost(p_metadata jsonb) returns double precision
as $func$
  select memori._business_boost(p_metadata, memori._budget_config())
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.business_boost(jsonb) is 'min(revenue/10000, 20) + urgency + client tier + deal status + relationship boosts (memori.priority_boosts), the total capped at 20.';

-------------------------------------------------------------------------------
-- chunk_priority: the priority of one chunk
-- p_chunk: one chunk as in context_optimize's p_chunks (type, timestamp and metadata matter; id, content and
--   tokens do not); an unknown type: PM004, a malformed field: PM001
-- p_options: the context_optimize options that count here: prefer_recent (default true), recency_mode ('linear',
--   the default, or 'exponential'); the others are checked as there (PM001); NULL: {}
create or replace function memori.chunk_priority(p_chunk jsonb, p_now timestamptz default now(),
                                                 p_options jsonb default '{}'::jsonb)
returns double precision
as $func$
declare
  v_cfg  jsonb := memori._budget_config();
  v_opt  jsonb := memori._budget_options(p_options, v_cfg);
  v_base integer;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  select base_priority into v_base from memori.chunk_types where chunk_type = p_chunk->>'type';
  -- the id and the content do not matter here
  perform memori._check_chunks(jsonb_build_array(coalesce(p_chunk, 'null') || '{"id": 0, "tokens": 0}'), false, v_cfg);
  return (memori._chunk_score(v_base, p_chunk, p_now, v_opt, v_cfg)).priority;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.chunk_priority(jsonb, timestamptz, jsonb) is 'Base priority of the chunk''s type + recency boost + RAG boost (relevance x 20) + business boost.';

-------------------------------------------------------------------------------
-- context_optimize: the seed's token budget optimisation of a chunk list
-- (the result was jsonb before migration 0020: create or replace cannot change it)
-- p_chunks: JSON array of {"id" (unique string or number), "type" (of memori.chunk_types, else PM004), "content",
--   "tokens" (estimated when absent), "content_type", "timestamp", "metadata"}; over budget.max_chunks: PM003
-- p_available_tokens: the model's context window in tokens, >= 0 (else PM001); the budget is this minus the
--   reserve (reserve_tokens, at most this, else PM001)
-- p_options: JSON object (NULL: {}): reserve_tokens (default maxSystemPrompt), category_budgets (false), order
--   ('priority' | 'original'), recency_mode ('linear' | 'exponential'), prefer_recent (true), persist
--   (budget.persist), max_conflicts, max_dropped_ids (budget.max_dropped_ids; "all"), user_id, session_id, on_error
--   ('raise' | 'report'); others: PM001
drop function if exists memori.context_optimize(jsonb, integer, jsonb, timestamptz);
create or replace function memori.context_optimize(
  p_chunks           jsonb,
  p_available_tokens integer,
  p_options          jsonb default '{}'::jsonb,
  p_now              timestamptz default now()
) returns memori.optimization_result
as $func$
declare
  v_cfg    jsonb := memori._budget_config();
  v_opt    jsonb;
  v_n      integer;
  v_ids    jsonb[];
  v_types  text[];
  v_tokens integer[];
  v_prio   double precision[];
  v_orig   integer[];
  v_rec    double precision[];
  v_rev    double precision[];
  v_state  text;
  v_msg    text;
  v_detail text;
  v_hint   text;
begin
  -- (in the body, not the declarations: the exception block below catches what fails here)
  v_opt := memori._budget_options(p_options, v_cfg);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  v_n := memori._check_chunks(p_chunks, false, v_cfg);
  -- step 1: allocations (tokens given or estimated, priority); step 2: sort
  -- (sorted once in the subquery; the aggregates take its order)
  select array_agg(c.id), array_agg(c.chunk_type), array_agg(c.tokens), array_agg(c.priority),
         array_agg((c.n - 1)::integer), array_agg(c.recency), array_agg(c.revenue)
    into v_ids, v_types, v_tokens, v_prio, v_orig, v_rec, v_rev
    from (select t.e->'id' as id, t.e->>'type' as chunk_type, t.n,
                 coalesce((t.e->>'tokens')::integer,
                          memori.token_estimate(t.e->>'content', coalesce(t.e->>'content_type', 'general')))
                   as tokens,
                 s.priority, s.recency, s.revenue
            -- base priorities from the configuration (chunk_types, checked above), not a join: on Citus
            -- a query over the reference table runs on a worker, where _chunk_score may read no table
            from jsonb_array_elements(p_chunks) with ordinality t(e, n)
           cross join lateral memori._chunk_score((v_cfg->'bases'->>(t.e->>'type'))::integer, t.e, p_now, v_opt,
                                                  v_cfg) s
           order by s.priority desc, s.ts desc nulls last, t.n) c;
  -- steps 3 to 6: budget, greedy walk, result; then persist and events
  return memori._budget_record(
           memori._budget_result(v_ids, v_types, v_tokens, v_prio, v_orig, v_rec, v_rev, p_available_tokens,
                                 v_opt, v_cfg, null),
           'request', v_n, v_opt, v_opt->>'session_id', null, p_now);
exception when others then
  get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text, v_detail = pg_exception_detail,
                          v_hint = pg_exception_hint;
  if p_options->>'on_error' is distinct from 'report' then raise; end if;  -- as raised: sqlstate, hint, detail
  return memori._budget_failed(
           jsonb_build_object('source', 'request', 'session_id', p_options->>'session_id',
                              'user_id', p_options->>'user_id',
                              'chunks_count', case when jsonb_typeof(p_chunks) = 'array'
                                                   then jsonb_array_length(p_chunks) end),
           p_options, v_state, v_msg, v_detail, v_hint, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_optimize(jsonb, integer, jsonb, timestamptz) is 'Seed 02''s optimisation: prioritise chunks, sort, greedily fill available tokens minus the reserve; allocation, drops, conflicts, metrics. With {"on_error": "report"} a failure is recorded (context.optimization.failed) and returned in error_* instead of raised.';

-------------------------------------------------------------------------------
-- chunk_add_many: store chunks of a session (ranked later by context_optimize_stored)
-- p_chunks: JSON array of chunks as for context_optimize, but content required (at most budget.max_content_bytes
--   bytes, else PM003) and "id" a UUID or absent (generated); over budget.max_chunks: PM003
-- p_ttl: how long the chunks are kept (> 0, else PM001); NULL: their type's retention policy of context_chunks
create or replace function memori.chunk_add_many(
  p_session_id text,
  p_chunks     jsonb,
  p_user_id    text default null,
  p_ttl        interval default null,
  p_now        timestamptz default now()
) returns setof memori.chunk_added
as $func$
declare
  v_cfg  jsonb := memori._budget_config();
  v_opt  jsonb := memori._budget_options('{}', v_cfg);
  v_user text;
begin
  perform memori._check_identifier('session id', p_session_id);
  -- the one acting-user rule: p_user_id must be memori.user_id when that is set (PM040)
  v_user := memori._acting_user(p_user_id);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  if p_ttl is not null and p_ttl <= interval '0' then
    perform memori._invalid(format('ttl must be positive, got %s', p_ttl), 'Pass a TTL such as 1 day, or omit it to use the retention policy.');
  end if;
  perform memori._check_chunks(p_chunks, true, v_cfg);
  -- the metadata boosts are computed now, so that ranking never reads metadata
  return query
    insert into memori.context_chunks as c (id, session_id, user_id, chunk_type, content, tokens, ts, ts_us, metadata,
                                            rag_boost, business_boost, revenue_boost, business, created_at, expires_at)
    select coalesce((t.e->>'id')::uuid, gen_random_uuid()), p_session_id, v_user, t.e->>'type', t.e->>'content',
           coalesce((t.e->>'tokens')::integer,
                    memori.token_estimate(t.e->>'content', coalesce(t.e->>'content_type', 'general'))),
           s.ts, memori._epoch_us(s.ts), coalesce(nullif(t.e->'metadata', 'null'::jsonb), '{}'::jsonb), s.rag,
           s.business, s.revenue, s.is_business, p_now,
           p_now + coalesce(p_ttl, memori._budget_retention(t.e->>'type', 'context_chunks'))
      from jsonb_array_elements(p_chunks) with ordinality t(e, n)
     cross join lateral memori._chunk_score(0, t.e, p_now, v_opt, v_cfg) s
     order by t.n
    returning c.id, c.chunk_type, c.tokens, c.expires_at;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.chunk_add_many(text, jsonb, text, interval, timestamptz) is 'Store up to budget.max_chunks chunks of a session, in order (content required, tokens estimated when absent); they expire after p_ttl or their type''s retention.';

-------------------------------------------------------------------------------
-- chunk_clear: forget a session's stored chunks
-- p_session_id: the session of the user memori.user_id names; when memori.user_id is unset (an owner or
--   superuser), that session id of every user
create or replace function memori.chunk_clear(p_session_id text) returns integer
as $func$
declare
  v_user  text := nullif(current_setting('memori.user_id', true), '');
  v_count integer;
begin
  perform memori._check_identifier('session id', p_session_id);
  if v_user is not null then
    delete from memori.context_chunks k where k.user_id = v_user and k.session_id = p_session_id;
  else  -- an owner or superuser acting for no user: that session id of every user
    delete from memori.context_chunks k where k.session_id = p_session_id;
  end if;
  get diagnostics v_count = row_count;
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.chunk_clear(text) is 'Delete every stored chunk of a session; returns how many.';

-------------------------------------------------------------------------------
-- context_optimize_stored: the same optimisation over a session's stored chunks
-- p_session_id: the session of the options' user_id, else of memori.user_id; when neither is set (an owner or
--   superuser), of the first user (by user id) who has chunks in a session of that id
-- p_available_tokens: the model's context window in tokens, >= 0 (else PM001), as for context_optimize
-- p_options: as for context_optimize (NULL: {}); over budget.max_stored_chunks unexpired chunks: PM003
drop function if exists memori.context_optimize_stored(text, integer, jsonb, timestamptz);
create or replace function memori.context_optimize_stored(
  p_session_id       text,
  p_available_tokens integer,
  p_options          jsonb default '{}'::jsonb,
  p_now              timestamptz default now()
) returns memori.optimization_result
as $func$
declare
  v_cfg    jsonb := memori._budget_config();
  v_opt    jsonb;
  v_prefer boolean;
  v_exp    boolean;
  v_linear float8 := (v_cfg->>'recency_linear_max')::float8;
  v_max    float8 := (v_cfg->>'recency_max_boost')::float8;
  v_rate   float8 := (v_cfg->>'recency_decay_rate')::float8;
  v_slow   float8 := (v_cfg->>'recency_business_decay_rate')::float8;
  v_now_us bigint := memori._epoch_us(p_now);
  v_n      integer;
  v_ids    uuid[];
  v_types  text[];
  v_tokens integer[];
  v_prio   double precision[];
  v_orig   integer[];
  v_bases  jsonb := v_cfg->'bases';
  v_caps   boolean;
  v_min    integer;
  v_m      integer;
  v_k      bigint;
  v_limit  bigint;
  v_budget integer;
  v_alloc  integer[];
  v_left   bigint;
  v_owner  text;
  v_state  text;
  v_msg    text;
  v_detail text;
  v_hint   text;
begin
  -- (in the body, not the declarations: the exception block below catches what fails here)
  v_opt := memori._budget_options(p_options, v_cfg);
  v_prefer := (v_opt->>'prefer_recent')::boolean;
  v_exp := v_opt->>'recency_mode' = 'exponential';
  v_caps := (v_opt->>'category_budgets')::boolean;
  perform memori._check_identifier('session id', p_session_id);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  -- whose session: session ids are unique per user. The acting user (the
  -- option user_id, else memori.user_id); an owner or superuser giving
  -- neither reads the session's chunks of the first user who has one.
  v_owner := case when v_opt ? 'user_id' then memori._acting_user(v_opt->>'user_id')
                  else nullif(current_setting('memori.user_id', true), '') end;
  if v_owner is null then
    select min(k.user_id) into v_owner from memori.context_chunks k where k.session_id = p_session_id;
  end if;
  -- Steps 1 and 2 from the ranking index alone (an index-only scan in
  -- insertion order): tokens and the metadata boosts were stored with the
  -- chunk; the recency boost is _recency_boost's rule (_recency_curve,
  -- inlined), from the age in microseconds (integer arithmetic, one rounding).
  --
  -- The ranking is bounded (issue 21): a result lists at most max_dropped_ids
  -- dropped ids and max_conflicts conflicts, and no chunk is allocated once
  -- the budget left is below the smallest chunk, so only a prefix of the
  -- order is needed: the first v_k chunks (a top-N sort), checked by the walk
  -- over them, and more (four times as many, at last all) when the prefix
  -- does not decide the result. With invalid arguments everything is ranked
  -- and _budget_result raises the error as before.
  v_budget := p_available_tokens - (v_opt->>'reserve_tokens')::integer;
  v_k := memori._budget_max_dropped(v_opt, v_cfg)::bigint + (v_opt->>'max_conflicts')::bigint + 1024;
  v_k := case when v_budget >= 0 and v_k <= (v_cfg->>'max_stored_chunks')::bigint then v_k end;  -- else: all
  loop
    v_limit := case when v_k < v_n or (v_n is null and v_k is not null) then v_k end;
    -- (the type is carried only when category budgets need it: a narrower sort, no array of NULLs; the
    -- recency and revenue boosts, for the metrics of the allocated chunks only, _budget_result reads with
    -- their content)
    select array_agg(c.id), array_agg(c.chunk_type) filter (where v_caps), array_agg(c.tokens),
           array_agg(c.priority), array_agg(c.idx)
      into v_ids, v_types, v_tokens, v_prio, v_orig
      from (select c.id, case when v_caps then c.chunk_type end as chunk_type, c.tokens, p.priority, c.idx
              -- base priorities from the configuration object, not a join per row
              from (select k.id, k.chunk_type, (v_bases->>k.chunk_type)::integer as base_priority, k.tokens,
                           k.ts_us, k.rag_boost, k.business_boost, k.revenue_boost, k.business,
                           (row_number() over (order by k.seq) - 1)::integer as idx
                      from memori.context_chunks k
                     where k.user_id = v_owner and k.session_id = p_session_id
                       and (k.expires_at is null or k.expires_at > p_now)) c
             cross join lateral (
               select memori._recency_curve((v_now_us - c.ts_us)::float8 / 1000, c.business, v_prefer, v_exp,
                                            v_linear, v_max, v_rate, v_slow) as recency) r
             cross join lateral (select ((c.base_priority::float8 + r.recency) + c.rag_boost) + c.business_boost
                                        as priority) p
             order by p.priority desc, c.ts_us desc nulls last, c.idx
             limit v_limit) c;
    v_m := coalesce(cardinality(v_ids), 0);
    if v_limit is null or v_m < v_limit then  -- everything ranked
      v_n := v_m;
      exit;
    end if;
    if v_n is null then
      -- how many there are, and the smallest: one more pass over the index (cheaper than counting in
      -- the ranking statement, where a window over all rows keeps every row)
      select count(*)::integer, min(k.tokens) into v_n, v_min
        from memori.context_chunks k
       where k.user_id = v_owner and k.session_id = p_session_id and (k.expires_at is null or k.expires_at > p_now);
      v_n := greatest(v_n, v_m);  -- (a concurrent delete between the two statements)
    end if;
    exit when v_m >= v_n or v_n > (v_cfg->>'max_stored_chunks')::integer;
    -- the walk over the prefix is the walk's start over all; the prefix decides the result when nothing
    -- after it fits (the budget left is below the smallest chunk) and it holds the dropped ids and the
    -- conflicts the result lists
    v_alloc := memori._budget_walk(v_tokens,
                                   case when v_caps then array(select v_cfg->'categories'->>t from unnest(v_types) t) end,
                                   v_budget, case when v_caps then v_cfg->'caps' else '{}'::jsonb end);
    v_left := v_budget - coalesce((select sum(v_tokens[a]) from unnest(v_alloc) a), 0);
    exit when v_left < v_min
              and v_m - cardinality(v_alloc) >= memori._budget_max_dropped(v_opt, v_cfg)
              and (v_alloc[1] is null
                   or (v_m - v_alloc[1]) - (cardinality(v_alloc) - 1) >= (v_opt->>'max_conflicts')::integer);
    v_alloc := null;
    -- (with a chunk of 0 tokens something always fits: only all of the order decides)
    v_k := case when v_min > 0 then v_k * 4 end;
  end loop;
  if v_n > (v_cfg->>'max_stored_chunks')::integer then
    raise exception 'session % has % unexpired chunks; the limit is %', p_session_id, v_n, v_cfg->>'max_stored_chunks'
      using errcode = 'PM003',
            hint = 'Clear old chunks (memori.chunk_clear) or give them a TTL, or raise memori.settings budget.max_stored_chunks.';
  end if;
  return memori._budget_record(memori._budget_result(v_ids, v_types, v_tokens, v_prio, v_orig, null, null,
                                                     p_available_tokens, v_opt, v_cfg, v_owner, v_n, v_alloc, p_now),
                               'stored', v_n, v_opt, p_session_id, v_owner, p_now);
exception when others then
  get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text, v_detail = pg_exception_detail,
                          v_hint = pg_exception_hint;
  if p_options->>'on_error' is distinct from 'report' then raise; end if;  -- as raised: sqlstate, hint, detail
  return memori._budget_failed(
           jsonb_build_object('source', 'stored', 'session_id', p_session_id, 'user_id', p_options->>'user_id'),
           p_options, v_state, v_msg, v_detail, v_hint, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.context_optimize_stored(text, integer, jsonb, timestamptz) is 'context_optimize over a session''s unexpired stored chunks, ranked from an index; content is read for the allocated chunks only. {"on_error": "report"} as for context_optimize.';
