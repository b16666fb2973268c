-- pymemdb SQL API: the context window manager's private helpers (seed 02).
--
-- The public functions and the configuration are in sql/300-budget.sql. This
-- file is installed just before it ("300-budget-internals" sorts before
-- "300-budget.sql"): business_boost (language sql) resolves _business_boost
-- when it is created. The token estimator is memori.token_estimate in
-- sql/000-core.sql, the one estimator every concern calls.

-------------------------------------------------------------------------------
-- _budget_config: every budget setting and boost table as one JSON object
create or replace function memori._budget_config() returns jsonb
as $func$
  select jsonb_build_object(
           'revenue_scale', 10000, 'revenue_max_boost', 20, 'business_max_boost', 20, 'rag_boost_scale', 20,
           'recency_linear_max', 20, 'recency_max_boost', 15, 'recency_decay_rate', 0.05,
           'recency_business_decay_rate', 0.02, 'density_general', 3.8, 'density_business', 4.2,
           'density_code', 3.5, 'summary_threshold', 500, 'max_chunks', 10000, 'max_stored_chunks', 100000,
           'max_content_bytes', 1048576, 'persist', true, 'max_conflicts', 100, 'max_dropped_ids', 1000)
      || coalesce((select jsonb_object_agg(substr(s.key, 8), s.value) from memori.settings s
                    where s.key like 'budget.%'), '{}')
      || jsonb_build_object(
           -- boost values are matched case-insensitively and without underscores
           'boosts', coalesce((select jsonb_object_agg(b.factor, b.m)
                                 from (select factor, jsonb_object_agg(lower(replace(value, '_', '')), boost) as m
                                         from memori.priority_boosts group by factor) b), '{}'),
           'caps', coalesce((select jsonb_object_agg(t.category, jsonb_build_object('name', t.name, 'tokens', t.tokens))
                               from memori.token_budgets t where t.category is not null), '{}'),
           'bases', (select jsonb_object_agg(c.chunk_type, c.base_priority) from memori.chunk_types c),
           'categories', (select jsonb_object_agg(c.chunk_type, c.category) from memori.chunk_types c),
           'reserve', coalesce((select t.tokens from memori.token_budgets t where t.name = 'maxSystemPrompt'), 0),
           'max_overall', coalesce((select t.tokens from memori.token_budgets t where t.name = 'maxOverall'), 32000))
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_config() is 'The budget settings (defaults where a row is missing), boost tables, category caps and reserve as one JSON object.';

-------------------------------------------------------------------------------
-- _revenue_boost: min(revenue impact / scale, max), 0 without a numeric revenue
create or replace function memori._revenue_boost(p_metadata jsonb, p_cfg jsonb) returns double precision
as $func$
  select case when jsonb_typeof(r.v) = 'number'
              then least(r.v::text::float8 / (p_cfg->>'revenue_scale')::float8, (p_cfg->>'revenue_max_boost')::float8)
              else 0 end
    from (select coalesce(nullif(p_metadata->'revenueImpact', 'null'), p_metadata->'revenue_impact') as v) r
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._revenue_boost(jsonb, jsonb) is 'Revenue boost of chunk metadata: min(revenueImpact (or revenue_impact) / scale, max); 0 when not a number.';

-------------------------------------------------------------------------------
-- _business_boost: revenue + urgency + tier + deal + relationship, capped
create or replace function memori._business_boost(p_metadata jsonb, p_cfg jsonb) returns double precision
as $func$
  select least(
           (((memori._revenue_boost(p_metadata, p_cfg)
              + coalesce((p_cfg #>> array['boosts', 'urgency', lower(replace(p_metadata->>'urgency', '_', ''))])::float8, 0))
              + coalesce((p_cfg #>> array['boosts', 'client_tier',
                                          lower(replace(coalesce(p_metadata->>'clientTier', p_metadata->>'client_tier'),
                                                        '_', ''))])::float8, 0))
              + coalesce((p_cfg #>> array['boosts', 'deal_status',
                                          lower(replace(coalesce(p_metadata->>'dealStatus', p_metadata->>'deal_status'),
                                                        '_', ''))])::float8, 0))
              + coalesce((p_cfg #>> array['boosts', 'relationship',
                                          lower(replace(coalesce(p_metadata->>'relationship',
                                                                 p_metadata->>'relationship_stage'), '_', ''))])::float8, 0),
           (p_cfg->>'business_max_boost')::float8)
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._business_boost(jsonb, jsonb) is 'Business boost of chunk metadata with a given configuration (see business_boost).';

-------------------------------------------------------------------------------
-- _is_business: does chunk metadata carry a business field?
create or replace function memori._is_business(p_metadata jsonb) returns boolean
as $func$
  select coalesce(jsonb_typeof(p_metadata) = 'object'
                  and p_metadata ?| array['revenueImpact', 'revenue_impact', 'urgency', 'clientTier', 'client_tier',
                                          'dealStatus', 'deal_status', 'relationship', 'relationship_stage'], false)
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._is_business(jsonb) is 'True when chunk metadata has a business field: such chunks decay slower (recency_mode exponential).';

-------------------------------------------------------------------------------
-- _recency_curve: the recency boost of an age, from options and configuration already read
-- The one recency rule: _recency_boost (chunks given in the call), the stored
-- ranking of context_optimize_stored and the stored winners' metrics of
-- _budget_result use it. Linear (the seed's workflow): max(0, linear_max -
-- age in days); a timestamp in the future counts as age 0. Exponential:
-- max_boost * exp(-rate * days), with the slower rate for business chunks. No
-- timestamp (age NULL), or prefer_recent false: no boost. A SQL-standard body
-- without SET, so PostgreSQL inlines it into the ranking statement: a function
-- with a pinned search_path is not inlined and would run once per chunk.
create or replace function memori._recency_curve(
  p_age_ms   double precision,  -- (now - timestamp) in milliseconds; NULL: no timestamp
  p_business boolean,           -- business metadata: the slower exponential rate
  p_prefer   boolean,           -- option prefer_recent
  p_exp      boolean,           -- option recency_mode is 'exponential'
  p_linear   double precision,  -- budget.recency_linear_max
  p_max      double precision,  -- budget.recency_max_boost
  p_rate     double precision,  -- budget.recency_decay_rate
  p_slow     double precision   -- budget.recency_business_decay_rate
) returns double precision
language sql immutable
begin atomic
  select case
    when p_age_ms is null or not p_prefer then 0::pg_catalog.float8
    when p_exp then p_max * pg_catalog.exp(-(case when p_business then p_slow else p_rate end)
                                           * greatest(p_age_ms / 86400000::pg_catalog.float8, 0::pg_catalog.float8))
    else greatest(0::pg_catalog.float8, least(p_linear, p_linear - p_age_ms / 86400000::pg_catalog.float8))
  end;
end;
comment on function memori._recency_curve(double precision, boolean, boolean, boolean, double precision, double precision, double precision, double precision) is 'Recency boost of an age in milliseconds: linear max(0, linear_max - days) or exponential max_boost * exp(-rate * days); inlined into the ranking.';

-------------------------------------------------------------------------------
-- _recency_boost: the recency boost of a chunk of a given age
create or replace function memori._recency_boost(p_age_ms double precision, p_business boolean, p_opt jsonb, p_cfg jsonb)
returns double precision
as $func$
  -- _recency_curve with the options and configuration read from their objects
  select memori._recency_curve(p_age_ms, p_business, (p_opt->>'prefer_recent')::boolean,
                               p_opt->>'recency_mode' = 'exponential',
                               (p_cfg->>'recency_linear_max')::float8, (p_cfg->>'recency_max_boost')::float8,
                               (p_cfg->>'recency_decay_rate')::float8, (p_cfg->>'recency_business_decay_rate')::float8)
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._recency_boost(double precision, boolean, jsonb, jsonb) is 'Recency boost for an age in milliseconds: linear max(0, 20 - days) or exponential decay (p_opt recency_mode).';

-------------------------------------------------------------------------------
-- _epoch_us: a timestamp as microseconds since 1970 (exact)
create or replace function memori._epoch_us(p_ts timestamptz) returns bigint
as $func$
  select (extract(epoch from p_ts) * 1000000)::bigint
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._epoch_us(timestamptz) is 'Microseconds since 1970-01-01 UTC, exactly (stored chunks keep it in ts_us).';

-------------------------------------------------------------------------------
-- _age_ms: milliseconds from a chunk's timestamp to now, as the seed computes it
create or replace function memori._age_ms(p_ts timestamptz, p_now timestamptz) returns double precision
as $func$
  -- exact microseconds, then one rounding to double precision, / 1000
  select (memori._epoch_us(p_now) - memori._epoch_us(p_ts))::float8 / 1000
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._age_ms(timestamptz, timestamptz) is 'Age in milliseconds (now - timestamp): exact microseconds rounded once to double precision, / 1000.';
-------------------------------------------------------------------------------
-- _chunk_score: the boosts and priority of one (valid) chunk
create or replace function memori._chunk_score(p_base integer, p_chunk jsonb, p_now timestamptz, p_opt jsonb, p_cfg jsonb)
returns memori.chunk_score
as $func$
  select x.ts, r.recency, x.rag, x.business, x.revenue, x.is_business,
         ((p_base::float8 + r.recency) + x.rag) + x.business
    from (select (p_chunk->>'timestamp')::timestamptz as ts,
                 case when jsonb_typeof(p_chunk #> '{metadata,rag_match_metadata,relevance}') = 'number'
                      then (p_chunk #>> '{metadata,rag_match_metadata,relevance}')::float8
                           * (p_cfg->>'rag_boost_scale')::float8
                      else 0 end as rag,
                 memori._business_boost(p_chunk->'metadata', p_cfg) as business,
                 memori._revenue_boost(p_chunk->'metadata', p_cfg) as revenue,
                 memori._is_business(p_chunk->'metadata') as is_business) x
   cross join lateral (select memori._recency_boost(memori._age_ms(x.ts, p_now), x.is_business, p_opt, p_cfg)
                              as recency) r
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._chunk_score(integer, jsonb, timestamptz, jsonb, jsonb) is 'Timestamp, recency, RAG and business boosts and the priority ((base + recency) + rag) + business of one chunk.';

-------------------------------------------------------------------------------
-- _budget_options: p_options checked, with defaults filled in
create or replace function memori._budget_options(p_options jsonb, p_cfg jsonb) returns jsonb
as $func$
declare
  v_opt     jsonb := coalesce(p_options, '{}'::jsonb);
  v_unknown text;
begin
  if jsonb_typeof(v_opt) <> 'object' then
    perform memori._invalid('options must be a JSON object', 'Pass p_options such as {"reserve_tokens": 0}.');
  end if;
  select string_agg(k, ', ') into v_unknown from jsonb_object_keys(v_opt) k
   where k not in ('reserve_tokens', 'category_budgets', 'order', 'recency_mode', 'prefer_recent', 'persist',
                   'user_id', 'session_id', 'max_conflicts', 'max_dropped_ids', 'on_error');
  if v_unknown is not null then
    perform memori._invalid(format('unknown option(s) %s', v_unknown),
                            'Options: reserve_tokens, category_budgets, order, recency_mode, prefer_recent, persist, max_conflicts, max_dropped_ids, user_id, session_id, on_error.');
  end if;
  v_opt := jsonb_strip_nulls(v_opt);
  if v_opt ? 'reserve_tokens' and (jsonb_typeof(v_opt->'reserve_tokens') <> 'number'
                                   or (v_opt->>'reserve_tokens')::numeric <> trunc((v_opt->>'reserve_tokens')::numeric)
                                   or (v_opt->>'reserve_tokens')::numeric not between 0 and 2147483647) then
    perform memori._invalid(format('reserve_tokens must be a whole number >= 0, got %s', v_opt->'reserve_tokens'),
                            'Pass the tokens to keep free, e.g. {"reserve_tokens": 0}; omit it to reserve maxSystemPrompt.');
  end if;
  if v_opt ? 'max_conflicts' and (jsonb_typeof(v_opt->'max_conflicts') <> 'number'
                                  or (v_opt->>'max_conflicts')::numeric <> trunc((v_opt->>'max_conflicts')::numeric)
                                  or (v_opt->>'max_conflicts')::numeric not between 0 and 2147483647) then
    perform memori._invalid(format('max_conflicts must be a whole number >= 0, got %s', v_opt->'max_conflicts'),
                            'Pass how many conflicts to list, e.g. {"max_conflicts": 10}; conflicts_count is always the total.');
  end if;
  if v_opt ? 'max_dropped_ids' and v_opt->'max_dropped_ids' is distinct from '"all"'::jsonb
     and (jsonb_typeof(v_opt->'max_dropped_ids') <> 'number'
          or (v_opt->>'max_dropped_ids')::numeric <> trunc((v_opt->>'max_dropped_ids')::numeric)
          or (v_opt->>'max_dropped_ids')::numeric not between 0 and 2147483647) then
    perform memori._invalid(format('max_dropped_ids must be a whole number >= 0 or "all", got %s',
                                   v_opt->'max_dropped_ids'),
                            'Pass how many dropped ids to list, e.g. {"max_dropped_ids": 50}, or {"max_dropped_ids": "all"}; chunks_dropped is always the total.');
  end if;
  if exists (select 1 from unnest(array['category_budgets', 'prefer_recent', 'persist']) k
              where v_opt ? k and jsonb_typeof(v_opt->k) <> 'boolean') then
    perform memori._invalid('category_budgets, prefer_recent and persist must be true or false',
                            'Pass JSON booleans, e.g. {"persist": false}.');
  end if;
  if coalesce(v_opt->>'order', 'priority') not in ('priority', 'original') then
    perform memori._invalid(format('order must be priority or original, got %s', v_opt->'order'),
                            'Pass {"order": "original"} to get the chunks in input order.');
  end if;
  if coalesce(v_opt->>'on_error', 'raise') not in ('raise', 'report') then
    perform memori._invalid(format('on_error must be raise or report, got %s', v_opt->'on_error'),
                            'report: the failure is recorded (context.optimization.failed) and returned in the error_* columns.');
  end if;
  if coalesce(v_opt->>'recency_mode', 'linear') not in ('linear', 'exponential') then
    perform memori._invalid(format('recency_mode must be linear or exponential, got %s', v_opt->'recency_mode'),
                            'linear: max(0, 20 - age in days) as the seed''s workflow; exponential: the configured decay.');
  end if;
  if exists (select 1 from unnest(array['user_id', 'session_id']) k
              where v_opt ? k and (jsonb_typeof(v_opt->k) <> 'string'
                                   or memori._identifier_problem(k, v_opt->>k) is not null)) then
    perform memori._invalid('user_id and session_id must be non-empty strings without control characters',
                            'Pass ids such as {"user_id": "alice", "session_id": "s1"}.');
  end if;
  return jsonb_build_object('reserve_tokens', p_cfg->'reserve', 'category_budgets', false, 'order', 'priority',
                            'recency_mode', 'linear', 'prefer_recent', true, 'persist', p_cfg->'persist',
                            'max_conflicts', p_cfg->'max_conflicts')
         || v_opt;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_options(jsonb, jsonb) is 'Validate context_optimize options (PM001 for unknown or malformed ones) and fill in the defaults.';

-------------------------------------------------------------------------------
-- _chunk_problem: the first rule a chunk breaks ({sqlstate, message, hint}), NULL when valid
create or replace function memori._chunk_problem(p_chunk jsonb, p_known_type boolean, p_stored boolean,
                                                 p_max_bytes integer)
returns text[]
as $func$
  select case
    when jsonb_typeof(p_chunk) is distinct from 'object' then
      array['PM001', 'not a JSON object', 'Each chunk is {"id": ..., "type": ..., "content": ..., "tokens": ...}.']
    when not p_stored and (jsonb_typeof(p_chunk->'id') is null or jsonb_typeof(p_chunk->'id') not in ('string', 'number')
                           or btrim(p_chunk->>'id') = '') then
      array['PM001', 'id must be a non-empty string or a number', 'Give every chunk a unique id.']
    when p_stored and coalesce(jsonb_typeof(p_chunk->'id'), 'null') <> 'null'
         and (jsonb_typeof(p_chunk->'id') <> 'string'
              or p_chunk->>'id' !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$') then
      array['PM001', 'a stored chunk''s id must be a UUID', 'Omit id to have one generated.']
    when not p_known_type then
      array['PM004', format('unknown chunk type %s', coalesce(quote_literal(p_chunk->>'type'), 'NULL')), null]
    when coalesce(jsonb_typeof(p_chunk->'content'), 'null') not in ('string', 'null') then
      array['PM001', 'content must be a string', 'Pass the chunk''s text as a JSON string.']
    when coalesce(jsonb_typeof(p_chunk->'tokens'), 'null') <> 'null'
         and (jsonb_typeof(p_chunk->'tokens') <> 'number'
              or (p_chunk->>'tokens')::numeric <> trunc((p_chunk->>'tokens')::numeric)
              or (p_chunk->>'tokens')::numeric not between 0 and 2147483647) then
      array['PM001', format('tokens must be a whole number >= 0, got %s', p_chunk->'tokens'),
            'Omit tokens to have them estimated from the content.']
    when coalesce(jsonb_typeof(p_chunk->'content'), 'null') = 'null'
         and (p_stored or coalesce(jsonb_typeof(p_chunk->'tokens'), 'null') = 'null') then
      case when p_stored then array['PM001', 'content is missing', 'A stored chunk needs its content.']
           else array['PM001', 'content and tokens are both missing', 'Pass the content, the token count, or both.'] end
    when p_stored and octet_length(p_chunk->>'content') > p_max_bytes then
      memori._too_large('content', octet_length(p_chunk->>'content'), p_max_bytes,
                        'Store smaller chunks, or raise memori.settings budget.max_content_bytes.')
    when coalesce(jsonb_typeof(p_chunk->'timestamp'), 'null') not in ('string', 'null') then
      array['PM001', 'timestamp must be an ISO 8601 string', 'Pass a time such as 2026-11-22T09:00:00Z, or omit it.']
    when coalesce(jsonb_typeof(p_chunk->'metadata'), 'null') not in ('object', 'null') then
      array['PM001', 'metadata must be a JSON object', 'Pass metadata as {"key": value}, or omit it.']
    when coalesce(p_chunk->>'content_type', 'general') not in ('general', 'business', 'code', 'auto') then
      array['PM004', format('unknown content type %s', quote_literal(p_chunk->>'content_type')),
            'Use one of: general (3.8 chars/token), business (4.2), code (3.5), auto.']
  end
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._chunk_problem(jsonb, boolean, boolean, integer) is 'The rules of a chunk: {sqlstate, message, hint} of the first one it breaks, NULL when valid.';

-------------------------------------------------------------------------------
-- _check_chunks: a JSON array of valid chunks, or an error naming the first bad one
create or replace function memori._check_chunks(p_chunks jsonb, p_stored boolean, p_cfg jsonb) returns integer
as $func$
declare
  v_n   integer;
  v_max integer := (p_cfg->>'max_chunks')::integer;
  v_bad record;
begin
  if p_chunks is null or jsonb_typeof(p_chunks) <> 'array' then
    perform memori._invalid(format('chunks must be a JSON array, got %s', coalesce(jsonb_typeof(p_chunks), 'NULL')),
                            'Pass [{"id": "a", "type": "system_prompt", "content": "..."}, ...].');
  end if;
  v_n := jsonb_array_length(p_chunks);
  if v_n > v_max then
    raise exception '% chunks in one call; the limit is %', v_n, v_max
      using errcode = 'PM003',
            hint = 'Store the chunks (memori.chunk_add_many) and use context_optimize_stored, or raise memori.settings budget.max_chunks.';
  end if;
  -- (the known types from the configuration's bases, not a join: on Citus chunk_types is a reference
  -- table, and a query over it runs on a worker, where these functions may read no other table)
  select t.n - 1 as idx, memori._chunk_problem(t.e, (p_cfg->'bases') ? (t.e->>'type'), p_stored,
                                               (p_cfg->>'max_content_bytes')::integer) as problem
    into v_bad
    from jsonb_array_elements(p_chunks) with ordinality t(e, n)
   where memori._chunk_problem(t.e, (p_cfg->'bases') ? (t.e->>'type'), p_stored,
                               (p_cfg->>'max_content_bytes')::integer) is not null
   order by t.n
   limit 1;
  if found then
    raise exception 'chunks[%]: %', v_bad.idx, v_bad.problem[2]
      using errcode = v_bad.problem[1],
            hint = coalesce(v_bad.problem[3],
                            'Use one of: ' || (select string_agg(chunk_type, ', ' order by base_priority desc, chunk_type)
                                                 from memori.chunk_types) || '.');
  end if;
  select x.id into v_bad
    from (select t.e->'id' as id from jsonb_array_elements(p_chunks) t(e)
           where coalesce(t.e->'id', 'null') <> 'null') x
   group by x.id having count(*) > 1
   limit 1;
  if found then
    perform memori._invalid(format('chunk id %s appears more than once', v_bad.id), 'Give every chunk a unique id.');
  end if;
  return v_n;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._check_chunks(jsonb, boolean, jsonb) is 'Validate a chunk list (array, at most budget.max_chunks, each chunk valid, ids unique); returns its length.';

-------------------------------------------------------------------------------
-- _budget_max_dropped: how many dropped ids a result lists (option max_dropped_ids, else the setting)
create or replace function memori._budget_max_dropped(p_opt jsonb, p_cfg jsonb) returns integer
as $func$
  select case when v = '"all"'::jsonb then 2147483647 else (v #>> '{}')::integer end
    from coalesce(p_opt->'max_dropped_ids', p_cfg->'max_dropped_ids') v
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_max_dropped(jsonb, jsonb) is 'How many dropped ids a result lists: the option max_dropped_ids ("all": every one), else budget.max_dropped_ids.';

-------------------------------------------------------------------------------
-- _budget_walk: the greedy selection over chunks in priority order
create or replace function memori._budget_walk(p_tokens integer[], p_categories text[], p_budget integer, p_caps jsonb)
returns integer[]
as $func$
-- Walks the chunks in order: a chunk that fits (used + tokens <= budget, and
-- its category's used + tokens <= the category cap when caps are given) is
-- allocated, any other is dropped and the walk goes on. Returns the
-- positions (1-based) of the allocated chunks.
declare
  n       integer := coalesce(cardinality(p_tokens), 0);
  v_used  bigint := 0;
  v_alloc integer[] := '{}';
  v_left  bigint;
  v_min   integer;
  j       integer;
  v_cat   text;
  v_cap   jsonb;
  v_cused jsonb := '{}';
  i       integer := 1;
begin
  if p_caps is null or p_caps = '{}'::jsonb then
    -- Without caps the allocated chunks are a prefix (while everything fits)
    -- and then, from the first drop on, the chunks that fit what is left.
    while i <= n and v_used + p_tokens[i] <= p_budget loop
      v_used := v_used + p_tokens[i];
      i := i + 1;
    end loop;
    v_alloc := case when i > 1 then array(select generate_series(1, i - 1)) else '{}' end;
    v_left := p_budget - v_used;
    if i > n or v_left < 0 then
      return v_alloc;
    end if;
    -- the walk can stop once nothing left is small enough to fit
    select min(t) into v_min from unnest(p_tokens[i + 1:n]) t;
    for j in i + 1 .. n loop
      exit when v_left < v_min;
      if p_tokens[j] <= v_left then
        v_alloc := v_alloc || j;
        v_left := v_left - p_tokens[j];
      end if;
    end loop;
    return v_alloc;
  end if;
  for i in 1 .. n loop
    v_cat := p_categories[i];
    v_cap := p_caps->v_cat;
    if v_used + p_tokens[i] <= p_budget
       and (v_cap is null or coalesce((v_cused->>v_cat)::bigint, 0) + p_tokens[i] <= (v_cap->>'tokens')::bigint) then
      v_alloc := v_alloc || i;
      v_used := v_used + p_tokens[i];
      if v_cap is not null then
        v_cused := v_cused || jsonb_build_object(v_cat, coalesce((v_cused->>v_cat)::bigint, 0) + p_tokens[i]);
      end if;
    end if;
  end loop;
  return v_alloc;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_walk(integer[], text[], integer, jsonb) is 'Greedy budget walk over chunks in priority order (optional per-category caps); positions of the allocated chunks.';

-------------------------------------------------------------------------------
-- _budget_result: walk, then the seed's result as memori.optimization_result
-- (before issue 21's second pass _budget_resolve built it as one JSON object, which the callers turned into the
-- row again: every winner's content copied twice more. p_total and p_alloc: a prefix of the ranking may be passed)
create or replace function memori._budget_result(
  p_ids        anyarray,  -- jsonb[] (given ids) or uuid[] (stored chunks)
  p_types      text[],
  p_tokens     integer[],
  p_priorities double precision[],
  p_original   integer[],
  p_recency    double precision[],  -- (these two: chunks given in the call; NULL for stored chunks, whose
  p_revenue    double precision[],  -- boosts are read with their content)
  p_available  integer,
  p_opt        jsonb,
  p_cfg        jsonb,
  p_stored     text,      -- the stored chunks' user (NULL: chunks given in the call)
  p_total      integer default null,  -- how many chunks were ranked; NULL: the arrays' length
  p_alloc      integer[] default null, -- the walk's result over the arrays when the caller has it
  p_now        timestamptz default null -- stored chunks: the time their recency boost is computed for
) returns memori.optimization_result
as $func$
-- The arrays describe the chunks in priority order (position i of each is
-- the i-th chunk). Only allocated chunks and listed conflicts are looked at
-- one by one; the dropped ids are one pass over the ids.
--
-- The arrays may be a prefix of the ranking (p_total chunks in all) when the
-- caller knows that no chunk after it is allocated, and that the prefix holds
-- the first max_dropped_ids dropped chunks and the first max_conflicts
-- conflicts (context_optimize_stored); the counts are of all p_total.
declare
  v_reserve   integer := (p_opt->>'reserve_tokens')::integer;
  v_caps      jsonb := case when (p_opt->>'category_budgets')::boolean then p_cfg->'caps' else '{}'::jsonb end;
  v_max_conf  integer := (p_opt->>'max_conflicts')::integer;
  v_max_drop  integer := memori._budget_max_dropped(p_opt, p_cfg);
  v_original  boolean := p_opt->>'order' = 'original';
  v_summary_t integer := (p_cfg->>'summary_threshold')::integer;
  -- stored chunks' recency boost, as context_optimize_stored ranks them
  v_prefer    boolean := (p_opt->>'prefer_recent')::boolean;
  v_exp       boolean := p_opt->>'recency_mode' = 'exponential';
  v_linear    float8 := (p_cfg->>'recency_linear_max')::float8;
  v_max       float8 := (p_cfg->>'recency_max_boost')::float8;
  v_rate      float8 := (p_cfg->>'recency_decay_rate')::float8;
  v_slow      float8 := (p_cfg->>'recency_business_decay_rate')::float8;
  v_now_us    bigint := case when p_stored is not null then memori._epoch_us(p_now) end;
  v_m         integer := coalesce(cardinality(p_tokens), 0);  -- the chunks in the arrays
  v_n         integer := coalesce(p_total, cardinality(p_tokens), 0);  -- the chunks ranked
  v_budget    integer;
  v_alloc     integer[];
  v_mask      boolean[];
  v_cats      text[];
  v_first     integer;
  v_r         memori.optimization_result;
  v_c1        integer[] := '{}';
  v_c2        integer[] := '{}';
  v_why       text[] := '{}';
  v_last      integer;
  v_before    bigint := 0;
  j           integer := 1;
  p           integer;
begin
  if p_available is null or p_available < 0 then
    perform memori._invalid(format('available tokens must be a whole number >= 0, got %s',
                                   coalesce(p_available::text, 'NULL')),
                            'Pass the tokens of the model''s context window, e.g. 32000.');
  end if;
  if v_reserve > p_available then
    perform memori._invalid(format('the reserve of %s tokens is more than the %s available', v_reserve, p_available),
                            'Pass {"reserve_tokens": N} with N <= the available tokens (0 allowed); the default reserve is maxSystemPrompt.');
  end if;
  v_budget := p_available - v_reserve;
  if v_caps <> '{}'::jsonb then
    v_cats := array(select p_cfg->'categories'->>t from unnest(p_types) t);
  end if;
  v_alloc := coalesce(p_alloc, memori._budget_walk(p_tokens, v_cats, v_budget, v_caps));
  v_first := v_alloc[1];

  -- Conflicts: each drop after the first allocation, with the last chunk
  -- allocated before it; the first max_conflicts of them are listed.
  if v_first is not null then
    p := v_first;
    while p < v_m and cardinality(v_c2) < v_max_conf loop
      -- move past the allocated chunks up to p
      while j <= cardinality(v_alloc) and v_alloc[j] <= p loop
        v_last := v_alloc[j];
        v_before := v_before + p_tokens[v_last];
        j := j + 1;
      end loop;
      p := p + 1;
      if j <= cardinality(v_alloc) and v_alloc[j] = p then
        continue;
      end if;
      v_c1 := v_c1 || v_last;
      v_c2 := v_c2 || p;
      v_why := v_why || case when v_before + p_tokens[p] > v_budget then 'available'
                             else v_caps #>> array[v_cats[p], 'name'] end;
    end loop;
  end if;

  -- The allocated chunks: token spans in output order, metrics in selection
  -- order. Each chunk's object is built once, from a row (to_jsonb of the
  -- rows' array), not as an object per chunk gathered again by jsonb_agg.
  if p_stored is null then
    select coalesce(to_jsonb(array_agg(c order by s.out_key)), '[]')
      into v_r.optimized_chunks
      from (select x.pos, case when v_original then p_original[x.pos] else x.pos end as out_key,
                   sum(p_tokens[x.pos]) over (order by case when v_original then p_original[x.pos] else x.pos end)
                     - p_tokens[x.pos] as span_start
              from unnest(v_alloc) x(pos)) s
     cross join lateral (select p_ids[s.pos] as id, p_types[s.pos] as type, p_tokens[s.pos] as tokens,
                                p_priorities[s.pos] as priority,
                                array[s.span_start, s.span_start + p_tokens[s.pos]] as token_span,
                                p_original[s.pos] as original_index) c;
    select jsonb_build_object('prioritization_score', coalesce(avg(p_priorities[x.pos] order by x.pos), 0),
                              'business_relevance_boost', coalesce(avg(p_revenue[x.pos] order by x.pos), 0),
                              'recency_boost', coalesce(avg(p_recency[x.pos] order by x.pos), 0))
      into v_r.optimization_metrics
      from unnest(v_alloc) x(pos);
  else
    -- Stored chunks: the winners' type (the ranking carries it only for category budgets), content, revenue
    -- boost and recency boost, and only theirs, in one primary key probe each (limit 1: never the whole
    -- table scanned and hashed, as the planner chose for a join over a small table). The recency boost is
    -- context_optimize_stored's (_recency_curve), on the same values: the same double precision numbers,
    -- without an array of all candidates' boosts (p_recency and p_revenue are NULL here).
    select coalesce(to_jsonb(array_agg(c order by s.out_key)), '[]'),
           jsonb_build_object('prioritization_score', coalesce(avg(s.priority order by s.pos), 0),
                              'business_relevance_boost', coalesce(avg(s.revenue order by s.pos), 0),
                              'recency_boost', coalesce(avg(s.recency order by s.pos), 0))
      into v_r.optimized_chunks, v_r.optimization_metrics
      from (select x.pos, case when v_original then p_original[x.pos] else x.pos end as out_key,
                   sum(p_tokens[x.pos]) over (order by case when v_original then p_original[x.pos] else x.pos end)
                     - p_tokens[x.pos] as span_start,
                   p_priorities[x.pos] as priority, k.chunk_type, k.content, k.revenue_boost as revenue, k.recency
              from unnest(v_alloc) x(pos)
              left join lateral (
                select k.chunk_type, k.content, k.revenue_boost,
                       memori._recency_curve((v_now_us - k.ts_us)::float8 / 1000, k.business, v_prefer, v_exp,
                                             v_linear, v_max, v_rate, v_slow) as recency
                  from memori.context_chunks k
                 where k.user_id = p_stored and k.id = p_ids[x.pos]::text::uuid
                 limit 1) k on true) s
     cross join lateral (select p_ids[s.pos] as id, coalesce(p_types[s.pos], s.chunk_type) as type,
                                p_tokens[s.pos] as tokens, s.priority,
                                array[s.span_start, s.span_start + p_tokens[s.pos]] as token_span,
                                p_original[s.pos] as original_index, s.content) c;
  end if;
  select coalesce(sum(p_tokens[x.pos]), 0),
         coalesce(to_jsonb(array_agg(p_ids[x.pos] order by x.pos) filter (where p_tokens[x.pos] > v_summary_t)),
                  '[]')
    into v_r.total_tokens_used, v_r.requires_summarization
    from unnest(v_alloc) x(pos);

  v_mask := array_fill(false, array[v_m]);
  foreach p in array v_alloc loop
    v_mask[p] := true;
  end loop;
  -- the first max_dropped_ids, in array order: the walk's (chunks_dropped counts them all)
  v_r.dropped_chunk_ids := to_jsonb(array(select u.id from unnest(p_ids, v_mask) u(id, allocated)
                                           where not u.allocated limit v_max_drop));
  v_r.tokens_remaining := v_budget - v_r.total_tokens_used;
  v_r.tokens_available := p_available;
  v_r.reserved_tokens := v_reserve;
  v_r.chunks_dropped := v_n - cardinality(v_alloc);
  -- (as the chunks: the objects built once, from rows)
  v_r.conflicts := coalesce((select to_jsonb(array_agg(r order by c.k))
                               from unnest(v_c1, v_c2, v_why) with ordinality c(c1, c2, why, k)
                              cross join lateral (select p_ids[c.c1] as chunk1, p_ids[c.c2] as chunk2,
                                                         'budget_exceeded' as conflict_type,
                                                         'keep_chunk1' as resolution, c.why as budget) r), '[]');
  v_r.conflicts_count := case when v_first is null then 0 else (v_n - v_first) - (cardinality(v_alloc) - 1) end;
  -- optimization_id: set by _budget_record when the optimisation is persisted
  return v_r;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_result(anyarray, text[], integer[], double precision[], integer[], double precision[], double precision[], integer, jsonb, jsonb, text, integer, integer[], timestamptz) is 'Resolve the budget over chunks in priority order (parallel arrays): allocation, drops, conflicts, spans, metrics as the seed''s result (memori.optimization_result).';
-------------------------------------------------------------------------------
-- _budget_record: persist an optimisation and emit its events
create or replace function memori._budget_record(p_result memori.optimization_result, p_source text,
                                                 p_chunks_count integer, p_opt jsonb, p_session_id text,
                                                 p_user_id text, p_now timestamptz)
returns memori.optimization_result
as $func$
declare
  -- the one acting-user rule when a user is given; else memori.user_id, else the stored chunks' owner
  v_user      text := case when p_opt ? 'user_id' then memori._acting_user(p_opt->>'user_id')
                           else coalesce(nullif(current_setting('memori.user_id', true), ''), p_user_id) end;
  v_allocated integer;
  v_conflicts integer;
begin
  if not (p_opt->>'persist')::boolean then
    return p_result;
  end if;
  if v_user is null then
    perform memori._invalid('no user for the optimisation record',
                            'Pass {"user_id": ...} in p_options, SET memori.user_id, or {"persist": false}.');
  end if;
  v_allocated := jsonb_array_length(p_result.optimized_chunks);
  v_conflicts := jsonb_array_length(p_result.conflicts);
  perform memori._event_emit('context.optimization.started',
            jsonb_build_object('source', p_source, 'user_id', v_user, 'session_id', p_session_id,
                               'chunks_count', p_chunks_count, 'tokens_available', p_result.tokens_available),
            p_now);
  insert into memori.context_optimizations (user_id, session_id, source, chunks_count, optimized_count, dropped_count,
                                            conflicts_count, tokens_used, tokens_available, reserved_tokens, metrics,
                                            options, pxyz, created_at, expires_at)
  values (v_user, p_session_id, p_source, p_chunks_count, v_allocated, p_result.chunks_dropped, v_conflicts,
          p_result.total_tokens_used, p_result.tokens_available, p_result.reserved_tokens,
          p_result.optimization_metrics, p_opt - 'user_id' - 'session_id' - 'on_error',
          jsonb_build_object('entity', 'context', 'operation', 'optimize', 'source', p_source, 'time', p_now),
          p_now, p_now + memori._budget_retention(p_source))
  returning id into p_result.optimization_id;
  perform memori._event_emit('context.budget.resolved',
            jsonb_build_object('optimization_id', p_result.optimization_id, 'allocated_count', v_allocated,
                               'dropped_count', p_result.chunks_dropped, 'tokens_used', p_result.total_tokens_used,
                               'tokens_remaining', p_result.tokens_remaining), p_now);
  if p_result.chunks_dropped > 0 then
    perform memori._event_emit('context.chunks_dropped',
              jsonb_build_object('optimization_id', p_result.optimization_id, 'count', p_result.chunks_dropped),
              p_now);
  end if;
  if v_conflicts > 0 then
    perform memori._event_emit('context.conflict_detected',
              jsonb_build_object('optimization_id', p_result.optimization_id, 'count', v_conflicts,
                                 'first', p_result.conflicts->0), p_now);
  end if;
  perform memori._event_emit('context.optimization.success',
            jsonb_build_object('optimization_id', p_result.optimization_id, 'tokens_used', p_result.total_tokens_used,
                               'chunks_optimized', v_allocated), p_now);
  return p_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_record(memori.optimization_result, text, integer, jsonb, text, text, timestamptz) is 'Record an optimisation in memori.context_optimizations and emit its events, unless p_opt persist is false.';

-------------------------------------------------------------------------------
-- _budget_retention: how long rows of a budget table's kind are kept
create or replace function memori._budget_retention(p_kind text, p_table text default 'context_optimizations')
returns interval
as $func$
  select retention from memori.retention_policies
   where table_name = p_table and kind in (p_kind, '*')
   order by (kind = p_kind) desc
   limit 1
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_retention(text, text) is 'Retention of a context_chunks / context_optimizations kind: its policy, else the table default (NULL: kept).';

-------------------------------------------------------------------------------
-- _budget_failed: the context.optimization.failed event and the failure as a result
drop function if exists memori._budget_failed(jsonb, timestamptz);  -- the client called it before 0020
create or replace function memori._budget_failed(
  p_about   jsonb,        -- source, chunks_count, session_id, user_id of the failed call
  p_options jsonb,        -- the call's options as given (they may be what failed)
  p_state   text,
  p_message text,
  p_detail  text,
  p_hint    text,
  p_now     timestamptz
) returns memori.optimization_result
as $func$
declare
  v_result memori.optimization_result;
begin
  -- The failed call's own work is rolled back (its exception block); this runs
  -- in the caller's transaction, which stays usable, so the event is kept.
  if p_options->'persist' is distinct from 'false'::jsonb then
    perform memori._event_emit('context.optimization.failed',
              jsonb_strip_nulls(p_about || jsonb_build_object('error', p_message, 'sqlstate', p_state)),
              coalesce(p_now, now()));
  end if;
  v_result.error_sqlstate := p_state;
  v_result.error_message := p_message;
  v_result.error_detail := p_detail;
  v_result.error_hint := p_hint;
  return v_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._budget_failed(jsonb, jsonb, text, text, text, text, timestamptz) is 'Emit context.optimization.failed (unless persist is false) and return the failure as an optimization_result (on_error report).';

