-- pymemdb SQL API, part 10: AI virtual memory, the page table (seed 03, phase 1).
--
-- A page is any piece of session content (a message, a summary, a claim, an
-- image) with a type, a modality, a storage tier L0..L4 and up to four
-- representations: level 0 is the page itself, levels 1 (reduced) and 2
-- (abstract) are written by a Python Compressor, level 3 (a reference) is
-- derived here. The working set (L0, sql/105) maps pages into the model's
-- context; every change to it is appended to memori.page_mutations (sql/115)
-- so what the model saw at any turn can be replayed.

-------------------------------------------------------------------------------
-- configuration: the seed's defaults, copied into a session's row when it starts
insert into memori.settings (key, value, description) values
  ('vm.max_l0_tokens', '128000', 'Default token budget of a session''s working set (L0, the context window).'),
  ('vm.max_l1_pages', '100', 'Default number of evicted pages kept in L1 (hot cache) before the oldest go to L2.'),
  ('vm.eviction_policy', '"importance_weighted_lru"', 'Default eviction policy: lru, importance_weighted_lru or modality_aware_lru.'),
  ('vm.eviction_threshold', '0.85', 'Evict when the working set passes this share of max_l0_tokens.'),
  ('vm.pinned_last_turns', '3', 'Transcript pages of the last N turns are pinned.'),
  ('vm.fault_protection_turns', '2', 'Pages faulted in during the last N turns are not evicted (anti-thrash).'),
  ('vm.eviction_cooldown_turns', '3', 'Pages evicted within the last N turns carry an eviction penalty (anti-thrash).'),
  ('vm.faults_allowed', 'true', 'Default: the model may call page_fault.'),
  ('vm.max_faults_per_turn', '3', 'Fault policy: faults served per turn.'),
  ('vm.max_fault_tokens_per_turn', '8192', 'Fault policy: tokens faults may bring in per turn.'),
  ('vm.fault_confidence_threshold', '"referenced"', 'Fault policy: explicit, referenced or speculative.'),
  ('vm.autopin_pattern', '"^(system|sys|goal|plan|pref|prefs|preferences|tools?)_"', 'Pages whose id matches this regex (system prompt, goals/plans, user preferences, tool schemas) are pinned when added.'),
  ('vm.max_content_bytes', '1048576', 'Largest page content (text plus data) accepted, in bytes.')
on conflict (key) do nothing;

comment on table memori.vm_sessions is 'One row per AI virtual memory session: turn counter, L0 budget, eviction and fault policies, pack cache counters.';
comment on table memori.pages is 'The page table (seed 03): one row per page of a session, its level-0 content, tier, level, version and access tracking.';
comment on table memori.page_representations is 'Cheaper representations of a page: levels 1 (reduced) and 2 (abstract) from a Compressor, level 3 (reference) derived in SQL.';
comment on table memori.page_versions is 'Earlier contents of a page, one row per replaced version.';
comment on table memori.working_set is 'L0: the pages mapped into the model''s context, each at a level, with pinning and turn tracking.';
comment on table memori.page_faults is 'Every page fault asked for, with its reason, outcome (served, already_mapped, refused, error) and tokens.';
comment on table memori.page_mutations is 'Append-only log of page operations (create, fault_in, evict, compress, pin, unpin, update) for replay.';
comment on table memori.vm_pack_cache is 'Packed VM:CONTEXT blocks keyed by session, model, budget and working-set hash.';

-------------------------------------------------------------------------------
-- vm_visible_pages: the pages each session sees (copy-on-write forks, issue 7)
-- The one place fork resolution lives (sql/560-vm-fork.sql writes the forks).
-- A session sees its own rows (depth 0) and, when it is a fork, each
-- ancestor's rows with id <= the ancestor's max page id at the fork that no
-- closer session (itself or a nearer ancestor) has a row for. A plain view, so
-- the planner inlines it: "where user_id = $1 and viewer_session_id = $2" (every
-- reader names the user: session ids are unique per user) is an index scan of
-- the session's own pages plus empty probes of memori.vm_forks for an
-- unforked session. Every page reader goes through it (or _page_resolve /
-- _page_get); every writer of a page another session may see goes through
-- _page_get(..., true) or _page_copy first (the triggers of sql/160 copy a
-- shared row down to the forks before its own session changes it).
-- On a Citus cluster (issue 20) the reader's "user_id = <the user>" must reach
-- every table of the statement as a constant, or Citus plans it over every
-- shard (and refuses it once a reader adds a correlated subquery of its own).
-- So both checks are NOT EXISTS that the planner turns into anti joins (no
-- OFFSET, every outer reference in the subquery's WHERE), each naming
-- f.user_id: the reader's constant user reaches memori.pages o, memori.vm_forks
-- c and memori.pages q too, and Citus routes the statement to the user's shard.
-- (They were correlated subplans, whose user is a parameter Citus cannot prune
-- by.) For the plan on one server:
-- * a fork's viewer_session_id is f.session_id || '': the reader's session
--   constant then stays a filter on f and does not become o.session_id = <the
--   fork> as well; o is then estimated as the user's pages, whose statistics
--   are good, not as the fork's own pages, which are new (a fork's own rows grow
--   with every write, before ANALYZE sees them: estimated at one row, the anti
--   join was a nested loop over all of them for every shared row);
-- * the nearer-ancestor check is needed from depth 2 only: depth 1 has an arm
--   of its own without it (a fork of an unforked session pays nothing for it).
create or replace view memori.vm_visible_pages with (security_invoker = true) as
select p.session_id as viewer_session_id, 0 as depth, p.*
  from memori.pages p
union all
select f.session_id || '', f.depth, p.*
  from memori.vm_forks f
  join memori.pages p on p.user_id = f.user_id and p.session_id = f.ancestor_session_id and p.id <= f.max_page_id
 where f.depth = 1
   and not exists (select 1 from memori.pages o
                    where o.user_id = f.user_id and o.session_id = f.session_id and o.page_id = p.page_id)
union all
select f.session_id || '', f.depth, p.*
  from memori.vm_forks f
  join memori.pages p on p.user_id = f.user_id and p.session_id = f.ancestor_session_id and p.id <= f.max_page_id
 where f.depth > 1
   and not exists (select 1 from memori.pages o
                    where o.user_id = f.user_id and o.session_id = f.session_id and o.page_id = p.page_id)
   and not exists (select 1 from memori.vm_forks c, memori.pages q
                    where c.user_id = f.user_id and c.session_id = f.session_id and c.depth < f.depth
                      and q.user_id = f.user_id and q.session_id = c.ancestor_session_id
                      and q.page_id = p.page_id and q.id <= c.max_page_id);
comment on view memori.vm_visible_pages is 'Every page row each session sees (viewer_session_id): its own (depth 0) and, for a fork, its ancestors'' rows as of the fork that nothing closer overrides (depth = ancestor distance).';

-------------------------------------------------------------------------------
-- retention: pages, faults, mutations and sessions in the engine's shape
create or replace view memori._retention_pages with (security_invoker = true) as
select p.id, p.user_id as owner, p.session_id as category, p.page_type as kind, p.expires_at,
       -- claims and procedures are kept, unless vm_gc found them unreachable
       (p.page_type in ('claim', 'procedure') and p.gc_marked_at is null) as important
  from memori.pages p;
comment on view memori._retention_pages is 'memori.pages as retention candidates: page type as kind, claims and procedures important.';

create or replace view memori._retention_page_faults with (security_invoker = true) as
select f.id, f.user_id as owner, f.session_id as category, f.reason as kind, f.expires_at, false as important
  from memori.page_faults f;
comment on view memori._retention_page_faults is 'memori.page_faults as retention candidates: fault reason as kind.';

create or replace view memori._retention_page_mutations with (security_invoker = true) as
select m.id, m.user_id as owner, m.session_id as category, m.mutation_type as kind, m.expires_at, false as important
  from memori.page_mutations m;
comment on view memori._retention_page_mutations is 'memori.page_mutations as retention candidates: mutation type as kind.';

create or replace view memori._retention_vm_sessions with (security_invoker = true) as
select s.session_id as id, s.user_id as owner, 'vm_session'::text as category, 'vm_session'::text as kind,
       s.expires_at, false as important
  from memori.vm_sessions s;
comment on view memori._retention_vm_sessions is 'memori.vm_sessions as retention candidates (deleting one deletes its pages).';

select memori.retention_register('pages', 'memori.pages', 'memori._retention_pages', 'id',
                                 'AI virtual memory pages (seed 03)', 4, null, true);
select memori.retention_register('page_faults', 'memori.page_faults', 'memori._retention_page_faults', 'id',
                                 'Page faults with their reasons (seed 03)', 1, interval '30 days');
select memori.retention_register('page_mutations', 'memori.page_mutations', 'memori._retention_page_mutations', 'id',
                                 'Append-only page mutation log (seed 03)', 2, interval '90 days');
select memori.retention_register('vm_sessions', 'memori.vm_sessions', 'memori._retention_vm_sessions', 'session_id',
                                 'AI virtual memory sessions (seed 03)', 4, null, false);

-------------------------------------------------------------------------------
-- turn_begin: start the session's next turn
-- p_session_id: the VM session; created with the vm.* settings when new (PM041 when the id is another
--   user's session in memori.sessions)
create or replace function memori.turn_begin(
  p_session_id text,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns integer
as $func$
declare
  v_s   memori.vm_sessions := memori._vm_session(p_session_id, p_user_id, true, p_now);
  v_old record;
begin
  update memori.vm_sessions set turn = turn + 1, updated_at = p_now
   where user_id = v_s.user_id and session_id = v_s.session_id returning * into v_s;
  -- pages pinned as "one of the last N turns" are unpinned once they are older
  for v_old in
    update memori.working_set w set pinned = false, pin_reason = null
      from memori.pages p
     where w.user_id = v_s.user_id and w.session_id = v_s.session_id and w.pinned and w.pin_reason = 'recent_turn'
       and p.user_id = w.user_id and p.session_id = w.session_id and p.page_id = w.page_id
       and p.turn <= v_s.turn - greatest(v_s.pinned_last_turns, 1)
    returning w.page_id, w.level, w.tokens
  loop
    perform memori._page_mutation(v_s, v_old.page_id, 'unpin', 'L0', 'L0', v_old.level, v_old.level, v_old.tokens,
                                  'system', 'turn_aged_out', p_now);
  end loop;
  return v_s.turn;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.turn_begin(text, text, timestamptz) is 'Start the next turn of a VM session (created with the vm.* defaults if new); unpins transcript pages older than the last N turns; returns the turn.';

-------------------------------------------------------------------------------
-- vm_session_configure: change a session's budget and policies
-- p_session_id: the VM session; created with the vm.* settings when new
-- p_config: a JSON object of the settings to change (a key absent or JSON null keeps its value): max_l0_tokens,
--   max_l1_pages, eviction_policy, eviction_threshold, pinned_last_turns, fault_protection_turns,
--   eviction_cooldown_turns, faults_allowed, max_faults_per_turn, max_fault_tokens_per_turn,
--   fault_confidence_threshold, paging_mode; not an object, another key or a value out of range is PM001;
--   eviction_policy 'lru', 'importance_weighted_lru', 'modality_aware_lru', fault_confidence_threshold
--   'explicit', 'referenced', 'speculative', paging_mode 'model', 'runtime', 'hybrid' (else PM004)
create or replace function memori.vm_session_configure(
  p_session_id text,
  p_config     jsonb,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns memori.vm_sessions
as $func$
declare
  v_s       memori.vm_sessions := memori._vm_session(p_session_id, p_user_id, true, p_now);
  v_allowed text[] := array['max_l0_tokens', 'max_l1_pages', 'eviction_policy', 'eviction_threshold',
                            'pinned_last_turns', 'fault_protection_turns', 'eviction_cooldown_turns',
                            'faults_allowed', 'max_faults_per_turn', 'max_fault_tokens_per_turn',
                            'fault_confidence_threshold', 'paging_mode'];
  v_bad     text;
begin
  if p_config is null or jsonb_typeof(p_config) <> 'object' then
    perform memori._invalid('config must be a JSON object', 'Pass e.g. {"max_l0_tokens": 32000}.');
  end if;
  select string_agg(k, ', ') into v_bad from jsonb_object_keys(p_config) k where k <> all (v_allowed);
  if v_bad is not null then
    perform memori._invalid(format('unknown VM setting(s) %s', v_bad), 'Settings: ' || array_to_string(v_allowed, ', ') || '.');
  end if;
  -- a JSON null keeps the current value
  if p_config->>'eviction_policy' is not null then
    perform memori._vm_check_choice('eviction policy', p_config->>'eviction_policy');
  end if;
  if p_config->>'fault_confidence_threshold' is not null then
    perform memori._vm_check_choice('fault confidence threshold', p_config->>'fault_confidence_threshold');
  end if;
  if p_config ? 'paging_mode' and not coalesce((p_config->>'paging_mode') in ('model', 'runtime', 'hybrid'), false) then
    raise exception 'unknown paging mode %', coalesce(quote_literal(p_config->>'paging_mode'), 'NULL')
      using errcode = 'PM004', hint = 'Use one of: model (the model faults), runtime (a pre-pass prefetches), hybrid (both).';
  end if;
  begin
    update memori.vm_sessions set
      max_l0_tokens = coalesce((p_config->>'max_l0_tokens')::integer, max_l0_tokens),
      max_l1_pages = coalesce((p_config->>'max_l1_pages')::integer, max_l1_pages),
      eviction_policy = coalesce(p_config->>'eviction_policy', eviction_policy),
      eviction_threshold = coalesce((p_config->>'eviction_threshold')::numeric, eviction_threshold),
      pinned_last_turns = coalesce((p_config->>'pinned_last_turns')::integer, pinned_last_turns),
      fault_protection_turns = coalesce((p_config->>'fault_protection_turns')::integer, fault_protection_turns),
      eviction_cooldown_turns = coalesce((p_config->>'eviction_cooldown_turns')::integer, eviction_cooldown_turns),
      faults_allowed = coalesce((p_config->>'faults_allowed')::boolean, faults_allowed),
      max_faults_per_turn = coalesce((p_config->>'max_faults_per_turn')::integer, max_faults_per_turn),
      max_fault_tokens_per_turn = coalesce((p_config->>'max_fault_tokens_per_turn')::integer, max_fault_tokens_per_turn),
      fault_confidence_threshold = coalesce(p_config->>'fault_confidence_threshold', fault_confidence_threshold),
      paging_mode = coalesce(p_config->>'paging_mode', paging_mode),
      updated_at = p_now
     where user_id = v_s.user_id and session_id = v_s.session_id
    returning * into v_s;
  exception when check_violation or invalid_text_representation then
    perform memori._invalid('a VM setting is out of range: ' || sqlerrm,
                            'Budgets and counts are >= 0 (max_l0_tokens > 0), eviction_threshold is in (0, 1].');
  end;
  if (select coalesce(sum(tokens), 0) from memori.working_set where user_id = v_s.user_id and session_id = v_s.session_id) > v_s.max_l0_tokens then
    perform memori._vm_make_room(v_s, 0, null, 'system', 'budget_lowered', p_now);
  end if;
  delete from memori.vm_pack_cache where user_id = v_s.user_id and session_id = v_s.session_id;
  return v_s;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_session_configure(text, jsonb, text, timestamptz) is 'Change a VM session''s budget and policies (keys as in memori.vm_sessions); evicts at once when the budget is lowered below use.';

-------------------------------------------------------------------------------
-- vm_session_get: a session's row
create or replace function memori.vm_session_get(p_session_id text) returns memori.vm_sessions
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
  v_s    memori.vm_sessions;
begin
  select * into v_s from memori.vm_sessions where user_id = v_user and session_id = p_session_id;
  return case when found then v_s end;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_session_get(text) is 'The acting user''s VM session row (turn, budget, policies, pack cache counters); no row when missing.';

-------------------------------------------------------------------------------
-- page_create: register a page, optionally mapping it into the working set
-- p_session_id: the VM session; created with the vm.* settings when new
-- p_page_id: the page's id, unique in the session (PM063 when taken); non-empty, at most 200 characters (PM001)
-- p_content: the text (for media its caption or transcript); a page needs p_content, p_data or p_artifact_ref
--   (else PM001); content plus data over vm.max_content_bytes bytes is PM003
-- p_page_type: 'transcript', 'summary', 'artifact', 'claim', 'procedure' or 'index' (else PM004)
-- p_modality: 'text', 'image', 'audio', 'video' or 'structured' (else PM004)
-- p_role: of a transcript page: 'user', 'assistant', 'tool' or 'system' (else PM004); NULL: none; a
--   'system' page is pinned by default
-- p_data: structured content (jsonb): a structured page's value, video scenes, audio timestamps
-- p_importance: 0 to 1 (else PM001); weighs in importance_weighted_lru eviction and pages_top_importance
-- p_provenance: ids of the pages this one derives from (stored as given, not checked); NULL: none
-- p_represents: id of the page this one is a compressed version of (stored as given, not checked)
-- p_hint: discovery text for the manifest (not evidence); when given it replaces the derived topic tags in the
--   page's level-3 reference (appended to an image's or video's)
-- p_segment: the conversation segment the page belongs to (memori.segment_current); NULL: none
-- p_mime_type: the content's MIME type; NULL: 'text/plain' for text, 'application/json' for structured, else none
-- p_artifact_ref: where content kept outside the database is (a URL or object key), e.g. large media
-- p_tokens: the page's cost at level 0 in tokens (>= 0, else PM001); NULL: estimated at 4 bytes a token from
--   the content, else the data, else the artifact reference
-- p_size_bytes: the media's size in bytes; NULL: the bytes of content plus data
-- p_dimensions: an image's {width, height} in pixels (exactly two elements, else PM001); shown in its reference
-- p_duration_seconds: an audio or video page's length in seconds; shown in its reference
-- p_add_to_working_set: true maps the page into L0 at level 0 now, evicting as needed (PM060 when nothing can
--   go); false or NULL only registers it
-- p_pin: when mapped: true pins it, false does not, NULL pins it when in the default pinned set (role
--   'system', id matching vm.autopin_pattern, a transcript page of the last pinned_last_turns turns)
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
-- p_expires_at: when the page expires (the retention engine deletes it then); NULL: never
create or replace function memori.page_create(
  p_session_id        text,
  p_page_id           text,
  p_content           text default null,
  p_page_type         text default 'transcript',
  p_modality          text default 'text',
  p_role              text default null,
  p_data              jsonb default null,
  p_importance        double precision default 0.5,
  p_provenance        text[] default null,
  p_represents        text default null,
  p_hint              text default null,
  p_segment           text default null,
  p_mime_type         text default null,
  p_artifact_ref      text default null,
  p_tokens            integer default null,
  p_size_bytes        bigint default null,
  p_dimensions        integer[] default null,
  p_duration_seconds  numeric default null,
  p_add_to_working_set boolean default true,
  p_pin               boolean default null,
  p_actor             text default 'system',
  p_user_id           text default null,
  p_expires_at        timestamptz default null,
  p_now               timestamptz default now()
) returns memori.pages
as $func$
declare
  v_s     memori.vm_sessions := memori._vm_session(p_session_id, p_user_id, true, p_now);
  v_p     memori.pages;
  v_bytes integer;
begin
  perform memori._check_identifier('page id', p_page_id, 200);
  perform memori._vm_check_choice('page type', p_page_type);
  perform memori._vm_check_choice('modality', p_modality);
  perform memori._vm_check_choice('role', p_role, 'or omit it');
  if p_importance is null or p_importance < 0 or p_importance > 1 then
    perform memori._invalid(format('importance must be between 0 and 1, got %s', coalesce(p_importance::text, 'NULL')),
                            'Pass an importance such as 0.5 (claims are typically 0.9+).');
  end if;
  if p_tokens is not null and p_tokens < 0 then
    perform memori._invalid(format('tokens must be >= 0, got %s', p_tokens), 'Omit p_tokens to estimate them from the content.');
  end if;
  if p_dimensions is not null and cardinality(p_dimensions) <> 2 then
    perform memori._invalid('dimensions must be {width, height}', 'Pass e.g. ARRAY[1200, 800].');
  end if;
  if p_content is null and p_data is null and p_artifact_ref is null then
    perform memori._invalid('a page needs content, data or an artifact reference',
                            'Pass p_content (text, caption, transcript), p_data (structured) or p_artifact_ref.');
  end if;
  v_bytes := memori._page_check_content(p_content, p_data);
  if memori._page_row(v_s.user_id, p_session_id, p_page_id) is not null then
    raise exception 'page % already exists in session %', quote_literal(p_page_id), quote_literal(p_session_id)
      using errcode = 'PM063', hint = 'Change its content with memori.page_update, or use a new page id.';
  end if;

  insert into memori.pages (session_id, user_id, page_id, page_type, modality, role, content, data, artifact_ref,
                            mime_type, size_bytes, tokens, importance, provenance, represents, segment, turn, hint,
                            dimensions, duration_seconds, created_at, updated_at, last_accessed, dirty, expires_at,
                            search_tsv)
  values (p_session_id, v_s.user_id, p_page_id, p_page_type, p_modality, p_role, p_content, p_data, p_artifact_ref,
          -- a searched CASE: Citus evaluates a simple CASE over a parameter into "CASE 'text' WHEN NULL::boolean"
          coalesce(p_mime_type, case when p_modality = 'text' then 'text/plain'
                                     when p_modality = 'structured' then 'application/json' end),
          coalesce(p_size_bytes, v_bytes),
          coalesce(p_tokens, memori.token_estimate(coalesce(p_content, p_data::text, p_artifact_ref), 'page')),
          case when p_importance < 1e-6 then 0 else p_importance end, coalesce(p_provenance, '{}'), p_represents, p_segment, v_s.turn, p_hint,
          p_dimensions, p_duration_seconds, p_now, p_now, p_now, true, p_expires_at,
          memori.page_search_vector(p_hint, p_content))
  returning * into v_p;
  perform memori._page_write_reference(v_p, p_now);
  if not coalesce(p_add_to_working_set, false) then
    perform memori._page_mutation(v_s, p_page_id, 'create', null, v_p.tier, null, null, null, p_actor,
                                  'page_create', p_now);
  else
    perform memori._vm_map(v_s, v_p, 0, p_pin, 'create', p_actor, 'page_create', p_now);
    select * into v_p from memori.pages where user_id = v_s.user_id and id = v_p.id;
  end if;
  return v_p;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_create(text, text, text, text, text, text, jsonb, double precision, text[], text, text, text, text, text, integer, bigint, integer[], numeric, boolean, boolean, text, text, timestamptz, timestamptz) is 'Register a page (type, modality, content, provenance, media metadata) and, unless told not to, map it into L0 at level 0, evicting as needed.';

-------------------------------------------------------------------------------
-- page_update: new content is a new version
-- p_page_id: the page (PM005 when the session sees no unexpired page of that id); a fork's page shared
--   with an ancestor is copied into the session first
-- p_content: the new text; NULL keeps the current one (PM001 when p_content and p_data are both NULL);
--   content plus data over vm.max_content_bytes bytes is PM003
-- p_data: the new structured content (jsonb); NULL keeps the current one
-- p_tokens: the new cost at level 0 in tokens (>= 0, else PM001); NULL: estimated at 4 bytes a token
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
-- p_provenance: NULL keeps the provenance; else its new page ids (duplicates dropped), each a live page of
--   the session (PM001 when empty, PM090 when one is missing)
drop function if exists memori.page_update(text, text, text, jsonb, integer, text, timestamptz);
create or replace function memori.page_update(
  p_session_id text,
  p_page_id    text,
  p_content    text default null,
  p_data       jsonb default null,
  p_tokens     integer default null,
  p_actor      text default 'system',
  p_now        timestamptz default now(),
  p_provenance text[] default null
) returns memori.pages
as $func$
declare
  v_s   memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_p   memori.pages := memori._page_get(p_session_id, p_page_id, p_now, true);
  v_ws  memori.working_set;
  v_new integer;
  v_bytes integer;
begin
  if p_content is null and p_data is null then
    perform memori._invalid('nothing to update: pass p_content or p_data', 'Pass the page''s new content.');
  end if;
  if p_provenance is not null then
    -- new provenance: the pages the new content was decided or derived in (PM090 when one is missing)
    perform memori._page_check_provenance(p_session_id, p_provenance, p_now);
  end if;
  if p_tokens is not null and p_tokens < 0 then
    perform memori._invalid(format('tokens must be >= 0, got %s', p_tokens), 'Omit p_tokens to estimate them from the content.');
  end if;
  v_bytes := memori._page_check_content(coalesce(p_content, v_p.content), coalesce(p_data, v_p.data));
  insert into memori.page_versions (session_id, page_id, user_id, version, content, data, tokens, created_at)
  values (v_p.session_id, v_p.page_id, v_p.user_id, v_p.version, v_p.content, v_p.data, v_p.tokens, v_p.updated_at);
  v_new := coalesce(p_tokens, memori.token_estimate(coalesce(p_content, v_p.content, coalesce(p_data, v_p.data)::text), 'page'));
  perform memori._page_write(v_s.user_id, v_p.session_id, array[v_p.page_id]);
  update memori.pages
     set content = coalesce(p_content, content), data = coalesce(p_data, data), tokens = v_new,
         -- written here, not generated: a generated column is recomputed on every update of the row
         search_tsv = case when p_content is null then search_tsv else memori.page_search_vector(hint, p_content) end,
         provenance = case when p_provenance is null then provenance
                           else array(select u.x from unnest(p_provenance) with ordinality u(x, o)
                                       group by u.x order by min(u.o)) end,
         size_bytes = v_bytes,  -- v_p is the locked row: its content is the row's
         version = version + 1, dirty = true, updated_at = p_now
   where user_id = v_s.user_id and id = v_p.id
  returning * into v_p;
  -- reduced and abstract forms describe the old content: the Compressor rewrites them
  delete from memori.page_representations
   where user_id = v_s.user_id and session_id = v_p.session_id and page_id = v_p.page_id and level in (1, 2);
  perform memori._page_write_reference(v_p, p_now);
  select * into v_ws from memori.working_set
   where user_id = v_s.user_id and session_id = v_p.session_id and page_id = v_p.page_id;
  if found then
    -- a mapped page is re-mapped from its new content at level 0 (its levels 1 and 2 are gone); logged there
    perform memori._vm_map(v_s, v_p, case when v_ws.level = 3 then 3 else 0 end, null, 'update', p_actor,
                           format('version %s', v_p.version), p_now);
    select * into v_p from memori.pages where user_id = v_s.user_id and id = v_p.id;
  else
    perform memori._page_mutation(v_s, v_p.page_id, 'update', v_p.tier, v_p.tier, null, null, null, p_actor,
                                  format('version %s', v_p.version), p_now);
  end if;
  perform memori._event_emit('page.updated', jsonb_build_object('session_id', v_p.session_id, 'page_id', v_p.page_id,
                                                                 'version', v_p.version), p_now);
  return v_p;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_update(text, text, text, jsonb, integer, text, timestamptz, text[]) is 'Replace a page''s content (and, with p_provenance, its provenance: PM090 when a cited page is missing): the old one goes to page_versions, the page is dirty until flushed, stale representations and cached packs are dropped.';

-------------------------------------------------------------------------------
-- page_flush: mark dirty pages as persisted
-- p_session_id: the VM session (PM005 when missing)
-- p_page_ids: the pages to flush (ids not dirty or missing are skipped); NULL: every dirty page of the session
create or replace function memori.page_flush(
  p_session_id text,
  p_page_ids   text[] default null,
  p_now        timestamptz default now()
) returns integer
as $func$
declare
  v_s   memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_n   integer;
  v_id  bigint;
  v_ids text[];
begin
  -- dirty pages shared with an ancestor are copied first (flushing is a write). "An
  -- ancestor's row" is its session, not depth > 0: a filter that empties the view's
  -- own-row branch outright makes Citus plan the statement over every shard
  for v_id in
    select v.id from memori.vm_visible_pages v
     where v.user_id = v_s.user_id and v.viewer_session_id = p_session_id and v.session_id <> p_session_id
       and v.dirty
       and (p_page_ids is null or v.page_id = any (p_page_ids))
  loop
    perform memori._page_copy(v_id, p_session_id);
  end loop;
  select array_agg(page_id) into v_ids from memori.pages
   where user_id = v_s.user_id and session_id = p_session_id and dirty
     and (p_page_ids is null or page_id = any (p_page_ids));
  perform memori._page_write(v_s.user_id, p_session_id, coalesce(v_ids, '{}'));
  update memori.pages set dirty = false, last_flushed = p_now
   where user_id = v_s.user_id and session_id = p_session_id and dirty and (p_page_ids is null or page_id = any (p_page_ids));
  get diagnostics v_n = row_count;
  return v_n;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_flush(text, text[], timestamptz) is 'Clear the dirty bit of a session''s pages (all, or the ids given) and stamp last_flushed; returns how many.';

-------------------------------------------------------------------------------
-- page_lookup: a page-table entry (what a TLB caches)
-- p_page_id: the page; the result is NULL when the session sees no unexpired page of that id
create or replace function memori.page_lookup(p_session_id text, p_page_id text, p_now timestamptz default now())
returns memori.page_table_entry
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
  v_e    memori.page_table_entry;
begin
  -- the columns, not a row cast to memori.page_table_entry: on a cluster the statement runs
  -- whole on the user's worker, which may not have the type
  select p.page_id, p.tier, p.compression_level, p.version, p.dirty, p.last_flushed, p.last_accessed,
         p.access_count, w.page_id is not null, w.level, coalesce(w.pinned, false), p.expires_at
    into v_e
    from memori.vm_visible_pages p
    left join memori.working_set w
      on w.user_id = p.user_id and w.session_id = p.viewer_session_id and w.page_id = p.page_id
   where p.user_id = v_user and p.viewer_session_id = p_session_id and p.page_id = p_page_id
     and (p.expires_at is null or p.expires_at > p_now);
  if not found then
    return null;
  end if;
  return v_e;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_lookup(text, text, timestamptz) is 'The page-table entry of a page (tier, level, version, dirty, access, mapping, expires_at for a cache to honour); NULL when missing or expired.';

-------------------------------------------------------------------------------
-- page_representation_put: store a Compressor's level 1, 2 (or 3) output
-- p_page_id: the page (PM005 when missing or expired); a fork's shared page is copied into the session first
-- p_level: 1 (reduced), 2 (abstract) or 3 (reference); anything else is PM001 (level 0 is page_update's)
-- p_content: the representation's text (PM001 when p_content and p_data are both NULL; PM003 above
--   vm.max_content_bytes bytes)
-- p_data: the representation's structured content (jsonb)
-- p_tokens: its cost in tokens; NULL: estimated at 4 bytes a token
-- p_version: the page version it was made from (page_compress_todo's version): PM064 when not the current
--   one; NULL: not checked, stored as the current version
create or replace function memori.page_representation_put(
  p_session_id text,
  p_page_id    text,
  p_level      integer,
  p_content    text default null,
  p_data       jsonb default null,
  p_tokens     integer default null,
  p_version    integer default null,
  p_now        timestamptz default now()
) returns memori.page_representations
as $func$
declare
  -- the session first, then the page: the order every VM writer locks in (no deadlocks)
  v_s memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_p memori.pages := memori._page_get(p_session_id, p_page_id, p_now, true);
  v_r memori.page_representations;
begin
  if p_level is null or p_level not between 1 and 3 then
    perform memori._invalid(format('representation level must be 1, 2 or 3, got %s', coalesce(p_level::text, 'NULL')),
                            'Level 0 is the page itself (memori.page_update); 1 reduced, 2 abstract, 3 reference.');
  end if;
  if p_content is null and p_data is null then
    perform memori._invalid('a representation needs content or data', 'Pass the compressed text as p_content.');
  end if;
  if p_version is not null and p_version <> v_p.version then
    raise exception 'page % is at version %, the representation was made from version %', quote_literal(p_page_id),
                    v_p.version, p_version
      using errcode = 'PM064', hint = 'Compress the current content again (memori.page_compress_todo lists it).';
  end if;
  perform memori._page_check_content(p_content, p_data);
  perform memori._page_write(v_s.user_id, p_session_id, array[p_page_id]);
  insert into memori.page_representations (session_id, page_id, user_id, level, content, data, tokens, version,
                                           created_at)
  values (p_session_id, p_page_id, v_p.user_id, p_level, p_content, p_data,
          coalesce(p_tokens, memori.token_estimate(coalesce(p_content, p_data::text), 'page')), v_p.version, p_now)
  on conflict (user_id, session_id, page_id, level) do update
     set content = excluded.content, data = excluded.data, tokens = excluded.tokens, version = excluded.version,
         created_at = excluded.created_at
  returning * into v_r;
  delete from memori.vm_pack_cache where user_id = v_s.user_id and session_id = p_session_id;
  -- a page mapped at this level now costs the new representation's tokens
  if exists (select 1 from memori.working_set w
              where w.user_id = v_s.user_id and w.session_id = p_session_id and w.page_id = p_page_id and w.level = p_level
                and w.tokens <> v_r.tokens) then
    perform memori._vm_map(v_s, v_p, p_level, null, 'compress', 'system', 'representation_rewritten', p_now);
  end if;
  return v_r;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_representation_put(text, text, integer, text, jsonb, integer, integer, timestamptz) is 'Store a reduced (1), abstract (2) or reference (3) representation of a page; PM064 when made from an older version.';

-------------------------------------------------------------------------------
-- page_compress_todo: pages whose levels 1 and 2 a Compressor should write
-- p_limit: most rows returned (one per page and missing level); NULL: 100; 0 or negative: none
create or replace function memori.page_compress_todo(
  p_session_id text,
  p_limit      integer default 100,
  p_now        timestamptz default now()
) returns setof memori.page_compress_item
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
begin
  return query
    select p.page_id, p.modality, p.page_type, l.level, p.content, p.data, p.tokens, p.version
      from memori.vm_visible_pages p
     cross join (values (1), (2)) l(level)
     where p.user_id = v_user and p.viewer_session_id = p_session_id
       and (p.expires_at is null or p.expires_at > p_now)
       and p.page_type not in ('index', 'claim', 'procedure')  -- never or rarely compressed (seed 1.1)
       and p.tokens > 8
       and not exists (select 1 from memori.page_representations r
                        where r.user_id = p.user_id and r.session_id = p.session_id and r.page_id = p.page_id and r.level = l.level)
     order by (p.tier = 'L0') desc, p.last_accessed desc, p.page_id, l.level
     limit greatest(coalesce(p_limit, 100), 0);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_compress_todo(text, integer, timestamptz) is 'Missing level 1 and 2 representations of compressible pages (mapped pages first) for a Compressor to write.';

-------------------------------------------------------------------------------
-- page_pin: pin or unpin a mapped page
-- p_page_id: the page (PM005 when missing or expired); pinning an unmapped page maps it at level 0
-- p_pinned: true pins, false unpins (a recent-turn pin that still applies stays); NULL is PM001
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.page_pin(
  p_session_id text,
  p_page_id    text,
  p_pinned     boolean default true,
  p_actor      text default 'user',
  p_now        timestamptz default now()
) returns boolean
as $func$
declare
  v_s memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_p memori.pages := memori._page_get(p_session_id, p_page_id, p_now, false);
  v_w memori.working_set;
  v_recent boolean;
begin
  if p_pinned is null then
    perform memori._invalid('p_pinned must be true or false', 'Pass true to pin, false to unpin.');
  end if;
  select * into v_w from memori.working_set
   where user_id = v_s.user_id and session_id = p_session_id and page_id = p_page_id for update;
  if not found then
    if not p_pinned then
      return false;
    end if;
    -- pinning an unmapped page maps it first (level 0)
    perform memori._vm_map(v_s, v_p, 0, true, 'fault_in', p_actor, 'pin', p_now);
    return true;
  end if;
  -- the recent-turn window is a separate default (seed 2.3): an explicit pin
  -- replaces it as the reason, and an unpin leaves it while it still applies
  v_recent := v_p.page_type = 'transcript' and v_s.pinned_last_turns > 0
              and v_p.turn > v_s.turn - v_s.pinned_last_turns;
  if p_pinned then
    if v_w.pinned and v_w.pin_reason = 'explicit' then
      return false;
    end if;
    update memori.working_set set pinned = true, pin_reason = 'explicit'
     where user_id = v_s.user_id and session_id = p_session_id and page_id = p_page_id;
  else
    if not v_w.pinned or (v_w.pin_reason = 'recent_turn' and v_recent) then
      return false;
    end if;
    update memori.working_set set pinned = v_recent, pin_reason = case when v_recent then 'recent_turn' end
     where user_id = v_s.user_id and session_id = p_session_id and page_id = p_page_id;
  end if;
  perform memori._page_mutation(v_s, p_page_id, case when p_pinned then 'pin' else 'unpin' end, 'L0', 'L0',
                                v_w.level, v_w.level, v_w.tokens, p_actor, 'explicit', p_now);
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_pin(text, text, boolean, text, timestamptz) is 'Pin (never evicted) or unpin a page; an explicit pin replaces a recent-turn or default-set pin as the reason and outlives turn aging; unpinning keeps a recent-turn pin that still applies; pinning an unmapped page maps it at level 0. True when something changed.';
