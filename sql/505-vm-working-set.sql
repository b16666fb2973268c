-- pymemdb SQL API, part 11: the working set (seed 03, phases 2 and 4).
--
-- L0 holds the pages mapped into the model's context, each at a level. The
-- budget invariant: the tokens of L0 never exceed the session's max_l0_tokens,
-- and pinned pages are never evicted. When a page comes in and L0 would pass
-- eviction_threshold * max_l0_tokens, victims are chosen by the session's
-- policy; each victim is first downgraded one level when a cheaper
-- representation exists (compress before evict), and only then moved to L1.
-- Pinned pages and pages faulted in during the last fault_protection_turns
-- are never victims; if the hard budget cannot be met without them, PM060.

-------------------------------------------------------------------------------
-- _vm_level_tokens: tokens of a page at a level (NULL when that level is missing)
create or replace function memori._vm_level_tokens(p_page memori.pages, p_level integer)
returns integer
as $func$
  select case when p_level = 0 then p_page.tokens
              else (select r.tokens from memori.page_representations r
                     where r.user_id = p_page.user_id and r.session_id = p_page.session_id
                       and r.page_id = p_page.page_id and r.level = p_level) end
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_level_tokens(memori.pages, integer) is 'Tokens of a page at a level: level 0 from the page, others from page_representations (NULL when not written).';

-------------------------------------------------------------------------------
-- _vm_candidates: the evictable pages of a session, in eviction order
-- The three policies are one ordering with policy-dependent terms: media
-- first for modality_aware_lru, then the keep score (lowest evicted first).
create or replace function memori._vm_candidates(p_s memori.vm_sessions, p_policy text, p_keep text,
                                                 p_compressible boolean)
returns table (page_id text, level integer, tokens integer, page_type text, modality text,
               keep_score double precision)
as $func$
  select c.page_id, c.level, c.tokens, c.page_type, c.modality, c.keep_score
    from (select w.page_id, w.level, w.tokens, w.page_type, w.modality, w.last_access_turn, w.turn_added,
                 -- a superseded claim is history: evicted like any page, not last (issue 15)
                 (w.page_type = 'claim' and not w.superseded) as current_claim,
                 -- written out here: a function with SET cannot be inlined, and this runs per mapped page
                 -- the seed's eviction priority by type (claims and index pages very low, summaries and procedures low)
                 (case when w.superseded then 0.0
                       when w.page_type in ('claim', 'index') then 1.0 when w.page_type = 'procedure' then 0.5
                       when w.page_type = 'summary' then 0.5 else 0.0 end
                  -- anti-thrash: a page evicted within the cooldown carries a penalty against another eviction
                  + case when w.last_evict_turn is not null
                              and p_s.turn - w.last_evict_turn < p_s.eviction_cooldown_turns then 0.5 else 0.0 end
                 )::double precision
                 -- recency, and importance for importance_weighted_lru
                 + case when p_policy = 'importance_weighted_lru'
                        then 0.5 / (1 + greatest(p_s.turn - w.last_access_turn, 0)) + 0.5 * w.importance
                        else 1.0 / (1 + greatest(p_s.turn - w.last_access_turn, 0)) end as keep_score
            -- the page's columns the order reads are in its working-set row (migration 0031): no join
            from memori.working_set w
           where w.user_id = p_s.user_id and w.session_id = p_s.session_id
             and not w.pinned
             and w.page_id is distinct from p_keep
             -- the compress pass only wants pages that can go down a level
             and (not p_compressible or w.level < 3)
             and (not p_compressible or w.page_type not in ('index', 'claim', 'procedure'))
             -- anti-thrash: pages faulted in during the last fault_protection_turns stay
             and not (w.last_fault_turn is not null and p_s.turn - w.last_fault_turn < p_s.fault_protection_turns)) c
   -- claims last whatever their score (issue 7): decisions stay available while anything else can go
   order by c.current_claim,
            case when p_policy = 'modality_aware_lru' and c.modality in ('image', 'audio', 'video') then 0 else 1 end,
            c.keep_score, c.last_access_turn, c.turn_added, c.page_id
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_candidates(memori.vm_sessions, text, text, boolean) is 'Unpinned, unprotected pages of a working set in eviction order for a policy (claims last; modality_aware_lru: media first; then keep score); only compressible ones when asked.';

-------------------------------------------------------------------------------
-- vm_eviction_candidates: which pages a policy would evict first, and why
-- p_session_id: the VM session (PM005 when missing)
-- p_policy: the order to rank by: 'lru', 'importance_weighted_lru' or 'modality_aware_lru' (else PM004);
--   NULL: the session's eviction_policy
create or replace function memori.vm_eviction_candidates(p_session_id text, p_policy text default null)
returns table (rank bigint, page_id text, level integer, tokens integer, page_type text, modality text,
               keep_score double precision)
as $func$
declare
  v_s      memori.vm_sessions := memori._vm_session_read(p_session_id);
  v_policy text := coalesce(p_policy, v_s.eviction_policy);
begin
  if v_policy not in ('lru', 'importance_weighted_lru', 'modality_aware_lru') then
    raise exception 'unknown eviction policy %', quote_literal(v_policy)
      using errcode = 'PM004', hint = 'Use one of: lru, importance_weighted_lru, modality_aware_lru.';
  end if;
  return query select row_number() over (), c.page_id, c.level, c.tokens, c.page_type, c.modality, c.keep_score
                 from memori._vm_candidates(v_s, v_policy, null, false) c;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_eviction_candidates(text, text) is 'The evictable pages of a working set in the order a policy (default the session''s) would take them, with their keep scores; pinned and protected pages are not listed.';

-------------------------------------------------------------------------------
-- _vm_evict_run: free at least p_required tokens of L0 (as far as the rules allow)
-- Each pass first chooses its victims in the policy's order (reads only),
-- then writes them set-based: one statement per table for all victims, and
-- the log rows one per victim in that order. Per victim, the writes were
-- five statements and three function calls (issue 21: with an 8k-token L0
-- a fault that needs room for a 300-token page evicts ~20 references).
create or replace function memori._vm_evict_run(
  p_s memori.vm_sessions, p_required integer, p_policy text, p_keep text, p_actor text, p_cause text,
  p_now timestamptz
) returns setof memori.vm_eviction
as $func$
declare
  v_policy  text := coalesce(p_policy, p_s.eviction_policy);
  v_freed   integer := 0;
  v_c       record;
  v_next    record;
  v_ids     text[] := '{}';
  v_before  integer[] := '{}';   -- each victim's level in L0
  v_after   integer[] := '{}';   -- pass 1: its cheaper level
  v_tokens  integer[] := '{}';   -- pass 1: its tokens at that level; pass 2: the tokens it held
  v_saved   integer[] := '{}';   -- pass 1: the tokens its compression freed
  v_expires timestamptz;
  i         integer;
begin
  if v_policy not in ('lru', 'importance_weighted_lru', 'modality_aware_lru') then
    raise exception 'unknown eviction policy %', quote_literal(v_policy)
      using errcode = 'PM004', hint = 'Use one of: lru, importance_weighted_lru, modality_aware_lru.';
  end if;
  if p_required <= 0 then
    return;
  end if;
  -- pass 1, compress before evict: each victim down one level where a cheaper form exists
  for v_c in select * from memori._vm_candidates(p_s, v_policy, p_keep, true) loop
    exit when v_freed >= p_required;
    select r.level, r.tokens into v_next
      from memori.page_representations r
     where r.user_id = p_s.user_id and r.session_id = p_s.session_id and r.page_id = v_c.page_id and r.level > v_c.level
       and r.tokens < v_c.tokens
     order by r.level
     limit 1;
    continue when not found;
    v_ids := v_ids || v_c.page_id;
    v_before := v_before || v_c.level;
    v_after := v_after || v_next.level;
    v_tokens := v_tokens || v_next.tokens;
    v_saved := v_saved || (v_c.tokens - v_next.tokens);
    v_freed := v_freed + v_c.tokens - v_next.tokens;
  end loop;
  if cardinality(v_ids) > 0 then
    v_expires := memori._vm_log_expiry(p_s, p_actor, p_now);
    perform memori._page_write(p_s.user_id, p_s.session_id, v_ids);
    -- (array_position, not a join to unnest: a router statement on the user's shard on Citus)
    update memori.working_set w
       set level = v_after[array_position(v_ids, w.page_id)], tokens = v_tokens[array_position(v_ids, w.page_id)]
     where w.user_id = p_s.user_id and w.session_id = p_s.session_id and w.page_id = any (v_ids);
    update memori.pages p set compression_level = v_after[array_position(v_ids, p.page_id)]
     where p.user_id = p_s.user_id and p.session_id = p_s.session_id and p.page_id = any (v_ids);
    for i in 1 .. cardinality(v_ids) loop
      insert into memori.page_mutations (session_id, user_id, page_id, at, turn, mutation_type, tier_before,
                                         tier_after, level_before, level_after, tokens_after, actor, cause, expires_at)
      values (p_s.session_id, p_s.user_id, v_ids[i], p_now, p_s.turn, 'compress', 'L0', 'L0', v_before[i], v_after[i],
              v_tokens[i], p_actor, p_cause, v_expires);
      return next row(v_ids[i], 'compress', v_after[i], 'L0', v_saved[i])::memori.vm_eviction;
    end loop;
    -- any change to the working set makes cached packs stale
    delete from memori.vm_pack_cache where user_id = p_s.user_id and session_id = p_s.session_id;
  end if;
  -- pass 2: evict to L1 in the same order
  if v_freed >= p_required then
    return;
  end if;
  v_ids := '{}';
  v_before := '{}';
  v_tokens := '{}';
  for v_c in select * from memori._vm_candidates(p_s, v_policy, p_keep, false) loop
    exit when v_freed >= p_required;
    v_ids := v_ids || v_c.page_id;
    v_before := v_before || v_c.level;
    v_tokens := v_tokens || v_c.tokens;
    v_freed := v_freed + v_c.tokens;
  end loop;
  if cardinality(v_ids) > 0 then
    v_expires := coalesce(v_expires, memori._vm_log_expiry(p_s, p_actor, p_now));
    perform memori._page_write(p_s.user_id, p_s.session_id, v_ids);
    delete from memori.working_set
     where user_id = p_s.user_id and session_id = p_s.session_id and page_id = any (v_ids);
    update memori.pages set tier = 'L1', compression_level = 0, last_evict_turn = p_s.turn
     where user_id = p_s.user_id and session_id = p_s.session_id and page_id = any (v_ids);
    for i in 1 .. cardinality(v_ids) loop
      insert into memori.page_mutations (session_id, user_id, page_id, at, turn, mutation_type, tier_before,
                                         tier_after, level_before, level_after, tokens_after, actor, cause, expires_at)
      values (p_s.session_id, p_s.user_id, v_ids[i], p_now, p_s.turn, 'evict', 'L0', 'L1', v_before[i], null, null,
              p_actor, p_cause, v_expires);
      return next row(v_ids[i], 'evict', null, 'L1', v_tokens[i])::memori.vm_eviction;
    end loop;
    delete from memori.vm_pack_cache where user_id = p_s.user_id and session_id = p_s.session_id;
  end if;
  perform memori._vm_l1_overflow(p_s, p_actor, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_evict_run(memori.vm_sessions, integer, text, text, text, text, timestamptz) is 'Free at least p_required L0 tokens: downgrade victims a level where cheaper, then evict to L1, in the policy''s order; returns what it did (may free less when pages are pinned or protected).';

-------------------------------------------------------------------------------
-- _vm_l1_overflow: L1 keeps max_l1_pages; the least recently used go to L2
-- Which pages go is the order "last_accessed desc, page_id desc" past the
-- first max_l1_pages (the cap): the oldest n - max_l1_pages of n, taken here
-- from the front of the ascending order (one scan: L1 holds at most the cap
-- plus what one eviction run moved, 100-130 rows in bench vm, so neither a
-- bounded count nor an index on the order would save anything measurable;
-- the per-page UPDATE is the cost). The log rows are the ones
-- _page_mutation writes, one per demoted page in page_id order (ids in that
-- order), its checks, retention and pack-cache drop done once per call.
-- Every statement names its user (one shard on Citus).
create or replace function memori._vm_l1_overflow(p_s memori.vm_sessions, p_actor text, p_now timestamptz)
returns void
as $func$
declare
  v_id      text;
  v_ids     text[];
  v_expires timestamptz;
begin
  -- one scan of the session's L1 rows, oldest first; the pages past the cap are the first n - max_l1_pages
  select a[1:greatest(cardinality(a) - p_s.max_l1_pages, 0)] into v_ids
    from (select array_agg(page_id order by last_accessed, page_id) a
            from memori.pages
           where user_id = p_s.user_id and session_id = p_s.session_id and tier = 'L1') l;
  if coalesce(cardinality(v_ids), 0) = 0 then
    return;
  end if;
  v_expires := memori._vm_log_expiry(p_s, p_actor, p_now);  -- the actor checked before anything is written
  perform memori._page_write(p_s.user_id, p_s.session_id, v_ids);
  update memori.pages p set tier = 'L2'
   where p.user_id = p_s.user_id and p.session_id = p_s.session_id and p.page_id = any (v_ids);
  if not found then
    return;
  end if;
  -- one INSERT per page, in page_id order, each a single-row router INSERT on Citus (an INSERT ... SELECT of
  -- many rows goes through the coordinator's COPY there, which row-level security refuses)
  select array_agg(x order by x) into v_ids from unnest(v_ids) x;
  foreach v_id in array v_ids loop
    insert into memori.page_mutations (session_id, user_id, page_id, at, turn, mutation_type, tier_before,
                                       tier_after, level_before, level_after, tokens_after, actor, cause, expires_at)
    values (p_s.session_id, p_s.user_id, v_id, p_now, p_s.turn, 'evict', 'L1', 'L2', null, null, null, p_actor,
            'l1_full', v_expires);
  end loop;
  delete from memori.vm_pack_cache where user_id = p_s.user_id and session_id = p_s.session_id;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_l1_overflow(memori.vm_sessions, text, timestamptz) is 'Move the least recently accessed L1 pages beyond max_l1_pages to L2 (logged).';

-------------------------------------------------------------------------------
-- _vm_make_room: keep L0 within budget for p_incoming more tokens
create or replace function memori._vm_make_room(
  p_s memori.vm_sessions, p_incoming integer, p_keep text, p_actor text, p_cause text, p_now timestamptz
) returns text[]
as $func$
declare
  v_used    integer;
  v_target  integer := floor(p_s.max_l0_tokens * p_s.eviction_threshold)::integer;
  v_done    memori.vm_eviction[];
  v_freed   integer;
  v_blocked integer;
begin
  select coalesce(sum(tokens), 0) into v_used
    from memori.working_set
     where user_id = p_s.user_id and session_id = p_s.session_id and page_id is distinct from p_keep;
  if v_used + p_incoming <= v_target then
    return '{}';
  end if;
  -- over the threshold: evict down to it as far as the rules allow
  select coalesce(array_agg(e), '{}') into v_done
    from memori._vm_evict_run(p_s, v_used + p_incoming - v_target, null, p_keep, p_actor, p_cause, p_now) e;
  select coalesce(sum(e.tokens_freed), 0) into v_freed from unnest(v_done) e;
  if v_used + p_incoming - v_freed > p_s.max_l0_tokens then
    select coalesce(sum(tokens), 0) into v_blocked
      from memori.working_set
     where user_id = p_s.user_id and session_id = p_s.session_id and page_id is distinct from p_keep;
    raise exception 'the working set cannot take % tokens: % of % are pinned or protected', p_incoming, v_blocked,
                    p_s.max_l0_tokens
      using errcode = 'PM060',
            detail = format('session %s, turn %s, incoming %s tokens', p_s.session_id, p_s.turn, p_incoming),
            hint = 'Unpin pages (memori.page_pin(..., false)), map this page at a cheaper level, or raise max_l0_tokens (memori.vm_session_configure).';
  end if;
  return array(select distinct e.page_id from unnest(v_done) e order by 1);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_make_room(memori.vm_sessions, integer, text, text, text, timestamptz) is 'Evict (compress first) down to eviction_threshold for p_incoming tokens; PM060 when even then L0 would pass max_l0_tokens. Returns the pages touched.';

-------------------------------------------------------------------------------
-- _vm_map: put a page into L0 at a level (or change its level), making room
create or replace function memori._vm_map(
  p_s memori.vm_sessions, p_page memori.pages, p_level integer, p_pin boolean, p_type text, p_actor text,
  p_cause text, p_now timestamptz
) returns text[]
as $func$
declare
  v_tokens  integer;
  v_old     memori.working_set;
  v_pin     boolean;
  v_reason  text;
  v_evicted text[];
begin
  -- a mapped page is always the session's own row: a page shared with an
  -- ancestor (copy-on-write fork) is copied before it is mapped
  if p_page.session_id <> p_s.session_id then
    p_page := memori._page_copy(p_page.id, p_s.session_id);
  end if;
  v_tokens := memori._vm_level_tokens(p_page, p_level);
  if v_tokens is null then
    raise exception 'page % has no level % representation', quote_literal(p_page.page_id), p_level
      using errcode = 'PM005', hint = 'Map it at level 0 or 3, or write the level with a Compressor first.';
  end if;
  select * into v_old from memori.working_set
   where user_id = p_s.user_id and session_id = p_s.session_id and page_id = p_page.page_id;
  -- the seed's default pinned set: system prompt, goals/plans, preferences, tool schemas, the last N turns
  v_reason := case when p_pin then 'explicit'
                   when p_pin is null and (p_page.role = 'system'
                                           or p_page.page_id ~ coalesce(memori._vm_setting(p_s.user_id, p_s.session_id, 'vm.autopin_pattern')
                                                                      #>> '{}', '^$'))
                     then 'default_set'
                   when p_pin is null and p_page.page_type = 'transcript' and p_s.pinned_last_turns > 0
                        and p_page.turn > p_s.turn - p_s.pinned_last_turns
                     then 'recent_turn' end;
  v_pin := coalesce(v_old.pinned, false) or v_reason is not null;
  v_evicted := memori._vm_make_room(p_s, v_tokens, p_page.page_id, p_actor, p_cause, p_now);
  perform memori._page_write(p_s.user_id, p_s.session_id, array[p_page.page_id]);
  -- with the page's columns the eviction order reads (_vm_candidates): they do not change while it is mapped,
  -- but for a supersede (sql/550-vm-lifecycle.sql)
  insert into memori.working_set (session_id, page_id, user_id, level, tokens, turn_added, last_access_turn, pinned,
                                  pin_reason, added_at, page_type, modality, importance, superseded, last_evict_turn,
                                  last_fault_turn)
  values (p_s.session_id, p_page.page_id, p_s.user_id, p_level, v_tokens, p_s.turn, p_s.turn, v_pin, v_reason, p_now,
          p_page.page_type, p_page.modality, p_page.importance, p_page.superseded_by is not null,
          p_page.last_evict_turn, p_page.last_fault_turn)
  on conflict (user_id, session_id, page_id) do update
     set level = excluded.level, tokens = excluded.tokens, last_access_turn = excluded.last_access_turn,
         pinned = excluded.pinned, page_type = excluded.page_type, modality = excluded.modality,
         importance = excluded.importance, superseded = excluded.superseded,
         last_evict_turn = excluded.last_evict_turn, last_fault_turn = excluded.last_fault_turn,
         -- an explicit pin replaces a recent-turn or default-set reason (it must outlive turn aging)
         pin_reason = case when excluded.pin_reason = 'explicit' then 'explicit'
                           else coalesce(memori.working_set.pin_reason, excluded.pin_reason) end;
  update memori.pages set tier = 'L0', compression_level = p_level
   where user_id = p_s.user_id and session_id = p_s.session_id and page_id = p_page.page_id
     and (tier, compression_level) is distinct from ('L0', p_level);  -- page_fault wrote it already
  if v_old.page_id is null or v_old.level <> p_level or v_old.tokens <> v_tokens or p_type <> 'fault_in' then
    perform memori._page_mutation(p_s, p_page.page_id, p_type, case when p_type = 'create' then null else p_page.tier end,
                                  'L0', v_old.level, p_level, v_tokens, p_actor, p_cause, p_now);
  end if;
  if v_pin and p_type <> 'create'
     and (not coalesce(v_old.pinned, false) or (v_reason = 'explicit' and v_old.pin_reason is distinct from 'explicit')) then
    perform memori._page_mutation(p_s, p_page.page_id, 'pin', 'L0', 'L0', p_level, p_level, v_tokens, p_actor,
                                  v_reason, p_now);
  end if;
  return v_evicted;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_map(memori.vm_sessions, memori.pages, integer, boolean, text, text, text, timestamptz) is 'Map a page into L0 at a level (or change its level), pinning it when it belongs to the default pinned set, evicting to stay within budget; logged.';

-------------------------------------------------------------------------------
-- vm_add_page: map an existing page into the working set
-- p_session_id: the VM session (PM005 when missing)
-- p_page_id: the page to map (PM005 when missing or expired); already mapped: its level changes
-- p_level: the representation to map: 0 full, 1 reduced, 2 abstract, 3 reference (else PM001); PM005 when
--   the page has no level 1 or 2 representation yet
-- p_pin: true pins it, false does not, NULL pins it when in the default pinned set (role 'system', id matching
--   vm.autopin_pattern, a transcript page of the last pinned_last_turns turns); a pinned page stays pinned
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.vm_add_page(
  p_session_id text,
  p_page_id    text,
  p_level      integer default 0,
  p_pin        boolean default null,
  p_actor      text default 'system',
  p_now        timestamptz default now()
) returns text[]
as $func$
declare
  v_s memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_p memori.pages := memori._page_get(p_session_id, p_page_id, p_now, true);
begin
  if p_level is null or p_level not between 0 and 3 then
    perform memori._invalid(format('level must be between 0 and 3, got %s', coalesce(p_level::text, 'NULL')),
                            'Levels: 0 full, 1 reduced, 2 abstract, 3 reference.');
  end if;
  perform memori._page_write(v_s.user_id, v_p.session_id, array[v_p.page_id]);
  update memori.pages set last_accessed = p_now, access_count = access_count + 1
   where user_id = v_s.user_id and id = v_p.id;
  return memori._vm_map(v_s, v_p, p_level, p_pin, 'fault_in', p_actor, 'vm_add_page', p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_add_page(text, text, integer, boolean, text, timestamptz) is 'Map a registered page into L0 at a level, evicting (compress first) to stay under max_l0_tokens; returns the pages evicted or compressed; PM060 when pinned pages leave no room.';

-------------------------------------------------------------------------------
-- vm_evict: free L0 tokens with a policy
-- p_session_id: the VM session (PM005 when missing)
-- p_required_tokens: how many L0 tokens to free at least (>= 0, else PM001); PM060 and nothing done when
--   pinned or protected pages leave fewer to free
-- p_policy: 'lru', 'importance_weighted_lru' or 'modality_aware_lru' (else PM004); NULL: the session's
--   eviction_policy
-- p_actor: who acts, logged in page_mutations: 'user', 'model', 'tool' or 'system' (else PM004)
create or replace function memori.vm_evict(
  p_session_id      text,
  p_required_tokens integer,
  p_policy          text default null,
  p_actor           text default 'system',
  p_now             timestamptz default now()
) returns setof memori.vm_eviction
as $func$
declare
  v_s     memori.vm_sessions := memori._vm_session(p_session_id, null, false, p_now);
  v_done  memori.vm_eviction[];
  v_freed integer;
begin
  if p_required_tokens is null or p_required_tokens < 0 then
    perform memori._invalid(format('required tokens must be >= 0, got %s', coalesce(p_required_tokens::text, 'NULL')),
                            'Pass how many L0 tokens to free, e.g. 2000.');
  end if;
  select coalesce(array_agg(e), '{}') into v_done
    from memori._vm_evict_run(v_s, p_required_tokens, p_policy, null, p_actor, 'explicit_request', p_now) e;
  select coalesce(sum(e.tokens_freed), 0) into v_freed from unnest(v_done) e;
  if v_freed < p_required_tokens then
    raise exception 'only % of % tokens can be freed: the rest of the working set is pinned or protected',
                    v_freed, p_required_tokens
      using errcode = 'PM060',
            hint = 'Unpin pages (memori.page_pin(..., false)) or wait for faulted pages to leave their protection window.';
  end if;
  return query select * from unnest(v_done);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_evict(text, integer, text, text, timestamptz) is 'Free at least p_required_tokens of L0 with a policy (lru, importance_weighted_lru, modality_aware_lru; default the session''s), compressing before evicting; PM060 (nothing done) when pinned/protected pages prevent it.';

-------------------------------------------------------------------------------
-- working_set_list: the mapped pages of a session
create or replace function memori.working_set_list(p_session_id text)
returns setof memori.working_set
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
begin
  return query
    select w.* from memori.working_set w
      join memori.pages p on p.user_id = w.user_id and p.session_id = w.session_id and p.page_id = w.page_id
     where w.user_id = v_user and w.session_id = p_session_id
     order by p.id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.working_set_list(text) is 'The working set (L0) of a session in page creation order: level, tokens, turns, pinning.';
