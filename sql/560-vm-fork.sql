-- pymemdb SQL API, part 16: copy-on-write fork of a VM session (seed 03, 10.3).
--
-- memori.session_fork makes a new session that sees every page of its source
-- as of the fork without copying a page: memori.vm_forks records, for the
-- fork, each ancestor and the ancestor's largest page row id at that moment,
-- and memori.vm_visible_pages (sql/100) resolves a session's pages through
-- that chain. Only the working set is copied (it is bounded by the L0 budget,
-- not by the page count): a mapped page is always the session's own row, so
-- working_set keeps its foreign key to pages and the eviction code needs no
-- resolution.
--
-- Copy-on-write, both ways:
--   * a write in the fork to a page it shares (page_update, representations,
--     embeddings, flush, a fault or pin that maps it) first copies the row into
--     the fork: memori._page_get(..., p_lock => true) and memori._vm_map do it;
--   * a write in the source (or any ancestor) to a row a fork still shares is
--     preceded by a copy of the row as it was into every fork that resolves to
--     it: the BEFORE triggers below, on pages and on page_representations. A
--     deleted row (its session deleted) is copied down the same way, so a fork
--     outlives its source. A deleted row already expired (by the clock) is not
--     copied: no fork sees it either.
-- Pages the source creates after the fork have larger ids: the fork never sees them.

-------------------------------------------------------------------------------
-- configuration
insert into memori.settings (key, value, description) values
  ('vm.max_fork_depth', '16', 'Longest ancestor chain of a forked session (a fork of a fork of ...); each level is one more join when pages are resolved.')
on conflict (key) do nothing;

comment on table memori.vm_forks is 'Copy-on-write forks: for each forked session, every ancestor (depth 1 = parent) and the ancestor''s largest page row id at the fork.';

-------------------------------------------------------------------------------
-- _page_resolve: the row id of a page as a session sees it (NULL when it does not)
create or replace function memori._page_resolve(p_session_id text, p_page_id text) returns bigint
as $func$
  -- the session's user's rows only (memori._page_row: two probes, one shard on a cluster)
  select memori._page_row(memori._vm_user(p_session_id, null), p_session_id, p_page_id)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_resolve(text, text) is 'Row id (memori.pages.id) of the page a session sees under an id: its own row, else the nearest ancestor''s as of the fork; NULL when none.';

-------------------------------------------------------------------------------
-- _page_copy: copy a page row (and its representations) into a session
create or replace function memori._page_copy(p_id bigint, p_session_id text) returns memori.pages
as $func$
declare
  v_user text := memori._vm_user(p_session_id);  -- a fork and its ancestors are one user's
  v_cols text;
  v_p    memori.pages;
begin
  -- every stored column but the key, the session and vm_gc's mark, read from the
  -- catalog so columns added by later migrations are copied too
  select string_agg(quote_ident(a.attname), ', ' order by a.attnum) into v_cols
    from pg_catalog.pg_attribute a
   where a.attrelid = 'memori.pages'::regclass and a.attnum > 0 and not a.attisdropped
     and a.attgenerated = '' and a.attidentity = ''
     and a.attname not in ('session_id', 'expires_at', 'gc_marked_at');
  -- the user as a literal: Citus plans an INSERT ... SELECT whose user is a parameter
  -- over every shard (and copies the row through the coordinator)
  execute format('insert into memori.pages (session_id, expires_at, %s) '
                 'select $2, case when gc_marked_at is null then expires_at end, %s from memori.pages '
                 'where user_id = %L and id = $1 returning *', v_cols, v_cols, v_user)
     into v_p using p_id, p_session_id;
  if v_p.id is null then
    raise exception 'no page row %', p_id
      using errcode = 'PM005', hint = 'The page was deleted meanwhile; read it again.';
  end if;
  insert into memori.page_representations (session_id, page_id, user_id, level, content, data, tokens, version,
                                           created_at)
  select p_session_id, r.page_id, r.user_id, r.level, r.content, r.data, r.tokens, r.version, r.created_at
    from memori.page_representations r
    join memori.pages s on s.user_id = r.user_id and s.session_id = r.session_id and s.page_id = r.page_id
   where r.user_id = v_user and s.user_id = v_user and s.id = p_id;
  return v_p;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_copy(bigint, text) is 'Copy a page row and its representations into a session (copy-on-write); returns the new row. Earlier versions stay with the source row.';

-------------------------------------------------------------------------------
-- _page_cow_push: before a shared row changes, give every fork that sees it its own copy
create or replace function memori._page_cow_push(p_user_id text, p_id bigint, p_session_id text, p_page_id text)
returns integer
as $func$
declare
  v_user text := p_user_id;
  v_fork text;
  v_n    integer := 0;
begin
  for v_fork in
    select f.session_id from memori.vm_forks f
     where f.user_id = v_user and f.ancestor_session_id = p_session_id and f.max_page_id >= p_id
       -- a fork deleted in the same statement (its session and its parent's together) gets nothing
       and exists (select 1 from memori.vm_sessions s where s.user_id = v_user and s.session_id = f.session_id)
     order by f.depth, f.session_id
  loop
    if memori._page_row(v_user, v_fork, p_page_id) = p_id then
      perform memori._page_copy(p_id, v_fork);
      v_n := v_n + 1;
    end if;
  end loop;
  return v_n;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_cow_push(text, bigint, text, text) is 'Copy a page row, as it is now, into every fork that resolves to it; returns how many copies.';

-------------------------------------------------------------------------------
-- _pages_cow: trigger on memori.pages (before update or delete)
create or replace function memori._pages_cow() returns trigger
as $func$
begin
  -- vm_gc's mark and unmark change only expiry: no live fork sees the row (or it is kept);
  -- a deleted row that has expired (the retention engine's sweep) was seen by no fork either
  if not (tg_op = 'UPDATE' and new.gc_marked_at is distinct from old.gc_marked_at)
     and not (tg_op = 'DELETE' and coalesce(old.expires_at <= now(), false))
     and exists (select 1 from memori.vm_forks f
                  where f.user_id = old.user_id and f.ancestor_session_id = old.session_id and f.max_page_id >= old.id) then
    perform memori._page_cow_push(old.user_id, old.id, old.session_id, old.page_id);
  end if;
  return case when tg_op = 'DELETE' then old else new end;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._pages_cow() is 'Trigger: before a page row another session shares (a fork) changes or goes, copy it into those forks.';


-------------------------------------------------------------------------------
-- _page_representations_cow: trigger on memori.page_representations
create or replace function memori._page_representations_cow() returns trigger
as $func$
declare
  v_r  record := case when tg_op = 'DELETE' then old else new end;
  v_id bigint;
begin
  if exists (select 1 from memori.vm_forks f where f.user_id = v_r.user_id and f.ancestor_session_id = v_r.session_id) then
    select p.id into v_id from memori.pages p
     where p.user_id = v_r.user_id and p.session_id = v_r.session_id and p.page_id = v_r.page_id;
    if v_id is not null then
      perform memori._page_cow_push(v_r.user_id, v_id, v_r.session_id, v_r.page_id);
    end if;
  end if;
  return v_r;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_representations_cow() is 'Trigger: before a representation of a page a fork shares is written or removed, copy the page into those forks.';


-- The triggers, on one server. memori.distribute() drops them before placing the tables on a
-- Citus cluster (which refuses tables with triggers; the page writers copy on write themselves):
-- a re-install there must not bring them back.
do $cow$
declare
  v_distributed boolean;
begin
  if pg_catalog.to_regclass('pg_catalog.pg_dist_partition') is not null then
    -- (dynamic: without Citus the catalog table does not exist to plan against)
    execute 'select exists (select 1 from pg_catalog.pg_dist_partition where logicalrelid = ''memori.pages''::regclass)'
      into v_distributed;
    if v_distributed then
      return;
    end if;
  end if;
  create or replace trigger pages_cow before update or delete on memori.pages
    for each row execute function memori._pages_cow();
  create or replace trigger page_representations_cow before insert or update or delete on memori.page_representations
    for each row execute function memori._page_representations_cow();
end
$cow$;

-------------------------------------------------------------------------------
-- session_fork: a copy-on-write fork of a VM session
-- p_source_session_id: the VM session forked, the acting user's (PM005 when missing); fewer than
--   vm.max_fork_depth forks deep (default 16, else PM098)
-- p_new_session_id: the fork's id: new to the user (PM094 when it exists; PM041 when another user's session
--   in memori.sessions); non-empty, no control characters (PM001)
create or replace function memori.session_fork(
  p_source_session_id text,
  p_new_session_id    text,
  p_now               timestamptz default now()
) returns memori.session_fork_result
as $func$
declare
  v_src   memori.vm_sessions := memori._vm_session(p_source_session_id, null, false, p_now);
  v_new   memori.vm_sessions;
  v_shared bigint;
  v_max   bigint;
  v_depth integer;
  v_limit integer := coalesce((memori._setting('vm.max_fork_depth') #>> '{}')::integer, 16);
  v_w     memori.working_set;
  v_p     memori.pages;
  v_n     integer := 0;
begin
  perform memori._check_identifier('session id', p_new_session_id);
  if exists (select 1 from memori.vm_sessions where user_id = v_src.user_id and session_id = p_new_session_id) then
    raise exception 'session % already exists', quote_literal(p_new_session_id)
      using errcode = 'PM094', hint = 'Fork into a new session id.';
  end if;
  select coalesce(max(depth), 0) + 1 into v_depth from memori.vm_forks
   where user_id = v_src.user_id and session_id = v_src.session_id;
  if v_depth > v_limit then
    raise exception 'session % is a fork % levels deep; the limit is %', quote_literal(p_source_session_id),
                    v_depth - 1, v_limit
      using errcode = 'PM098', hint = 'Fork an earlier ancestor, or raise memori.settings vm.max_fork_depth.';
  end if;
  -- the same user: the fork is registered in the one session namespace (PM041 when the id is another user's)
  perform memori._context_session(p_new_session_id, v_src.user_id, null, p_now);
  insert into memori.vm_sessions (session_id, user_id, turn, max_l0_tokens, max_l1_pages, eviction_policy,
                                  eviction_threshold, pinned_last_turns, fault_protection_turns,
                                  eviction_cooldown_turns, faults_allowed, max_faults_per_turn,
                                  max_fault_tokens_per_turn, fault_confidence_threshold, created_at, updated_at)
  values (p_new_session_id, v_src.user_id, v_src.turn, v_src.max_l0_tokens, v_src.max_l1_pages,
          v_src.eviction_policy, v_src.eviction_threshold, v_src.pinned_last_turns, v_src.fault_protection_turns,
          v_src.eviction_cooldown_turns, v_src.faults_allowed, v_src.max_faults_per_turn,
          v_src.max_fault_tokens_per_turn, v_src.fault_confidence_threshold, p_now, p_now)
  returning * into v_new;

  -- the chain: the source as of now, then the source's own ancestors with their horizons
  -- (the source's lock holds back its writers, so no page of it appears meanwhile). Every
  -- ancestor is a session of the fork's user: the source is the acting user's own
  -- (memori._vm_session), and so are its ancestors, read under the same user.
  select coalesce(max(id), 0) into v_max from memori.pages
   where user_id = v_src.user_id and session_id = v_src.session_id;
  insert into memori.vm_forks (session_id, ancestor_session_id, user_id, depth, max_page_id, forked_at)
  values (v_new.session_id, v_src.session_id, v_src.user_id, 1, v_max, p_now);
  insert into memori.vm_forks (session_id, ancestor_session_id, user_id, depth, max_page_id, forked_at)
  select v_new.session_id, f.ancestor_session_id, f.user_id, f.depth + 1, f.max_page_id, p_now
    from memori.vm_forks f where f.user_id = v_src.user_id and f.session_id = v_src.session_id;

  -- the working set: its pages become the fork's own rows (bounded by the L0 budget)
  for v_w in select * from memori.working_set w where w.user_id = v_src.user_id and w.session_id = v_src.session_id
              order by w.turn_added, w.page_id loop
    select * into v_p from memori.pages
     where user_id = v_src.user_id and session_id = v_src.session_id and page_id = v_w.page_id;
    v_p := memori._page_copy(v_p.id, v_new.session_id);
    insert into memori.working_set (session_id, page_id, user_id, level, tokens, turn_added, last_access_turn,
                                    pinned, pin_reason, added_at, page_type, modality, importance, superseded,
                                    last_evict_turn, last_fault_turn)
    values (v_new.session_id, v_w.page_id, v_new.user_id, v_w.level, v_w.tokens, v_w.turn_added,
            v_w.last_access_turn, v_w.pinned, v_w.pin_reason, v_w.added_at, v_w.page_type, v_w.modality,
            v_w.importance, v_w.superseded, v_w.last_evict_turn, v_w.last_fault_turn);
    -- the fork's log starts with its working set, so replay at the fork's turn shows it
    perform memori._page_mutation(v_new, v_w.page_id, 'fault_in', v_p.tier, 'L0', null, v_w.level, v_w.tokens,
                                  'system', 'session_fork', p_now);
    v_n := v_n + 1;
  end loop;

  perform memori._event_emit('session.forked', jsonb_build_object('session_id', v_new.session_id,
                                                                    'source_session_id', v_src.session_id,
                                                                    'depth', v_depth), p_now);
  -- counted first, then cast: on a cluster the count runs whole on the user's worker, which may
  -- not have the type; "shared" is another session's row, not depth > 0 (one shard: sql/500)
  select count(*) into v_shared from memori.vm_visible_pages v
   where v.user_id = v_new.user_id and v.viewer_session_id = v_new.session_id and v.session_id <> v_new.session_id;
  return row(v_new.session_id, v_src.session_id, v_depth, v_shared, v_n, p_now)::memori.session_fork_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_fork(text, text, timestamptz) is 'Fork a VM session copy-on-write: the new session sees every page of the source as of now without copying them (only the working set is copied); PM094 when the new id exists, PM098 past vm.max_fork_depth.';

-------------------------------------------------------------------------------
-- session_fork_chain: the ancestors a session sees pages of
create or replace function memori.session_fork_chain(p_session_id text) returns setof memori.vm_forks
as $func$
declare
  v_user text := memori._vm_user(p_session_id);  -- a missing session has no rows: no error
begin
  return query select * from memori.vm_forks f where f.user_id = v_user and f.session_id = p_session_id
                order by f.depth;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.session_fork_chain(text) is 'The ancestors of a forked session, parent first, each with the largest page row id the fork sees of it; no rows for an unforked session.';

-------------------------------------------------------------------------------
-- vm_storage: the on-disk size of every VM table (the copy-on-write proof)
create or replace function memori.vm_storage()
returns table (table_name text, bytes bigint, row_estimate bigint)
as $func$
  select c.relname::text, pg_catalog.pg_total_relation_size(c.oid), c.reltuples::bigint
    from pg_catalog.pg_class c
   where c.relnamespace = 'memori'::regnamespace and c.relkind = 'r'
     and c.relname in ('vm_sessions', 'pages', 'page_representations', 'page_versions', 'working_set',
                       'page_faults', 'page_mutations', 'vm_pack_cache', 'vm_forks', 'vm_regions',
                       'vm_region_members', 'vm_region_pages')
   order by c.relname
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_storage() is 'pg_total_relation_size (table, indexes, TOAST) of every AI virtual memory table, with the planner''s row estimate.';
