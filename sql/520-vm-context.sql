-- pymemdb SQL API, part 14: what the model sees (seed 03, Chat Completions VM protocol).
--
-- vm_manifest is <VM:MANIFEST_JSON> (machine-readable: what exists and the
-- policies), vm_context is <VM:CONTEXT> (the mapped pages as a compact
-- transcript: the evidence), vm_tools the page_fault and search_pages tool
-- definitions, and vm_developer_message puts rules, manifest and context into
-- one developer message. Packed contexts are cached per (session, model,
-- budget, working-set hash); every page mutation drops a session's packs.

-------------------------------------------------------------------------------
-- vm_manifest: VM:MANIFEST_JSON
-- p_session_id: the VM session (PM005 when missing)
-- p_available_limit: most unmapped pages listed under available_pages (most important first), 0 to 10000
--   (else PM001)
-- p_faults_allowed: the faults_allowed policy the manifest shows; NULL: the session's; it can only switch
--   faults off (true on a session without faults shows false)
create or replace function memori.vm_manifest(
  p_session_id      text,
  p_available_limit integer default 200,
  p_faults_allowed  boolean default null,
  p_now             timestamptz default now()
) returns jsonb
as $func$
declare
  v_s memori.vm_sessions := memori._vm_session_read(p_session_id);
begin
  if p_available_limit is null or p_available_limit < 0 or p_available_limit > 10000 then
    perform memori._invalid(format('available limit must be between 0 and 10000, got %s', coalesce(p_available_limit::text, 'NULL')),
                            'The manifest lists the most important unmapped pages; 200 is a good default.');
  end if;
  return jsonb_build_object(
    'session_id', v_s.session_id,
    'turn', v_s.turn,
    'working_set', coalesce((
      select jsonb_agg(jsonb_build_object('page_id', w.page_id, 'modality', p.modality, 'level', w.level,
                                          'tokens_est', w.tokens, 'importance', p.importance, 'pinned', w.pinned)
                       order by p.id)
        from memori.working_set w
        join memori.pages p on p.user_id = w.user_id and p.session_id = w.session_id and p.page_id = w.page_id
       where w.user_id = v_s.user_id and w.session_id = v_s.session_id), '[]'::jsonb),
    'available_pages', coalesce((
      -- the seed's manifest schema has tier L2 | L3 | L4 for available pages: L1 (the
      -- cache of recently evicted pages) is session storage to the model, so L2
      select jsonb_agg(jsonb_build_object('page_id', a.page_id, 'modality', a.modality,
                                          'tier', case when a.tier = 'L1' then 'L2' else a.tier end,
                                          'levels', a.levels, 'hint', a.hint)
                       order by a.superseded, a.importance desc, a.last_accessed desc, a.page_id)
        from (select t.page_id, t.modality, t.tier, t.importance, t.last_accessed, t.superseded,
                     (select jsonb_agg(l order by l desc)
                        from (select 0 as l
                              union all
                              select r.level from memori.page_representations r
                               where r.user_id = v_s.user_id and r.session_id = t.session_id and r.page_id = t.page_id
                                 and r.level < 3) x) as levels,
                     case when t.superseded then format('superseded by %s: ', t.superseded_by) else '' end
                     || coalesce(t.hint, (select r.content from memori.page_representations r
                                           where r.user_id = v_s.user_id and r.session_id = t.session_id
                                             and r.page_id = t.page_id and r.level = 3),
                                 '') as hint
                -- the limit first, then levels and hints for those pages only (a fork's
                -- shared pages come from no ordered index: the subqueries would run for each)
                from (select p.session_id, p.page_id, p.modality, p.tier, p.importance, p.last_accessed, p.hint,
                             p.superseded_by, p.superseded_by is not null as superseded
                        from memori.vm_visible_pages p
                       where p.user_id = v_s.user_id and p.viewer_session_id = v_s.session_id and p.tier <> 'L0'
                         and (p.expires_at is null or p.expires_at > p_now)
                       -- a superseded claim is history: listed after every current page
                       order by p.superseded_by is not null, p.importance desc, p.last_accessed desc, p.page_id
                       limit p_available_limit) t) a), '[]'::jsonb),
    'total_available', (select count(*) from memori.vm_visible_pages p
                         where p.user_id = v_s.user_id and p.viewer_session_id = v_s.session_id and p.tier <> 'L0'
                           and (p.expires_at is null or p.expires_at > p_now)),
    'policies', jsonb_build_object(
      'faults_allowed', coalesce(p_faults_allowed, v_s.faults_allowed) and v_s.faults_allowed,
      'max_faults_per_turn', v_s.max_faults_per_turn,
      'upgrade_budget_tokens', v_s.max_fault_tokens_per_turn,
      'prefer_levels', '[2, 1, 0]'::jsonb,
      'fault_confidence_threshold', v_s.fault_confidence_threshold));
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_manifest(text, integer, boolean, timestamptz) is 'VM:MANIFEST_JSON of a session: working_set (creation order), available_pages with the seed''s tier (L2 | L3 | L4; an L1 page is listed as L2), levels and hint (importance order, limited), policies.';

-------------------------------------------------------------------------------
-- _vm_duration: m:ss of a duration in seconds
create or replace function memori._vm_duration(p_seconds numeric) returns text
as $func$
  select case when p_seconds is null then null
              else format('%s:%s', floor(p_seconds / 60)::bigint, lpad((floor(p_seconds)::bigint % 60)::text, 2, '0')) end
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_duration(numeric) is 'A duration in seconds as m:ss (NULL stays NULL).';

-------------------------------------------------------------------------------
-- _vm_line: one page as a VM:CONTEXT line
create or replace function memori._vm_line(
  p_page_id text, p_page_type text, p_modality text, p_role text, p_content text, p_data jsonb,
  p_dimensions integer[], p_duration numeric, p_hint text
) returns text
as $func$
  select case
           when p_modality = 'image' then 'I'
           when p_modality = 'audio' then 'D'
           when p_modality = 'video' then 'V'
           when p_page_type = 'transcript' and p_role = 'user' then 'U'
           when p_page_type = 'transcript' and p_role = 'assistant' then 'A'
           when p_page_type = 'transcript' and p_role = 'tool' then 'T'
           when p_page_type = 'artifact' or p_modality = 'structured' then 'T'
           else 'S' end
         || format(' (%s): ', p_page_id)
         || case p_modality
              when 'image' then format('[IMAGE: %s]', concat_ws(', ', coalesce(p_content, p_hint, 'no caption'),
                                                              case when p_content is null or p_content not like 'image:%'
                                                                   then p_dimensions[1] || 'x' || p_dimensions[2] end))
              when 'audio' then format('[AUDIO: %s]', concat_ws(', ', memori._vm_duration(p_duration) || ' duration',
                                                              'transcript: ' || to_json(p_content)::text))
              when 'video' then format('[VIDEO: %s]', concat_ws(', ', memori._vm_duration(p_duration) || ' duration',
                                                              jsonb_array_length(p_data->'scenes') || ' scenes',
                                                              'topic: ' || to_json(coalesce(p_hint, p_content))::text))
              when 'structured' then coalesce(p_data::text, to_json(p_content)::text)
              else coalesce(to_json(p_content)::text, p_data::text, '""') end
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_line(text, text, text, text, text, jsonb, integer[], numeric, text) is 'A page as one VM:CONTEXT line: prefix U/A/T/S/I/D/V, page id, JSON-quoted text or a media summary.';

-------------------------------------------------------------------------------
-- vm_context: VM:CONTEXT, packed within a token budget (and cached)
-- p_session_id: the VM session (PM005 when missing)
-- p_token_budget: the tokens the whole block may use (4 bytes a token), at least the empty block's (else
--   PM001); NULL: the session's max_l0_tokens
-- p_model: the model the block is packed for, a key of the pack cache (non-empty, at most 200 characters,
--   else PM001)
create or replace function memori.vm_context(
  p_session_id   text,
  p_token_budget integer default null,
  p_model        text default 'default',
  p_now          timestamptz default now()
) returns text
as $func$
declare
  v_s      memori.vm_sessions := memori._vm_session_read(p_session_id);
  v_budget integer := coalesce(p_token_budget, v_s.max_l0_tokens);
  v_hash   text;
  v_packed text;
  v_open   constant text := E'<VM:CONTEXT>\n';
  v_close  constant text := '</VM:CONTEXT>';
  v_left   integer;
  v_item   record;
  v_keep   bigint[] := '{}';
  v_shown  text[] := '{}';
  v_line   text;
  v_tokens integer;
begin
  if v_budget < memori.token_estimate(v_open || v_close, 'page') then
    perform memori._invalid(format('token budget must be at least %s (the empty block), got %s',
                                   memori.token_estimate(v_open || v_close, 'page'), v_budget),
                            'Pass the tokens the context may use, e.g. 8000.');
  end if;
  perform memori._check_identifier('model', p_model, 200);
  select md5(v_s.turn || '|' || v_s.pinned_last_turns || '|'
             || coalesce(string_agg(w.page_id || ':' || w.level || ':' || w.tokens || ':' || w.pinned, ',' order by w.page_id), ''))
    into v_hash
    from memori.working_set w where w.user_id = v_s.user_id and w.session_id = v_s.session_id;
  update memori.vm_pack_cache set hits = hits + 1
   where user_id = v_s.user_id and session_id = v_s.session_id and model = p_model and budget = v_budget and ws_hash = v_hash
  returning packed into v_packed;
  if found then
    update memori.vm_sessions set pack_hits = pack_hits + 1
     where user_id = v_s.user_id and session_id = v_s.session_id;
    return v_packed;
  end if;

  v_left := v_budget - memori.token_estimate(v_open || v_close, 'page');
  -- "traditional conversation feel": pinned pages, then the newest first; older
  -- transcript pages of a segment that has a summary page show as that summary
  for v_item in
    with mapped as (
      -- each page at its mapped level (memori._page_at_level written out: on Citus a function of
      -- a row of the table would run on the shard, where the row has the shard's type)
      select p.id, p.page_id, p.page_type, p.modality, p.role, p.segment, p.turn, p.dimensions,
             p.duration_seconds, p.hint, w.level, w.pinned, w.turn_added,
             case when w.level = 0 then p.content else r.content end as content,
             case when w.level = 0 then p.data else r.data end as data
        from memori.working_set w
        join memori.pages p on p.user_id = w.user_id and p.session_id = w.session_id and p.page_id = w.page_id
        left join memori.page_representations r
               on w.level > 0 and r.user_id = w.user_id and r.session_id = w.session_id and r.page_id = w.page_id
                  and r.level = w.level
       where w.user_id = v_s.user_id and w.session_id = v_s.session_id
         and (w.level = 0 or r.level is not null)
    ), summaries as (
      -- the newest summary page of each segment, looked up once
      select distinct on (sp.segment) sp.segment, sp.id
        from memori.vm_visible_pages sp
       where sp.user_id = v_s.user_id and sp.viewer_session_id = v_s.session_id
         and sp.page_type = 'summary' and sp.segment is not null
         and (sp.expires_at is null or sp.expires_at > p_now)
       order by sp.segment, sp.id desc
    ), folded as (
      select m.*, s.id as summary_id
        from mapped m
        left join summaries s
               on s.segment = m.segment and m.page_type = 'transcript' and not m.pinned
                  and m.turn <= v_s.turn - greatest(v_s.pinned_last_turns, 1)
                  -- a page mapped again after it was written (faulted in, prefetched) was asked for: shown as itself
                  and m.turn_added <= m.turn
    ), shown as (
      -- pages shown as themselves (each line is made in the loop: on Citus a function in
      -- this query would run on the shard, where the VM's functions are not installed)
      select f.id, f.pinned, f.turn, f.page_id, f.page_type, f.modality, f.role, f.content, f.data, f.dimensions,
             f.duration_seconds, f.hint
        from folded f where f.summary_id is null
      union all
      -- one summary per older segment, at level 2 when written (else its own content)
      select sp.id, false, sp.turn, sp.page_id, sp.page_type, sp.modality, sp.role, coalesce(r.content, sp.content),
             coalesce(r.data, sp.data), sp.dimensions, sp.duration_seconds, sp.hint
        from (select distinct summary_id from folded where summary_id is not null) x
        join memori.pages sp on sp.user_id = v_s.user_id and sp.id = x.summary_id
        left join memori.page_representations r
               on r.user_id = sp.user_id and r.session_id = sp.session_id and r.page_id = sp.page_id and r.level = 2
       where not exists (select 1 from mapped m where m.id = sp.id)
    )
    select s.* from shown s
     order by s.pinned desc, s.turn desc, s.id desc
  loop
    v_line := memori._vm_line(v_item.page_id, v_item.page_type, v_item.modality, v_item.role, v_item.content,
                              v_item.data, v_item.dimensions, v_item.duration_seconds, v_item.hint);
    v_tokens := ceil(octet_length(v_line || E'\n') / 4.0)::integer;
    if v_tokens <= v_left then
      v_keep := v_keep || v_item.id;
      v_shown := v_shown || v_line;
      v_left := v_left - v_tokens;
    end if;
  end loop;
  -- shown in the order the pages were created, whatever order they were chosen in
  select v_open || coalesce(string_agg(x.line || E'\n', '' order by x.id), '') || v_close
    into v_packed
    from unnest(v_keep, v_shown) as x(id, line);

  insert into memori.vm_pack_cache (session_id, user_id, model, budget, ws_hash, packed, tokens, created_at)
  values (v_s.session_id, v_s.user_id, p_model, v_budget, v_hash, v_packed, v_budget - v_left, p_now)
  on conflict do nothing;
  -- the seed's cache keeps 32 packs per session
  delete from memori.vm_pack_cache c
   using (select k.model, k.budget, k.ws_hash from memori.vm_pack_cache k
           where k.user_id = v_s.user_id and k.session_id = v_s.session_id
           order by k.created_at desc, k.hits desc offset 32) o
   where c.user_id = v_s.user_id and c.session_id = v_s.session_id
     and c.model = o.model and c.budget = o.budget and c.ws_hash = o.ws_hash;
  update memori.vm_sessions set pack_misses = pack_misses + 1
   where user_id = v_s.user_id and session_id = v_s.session_id;
  return v_packed;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_context(text, integer, text, timestamptz) is 'VM:CONTEXT of a session within a token budget (default max_l0_tokens): pinned and newest pages first, older segments as one summary, shown in creation order; cached per model, budget and working set.';

-------------------------------------------------------------------------------
-- vm_tools: the page_fault and search_pages tools in Chat Completions format
create or replace function memori.vm_tools() returns jsonb
as $func$
  select '[
    {"type": "function",
     "function": {
       "name": "page_fault",
       "description": "Load a memory page into context at a compression level. Use when you need the content of a known page_id.",
       "parameters": {
         "type": "object",
         "properties": {
           "page_id": {"type": "string", "description": "ID of the page to load"},
           "target_level": {"type": "integer", "minimum": 0, "maximum": 3, "default": 2,
                            "description": "0=full, 1=reduced, 2=abstract/summary, 3=reference only"},
           "reason": {"type": "string",
                      "enum": ["user_requested_recall", "resolve_reference", "tool_prereq", "speculative"],
                      "default": "resolve_reference",
                      "description": "Why the page is needed"}
         },
         "required": ["page_id"]}}},
    {"type": "function",
     "function": {
       "name": "search_pages",
       "description": "Search for pages matching a query. Use when you need relevant pages but do not know their IDs.",
       "parameters": {
         "type": "object",
         "properties": {
           "query": {"type": "string", "description": "Search query (semantic or keyword)"},
           "modality": {"type": "string", "enum": ["text", "image", "audio", "video", "structured"],
                        "description": "Filter by content type"},
           "limit": {"type": "integer", "default": 5, "description": "Maximum results to return"}
         },
         "required": ["query"]}}}
  ]'::jsonb
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_tools() is 'The VM tool definitions (page_fault with reason, search_pages) in Chat Completions tools format.';

-------------------------------------------------------------------------------
-- vm_developer_message: rules, manifest and context in one developer message
-- p_session_id: the VM session (PM005 when missing)
-- p_mode: the VM rules: 'strict', 'relaxed' or 'passive' (the manifest then shows faults off); else PM004
-- p_system_prompt: put first in the message; NULL or empty: left out
-- p_token_budget: the VM:CONTEXT block's budget in tokens (as in vm_context); NULL: the session's max_l0_tokens
-- p_model: the model the block is packed for (the pack cache key, as in vm_context)
create or replace function memori.vm_developer_message(
  p_session_id    text,
  p_mode          text default 'strict',
  p_system_prompt text default null,
  p_token_budget  integer default null,
  p_model         text default 'default',
  p_now           timestamptz default now()
) returns text
as $func$
declare
  v_s     memori.vm_sessions := memori._vm_session_read(p_session_id);
  v_rules text;
begin
  perform memori._vm_check_choice('VM prompt mode', p_mode);
  v_rules := case p_mode
    when 'strict' then
'<VM:RULES>
Grounding is strict. Only two things count as evidence:
1) what is inside <VM:CONTEXT> (the memory mapped for this turn), and
2) what tools return to you in role="tool" messages (for example page_fault).
<VM:MANIFEST_JSON> only says which pages exist. Its hints help you find pages; they are not evidence.
Never quote, paraphrase or rely on a hint, and never guess what an unmapped page says.
Page ids, modality, tier and level may be used to navigate, nothing more.
When you need something that is not in <VM:CONTEXT>, either call page_fault(page_id, target_level),
or ask one short clarifying question if no page fits.
Load the cheapest form first: target_level=2 (abstract), then 1 (reduced), and 0 (full) only when the user
needs exact wording, code or precise figures. Stay within max_faults_per_turn from the manifest policies,
never fault a page that is already in <VM:CONTEXT>, and when several pages might help, load the smallest first.
Do not fill gaps with assumptions. If the tools cannot give you what is needed, say:
"I don''t have that in the mapped context."
Cite what you use with page ids, e.g. [ref: msg_123] or [ref: tool:page_fault(img_045)]; citations are required.
When you call tools, reply with tool calls only; answer after the results arrive.
Do not mention these rules, memory tiers, paging or virtual memory unless the user asks how you work.
</VM:RULES>'
    when 'relaxed' then
'<VM:RULES>
<VM:CONTEXT> holds the memory mapped for this turn; tool results (role="tool") add to it.
<VM:MANIFEST_JSON> lists other pages; hints say what exists, not what it says.
To read a page, call page_fault(page_id, target_level), preferring level 2 before 1 and 0.
To find pages, call search_pages(query). Cite page ids when you use them.
</VM:RULES>'
    else
'<VM:RULES>
<VM:CONTEXT> holds the memory mapped for this turn; it is your evidence.
<VM:MANIFEST_JSON> lists other pages for reference only: you cannot load them, and hints are not evidence.
If something is not in <VM:CONTEXT>, say you do not have it.
</VM:RULES>'
  end;
  return concat_ws(E'\n\n', nullif(p_system_prompt, ''), v_rules,
                   E'<VM:MANIFEST_JSON>\n'
                   || memori.vm_manifest(p_session_id, 200, p_mode <> 'passive', p_now)::text
                   || E'\n</VM:MANIFEST_JSON>',
                   memori.vm_context(p_session_id, p_token_budget, p_model, p_now));
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_developer_message(text, text, text, integer, text, timestamptz) is 'One developer message: system prompt, VM rules for the mode (strict, relaxed, passive: no faults), VM:MANIFEST_JSON and VM:CONTEXT.';

-------------------------------------------------------------------------------
-- vm_metrics: budget use, faults by reason, evictions, pack cache
create or replace function memori.vm_metrics(p_session_id text, p_now timestamptz default now())
returns memori.vm_metrics_result
as $func$
declare
  v_s memori.vm_sessions := memori._vm_session_read(p_session_id);
  v_r memori.vm_metrics_result;
begin
  v_r.session_id := v_s.session_id;
  v_r.turn := v_s.turn;
  v_r.max_l0_tokens := v_s.max_l0_tokens;
  select coalesce(sum(tokens), 0), count(*), count(*) filter (where pinned)
    into v_r.l0_tokens, v_r.working_set_pages, v_r.pinned_pages
    from memori.working_set where user_id = v_s.user_id and session_id = v_s.session_id;
  -- the seed's TokenBudget: L0 use by modality
  v_r.l0_tokens_by_modality := coalesce((select jsonb_object_agg(modality, n) from (
                                           select p.modality, sum(w.tokens) as n
                                             from memori.working_set w
                                             join memori.pages p on p.user_id = w.user_id and p.session_id = w.session_id and p.page_id = w.page_id
                                            where w.user_id = v_s.user_id and w.session_id = v_s.session_id
                                            group by p.modality) t), '{}'::jsonb);
  select coalesce(jsonb_object_agg(tier, n), '{}'::jsonb), coalesce(sum(d), 0)
    into v_r.pages_by_tier, v_r.dirty_pages
    from (select tier, count(*) as n, count(*) filter (where dirty) as d from memori.vm_visible_pages
           where user_id = v_s.user_id and viewer_session_id = v_s.session_id group by tier) t;
  select count(*), count(*) filter (where outcome = 'served'), count(*) filter (where outcome = 'already_mapped'),
         count(*) filter (where outcome = 'refused'), count(*) filter (where outcome = 'error'), coalesce(sum(tokens), 0)
    into v_r.faults, v_r.faults_served, v_r.faults_already_mapped, v_r.faults_refused, v_r.faults_errors,
         v_r.fault_tokens
    from memori.page_faults where user_id = v_s.user_id and session_id = v_s.session_id;
  v_r.faults_by_reason := coalesce((select jsonb_object_agg(reason, n) from (
                                      select reason, count(*) as n from memori.page_faults
                                       where user_id = v_s.user_id and session_id = v_s.session_id
                                       group by reason) r), '{}'::jsonb);
  v_r.mutations := coalesce((select jsonb_object_agg(mutation_type, n) from (
                               select mutation_type, count(*) as n from memori.page_mutations
                                where user_id = v_s.user_id and session_id = v_s.session_id
                                group by mutation_type) m), '{}'::jsonb);
  v_r.pack_hits := v_s.pack_hits;
  v_r.pack_misses := v_s.pack_misses;
  v_r.pack_hit_rate := round(v_s.pack_hits::numeric / nullif(v_s.pack_hits + v_s.pack_misses, 0), 3);
  -- lifecycle metrics (sql/555-vm-metrics.sql): per-turn faults, evictions, thrash index, prefetch hit rate
  return memori._vm_metrics_lifecycle(v_s, p_now, v_r);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_metrics(text, timestamptz) is 'VM metrics of a session: L0 use (also by modality), pinned pages, pages by tier, faults by outcome and reason, mutations by type, pack cache hits and misses, and the lifecycle figures (memori.vm_metrics_result).';
