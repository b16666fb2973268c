-- pymemdb SQL API, part 17: garbage collection of pages (seed 03, 10.4).
--
-- memori.vm_gc is the mark phase of a mark and sweep; the sweep is the
-- retention engine (memori-cleanup preview|execute, pg_cron), which deletes a
-- page once its expires_at has passed.
--
-- Roots are the live sessions: a VM session whose row (and memori.sessions
-- row) has not expired. A page row is reachable when a live session sees it
-- (memori.vm_visible_pages: its own rows and, for a fork, its ancestors'
-- shared rows) and it is live (not expired), when it is mapped in a live
-- session's working set, or when the provenance of a reachable page names it
-- (resolved in the same session, so an expired source page a claim cites is
-- kept). Everything else is unreachable: the pages of dead sessions, and the
-- rows of a dead fork parent that every live fork has overridden.
--
-- Mark: an unreachable page without an expiry gets expires_at = p_now +
-- vm.gc_grace and gc_marked_at = p_now. Unmark: a page vm_gc marked that is
-- reachable again (a session revived, a new fork) loses both. Pages with an
-- expiry of their own are left to it. Under row-level security vm_gc sees,
-- and collects, the acting user's pages only (forks never cross users).

-------------------------------------------------------------------------------
-- configuration
insert into memori.settings (key, value, description) values
  ('vm.gc_grace', '"7 days"', 'How long a page vm_gc found unreachable is kept (its expires_at = mark time + this) before the retention engine deletes it.')
on conflict (key) do nothing;

-------------------------------------------------------------------------------
-- _vm_gc_live: a user's live sessions, GC's roots
create or replace function memori._vm_gc_live(p_user_id text, p_now timestamptz) returns text[]
as $func$
declare
  -- the user's expired memori.sessions first, in a statement of their own: that table may be
  -- placed differently (Citus joins no distributed table with a local one)
  v_dead text[] := array(select c.session_id from memori.sessions c
                          where c.user_id = p_user_id and c.expires_at <= p_now);
begin
  return array(select s.session_id from memori.vm_sessions s
                where s.user_id = p_user_id and (s.expires_at is null or s.expires_at > p_now)
                  and s.session_id <> all (v_dead)
                order by s.session_id);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_gc_live(text, timestamptz) is 'The live VM sessions of a user (unexpired, and not expired in memori.sessions): the roots of vm_gc.';

-------------------------------------------------------------------------------
-- _vm_gc_reachable: the page rows of one user reachable from a live session of theirs, and why
-- Every statement names the user: on a cluster the walk runs on that user's shard
-- (forks never cross users, so reachability never does either).
create or replace function memori._vm_gc_reachable(p_user_id text, p_now timestamptz)
returns table (id bigint, session_id text, page_id text, via text)
as $func$
declare
  v_live text[];
  v_seen jsonb;
  v_ws   jsonb;
begin
  v_live := memori._vm_gc_live(p_user_id, p_now);
  -- the rows the live sessions see, and their mapped pages, read first: the walk below is a
  -- recursive query, which Citus refuses over memori.vm_visible_pages (a UNION ALL)
  select coalesce(jsonb_agg(jsonb_build_object(
           'viewer', v.viewer_session_id, 'id', v.id, 'session_id', v.session_id, 'page_id', v.page_id,
           'provenance', v.provenance,
           'alive', v.expires_at is null or v.expires_at > p_now or v.gc_marked_at is not null)), '[]')
    into v_seen
    from memori.vm_visible_pages v
   where v.user_id = p_user_id and v.viewer_session_id = any (v_live);
  select coalesce(jsonb_agg(jsonb_build_object('session_id', w.session_id, 'page_id', w.page_id)), '[]')
    into v_ws
    from memori.working_set w
   where w.user_id = p_user_id and w.session_id = any (v_live);
  return query
    with recursive seen as materialized (
      select * from jsonb_to_recordset(v_seen)
               as x(viewer text, id bigint, session_id text, page_id text, provenance text[], alive boolean)
    ), reach (viewer, page_id, via) as (
      select s.viewer, s.page_id, 'live_session'::text from seen s where s.alive
      union
      select w.session_id, w.page_id, 'working_set'::text
        from jsonb_to_recordset(v_ws) as w(session_id text, page_id text)
      union
      select s.viewer, src.page_id, 'provenance'::text
        from reach r
        join seen s on s.viewer = r.viewer and s.page_id = r.page_id
       cross join lateral unnest(s.provenance) as src(page_id)
    )
    select distinct on (s.id) s.id, s.session_id, s.page_id, r.via
      from reach r
      join seen s on s.viewer = r.viewer and s.page_id = r.page_id
     order by s.id, case r.via when 'live_session' then 0 when 'working_set' then 1 else 2 end;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_gc_reachable(text, timestamptz) is 'vm_gc_reachable for one user: their page rows reachable from a live session of theirs.';

-------------------------------------------------------------------------------
-- _vm_gc_users: whose pages vm_gc and vm_gc_reachable look at
create or replace function memori._vm_gc_users() returns text[]
as $func$
  -- the acting user; with none (an owner's maintenance call), every user with a VM session
  select case when nullif(current_setting('memori.user_id', true), '') is not null
              then array[current_setting('memori.user_id', true)]
              else array(select distinct s.user_id from memori.vm_sessions s order by 1) end
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_gc_users() is 'The users vm_gc collects: memori.user_id, else (an owner''s call) every user with a VM session.';

-------------------------------------------------------------------------------
-- vm_gc_reachable: the page rows reachable from a live session, and why
create or replace function memori.vm_gc_reachable(p_now timestamptz default now())
returns table (id bigint, session_id text, page_id text, via text)
as $func$
  select r.* from unnest(memori._vm_gc_users()) u(user_id)
   cross join lateral memori._vm_gc_reachable(u.user_id, p_now) r
   order by r.id
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_gc_reachable(timestamptz) is 'Page rows reachable from a live session (seen and unexpired, mapped, or named by a reachable page''s provenance), each once with the first reason: live_session, working_set, provenance. The acting user''s, or every user''s for an owner without memori.user_id.';

-------------------------------------------------------------------------------
-- vm_gc: mark unreachable pages for the retention engine, unmark reachable ones
create or replace function memori.vm_gc(p_now timestamptz default now()) returns memori.vm_gc_result
as $func$
declare
  v_grace     interval;
  v_user      text;
  v_reachable bigint[];
  v_reach_all bigint := 0;
  v_n         bigint;
  v_live      bigint := 0;
  v_marked    bigint := 0;
  v_unmarked  bigint := 0;
  v_already   bigint := 0;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  begin
    v_grace := coalesce((memori._setting('vm.gc_grace') #>> '{}')::interval, interval '7 days');
  exception when others then
    raise exception 'memori.settings vm.gc_grace is not an interval: %', memori._setting('vm.gc_grace')
      using errcode = 'PM004', hint = 'Set it to an interval such as "7 days" (a JSON string).';
  end;
  if v_grace < interval '0' then
    perform memori._invalid('vm.gc_grace is negative', 'Set memori.settings vm.gc_grace to "0 seconds" or more.');
  end if;
  -- user by user: each statement touches one user's rows (one shard on a cluster)
  foreach v_user in array memori._vm_gc_users() loop
    v_live := v_live + cardinality(memori._vm_gc_live(v_user, p_now));
    select coalesce(array_agg(r.id order by r.id), '{}') into v_reachable from memori._vm_gc_reachable(v_user, p_now) r;
    v_reach_all := v_reach_all + cardinality(v_reachable);

    -- reachable again: a mark of ours is taken back
    update memori.pages p set expires_at = null, gc_marked_at = null
     where p.user_id = v_user and p.gc_marked_at is not null and p.id = any (v_reachable);
    get diagnostics v_n = row_count;
    v_unmarked := v_unmarked + v_n;
    -- still unreachable, already marked
    select v_already + count(*) into v_already from memori.pages p
     where p.user_id = v_user and p.gc_marked_at is not null and p.id <> all (v_reachable);
    -- newly unreachable: expire after the grace period (the retention engine deletes them then)
    update memori.pages p set expires_at = p_now + v_grace, gc_marked_at = p_now
     where p.user_id = v_user and p.gc_marked_at is null and p.expires_at is null and p.id <> all (v_reachable);
    get diagnostics v_n = row_count;
    v_marked := v_marked + v_n;
  end loop;

  perform memori._event_emit('vm.gc', jsonb_build_object('marked', v_marked, 'unmarked', v_unmarked,
                                                         'reachable', v_reach_all), p_now);
  return row(v_live, v_reach_all, v_marked, v_unmarked, v_already, p_now + v_grace)::memori.vm_gc_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_gc(timestamptz) is 'Mark and sweep: pages unreachable from every live session expire after vm.gc_grace (the retention engine deletes them); pages it marked that are reachable again are kept. The acting user''s pages, or every user''s, one user at a time, for an owner without memori.user_id. Returns the counts.';
