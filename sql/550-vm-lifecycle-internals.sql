-- pymemdb SQL API: the private helpers of the AI virtual memory lifecycle (sql/550-vm-lifecycle.sql).
-- Segments, swap-out, claims and the prefetch items; called only by the lifecycle's functions.
-- Installed before 550-vm-lifecycle.sql (file order), so its SQL-language functions find them.

-------------------------------------------------------------------------------
-- _vm_segment_label: the label of a session's n-th segment
create or replace function memori._vm_segment_label(p_seq integer) returns text
as $func$
  select 'seg_' || lpad(p_seq::text, 4, '0')
$func$ language sql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_segment_label(integer) is 'Label of the n-th segment of a session: seg_0001, seg_0002, ...';

-------------------------------------------------------------------------------
-- _vm_setting_int: an integer vm.* setting with a default
create or replace function memori._vm_setting_int(p_key text, p_default integer) returns integer
as $func$
  select coalesce((memori._setting(p_key) #>> '{}')::integer, p_default)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_setting_int(text, integer) is 'An integer memori.settings value, or the default when absent.';

-------------------------------------------------------------------------------
-- _claim_current: the current claim a (possibly superseded) claim leads to
create or replace function memori._claim_current(p_user_id text, p_session_id text, p_claim_id text,
                                                  p_now timestamptz)
returns text
as $func$
declare
  v_cur  text;
  v_next text;
  v_id   bigint;
  v_p    record;
  v_n    integer := 0;
begin
  -- a loop of one-row reads of the user's rows, not a recursive query over memori.vm_visible_pages:
  -- Citus plans the view's UNION ALL over every shard and refuses recursion there
  v_id := memori._page_row(p_user_id, p_session_id, p_claim_id);
  select p.page_id, p.superseded_by into v_cur, v_next from memori.pages p where p.user_id = p_user_id and p.id = v_id;
  while v_next is not null and v_n < 100 loop
    v_id := memori._page_row(p_user_id, p_session_id, v_next);
    select p.page_id, p.superseded_by into v_p from memori.pages p
     where p.user_id = p_user_id and p.id = v_id and (p.expires_at is null or p.expires_at > p_now);
    exit when not found;
    v_cur := v_p.page_id;
    v_next := v_p.superseded_by;
    v_n := v_n + 1;
  end loop;
  return v_cur;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._claim_current(text, text, text, timestamptz) is 'Follow superseded_by from a claim to the current claim of its topic (the claim itself when current).';

-------------------------------------------------------------------------------
-- _vm_segment_open: the transcript pages of a session's open segment
create or replace function memori._vm_segment_open(p_s memori.vm_sessions, p_now timestamptz)
returns setof memori.pages
as $func$
declare
  -- computed here: on a cluster the query runs on a shard, where memori's functions are not called
  v_label text := memori._vm_segment_label(p_s.segment_seq);
begin
  -- labelled with the open segment, or unlabelled and written since it opened;
  -- through vm_visible_pages, so a fork's shared pages are included (sql/160)
  return query
    select q.* from memori.vm_visible_pages p join memori.pages q on q.user_id = p_s.user_id and q.id = p.id
     where p.user_id = p_s.user_id and p.viewer_session_id = p_s.session_id and p.page_type = 'transcript'
       and (p.expires_at is null or p.expires_at > p_now)
       and (p.segment = v_label or (p.segment is null and p.turn >= p_s.segment_first_turn))
     order by p.id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_segment_open(memori.vm_sessions, timestamptz) is 'Transcript pages of the open segment: labelled with it, or unlabelled and written since it opened; in creation order.';

-------------------------------------------------------------------------------
-- _vm_swap_out: move one page out of L0/L1 to a lower tier (logged)
create or replace function memori._vm_swap_out(p_s memori.vm_sessions, p_page memori.pages, p_tier text, p_actor text,
                                               p_cause text, p_now timestamptz)
returns boolean
as $func$
declare
  v_level integer;
begin
  -- a fork's shared row belongs to its ancestor: never mapped in the fork (only
  -- own rows are), and changing its tier here would change the ancestor's page
  if p_page.tier >= p_tier or p_page.session_id <> p_s.session_id then
    return false;
  end if;
  delete from memori.working_set
   where user_id = p_s.user_id and session_id = p_s.session_id and page_id = p_page.page_id
  returning level into v_level;
  perform memori._page_write(p_s.user_id, p_s.session_id, array[p_page.page_id]);  -- forks sharing it, the notice
  update memori.pages set tier = p_tier, compression_level = 0,
                          last_evict_turn = case when p_page.tier = 'L0' then p_s.turn else last_evict_turn end
   where user_id = p_s.user_id and id = p_page.id;
  perform memori._page_mutation(p_s, p_page.page_id, 'evict', p_page.tier, p_tier, v_level, null, null, p_actor,
                                p_cause, p_now);
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_swap_out(memori.vm_sessions, memori.pages, text, text, text, timestamptz) is 'Unmap a page and move it down to a tier (L0/L1 -> L2), logged as an evict mutation; false when it already is that low.';

-------------------------------------------------------------------------------
-- _vm_last_summary: the summary page of a session's last closed segment
create or replace function memori._vm_last_summary(p_s memori.vm_sessions, p_now timestamptz) returns memori.pages
as $func$
declare
  v_id text;
  v_p  memori.pages;
begin
  select summary_page_id into v_id from memori.vm_segments
   where user_id = p_s.user_id and session_id = p_s.session_id order by seq desc limit 1;
  if v_id is null then
    return null;
  end if;
  begin
    v_p := memori._page_get(p_s.session_id, v_id, p_now, false);
  exception when sqlstate 'PM005' then
    return null;  -- expired or removed since
  end;
  return v_p;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_last_summary(memori.vm_sessions, timestamptz) is 'The summary page of the last closed segment of a session (NULL when none, or gone).';

-------------------------------------------------------------------------------
-- _vm_prefetch_item: one proposed page
create or replace function memori._vm_prefetch_item(p_page memori.pages, p_reason text, p_why text)
returns memori.vm_prefetch_item
as $func$
  select row(p_page.page_id, p_page.page_type, p_page.tier, p_reason, p_why, false, null, 0)::memori.vm_prefetch_item
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_prefetch_item(memori.pages, text, text) is 'A vm_prefetch_item for a page: not applied yet.';

-------------------------------------------------------------------------------
-- _vm_prefetch_apply: fault proposed pages in through page_fault, within the turn's budget
-- One fault per topic: the seed's thrash index counts every fault after the
-- first in a topic window, so further matches of a topic are only proposed.
create or replace function memori._vm_prefetch_apply(
  p_s memori.vm_sessions, p_items memori.vm_prefetch_item[], p_source text, p_max_faults integer,
  p_target_level integer, p_now timestamptz
) returns memori.vm_prefetch_item[]
as $func$
declare
  v_out    memori.vm_prefetch_item[] := '{}';
  v_item   memori.vm_prefetch_item;
  v_served integer;
  v_budget integer;
  v_groups text[] := '{}';
  v_group  text;
  v_topic  text;
  v_env    jsonb;
  v_expires timestamptz;
begin
  select count(*) into v_served from memori.page_faults
   where user_id = p_s.user_id and session_id = p_s.session_id and turn = p_s.turn and outcome = 'served';
  v_budget := least(coalesce(p_max_faults, memori._vm_setting_int('vm.prepass_max_faults', 2)),
                    p_s.max_faults_per_turn - v_served);
  foreach v_item in array p_items loop
    v_group := case when v_item.why like 'topic:%' then v_item.why else v_item.page_id end;
    -- the topic the thrash index counts the page under (its claim's topic for a claim's discussion)
    v_topic := 'page_topic:' || coalesce(memori._vm_page_topic(p_s.user_id, p_s.session_id, v_item.page_id), v_item.page_id);
    if memori._vm_resident(p_s.user_id, p_s.session_id, v_item.page_id) then
      -- in L0 at a useful level; a page mapped as a line of topic tags (level 3) is faulted up
      v_item.outcome := 'in_context';
    elsif not p_s.faults_allowed then
      v_item.outcome := 'skipped:faults_disabled';
    elsif (p_s.fault_confidence_threshold = 'explicit' and v_item.reason <> 'user_requested_recall')
          or (p_s.fault_confidence_threshold = 'referenced' and v_item.reason = 'speculative') then
      v_item.outcome := 'skipped:confidence_threshold';
    elsif v_group = any (v_groups) or v_topic = any (v_groups) then
      v_item.outcome := 'skipped:topic_has_fault';
    elsif v_budget <= 0 then
      v_item.outcome := 'skipped:fault_budget';
    else
      v_env := memori.page_fault(p_s.session_id, v_item.page_id, p_target_level, v_item.reason, 'system', p_now);
      v_item.applied := true;
      if v_env->'error' is not null and v_env->'error' <> 'null'::jsonb then
        v_item.outcome := 'refused:' || (v_env->'error'->>'reason');
      elsif (v_env->'effects'->>'promoted_to_working_set')::boolean then
        v_item.outcome := 'served';
        v_item.tier := 'L0';
        v_item.tokens := coalesce((v_env->'effects'->>'tokens_est')::integer, 0);
        v_budget := v_budget - 1;
        v_groups := v_groups || v_group || v_topic;
        v_expires := memori._vm_retention(p_s.user_id, p_s.session_id, 'vm_prefetches', p_now);  -- not on a shard
        insert into memori.vm_prefetches (session_id, user_id, page_id, turn, source, reason, why, tokens, at, expires_at)
        values (p_s.session_id, p_s.user_id, v_item.page_id, p_s.turn, p_source, v_item.reason, v_item.why,
                v_item.tokens, p_now, v_expires);
      else
        v_item.outcome := 'already_mapped';
      end if;
    end if;
    v_out := v_out || v_item;
  end loop;
  return v_out;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_prefetch_apply(memori.vm_sessions, memori.vm_prefetch_item[], text, integer, integer, timestamptz) is 'Fault proposed pages in through page_fault (actor system) in order: those not in L0 at a useful level, within the confidence threshold, one per topic (the message topic and the page''s thrash-index topic), at most the pre-pass budget and the turn''s remaining faults; records served ones in vm_prefetches.';

-------------------------------------------------------------------------------
-- _vm_prefetch_session: the shared argument checks of vm_prepass and vm_prefetch, then their session:
-- locked as every VM writer locks it when they apply (fault pages in), only read when they propose
create or replace function memori._vm_prefetch_session(
  p_session_id   text,
  p_apply        boolean,
  p_max_faults   integer,
  p_target_level integer,
  p_now          timestamptz
) returns memori.vm_sessions
as $func$
begin
  if p_max_faults is not null and p_max_faults < 0 then
    perform memori._invalid(format('max faults must be >= 0, got %s', p_max_faults), 'Omit it to use vm.prepass_max_faults.');
  end if;
  if p_target_level is null or p_target_level not between 0 and 3 then
    perform memori._invalid(format('target level must be 0..3, got %s', coalesce(p_target_level::text, 'NULL')),
                            '2 (abstract) is the seed''s default; 0 is the full page.');
  end if;
  return case when coalesce(p_apply, false) then memori._vm_session(p_session_id, null, false, p_now)
              else memori._vm_session_read(p_session_id) end;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_prefetch_session(text, boolean, integer, integer, timestamptz) is 'PM001 unless max faults >= 0 (or NULL) and the target level is 0..3; then the VM session, locked when p_apply (PM005 when missing).';

-------------------------------------------------------------------------------
-- _vm_resident: a page mapped at a level that still carries its content
create or replace function memori._vm_resident(p_user_id text, p_session_id text, p_page_id text) returns boolean
as $func$
declare
  v_useful integer := memori._vm_setting_int('vm.prepass_useful_level', 2);
begin
  -- level 3 is a line of topic tags: mapped, but it answers nothing
  return exists (select 1 from memori.working_set w
                  where w.user_id = p_user_id and w.session_id = p_session_id and w.page_id = p_page_id
                    and w.level <= v_useful);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_resident(text, text, text) is 'True when a page is in L0 at a useful level (vm.prepass_useful_level, default 2): what the pre-pass counts as in context.';

-------------------------------------------------------------------------------
-- _vm_old_discussion: a page cited only by superseded claims (a decision that changed)
create or replace function memori._vm_old_discussion(p_user_id text, p_session_id text, p_page_id text)
returns boolean
as $func$
  select exists (select 1 from memori.vm_visible_pages c
                  where c.user_id = p_user_id and c.viewer_session_id = p_session_id and c.page_type = 'claim'
                    and c.superseded_by is not null and c.provenance @> array[p_page_id])
     and not exists (select 1 from memori.vm_visible_pages c
                      where c.user_id = p_user_id and c.viewer_session_id = p_session_id and c.page_type = 'claim'
                        and c.superseded_by is null and c.provenance @> array[p_page_id])
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_old_discussion(text, text, text) is 'True when a page is the source of superseded claims only: the discussion of a decision that was replaced.';

-------------------------------------------------------------------------------
-- _vm_prefetch_result: what the pre-pass and the prefetcher return: applied, or proposed only
create or replace function memori._vm_prefetch_result(
  p_s memori.vm_sessions, p_items memori.vm_prefetch_item[], p_apply boolean, p_source text,
  p_max_faults integer, p_target_level integer, p_now timestamptz
) returns memori.vm_prefetch_item[]
as $func$
begin
  if coalesce(p_apply, false) then
    return memori._vm_prefetch_apply(p_s, p_items, p_source, p_max_faults, p_target_level, p_now);
  end if;
  -- proposals only: pages in L0 at a useful level are marked in_context
  return array(select (i.page_id, i.page_type, i.tier, i.reason, i.why, i.applied,
                       case when memori._vm_resident(p_s.user_id, p_s.session_id, i.page_id) then 'in_context' end,
                       i.tokens)::memori.vm_prefetch_item
                 from unnest(p_items) with ordinality
                      as i(page_id, page_type, tier, reason, why, applied, outcome, tokens, n)
                order by i.n);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_prefetch_result(memori.vm_sessions, memori.vm_prefetch_item[], boolean, text, integer, integer, timestamptz) is 'The items of vm_prepass or vm_prefetch (p_source): faulted in within the turn''s budget when p_apply, else proposed only (in_context when in L0 at a useful level).';
