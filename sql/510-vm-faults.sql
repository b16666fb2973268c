-- pymemdb SQL API, part 12: page faults (seed 03, phase 3 and the Chat Completions protocol).
--
-- memori.page_fault is what a runtime calls when the model calls the
-- page_fault tool. Its answer is the seed's canonical tool-result envelope,
-- ready to send back as the tool message's content. Everything the model may
-- get wrong (an unknown page id, a level outside 0..3, a reason the policy
-- refuses, too many faults this turn) comes back as an envelope with an
-- "error" the model can read and act on, never as an exception: an exception
-- would end the runtime's turn instead of the model's guess.

-------------------------------------------------------------------------------
-- _page_content_json: a page's content shaped for its modality (seed envelope)
create or replace function memori._page_content_json(
  p_modality text, p_content text, p_data jsonb, p_artifact_ref text, p_duration numeric
) returns jsonb
as $func$
  select jsonb_strip_nulls(case p_modality
    when 'image' then jsonb_build_object('caption', p_content, 'url', p_artifact_ref,
                                         'embedding', p_data->'embedding')
    when 'audio' then jsonb_build_object('transcript', p_content, 'timestamps', p_data->'timestamps',
                                         'duration_seconds', p_duration)
    when 'video' then jsonb_build_object('scenes', coalesce(p_data->'scenes', '[]'::jsonb), 'transcript', p_content)
    when 'structured' then jsonb_build_object('data', coalesce(p_data, to_jsonb(p_content)), 'schema',
                                              case when p_data is not null and p_content is not null then p_content end)
    else jsonb_build_object('text', coalesce(p_content, p_data::text))
  end)
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_content_json(text, text, jsonb, text, numeric) is 'Envelope content by modality: text {text}, image {caption, url}, audio {transcript, timestamps, duration_seconds}, video {scenes, transcript}, structured {data, schema}.';

-------------------------------------------------------------------------------
-- _page_at_level: a page's content, data and tokens at a level
create or replace function memori._page_at_level(p_page memori.pages, p_level integer)
returns table (content text, data jsonb, tokens integer)
as $func$
  select p_page.content, p_page.data, p_page.tokens where p_level = 0
  union all
  select r.content, r.data, r.tokens from memori.page_representations r
   where p_level > 0 and r.user_id = p_page.user_id and r.session_id = p_page.session_id
     and r.page_id = p_page.page_id and r.level = p_level
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_at_level(memori.pages, integer) is 'Content, data and tokens of a page at a level (no row when the level is not written).';

-------------------------------------------------------------------------------
-- _fault_refusal: the envelope of a fault that was not served
create or replace function memori._fault_refusal(p_page_id text, p_reason text, p_message text, p_hint text)
returns jsonb
as $func$
  select jsonb_build_object(
    'page', null,
    'error', jsonb_build_object('page_id', p_page_id, 'reason', p_reason, 'message', p_message, 'hint', p_hint),
    'effects', jsonb_build_object('promoted_to_working_set', false, 'tokens_est', 0, 'evictions', null))
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._fault_refusal(text, text, text, text) is 'Envelope of a refused or invalid fault: page null, error {page_id, reason, message, hint}, no effects.';

-------------------------------------------------------------------------------
-- _fault_record: one row of memori.page_faults
create or replace function memori._fault_record(
  p_s memori.vm_sessions, p_page_id text, p_reason text, p_target integer, p_served integer, p_outcome text,
  p_tokens integer, p_source_tier text, p_evictions text[], p_now timestamptz
) returns void
as $func$
declare
  -- scalars, not the session row: Citus would ship the row to the shard as a value of its type
  v_session text := p_s.session_id;
  v_user    text := p_s.user_id;
  v_turn    integer := p_s.turn;
  v_expires timestamptz := memori._vm_retention(p_s.user_id, p_s.session_id, 'page_faults', p_now);
begin
  insert into memori.page_faults (session_id, user_id, page_id, turn, reason, target_level, served_level, outcome,
                                  tokens, source_tier, evictions, at, expires_at)
  values (v_session, v_user, coalesce(p_page_id, ''), v_turn, coalesce(p_reason, ''), p_target, p_served,
          p_outcome, coalesce(p_tokens, 0), p_source_tier, coalesce(p_evictions, '{}'), p_now, v_expires);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._fault_record(memori.vm_sessions, text, text, integer, integer, text, integer, text, text[], timestamptz) is 'Record a page fault (served, already_mapped, refused or error) at the session''s turn.';

-------------------------------------------------------------------------------
-- page_fault: load a page into the working set; the seed's tool-result envelope
-- p_session_id: the VM session (PM005 when missing, raised: the model's mistakes below are envelopes)
-- p_page_id: the page to load; one the session does not see unexpired is an envelope with error unknown_page
-- p_target_level: the level wanted: 0 full, 1 reduced, 2 abstract, 3 reference; when it is not written, the
--   next more detailed one is served; outside 0..3 (or NULL) is an envelope with error invalid_level
-- p_reason: 'user_requested_recall', 'resolve_reference', 'tool_prereq' or 'speculative' (else an envelope with
--   error unknown_reason); checked against the session's fault_confidence_threshold
-- p_actor: who asks, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.page_fault(
  p_session_id   text,
  p_page_id      text,
  p_target_level integer default 2,
  p_reason       text default 'resolve_reference',
  p_actor        text default 'model',
  p_now          timestamptz default now()
) returns jsonb
as $func$
declare
  v_s        memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_id       bigint;
  v_p        memori.pages;
  v_w        memori.working_set;
  v_level    integer;
  v_at       record;
  v_served   integer;
  v_used     integer;
  v_evicted  text[];
  v_cheaper  record;
  v_refusal  jsonb;
  v_source   text;
  v_tokens   integer;
begin
  -- what the model may get wrong: an envelope it can read, recorded as an error
  v_refusal := case
    when p_reason is null or p_reason not in ('user_requested_recall', 'resolve_reference', 'tool_prereq', 'speculative') then
      memori._fault_refusal(p_page_id, 'unknown_reason', format('unknown fault reason %s', coalesce(quote_literal(p_reason), 'NULL')),
                            'Use one of: user_requested_recall, resolve_reference, tool_prereq, speculative.')
    when p_target_level is null or p_target_level not between 0 and 3 then
      memori._fault_refusal(p_page_id, 'invalid_level', format('target_level must be 0, 1, 2 or 3, got %s', coalesce(p_target_level::text, 'null')),
                            '0 = full, 1 = reduced, 2 = abstract/summary, 3 = reference only; prefer 2.')
  end;
  if v_refusal is null then
    -- resolved through the session's forks (a shared page is copied below, before it changes)
    v_id := memori._page_row(v_s.user_id, v_s.session_id, p_page_id);
    select * into v_p from memori.pages
     where user_id = v_s.user_id and id = v_id and (expires_at is null or expires_at > p_now)
       for update;
    if not found then
      v_refusal := memori._fault_refusal(p_page_id, 'unknown_page', format('no page %s in this session', coalesce(quote_literal(p_page_id), 'null')),
                                         'Use a page_id from VM:MANIFEST_JSON or VM:CONTEXT, or call search_pages to find one.');
    end if;
  end if;
  if v_refusal is not null then
    perform memori._fault_record(v_s, p_page_id, p_reason, p_target_level, null, 'error', 0, null, null, p_now);
    return v_refusal;
  end if;

  -- the fault policy (seed 3.3)
  select count(*) filter (where outcome = 'served'), coalesce(sum(tokens) filter (where outcome = 'served'), 0)
    into v_served, v_used
    from memori.page_faults where user_id = v_s.user_id and session_id = v_s.session_id and turn = v_s.turn;
  v_refusal := case
    when not v_s.faults_allowed then
      memori._fault_refusal(p_page_id, 'faults_disabled', 'page faults are disabled for this session',
                            'Answer from VM:CONTEXT, or say the information is not in the mapped context.')
    when (v_s.fault_confidence_threshold = 'explicit' and p_reason <> 'user_requested_recall')
         or (v_s.fault_confidence_threshold = 'referenced' and p_reason = 'speculative') then
      memori._fault_refusal(p_page_id, 'confidence_threshold',
                            format('a %s fault is below this session''s confidence threshold (%s)', p_reason,
                                   v_s.fault_confidence_threshold),
                            case v_s.fault_confidence_threshold
                              when 'explicit' then 'Fault only pages the user explicitly asked to recall (reason user_requested_recall).'
                              else 'Fault only pages you need to resolve a reference or a tool prerequisite, not speculatively.' end)
    when v_served >= v_s.max_faults_per_turn then
      memori._fault_refusal(p_page_id, 'max_faults_per_turn',
                            format('%s faults were already served this turn; the limit is %s', v_served, v_s.max_faults_per_turn),
                            'Answer with what is mapped now, or ask the user to narrow the question.')
  end;
  if v_refusal is not null then
    perform memori._fault_record(v_s, p_page_id, p_reason, p_target_level, null, 'refused', 0, v_p.tier, null, p_now);
    return v_refusal;
  end if;

  v_source := v_p.tier;
  -- faulting updates access tracking: a write, so a shared page becomes the session's own
  if v_p.session_id <> v_s.session_id then
    v_p := memori._page_copy(v_p.id, v_s.session_id);
  end if;
  perform memori._page_write(v_s.user_id, v_s.session_id, array[p_page_id]);
  select * into v_w from memori.working_set
   where user_id = v_s.user_id and session_id = v_s.session_id and page_id = p_page_id;
  if found and v_w.level <= p_target_level then
    -- already mapped with at least the detail asked for: nothing to load
    update memori.pages set last_accessed = p_now, access_count = access_count + 1
     where user_id = v_s.user_id and id = v_p.id
    returning * into v_p;
    update memori.working_set set last_access_turn = v_s.turn
     where user_id = v_s.user_id and session_id = v_s.session_id and page_id = p_page_id;
    select * into v_at from memori._page_at_level(v_p, v_w.level);
    perform memori._fault_record(v_s, p_page_id, p_reason, p_target_level, v_w.level, 'already_mapped', 0, v_source,
                                 null, p_now);
    return memori._page_envelope(v_p, v_w.level, v_at.content, v_at.data, v_source, false, v_w.tokens, null);
  end if;

  -- the most detailed level written at or below the target (level 0 always is)
  select l.level, l.tokens into v_level, v_tokens
    from (select 0 as level, v_p.tokens as tokens
          union all
          select r.level, r.tokens from memori.page_representations r
           where r.user_id = v_s.user_id and r.session_id = v_p.session_id and r.page_id = v_p.page_id) l
   where l.level <= p_target_level
   order by l.level desc
   limit 1;
  select * into v_at from memori._page_at_level(v_p, v_level);
  if v_used + v_at.tokens > v_s.max_fault_tokens_per_turn then
    select r.level, r.tokens into v_cheaper from memori.page_representations r
     where r.user_id = v_s.user_id and r.session_id = v_p.session_id and r.page_id = v_p.page_id
       and v_used + r.tokens <= v_s.max_fault_tokens_per_turn
     order by r.level limit 1;
    perform memori._fault_record(v_s, p_page_id, p_reason, p_target_level, null, 'refused', 0, v_source, null, p_now);
    return memori._fault_refusal(p_page_id, 'max_fault_tokens_per_turn',
             format('level %s of %s is %s tokens; %s of this turn''s %s fault tokens are used', v_level, p_page_id,
                    v_at.tokens, v_used, v_s.max_fault_tokens_per_turn),
             case when v_cheaper.level is not null
                  then format('Request target_level=%s (%s tokens) instead.', v_cheaper.level, v_cheaper.tokens)
                  else 'Answer with what is mapped now; more can be loaded next turn.' end);
  end if;

  begin
    -- access tracking; faulted pages are protected from eviction for fault_protection_turns (anti-thrash).
    -- The same statement maps the row into L0 at its level, which _vm_map would otherwise
    -- write as a second row version (issue 21: every version of a page costs its indexes);
    -- _vm_map logs the move from the tier the page had, and skips its own update.
    update memori.pages set last_accessed = p_now, access_count = access_count + 1, last_fault_turn = v_s.turn,
                            tier = 'L0', compression_level = v_level
     where user_id = v_s.user_id and id = v_p.id
    returning * into v_p;
    v_p.tier := v_source;
    v_evicted := memori._vm_map(v_s, v_p, v_level, null, 'fault_in', p_actor, 'page_fault:' || p_reason, p_now);
  exception when sqlstate 'PM060' then
    perform memori._fault_record(v_s, p_page_id, p_reason, p_target_level, null, 'refused', 0, v_source, null, p_now);
    return memori._fault_refusal(p_page_id, 'working_set_full',
             format('the working set has no room for %s tokens: the rest is pinned or recently loaded', v_at.tokens),
             'Request a cheaper level (target_level=3 is a reference), or answer with what is mapped now.');
  end;
  perform memori._fault_record(v_s, p_page_id, p_reason, p_target_level, v_level, 'served', v_at.tokens, v_source,
                               v_evicted, p_now);
  select * into v_p from memori.pages where user_id = v_s.user_id and id = v_p.id;
  return memori._page_envelope(v_p, v_level, v_at.content, v_at.data, v_source, true, v_at.tokens,
                               nullif(v_evicted, '{}'));
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_fault(text, text, integer, text, text, timestamptz) is 'Load a page into the working set at the most detailed level written up to p_target_level; returns the seed''s envelope {page, effects}, or {page: null, error} when the model''s request is invalid or the fault policy refuses it.';

-------------------------------------------------------------------------------
-- _page_envelope: the canonical tool-result envelope of a served page
create or replace function memori._page_envelope(
  p_page memori.pages, p_level integer, p_content text, p_data jsonb, p_source_tier text, p_promoted boolean,
  p_tokens integer, p_evictions text[]
) returns jsonb
as $func$
  select jsonb_build_object(
    'page', jsonb_build_object(
      'page_id', p_page.page_id,
      'modality', p_page.modality,
      'level', p_level,
      'tier', p_page.tier,
      'content', memori._page_content_json(p_page.modality, p_content, p_data,
                                           case when p_level <= 1 then p_page.artifact_ref end, p_page.duration_seconds),
      'meta', jsonb_strip_nulls(jsonb_build_object(
        'mime_type', p_page.mime_type,
        'size_bytes', p_page.size_bytes,
        'source_tier', p_source_tier,
        'page_type', p_page.page_type,
        'version', p_page.version,
        'provenance', nullif(to_jsonb(p_page.provenance), '[]'::jsonb),
        'dimensions', to_jsonb(p_page.dimensions),
        'duration_seconds', p_page.duration_seconds,
        'word_count', case when p_page.modality = 'text' and p_content is not null
                           then coalesce(array_length(regexp_split_to_array(btrim(p_content), '\s+'), 1), 0) end))),
    'effects', jsonb_build_object(
      'promoted_to_working_set', p_promoted,
      'tokens_est', p_tokens,
      'evictions', to_jsonb(p_evictions)))
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_envelope(memori.pages, integer, text, jsonb, text, boolean, integer, text[]) is 'The seed''s canonical envelope {page: {page_id, modality, level, tier, content, meta}, effects: {promoted_to_working_set, tokens_est, evictions}}.';

-------------------------------------------------------------------------------
-- page_fault_list: the faults of a session, newest first
-- p_turn: only the faults of this turn; NULL: every turn
-- p_limit: most rows returned, newest first; NULL: 100; 0 or negative: none
create or replace function memori.page_fault_list(
  p_session_id text,
  p_turn       integer default null,
  p_limit      integer default 100
) returns setof memori.page_faults
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
begin
  return query
    select * from memori.page_faults
     where user_id = v_user and session_id = p_session_id and (p_turn is null or turn = p_turn)
     order by id desc
     limit greatest(coalesce(p_limit, 100), 0);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_fault_list(text, integer, integer) is 'Recorded page faults of a session (optionally one turn), newest first, with reason and outcome.';
