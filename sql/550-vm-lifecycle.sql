-- pymemdb SQL API, part 15: AI virtual memory lifecycle (seed 03, phases 2.6, 10, 11; issue 7).
--
-- Claims are token-cheap, high-importance decision pages with provenance; the
-- working set evicts them last (sql/105 orders candidates claims-last).
-- segment_close is the infinite-conversation hook: the open segment's
-- transcript leaves L0 for L2 (the swap file), a summary page written by the
-- client's Summarizer stands in for it, and the next segment starts.
-- vm_prepass is the seed's runtime pre-pass (recall signals, topics, the last
-- segment summary) and vm_prefetch its simple prefetcher; both only propose
-- pages unless told to apply, and then fault them in through page_fault, so
-- the fault policy (per-turn limits, confidence threshold) holds for them as
-- for the model. A session's paging mode (model | runtime | hybrid) decides
-- whether vm_turn_start runs the pre-pass.
--
-- Pages are read through the VM's accessors (_page_get, page_lookup,
-- pages_by_type, pages_top_importance, search_pages, page_fault) wherever one
-- fits, so a change in how pages resolve (forks) reaches this file too.

-------------------------------------------------------------------------------
-- configuration
insert into memori.settings (key, value, description) values
  ('vm.claim_max_tokens', '200', 'Largest claim page accepted, in tokens: claims are token-cheap by design.'),
  ('vm.prepass_max_faults', '2', 'Faults the runtime pre-pass and the prefetcher may use per call (never more than the session''s max_faults_per_turn left this turn).'),
  ('vm.prepass_topics', '3', 'Topics the pre-pass extracts from a user message.'),
  ('vm.prepass_stopwords', '["about", "again", "before", "choice", "could", "decided", "decision", "earlier", "remember", "previously", "regarding", "return", "revisit", "should", "their", "there", "these", "thing", "those", "what", "whats", "where", "which", "would"]', 'Words of 5+ letters the pre-pass never takes as a topic (recall phrasing, not subject matter).'),
  ('vm.thrash_window_turns', '5', 'Window of the seed''s thrash index, in turns.'),
  ('vm.prepass_useful_level', '2', 'Deepest level at which a mapped page still counts as in context for the pre-pass (3 is a line of topic tags: it does not).')
on conflict (key) do nothing;

-- the seed's three recall signals (11.2); DBAs add or disable rows
insert into memori.vm_recall_signals (pattern, description) values
  ('(as we|what did we|earlier|previously|remember when)', 'Explicit recall: "as we decided", "what did we say", "earlier".'),
  ('(that (decision|choice|plan|approach) (about|for|regarding))', 'A reference to an earlier decision, choice, plan or approach.'),
  ('(go back to|revisit|return to)', 'Returning to an earlier topic.')
on conflict (pattern) do nothing;

comment on table memori.vm_segments is 'Closed segments of a VM session: turns, transcript pages, summary page, source and summary tokens.';
comment on table memori.vm_recall_signals is 'Recall signal patterns (case-insensitive regular expressions) of the runtime pre-pass; seeded with the seed''s three.';
comment on table memori.vm_prefetches is 'Pages the runtime pre-pass or the prefetcher faulted in, and the turn the model cited them (prefetch hit rate).';

-------------------------------------------------------------------------------
-- retention: prefetch records expire like the fault record
create or replace view memori._retention_vm_prefetches with (security_invoker = true) as
select f.id, f.user_id as owner, f.session_id as category, f.source as kind, f.expires_at, false as important
  from memori.vm_prefetches f;
comment on view memori._retention_vm_prefetches is 'memori.vm_prefetches as retention candidates: source (prepass, prefetch) as kind.';

select memori.retention_register('vm_prefetches', 'memori.vm_prefetches', 'memori._retention_vm_prefetches', 'id',
                                 'Pages prefetched by the VM pre-pass and prefetcher (seed 03)', 1, interval '30 days');

-------------------------------------------------------------------------------
-- _vm_recall_signal_valid: a recall signal must be a valid regular expression
-- The CHECK constraint vm_recall_signals_pattern_valid calls it (a trigger did,
-- but Citus refuses triggers on its tables: vm_recall_signals is a reference
-- table on a cluster, docs/scale-out.md). Immutable: a pattern's validity never
-- changes.
create or replace function memori._vm_recall_signal_valid(p_pattern text) returns boolean
as $func$
begin
  begin
    perform '' ~* p_pattern;
  exception when invalid_regular_expression then
    raise exception 'recall signal % is not a valid regular expression: %', quote_literal(p_pattern), sqlerrm
      using errcode = 'PM093', hint = 'Use a PostgreSQL regular expression (matched case-insensitively), e.g. ''(as we|earlier)''.';
  end;
  if btrim(coalesce(p_pattern, '')) = '' then
    raise exception 'recall signal pattern is empty'
      using errcode = 'PM093', hint = 'An empty pattern matches every message; disable the pre-pass with paging_mode = model instead.';
  end if;
  return true;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_recall_signal_valid(text) is 'CHECK of memori.vm_recall_signals.pattern: true, or PM093 when the pattern is empty or not a valid regular expression.';

do $check$
begin
  -- (Citus refuses even DROP TRIGGER IF EXISTS on a reference table: only when there is one)
  if exists (select from pg_catalog.pg_trigger
              where tgrelid = 'memori.vm_recall_signals'::regclass and tgname = 'vm_recall_signals_check') then
    drop trigger vm_recall_signals_check on memori.vm_recall_signals;
  end if;
  if not exists (select from pg_catalog.pg_constraint
                  where conrelid = 'memori.vm_recall_signals'::regclass and conname = 'vm_recall_signals_pattern_valid') then
    alter table memori.vm_recall_signals
      add constraint vm_recall_signals_pattern_valid check (memori._vm_recall_signal_valid(pattern));
  end if;
end
$check$;

-------------------------------------------------------------------------------
-- claim_create: a token-cheap, high-importance decision page with provenance
-- p_session_id: the VM session, which must exist (PM005): a claim cites its pages
-- p_content: the decision in one sentence: non-blank (PM001), at most vm.claim_max_tokens tokens (default 200,
--   4 bytes a token; else PM003)
-- p_provenance: the ids of the pages it was decided in (duplicates dropped): non-empty (PM001), each a live
--   page of the session (PM090)
-- p_importance: 0 to 1 (else PM001); claims are evicted last
-- p_topic: what the claim decides, stored as its hint (at most 200 characters, PM001): claim_history and
--   claim_conflicts compare it case-insensitively; NULL: none
-- p_claim_id: the claim's page id (PM063 when taken); NULL: claim_<topic>_001, the first free number (without a
--   topic the first 8 hex digits of the content's md5 stand for it)
-- p_pin: true pins it, false does not, NULL pins it when in the default pinned set (as page_create)
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.claim_create(
  p_session_id text,
  p_content    text,
  p_provenance text[],
  p_importance double precision default 0.95,
  p_topic      text default null,
  p_claim_id   text default null,
  p_pin        boolean default null,
  p_actor      text default 'system',
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns memori.pages
as $func$
declare
  -- no creating: a claim cites pages, so its session exists already
  v_s       memori.vm_sessions := memori._vm_session(p_session_id, p_user_id, false, p_now);
  v_tokens  integer := memori.token_estimate(p_content, 'page');
  v_max     integer := memori._vm_setting_int('vm.claim_max_tokens', 200);
  v_id      text := p_claim_id;
  v_stem    text;
  v_n       integer := 0;
  v_p       memori.pages;
begin
  if nullif(btrim(coalesce(p_content, '')), '') is null then
    perform memori._invalid('a claim needs content', 'State the decision, e.g. ''Decision: use PostgreSQL for the database''.');
  end if;
  if v_tokens > v_max then
    raise exception 'a claim is % tokens; claims are at most % tokens', v_tokens, v_max
      using errcode = 'PM003', detail = format('session %s', p_session_id),
            hint = 'State the decision in one sentence and keep the discussion in its provenance pages (or raise memori.settings vm.claim_max_tokens).';
  end if;
  if p_provenance is null or cardinality(p_provenance) = 0 then
    perform memori._invalid('a claim needs provenance: the page ids it was decided in',
                            'Pass p_provenance => ARRAY[''msg_042'', ''msg_043''].');
  end if;
  if p_topic is not null then
    perform memori._check_identifier('topic', p_topic, 200);
  end if;
  -- every source must be a live page of this session (PM090, as page_update checks it)
  perform memori._page_check_provenance(p_session_id, p_provenance, p_now);
  if v_id is null then
    -- claim_<topic>_001: the seed's id shape, numbered within the session
    v_stem := 'claim_' || coalesce(lower(regexp_replace(p_topic, '[^[:alnum:]_]+', '_', 'g')), left(md5(p_content), 8)) || '_';
    loop
      v_n := v_n + 1;
      v_id := v_stem || lpad(v_n::text, 3, '0');
      exit when not memori._page_live(v_s.user_id, p_session_id, v_id, p_now);
    end loop;
  end if;
  v_p := memori.page_create(p_session_id => p_session_id, p_page_id => v_id, p_content => p_content,
                            p_page_type => 'claim', p_importance => p_importance,
                            p_provenance => array(select x from unnest(p_provenance) with ordinality u(x, o)
                                                   group by x order by min(o)),
                            p_hint => p_topic, p_segment => memori._vm_segment_label(v_s.segment_seq),
                            p_add_to_working_set => true, p_pin => p_pin, p_actor => p_actor,
                            p_user_id => v_s.user_id, p_now => p_now);
  perform memori._event_emit('claim.created', jsonb_build_object('session_id', p_session_id, 'page_id', v_p.page_id,
                                                                  'topic', p_topic, 'provenance', to_jsonb(v_p.provenance)),
                             p_now);
  return v_p;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.claim_create(text, text, text[], double precision, text, text, boolean, text, text, timestamptz) is 'Record a decision as a claim page (at most vm.claim_max_tokens, importance 0.95 by default) citing pages of the session (PM090 when one is missing), mapped into L0 where eviction takes it last.';

-------------------------------------------------------------------------------
-- claim_supersede: a new decision replaces an earlier claim on the same topic
-- Seed 03, 8.3: last write wins for simple cases. The new claim takes the old
-- one's topic (and importance unless given); the old one stays a page with its
-- provenance, marked superseded_by / superseded_at / supersede_reason, leaves
-- L0 and ranks after current pages in search_pages, pages_top_importance, the
-- pre-pass and the manifest. Its history shows a 'supersede' mutation.
-- p_session_id: the VM session (PM005 when missing)
-- p_claim_id: the current claim replaced (PM005 when missing or expired; PM100 when not a claim or already
--   superseded)
-- p_content: the new decision (as claim_create: non-blank, at most vm.claim_max_tokens tokens; PM001, PM003)
-- p_provenance: the pages the new decision was made in (non-empty, live pages of the session; PM001, PM090)
-- p_reason: why the decision changed, non-blank (PM001); stored as the old claim's supersede_reason
-- p_importance: the new claim's importance, 0 to 1 (PM001); NULL: the old claim's
-- p_new_claim_id: the new claim's page id (PM063 when taken); NULL: claim_<topic>_NNN from the old claim's topic
-- p_pin: the new claim: true pins it, false does not, NULL pins it when in the default pinned set
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.claim_supersede(
  p_session_id   text,
  p_claim_id     text,
  p_content      text,
  p_provenance   text[],
  p_reason       text,
  p_importance   double precision default null,
  p_new_claim_id text default null,
  p_pin          boolean default null,
  p_actor        text default 'system',
  p_now          timestamptz default now()
) returns memori.pages
as $func$
declare
  v_s   memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_old memori.pages := memori._page_get(p_session_id, p_claim_id, p_now, true);
  v_new memori.pages;
  v_lvl integer;
begin
  if v_old.page_type <> 'claim' then
    raise exception 'page % is a % page, not a claim', quote_literal(p_claim_id), v_old.page_type
      using errcode = 'PM100', hint = 'Supersede a claim (memori.pages_by_type(session, ''claim'') lists them); update other pages with memori.page_update.';
  end if;
  if v_old.superseded_by is not null then
    raise exception 'claim % was already superseded by %', quote_literal(p_claim_id), quote_literal(v_old.superseded_by)
      using errcode = 'PM100', detail = format('superseded at %s: %s', v_old.superseded_at, v_old.supersede_reason),
            hint = format('Supersede the current claim of the topic instead (%s).',
                          memori._claim_current(v_s.user_id, p_session_id, p_claim_id, p_now));
  end if;
  if nullif(btrim(coalesce(p_reason, '')), '') is null then
    perform memori._invalid('a supersession needs a reason',
                            'Say why the decision changed, e.g. ''load tests showed MySQL fits better''.');
  end if;
  v_new := memori.claim_create(p_session_id => p_session_id, p_content => p_content, p_provenance => p_provenance,
                               p_importance => coalesce(p_importance, v_old.importance), p_topic => v_old.hint,
                               p_claim_id => p_new_claim_id, p_pin => p_pin, p_actor => p_actor,
                               p_user_id => v_s.user_id, p_now => p_now);
  -- the old claim: history now (a fork's shared row is copied first: the mark is the fork's)
  if v_old.session_id <> v_s.session_id then
    v_old := memori._page_copy(v_old.id, v_s.session_id);
  end if;
  -- its tier now (mapping the new claim may have moved it)
  select * into v_old from memori.pages where user_id = v_s.user_id and id = v_old.id;
  if v_old.tier in ('L0', 'L1') then
    perform memori._vm_swap_out(v_s, v_old, 'L2', p_actor, 'superseded', p_now);
  end if;
  perform memori._page_write(v_s.user_id, v_s.session_id, array[v_old.page_id]);
  update memori.pages set superseded_by = v_new.page_id, superseded_at = p_now, supersede_reason = p_reason
   where user_id = v_s.user_id and id = v_old.id
  returning * into v_old;
  -- (a mapped page's working-set row carries it for the eviction order)
  update memori.working_set set superseded = true
   where user_id = v_s.user_id and session_id = v_s.session_id and page_id = v_old.page_id;
  select level into v_lvl from memori.working_set
   where user_id = v_s.user_id and session_id = v_s.session_id and page_id = v_old.page_id;
  perform memori._page_mutation(v_s, v_old.page_id, 'supersede', v_old.tier, v_old.tier, v_lvl, v_lvl, null, p_actor,
                                left(format('superseded_by %s: %s', v_new.page_id, p_reason), 500), p_now);
  perform memori._event_emit('claim.superseded', jsonb_build_object('session_id', p_session_id, 'page_id', v_old.page_id,
                                                                     'superseded_by', v_new.page_id, 'topic', v_old.hint,
                                                                     'reason', p_reason), p_now);
  return v_new;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.claim_supersede(text, text, text, text[], text, double precision, text, boolean, text, timestamptz) is 'Replace a claim with a new one on the same topic (last write wins): the new claim is created with its own provenance; the old one stays with its provenance, marked superseded_by/at/reason, leaves L0 and ranks after current pages; PM100 when the page is not a current claim. Returns the new claim.';

-------------------------------------------------------------------------------
-- claim_history: every claim of a topic, current first, then the superseded newest first
-- p_topic: the topic (a claim's hint), compared case-insensitively; no rows for an unknown topic or session
create or replace function memori.claim_history(p_session_id text, p_topic text, p_now timestamptz default now())
returns setof memori.pages
as $func$
declare
  v_user text := memori._vm_user(p_session_id);  -- a missing session has no rows: no error
begin
  return query
    select q.* from memori.vm_visible_pages p join memori.pages q on q.user_id = v_user and q.id = p.id
     where p.user_id = v_user and p.viewer_session_id = p_session_id and p.page_type = 'claim'
       and lower(p.hint) = lower(p_topic) and (p.expires_at is null or p.expires_at > p_now)
     order by p.superseded_by is not null, p.id desc;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.claim_history(text, text, timestamptz) is 'The claims of a topic: current ones first, then superseded ones newest first, each with its provenance and superseded_by/at/reason.';

-------------------------------------------------------------------------------
-- claim_conflicts: two current claims on one topic that say different things
-- Seed 03, 8.3: user-resolvable conflicts for important content. Resolve one
-- with claim_supersede (the one the user keeps supersedes the other).
create or replace function memori.claim_conflicts(p_session_id text, p_now timestamptz default now())
returns setof memori.claim_conflict
as $func$
declare
  v_user text := memori._vm_user(p_session_id);  -- a missing session has no rows: no error
begin
  return query
    with c as (
      select p.page_id, lower(p.hint) as topic, p.content, p.created_at, p.id,
             lower(regexp_replace(btrim(coalesce(p.content, '')), '\s+', ' ', 'g')) as said
        from memori.vm_visible_pages p
       where p.user_id = v_user and p.viewer_session_id = p_session_id and p.page_type = 'claim'
         and p.hint is not null and p.superseded_by is null and (p.expires_at is null or p.expires_at > p_now))
    select p_session_id, a.topic, a.page_id, a.content, a.created_at, b.page_id, b.content, b.created_at
      from c a join c b on b.topic = a.topic and b.id > a.id and b.said <> a.said
     order by a.topic, a.id, b.id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.claim_conflicts(text, timestamptz) is 'Pairs of current (not superseded) claims on the same topic whose content differs, older first: conflicts for the user to resolve with claim_supersede.';

-------------------------------------------------------------------------------
-- segment_current: the label of a session's open segment
create or replace function memori.segment_current(p_session_id text) returns text
as $func$
  select memori._vm_segment_label((memori._vm_session_read(p_session_id)).segment_seq)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.segment_current(text) is 'The label of the open segment of a VM session (seg_0001, ...): pass it as p_segment when creating pages; PM005 when the session is missing.';

-------------------------------------------------------------------------------
-- segment_pages: what a Summarizer needs to summarize the open segment
create or replace function memori.segment_pages(p_session_id text, p_now timestamptz default now())
returns table (page_id text, role text, turn integer, tokens integer, tier text, pinned boolean, content text)
as $func$
declare
  v_s     memori.vm_sessions := memori._vm_session_read(p_session_id);
  -- the open segment first: a function over distributed tables is not called inside their query
  v_pages memori.pages[] := array(select p from memori._vm_segment_open(v_s, p_now) p);
begin
  return query
    select p.page_id, p.role, p.turn, p.tokens, p.tier, coalesce(w.pinned, false),
           coalesce(p.content, p.data::text, p.artifact_ref)
      from unnest(v_pages) p
      left join memori.working_set w on w.user_id = v_s.user_id and w.session_id = p.session_id
                                    and w.page_id = p.page_id
     order by p.id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.segment_pages(text, timestamptz) is 'The transcript pages of the open segment (role, turn, tokens, tier, pinned, content) in order: the source a Summarizer summarizes before segment_close.';

-------------------------------------------------------------------------------
-- segment_prompt: what the summarizer is asked to close the open segment
-- The seed's 10:1: the target is a tenth of the segment's tokens, at least 8 and
-- below the source; the source is the transcript as "role: text" lines.
-- p_target_tokens: the summary's target length in tokens; NULL or 0: the 10:1 target (a tenth of the
--   segment's tokens, at least 8, below the source); negative: PM001
create or replace function memori.segment_prompt(
  p_session_id    text,
  p_target_tokens integer default null,
  p_now           timestamptz default now()
) returns memori.compression_request
as $func$
begin
  if p_target_tokens < 0 then
    perform memori._invalid(format('p_target_tokens must be NULL, 0 (the 10:1 target) or positive, got %s',
                                   p_target_tokens),
                            'Omit p_target_tokens for the seed''s 10:1 target, or pass a number of tokens.');
  end if;
  return (
  with source as (
    select coalesce(sum(t.tokens), 0)::integer as tokens,
           coalesce(string_agg(coalesce(nullif(t.role, ''), 'system') || ': ' || coalesce(t.content, ''), E'\n'
                               order by t.ord), '') as text
      from memori.segment_pages(p_session_id, p_now)
           with ordinality as t(page_id, role, turn, tokens, tier, pinned, content, ord)
  ), target as (
    select s.tokens, s.text,
           coalesce(nullif(p_target_tokens, 0), greatest(1, least(greatest(8, s.tokens / 10), s.tokens - 1))) as tokens_max
      from source s
  )
  select row(p_session_id || ':' || memori.segment_current(p_session_id), 'new', 1, t.tokens, t.tokens_max, t.text,
             format(E'Summarize this conversation segment in at most %s tokens. Keep decisions, names and figures.\n\n%s',
                    t.tokens_max, t.text))::memori.compression_request
    from target t);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.segment_prompt(text, integer, timestamptz) is 'The summary request of the open segment (key session:segment, source transcript, source tokens, the 10:1 target unless p_target_tokens, the prompt): what segment_close''s summary answers; PM005 when the session is missing.';

-------------------------------------------------------------------------------
-- segment_close: summarize the open segment, swap its transcript out, open the next
-- p_session_id: the VM session (PM005 when missing); PM091 when its open segment has no transcript pages
-- p_summary: the Summarizer's summary of the open segment: non-blank (PM001) and fewer tokens than the
--   segment's transcript (4 bytes a token; else PM092)
-- p_summary_page_id: the summary page's id (PM063 when taken); NULL: summary_<segment> (summary_seg_0001, ...)
-- p_importance: the summary page's importance, 0 to 1 (else PM001)
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.segment_close(
  p_session_id      text,
  p_summary         text,
  p_summary_page_id text default null,
  p_importance      double precision default 0.6,
  p_actor           text default 'system',
  p_now             timestamptz default now()
) returns memori.vm_segments
as $func$
declare
  v_s       memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_label   text := memori._vm_segment_label(v_s.segment_seq);
  v_pages   memori.pages[];
  v_p       memori.pages;
  v_source  integer;
  v_sum     memori.pages;
  v_evicted integer := 0;
  v_first   integer;
  v_seg     memori.vm_segments;
begin
  select coalesce(array_agg(p order by p.id), '{}') into v_pages
    from memori._vm_segment_open(v_s, p_now) p;
  if cardinality(v_pages) = 0 then
    raise exception 'segment % of session % has no transcript pages', v_label, quote_literal(p_session_id)
      using errcode = 'PM091', detail = format('open since turn %s', v_s.segment_first_turn),
            hint = 'Close a segment after its turns were written (pages with p_segment => memori.segment_current(...)).';
  end if;
  if nullif(btrim(coalesce(p_summary, '')), '') is null then
    perform memori._invalid('the segment summary is empty', 'Summarize memori.segment_pages with a Summarizer (db.vm.segment_close does).');
  end if;
  select sum(x.tokens) into v_source from unnest(v_pages) x;
  if memori.token_estimate(p_summary, 'page') >= v_source then
    raise exception 'the summary is % tokens; the segment it replaces is % tokens', memori.token_estimate(p_summary, 'page'), v_source
      using errcode = 'PM092', detail = format('segment %s of session %s', v_label, p_session_id),
            hint = 'Summarize to well under the segment''s tokens (a tenth is the seed''s 10:1 target).';
  end if;

  -- the summary stands in for the segment: provenance to every transcript page of it
  v_sum := memori.page_create(p_session_id => p_session_id,
                              p_page_id => coalesce(p_summary_page_id, 'summary_' || v_label),
                              p_content => p_summary, p_page_type => 'summary', p_importance => p_importance,
                              p_provenance => array(select x.page_id from unnest(v_pages) x order by x.id),
                              p_hint => format('summary of %s (turns %s-%s)', v_label,
                                               (select min(x.turn) from unnest(v_pages) x), v_s.turn)
                                        || coalesce(': ' || memori._page_topics(p_summary, 5), ''),
                              p_segment => v_label, p_add_to_working_set => true, p_actor => p_actor,
                              p_user_id => v_s.user_id, p_now => p_now);
  -- the swap file: every unpinned transcript page of the segment goes to L2
  foreach v_p in array v_pages loop
    continue when exists (select 1 from memori.working_set w
                           where w.user_id = v_s.user_id and w.session_id = v_s.session_id
                             and w.page_id = v_p.page_id and w.pinned);
    -- its tier now (mapping the summary may have evicted it)
    select * into v_p from memori.pages where user_id = v_s.user_id and id = v_p.id;
    if memori._vm_swap_out(v_s, v_p, 'L2', p_actor, 'segment_close', p_now) then
      v_evicted := v_evicted + 1;
    end if;
  end loop;

  v_first := least(v_s.segment_first_turn, (select min(x.turn) from unnest(v_pages) x));  -- Citus: no subquery in VALUES
  insert into memori.vm_segments (session_id, seq, user_id, segment, first_turn, last_turn, summary_page_id, pages,
                                  evicted, source_tokens, summary_tokens, closed_at)
  values (v_s.session_id, v_s.segment_seq, v_s.user_id, v_label, v_first, v_s.turn, v_sum.page_id,
          cardinality(v_pages), v_evicted, v_source, v_sum.tokens, p_now)
  returning * into v_seg;
  update memori.vm_sessions set segment_seq = segment_seq + 1, segment_first_turn = turn + 1, updated_at = p_now
   where user_id = v_s.user_id and session_id = v_s.session_id;
  perform memori._event_emit('segment.closed', jsonb_build_object('session_id', p_session_id, 'segment', v_label,
                                                                   'summary_page_id', v_sum.page_id, 'pages', v_seg.pages,
                                                                   'evicted', v_evicted), p_now);
  return v_seg;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.segment_close(text, text, text, double precision, text, timestamptz) is 'Infinite-conversation hook: a summary page (provenance: the open segment''s transcript) enters L0, the segment''s unpinned transcript pages go to L2, the next segment opens; PM091 when empty, PM092 when the summary is not shorter.';

-------------------------------------------------------------------------------
-- segment_list: the closed segments of a session, oldest first
create or replace function memori.segment_list(p_session_id text) returns setof memori.vm_segments
as $func$
declare
  v_user text := memori._vm_user(p_session_id);  -- a missing session has no rows: no error
begin
  return query select * from memori.vm_segments s where s.user_id = v_user and s.session_id = p_session_id
                order by s.seq;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.segment_list(text) is 'Closed segments of a VM session, oldest first: turns, pages, summary page, source and summary tokens.';

-------------------------------------------------------------------------------
-- vm_prepass_topics: the topics the pre-pass takes from a user message
-- A topic is a run of adjacent subject words (5+ letters, not a stopword): a
-- multi-word subject ("deployment strategy") is one topic, searched as one
-- query, so it gets one fault, not one per word (issue 15).
-- p_user_message: the message (its first 10000 characters are read); NULL: no topics
-- p_limit: most topics returned; NULL: vm.prepass_topics (default 3); 0 or negative: none
create or replace function memori.vm_prepass_topics(p_user_message text, p_limit integer default null) returns text[]
as $func$
  with stop as (
    select array(select jsonb_array_elements_text(coalesce(memori._setting('vm.prepass_stopwords'), '[]'::jsonb))) as words
  ), w as (
    select lower(t.w) as w, t.o,
           (t.w ~ '^[[:alpha:]][[:alnum:]_]{4,}$' and lower(t.w) <> all (stop.words)) as subject
      -- words and punctuation marks: a mark (a comma, a question mark) ends a run too
      from stop, regexp_matches(left(coalesce(p_user_message, ''), 10000), '[[:alnum:]_]+|[^[:alnum:]_[:space:]]', 'g')
                 with ordinality m(w, o), lateral (select m.w[1] as w, m.o as o) t
  ), runs as (
    -- a new run starts after every word that is not a subject word
    select w.w, w.o, w.subject, count(*) filter (where not w.subject) over (order by w.o) as run from w
  ), phrases as (
    select string_agg(r.w, ' ' order by r.o) as topic, min(r.o) as first from runs r where r.subject group by r.run
  )
  select coalesce(array(select p.topic from phrases p group by p.topic
                         order by count(*) desc, min(p.first)
                         limit greatest(coalesce(p_limit, memori._vm_setting_int('vm.prepass_topics', 3)), 0)), '{}')
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_prepass_topics(text, integer) is 'Topics of a user message for the pre-pass: runs of adjacent 5+ letter words that are not vm.prepass_stopwords, each run one topic (a multi-word subject stays whole), most frequent first, then in message order.';

-------------------------------------------------------------------------------
-- vm_prepass: the runtime pre-pass (seed 11.2): which pages to prefetch for a user message
-- Anti-thrash (issue 15): a topic whose current claim is in context at a
-- useful level gets no fault at all; a topic whose summary is, gets no
-- transcript faults; a multi-word subject is one topic; superseded claims and
-- the discussion only they cite are never proposed; and _vm_prefetch_apply
-- serves at most one fault per topic.
-- p_session_id: the VM session (PM005 when missing)
-- p_user_message: the user's message, whose topics and recall signals choose the pages; NULL or longer than
--   100000 characters is PM001
-- p_apply: true faults the proposed pages not in context in (through the fault policy, one per topic); false
--   or NULL only proposes them
-- p_per_topic: most matching pages proposed per topic, 1 to 10 (else PM001)
-- p_max_faults: most faults this call applies (>= 0, else PM001); NULL: vm.prepass_max_faults (default 2);
--   never more than the session's max_faults_per_turn left this turn
-- p_target_level: the level the faults ask for (as page_fault's p_target_level), 0 to 3 (else PM001)
create or replace function memori.vm_prepass(
  p_session_id   text,
  p_user_message text,
  p_apply        boolean default false,
  p_per_topic    integer default 2,
  p_max_faults   integer default null,
  p_target_level integer default 2,
  p_now          timestamptz default now()
) returns setof memori.vm_prefetch_item
as $func$
declare
  v_s       memori.vm_sessions;
  v_signal  boolean;
  v_reason  text;
  v_items   memori.vm_prefetch_item[] := '{}';
  v_seen    text[] := '{}';
  v_topic   text;
  v_best    text;
  v_summary boolean;
  v_n       integer;
  v_r       record;
  v_p       memori.pages;
begin
  if p_user_message is null or length(p_user_message) > 100000 then
    perform memori._invalid('the user message is missing or longer than 100,000 characters', 'Pass the user''s message as text.');
  end if;
  if p_per_topic is null or p_per_topic not between 1 and 10 then
    perform memori._invalid(format('per-topic matches must be 1..10, got %s', coalesce(p_per_topic::text, 'NULL')),
                            'The seed takes the best 2 matches per topic.');
  end if;
  v_s := memori._vm_prefetch_session(p_session_id, p_apply, p_max_faults, p_target_level, p_now);
  v_signal := exists (select 1 from memori.vm_recall_signals where enabled and p_user_message ~* pattern);
  v_reason := case when v_signal then 'user_requested_recall' else 'speculative' end;

  -- 1. each topic of the message (a multi-word subject is one topic)
  foreach v_topic in array memori.vm_prepass_topics(p_user_message) loop
    v_n := 0;
    -- the topic's current claim: search ranks current claims first, and a
    -- superseded match leads to the claim that replaced it
    v_best := null;
    select memori._claim_current(v_s.user_id, p_session_id, c.page_id, p_now) into v_best
      from memori.search_pages(p_session_id, v_topic, p_user_id => v_s.user_id, p_page_types => array['claim'], p_limit => 1, p_now => p_now) c;
    if v_best is not null and memori._vm_resident(v_s.user_id, p_session_id, v_best) then
      -- the decision is in context, readable: the topic needs no fault
      if not v_best = any (v_seen) then
        v_items := v_items || memori._vm_prefetch_item(memori._page_get(p_session_id, v_best, p_now, false), v_reason,
                                                       'topic:' || v_topic);
        v_seen := v_seen || v_best;
      end if;
      continue;
    end if;
    -- a summary of the topic in context at a useful level stands in for its transcript
    v_summary := exists (select 1 from memori.search_pages(p_session_id, v_topic, p_user_id => v_s.user_id, p_page_types => array['summary'],
                                                           p_limit => 3, p_now => p_now) m
                          where memori._vm_resident(v_s.user_id, p_session_id, m.page_id));
    -- on a recall signal: the claim itself (token-cheap, it is the answer), then
    -- where it was decided, newest first
    if v_signal and v_best is not null then
      if not v_best = any (v_seen) then
        v_items := v_items || memori._vm_prefetch_item(memori._page_get(p_session_id, v_best, p_now, false), v_reason,
                                                       'topic:' || v_topic);
        v_seen := v_seen || v_best;
      end if;
      if not v_summary then
        for v_r in select src.page_id
                     from memori.page_provenance_chain(p_session_id, v_best, 'up', 1, p_now) ch
                    cross join lateral memori._page_get(p_session_id, ch.page_id, p_now, false) src
                    order by src.turn desc, src.id desc loop
          exit when v_n >= p_per_topic;
          continue when v_r.page_id = any (v_seen);
          v_p := memori._page_get(p_session_id, v_r.page_id, p_now, false);
          v_items := v_items || memori._vm_prefetch_item(v_p, v_reason, 'topic:' || v_topic);
          v_seen := v_seen || v_p.page_id;
          v_n := v_n + 1;
        end loop;
      end if;
    end if;
    -- then its best matches: never a superseded claim or the discussion only
    -- superseded claims cite, never this turn's own message; only claims and
    -- summaries when a summary covers the topic
    for v_r in select * from memori.search_pages(p_session_id, v_topic, p_user_id => v_s.user_id, p_limit => 20, p_now => p_now) loop
      exit when v_n >= p_per_topic;
      continue when v_r.page_id = any (v_seen);
      v_p := memori._page_get(p_session_id, v_r.page_id, p_now, false);
      continue when v_p.page_type = 'transcript' and v_p.turn = v_s.turn;
      continue when v_p.superseded_by is not null or memori._vm_old_discussion(v_s.user_id, p_session_id, v_p.page_id);
      continue when v_summary and v_p.page_type not in ('claim', 'summary');
      v_items := v_items || memori._vm_prefetch_item(v_p, v_reason, 'topic:' || v_topic);
      v_seen := v_seen || v_p.page_id;
      v_n := v_n + 1;
    end loop;
  end loop;
  -- 2. a recall signal: the top current claims (decisions are what users recall most)
  if v_signal then
    for v_r in select * from memori.pages_top_importance(p_session_id, 5, 'claim', p_now) loop
      continue when v_r.page_id = any (v_seen);
      v_p := memori._page_get(p_session_id, v_r.page_id, p_now, false);
      continue when v_p.superseded_by is not null;
      v_items := v_items || memori._vm_prefetch_item(v_p, 'user_requested_recall', 'recall_signal');
      v_seen := v_seen || v_p.page_id;
    end loop;
  end if;
  -- 3. always the last segment summary
  v_p := memori._vm_last_summary(v_s, p_now);
  if v_p.page_id is not null and not v_p.page_id = any (v_seen) then
    v_items := v_items || memori._vm_prefetch_item(v_p, v_reason, 'last_segment_summary');
  end if;

  return query select * from unnest(memori._vm_prefetch_result(v_s, v_items, p_apply, 'prepass', p_max_faults,
                                                                p_target_level, p_now));
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_prepass(text, text, boolean, integer, integer, integer, timestamptz) is 'The runtime pre-pass: per topic of the message (a multi-word subject is one), nothing when its current claim is in context at a useful level, else the claim and on a recall where it was decided (not when a summary of the topic is in context), then its best matches (never superseded claims or their discussion); on a recall the top current claims; the last segment summary. With p_apply, faults the ones not in context in within the turn''s budget, one per topic.';

-------------------------------------------------------------------------------
-- vm_prefetch: the seed's simple prefetcher (2.6)
-- p_session_id: the VM session (PM005 when missing)
-- p_apply: true faults the proposed pages not in context in (through the fault policy); false or NULL only
--   proposes them
-- p_claims: how many current claims to propose, most accessed first, 0 to 100 (else PM001)
-- p_tools: the tools whose procedure pages' prereqs and typical_pages_read are proposed (a procedure's
--   data->>'tool'); NULL: the tools of the session's tool pages of the last p_recent_turns turns
-- p_recent_turns: the window, in turns, for likely tools when p_tools is NULL; at least 1 (else PM001)
-- p_max_faults: most faults this call applies (>= 0, else PM001); NULL: vm.prepass_max_faults (default 2);
--   never more than the session's max_faults_per_turn left this turn
-- p_target_level: the level the faults ask for (as page_fault's p_target_level), 0 to 3 (else PM001)
create or replace function memori.vm_prefetch(
  p_session_id   text,
  p_apply        boolean default false,
  p_claims       integer default 3,
  p_tools        text[] default null,
  p_recent_turns integer default 3,
  p_max_faults   integer default null,
  p_target_level integer default 2,
  p_now          timestamptz default now()
) returns setof memori.vm_prefetch_item
as $func$
declare
  v_s     memori.vm_sessions;
  v_items memori.vm_prefetch_item[] := '{}';
  v_seen  text[] := '{}';
  v_tools text[];
  v_r     record;
  v_m     record;
  v_p     memori.pages;
  v_proc  memori.pages;
  v_pat   text;
begin
  if p_claims is null or p_claims not between 0 and 100 then
    perform memori._invalid(format('claims must be 0..100, got %s', coalesce(p_claims::text, 'NULL')), 'The seed prefetches 3.');
  end if;
  if p_recent_turns is null or p_recent_turns < 1 then
    perform memori._invalid('recent turns must be >= 1', 'Likely tools are the ones used in the last 3 turns by default.');
  end if;
  v_s := memori._vm_prefetch_session(p_session_id, p_apply, p_max_faults, p_target_level, p_now);

  -- 1. the last segment summary ("what did we discuss")
  v_p := memori._vm_last_summary(v_s, p_now);
  if v_p.page_id is not null then
    v_items := v_items || memori._vm_prefetch_item(v_p, 'speculative', 'last_segment_summary');
    v_seen := v_seen || v_p.page_id;
  end if;
  -- 2. the most referenced claims
  for v_r in select c.page_id from memori.vm_visible_pages c
              where c.user_id = v_s.user_id and c.viewer_session_id = p_session_id and c.page_type = 'claim'
                and c.superseded_by is null  -- current claims only: a superseded one is history
                and (c.expires_at is null or c.expires_at > p_now)
              order by c.access_count desc, c.importance desc, c.last_accessed desc, c.page_id
              limit p_claims loop
    v_p := memori._page_get(p_session_id, v_r.page_id, p_now, false);
    v_items := v_items || memori._vm_prefetch_item(v_p, 'speculative', 'top_claim');
    v_seen := v_seen || v_p.page_id;
  end loop;
  -- 3. prerequisite pages of likely tools: the tools named, else those used in the last turns
  v_tools := coalesce(p_tools, array(
    select distinct coalesce(p.data->>'tool', p.hint) from memori.vm_visible_pages p
     where p.user_id = v_s.user_id and p.viewer_session_id = p_session_id and p.role = 'tool' and p.turn > v_s.turn - p_recent_turns
       and coalesce(p.data->>'tool', p.hint) is not null and (p.expires_at is null or p.expires_at > p_now)));
  for v_r in select c.page_id from memori.pages_by_type(p_session_id, 'procedure', 10000, p_now) c loop
    v_proc := memori._page_get(p_session_id, v_r.page_id, p_now, false);
    continue when v_proc.data is null or jsonb_typeof(v_proc.data) <> 'object'
               or not (v_proc.data->>'tool') = any (v_tools);
    -- prereqs and typical_pages_read are page ids or globs (claim_location_*)
    for v_pat in select jsonb_array_elements_text(x) from (
                   select case when jsonb_typeof(v_proc.data->'prereqs') = 'array' then v_proc.data->'prereqs' else '[]' end
                   union all
                   select case when jsonb_typeof(v_proc.data->'typical_pages_read') = 'array'
                               then v_proc.data->'typical_pages_read' else '[]' end) t(x) loop
      for v_m in select p.page_id from memori.vm_visible_pages p
                  where p.user_id = v_s.user_id and p.viewer_session_id = p_session_id and (p.expires_at is null or p.expires_at > p_now)
                    and p.page_id like replace(replace(replace(v_pat, '\', '\\'), '%', '\%'), '*', '%')
                  order by p.importance desc, p.page_id limit 5 loop
        continue when v_m.page_id = any (v_seen);
        v_p := memori._page_get(p_session_id, v_m.page_id, p_now, false);
        v_items := v_items || memori._vm_prefetch_item(v_p, 'tool_prereq', 'procedure:' || (v_proc.data->>'tool'));
        v_seen := v_seen || v_p.page_id;
      end loop;
    end loop;
  end loop;

  return query select * from unnest(memori._vm_prefetch_result(v_s, v_items, p_apply, 'prefetch', p_max_faults,
                                                                p_target_level, p_now));
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_prefetch(text, boolean, integer, text[], integer, integer, integer, timestamptz) is 'The simple prefetcher: last segment summary, most accessed claims (speculative), prerequisite pages of likely tools from procedure pages (tool_prereq); with p_apply, faults the unmapped ones in within the turn''s budget.';

-------------------------------------------------------------------------------
-- vm_turn_start: start a turn with the user's message; runtime and hybrid sessions run the pre-pass
-- p_session_id: the VM session; created with the vm.* settings when new
-- p_user_message: the user's message, stored as a transcript page (role 'user') of the open segment; the
--   pre-pass reads it in paging mode runtime or hybrid; NULL is PM001
-- p_page_id: the message page's id (PM063 when taken); NULL: msg_<turn>_user, the turn in 4 digits (msg_0007_user)
create or replace function memori.vm_turn_start(
  p_session_id   text,
  p_user_message text,
  p_page_id      text default null,
  p_user_id      text default null,
  p_now          timestamptz default now()
) returns memori.vm_turn_result
as $func$
declare
  v_turn  integer := memori.turn_begin(p_session_id, p_user_id, p_now);
  v_s     memori.vm_sessions := memori._vm_session_read(p_session_id);
  v_label text := memori._vm_segment_label(v_s.segment_seq);
  v_p     memori.pages;
  v_items jsonb := '[]';
begin
  v_p := memori.page_create(p_session_id => p_session_id,
                            p_page_id => coalesce(p_page_id, format('msg_%s_user', lpad(v_turn::text, 4, '0'))),
                            p_content => p_user_message, p_page_type => 'transcript', p_role => 'user',
                            p_segment => v_label, p_actor => 'user', p_user_id => v_s.user_id, p_now => p_now);
  if v_s.paging_mode in ('runtime', 'hybrid') then
    select coalesce(jsonb_agg(to_jsonb(i)), '[]') into v_items
      from memori.vm_prepass(p_session_id, p_user_message, true, p_now => p_now) i;
  end if;
  return (v_turn, v_p.page_id, v_label, v_s.paging_mode, v_items)::memori.vm_turn_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_turn_start(text, text, text, text, timestamptz) is 'Begin a turn and record the user''s message as a transcript page of the open segment; in paging mode runtime or hybrid, run the pre-pass and fault its pages in. Returns memori.vm_turn_result (turn, page_id, segment, paging_mode, prefetch: the pre-pass''s items as JSON).';

-------------------------------------------------------------------------------
-- vm_cite: the pages the model's answer cited this turn (prefetch hit rate)
-- p_session_id: the VM session (PM005 when missing)
-- p_page_ids: the page ids the answer cited (NULL is PM001); ids never prefetched, or already counted, are ignored
create or replace function memori.vm_cite(p_session_id text, p_page_ids text[], p_now timestamptz default now())
returns integer
as $func$
declare
  v_s memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_n integer;
begin
  if p_page_ids is null then
    perform memori._invalid('no page ids', 'Pass the page ids the answer cited, e.g. ARRAY[''claim_db_choice_001''].');
  end if;
  update memori.vm_prefetches set used_turn = v_s.turn
   where user_id = v_s.user_id and session_id = v_s.session_id and page_id = any (p_page_ids) and used_turn is null and turn <= v_s.turn
     and (expires_at is null or expires_at > p_now);
  get diagnostics v_n = row_count;
  return v_n;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_cite(text, text[], timestamptz) is 'Record that the answer of this turn cited these pages: prefetches of them not yet used count as hits; returns how many.';
