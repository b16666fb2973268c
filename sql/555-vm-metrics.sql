-- pymemdb SQL API, part 16: AI virtual memory lifecycle metrics (seed 03, phase 7 and success metrics; issue 7).
--
-- memori.vm_metrics (sql/520) fills these columns of its result through
-- _vm_metrics_lifecycle: faults per turn, evictions, tokens available, the
-- compression ratio of closed segments, the seed's thrash index and the
-- prefetch hit rate. The page-table cache (the seed's TLB) lives in the
-- client, so its hit rate is the client's (db.pages.tlb.stats()), not here.

-------------------------------------------------------------------------------
-- _vm_page_topic: the topic a page belongs to, for the thrash index
create or replace function memori._vm_page_topic(p_user_id text, p_session_id text, p_page_id text) returns text
as $func$
declare
  v_p record;
begin
  -- a claim's topic; else the topic of the newest claim citing the page (its
  -- decision's discussion); else its hint; else its first topic tag (computed
  -- here, not in the query: on a cluster that runs on a shard)
  select p.page_type, p.hint, p.content, p.page_id,
         (select c.hint from memori.vm_visible_pages c
           where c.user_id = p_user_id and c.viewer_session_id = p.viewer_session_id and c.page_type = 'claim'
             and c.hint is not null and c.provenance @> array[p.page_id]
           order by c.id desc limit 1) as claim_hint
    into v_p
    from memori.vm_visible_pages p   -- a fork's shared pages too (sql/160)
   where p.user_id = p_user_id and p.viewer_session_id = p_session_id and p.page_id = p_page_id;
  if not found then
    return null;
  end if;
  return coalesce(case when v_p.page_type = 'claim' then v_p.hint end, v_p.claim_hint, v_p.hint,
                  nullif(split_part(coalesce(memori._page_topics(v_p.content, 1), ''), ',', 1), ''), v_p.page_id);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_page_topic(text, text, text) is 'Topic of a page for the thrash index: a claim''s topic, else that of the newest claim citing it, else its hint, else its first topic tag, else its id.';

-------------------------------------------------------------------------------
-- _vm_metrics_lifecycle: the lifecycle part of vm_metrics
create or replace function memori._vm_metrics_lifecycle(
  p_s memori.vm_sessions, p_now timestamptz, p_r memori.vm_metrics_result
) returns memori.vm_metrics_result
as $func$
declare
  v_window integer := greatest(memori._vm_setting_int('vm.thrash_window_turns', 5), 1);
  v_r      memori.vm_metrics_result := p_r;
  v_thrash record;
  v_topics jsonb;
  v_faulted text[];
begin
  v_r.paging_mode := p_s.paging_mode;
  v_r.tokens_available := greatest(p_s.max_l0_tokens - v_r.l0_tokens, 0);
  v_r.l0_utilization := round(v_r.l0_tokens::numeric / p_s.max_l0_tokens, 3);
  select round(coalesce(sum(n), 0)::numeric / greatest(p_s.turn, 1), 3), coalesce(max(n), 0),
         coalesce(max(n) filter (where turn = p_s.turn), 0)
    into v_r.faults_per_turn, v_r.faults_max_per_turn, v_r.faults_this_turn
    from (select turn, count(*) as n from memori.page_faults
           where user_id = p_s.user_id and session_id = p_s.session_id and outcome = 'served' group by turn) t;
  -- the topic of each faulted page, first: a function that reads distributed tables is not called
  -- inside a query of theirs (on a cluster that query runs on a shard)
  v_faulted := array(select distinct f.page_id from memori.page_faults f
                      where f.user_id = p_s.user_id and f.session_id = p_s.session_id and f.outcome = 'served');
  select coalesce(jsonb_object_agg(x.page_id, memori._vm_page_topic(p_s.user_id, p_s.session_id, x.page_id)), '{}')
    into v_topics from unnest(v_faulted) x(page_id);
  -- the seed's thrash index: in a window of N turns, every served fault after
  -- the first of its topic counts; divided by N. Now (the window ending at this
  -- turn) and the worst window of the session. Adding a fault to a window never
  -- lowers its count, so the worst window ends at a turn with a fault: only
  -- those windows are counted (each fault falls in at most N of them).
  with ends as (
    select distinct pf.turn as t from memori.page_faults pf
     where pf.user_id = p_s.user_id and pf.session_id = p_s.session_id and pf.outcome = 'served'
    union
    select greatest(p_s.turn, 1)
  ), w as (
    select e.t, x.thrash
      from ends e
     cross join lateral (
       select count(*) - count(distinct v_topics ->> f.page_id) as thrash
         from memori.page_faults f
        where f.user_id = p_s.user_id and f.session_id = p_s.session_id and f.outcome = 'served'
          and f.turn > e.t - v_window and f.turn <= e.t) x
  )
  select coalesce(max(thrash) filter (where w.t = greatest(p_s.turn, 1)), 0) as now,
         coalesce(max(thrash), 0) as worst,
         case when max(thrash) > 0 then (select w2.t from w w2 order by w2.thrash desc, w2.t limit 1) end as worst_turn
    into v_thrash from w;
  v_r.thrash_index := round(v_thrash.now::numeric / v_window, 3);
  v_r.thrash_index_max := round(v_thrash.worst::numeric / v_window, 3);
  v_r.thrash_index_max_turn := v_thrash.worst_turn;
  v_r.thrash_window_turns := v_window;
  select count(*) filter (where tier_before = 'L0'), count(*) filter (where tier_after in ('L2', 'L3', 'L4')),
         coalesce(jsonb_object_agg(cause, n) filter (where cause is not null), '{}'::jsonb)
    into v_r.evictions_from_l0, v_r.evictions_to_l2, v_r.evictions_by_cause
    from (select tier_before, tier_after, cause, count(*) over (partition by cause) as n
            from memori.page_mutations
           where user_id = p_s.user_id and session_id = p_s.session_id and mutation_type = 'evict') e;
  -- the seed's "average reduction from L0 to L2": transcript tokens of closed segments per summary token
  v_r.segment_open := memori._vm_segment_label(p_s.segment_seq);
  select count(*), coalesce(sum(source_tokens), 0),
         coalesce(sum(summary_tokens), 0), round(sum(source_tokens)::numeric / nullif(sum(summary_tokens), 0), 2)
    into v_r.segments_closed, v_r.segment_source_tokens, v_r.segment_summary_tokens,
         v_r.compression_ratio
    from memori.vm_segments where user_id = p_s.user_id and session_id = p_s.session_id;
  select count(*), count(*) filter (where p.tier = 'L0')
    into v_r.claims, v_r.claims_in_l0
    from memori.vm_visible_pages p
   where p.user_id = p_s.user_id and p.viewer_session_id = p_s.session_id and p.page_type = 'claim'
     and (p.expires_at is null or p.expires_at > p_now);
  select count(*), count(*) filter (where used_turn is not null),
         coalesce(jsonb_object_agg(source, n) filter (where source is not null), '{}'::jsonb),
         round((count(*) filter (where used_turn is not null))::numeric / nullif(count(*), 0), 3)
    into v_r.prefetched, v_r.prefetch_used, v_r.prefetch_by_source, v_r.prefetch_hit_rate
    from (select used_turn, source, count(*) over (partition by source) as n
            from memori.vm_prefetches
           where user_id = p_s.user_id and session_id = p_s.session_id
             and (expires_at is null or expires_at > p_now)) x;
  return v_r;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_metrics_lifecycle(memori.vm_sessions, timestamptz, memori.vm_metrics_result) is 'vm_metrics with its lifecycle columns filled in: paging mode, tokens available, faults per turn, evictions, segments and compression ratio, claims, thrash index (now and worst window), prefetch hit rate.';
