-- pymemdb SQL API, part 1: the retention engine.
--
-- Every table whose rows can expire carries `expires_at timestamptz` (NULL =
-- permanent) and is registered here with a *candidate view* exposing its rows
-- as (id, owner, category, kind, expires_at, important). The engine unions
-- those views into memori.retention_rows, resolves each row's policy, and
-- plans, previews and executes cleanup without knowing any table by name.
--
-- Deletion order (seeds 01 and 05): priority ascending, then expires_at
-- ascending; ties broken by table and row id so the order is total.
-- A row is expired when expires_at <= p_now; reads show it while
-- expires_at > p_now. The boundary second belongs to "expired".

-- settings of the cleaner's lock handling (issue 16; a DBA's values are kept)
insert into memori.settings (key, value, description) values
  ('cleanup.skip_retries', '3', 'A planned row a writer holds is skipped (never waited for) and tried again this many times at the end of the run, then left to the next run.'),
  ('cleanup.skip_retry_pause_ms', '50', 'Pause before each new attempt at rows skipped because a writer held them.'),
  ('cleanup.lock_retries', '5', 'A cleanup batch that loses a deadlock or hits lock_timeout is retried at half the size this many times before PM022.')
on conflict (key) do nothing;

comment on table memori.retention_tables is 'Registry of retention-managed tables and their candidate views (memori.retention_register).';
comment on table memori.retention_policies is 'Retention policy per (table, kind): priority (lower is cleaned first), retention, preserve-important, cleanup on/off; kind * is the table default.';
comment on table memori.cleanup_runs is 'One row per cleanup run: trigger, status, planned/deleted counts, batches, error.';
comment on table memori.cleanup_queue is 'The plan of running cleanups: rows to delete in deletion order (unlogged, emptied when a run ends).';

-------------------------------------------------------------------------------
-- _qualified_name: schema.name of a relation, quoted, whatever the search path
create or replace function memori._qualified_name(p_relation regclass) returns text
as $func$
  select format('%I.%I', n.nspname, c.relname)
    from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
   where c.oid = p_relation
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._qualified_name(regclass) is 'The quoted schema-qualified name of a relation (what retention_tables stores instead of node-local OIDs).';

-------------------------------------------------------------------------------
-- _retention_rows_sql: the query of retention_rows over some registered tables
-- One branch per table (its candidate view in the engine's shape), joined by
-- UNION ALL; the view is this query over every table. The cleaner's plan and
-- the expiry events query one table's branch at a time: on a Citus cluster a
-- filter on the union view is not pushed into its branches (each branch's whole
-- table came to the coordinator), a filter on one branch is, to every shard.
-- p_tables: the registered tables' names (retention_tables.table_name); NULL (default) for every table
create or replace function memori._retention_rows_sql(p_tables text[] default null) returns text
as $func$
declare
  v_branches text;
  v_table    record;
begin
  -- owner_key: the table's owner column (its distribution column on a cluster), which
  -- the view exposes under its own name, or as owner when the two are the same.
  -- (The registry is read alone, the catalog separately: on a cluster it is a reference
  -- table, which Citus does not join with the coordinator's catalog.)
  for v_table in select t.table_name, t.candidate_view, t.owner_column
                   from memori.retention_tables t
                  where p_tables is null or t.table_name = any (p_tables)
                  order by t.table_name loop
    v_branches := concat_ws(' union all ', v_branches, format(
      'select %L::text as table_name, v.id::text as row_id, v.owner::text as owner, '
      'v.category::text as category, v.kind::text as kind, v.expires_at, v.important, '
      'v.%I::text as owner_key '
      'from %s v', v_table.table_name,
      case when exists (select 1 from pg_catalog.pg_attribute a
                         where a.attrelid = pg_catalog.to_regclass(v_table.candidate_view)
                           and a.attname = v_table.owner_column and not a.attisdropped)
           then v_table.owner_column else 'owner' end,
      v_table.candidate_view));
  end loop;

  -- no table (registered, or asked for): no row, in the right shape
  return coalesce(v_branches,
    'select null::text as table_name, null::text as row_id, null::text as owner, '
    'null::text as category, null::text as kind, null::timestamptz as expires_at, '
    'null::boolean as important, null::text as owner_key where false');
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._retention_rows_sql(text[]) is 'The query of memori.retention_rows restricted to some registered tables (every table when NULL): one candidate-view branch per table.';

-------------------------------------------------------------------------------
-- _retention_candidates_sql: the query of retention_candidates over a row source
-- The one rule of each row's policy and of what cleanup may delete, as text:
-- retention_candidates is this query over retention_rows, the cleaner's plan
-- the same query over one table's branch (_retention_rows_sql), so both read
-- the rule from here.
-- p_rows: a FROM item with retention_rows's columns (a relation name or a parenthesised query)
create or replace function memori._retention_candidates_sql(p_rows text) returns text
as $func$
  select format($sql$select r.table_name,
       r.row_id,
       r.owner,
       r.category,
       r.kind,
       r.expires_at,
       coalesce(r.important, false)                                 as important,
       coalesce(pk.kind, pd.kind)                                   as policy_kind,
       coalesce(pk.priority, pd.priority)                           as priority,
       coalesce(pk.preserve_important, pd.preserve_important)       as preserve_important,
       coalesce(pk.cleanup_enabled, pd.cleanup_enabled)             as cleanup_enabled,
       (coalesce(pk.cleanup_enabled, pd.cleanup_enabled)
        and not (coalesce(r.important, false) and coalesce(pk.preserve_important, pd.preserve_important))
        and coalesce((select s.value from memori.settings s where s.key = 'cleanup.enabled'),
                     'true'::jsonb) = 'true'::jsonb)                    as deletable,
       r.owner_key
  from %s r
  left join memori.retention_policies pk on pk.table_name = r.table_name and pk.kind = r.kind
  left join memori.retention_policies pd on pd.table_name = r.table_name and pd.kind = '*'$sql$, p_rows)
  -- deletable: the one rule of what cleanup may delete once the row has expired.
  -- (cleanup.enabled is read by a subquery, evaluated once, not by memori._setting() per row:
  -- on a cluster the view runs on the shards, where a function reading the (reference)
  -- settings table would be a nested distributed query. Not a join either: with
  -- _cleanup_plan_chunk's enable_sort = off, PostgreSQL before 17 costs the extra join's
  -- sort at 1e10, and JIT then compiled every plan chunk for a minute.)
  -- owner_key: the owning user's column (the distribution column), which the cleaner deletes by
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._retention_candidates_sql(text) is 'The query of memori.retention_candidates (each row''s policy and whether cleanup may delete it) over a given row source.';

-------------------------------------------------------------------------------
-- _retention_rebuild_rows: regenerate the union view over registered tables
-- (and retention_candidates over it, from the same rule text the cleaner uses)
create or replace function memori._retention_rebuild_rows() returns void
as $func$
begin
  execute format('create or replace view memori.retention_rows with (security_invoker = true) as %s',
                 memori._retention_rows_sql());
  comment on view memori.retention_rows is
    'Every row of every retention-managed table in one shape (generated by retention_register).';
  execute format('create or replace view memori.retention_candidates with (security_invoker = true) as %s',
                 memori._retention_candidates_sql('memori.retention_rows'));
  comment on view memori.retention_candidates is 'Every retention-managed row with the policy that governs it (kind-specific, else the table default), whether cleanup may delete it once expired, and its owner key (the value of the table''s owner column).';
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._retention_rebuild_rows() is 'Regenerate memori.retention_rows as the union of every registered candidate view, and memori.retention_candidates over it.';

-------------------------------------------------------------------------------
-- retention_register: put a table under the retention engine
-- The registry keeps qualified names, not OIDs: on a Citus cluster it is a
-- reference table, read on workers where the coordinator's OIDs mean nothing.
-- p_owner_column is the owning user's column (the table's distribution column);
-- the candidate view exposes it under its own name, or as owner when they are
-- the same column.
-- p_table_name: the table's name in the registry and in its policies (retention_policies.table_name), 1-63
--   printable characters, else PM001; registering a name again replaces its entry
-- p_relation: the table; it must have an expires_at timestamptz column (NULL = permanent), else PM001
-- p_candidate_view: the view of its rows in the engine's shape: it must have the columns id, owner, category,
--   kind, expires_at and important, else PM001
-- p_id_column: the table's primary key column, by which the cleaner deletes rows (PM001 when absent)
-- p_description: free text stored in retention_tables.description
-- p_default_priority: priority of the table's default policy (kind '*'); lower levels are deleted first
-- p_default_retention: retention of the default policy; NULL (default) keeps rows forever
-- p_default_preserve_important: default policy: true keeps rows marked important even once expired
--   (the three defaults only create the '*' policy: an existing one, maybe tuned by a DBA, is kept)
-- p_owner_column: the owning user's column (the distribution column on Citus), default 'user_id'; PM001 when absent
drop function if exists memori.retention_register(text, regclass, regclass, name, text, integer, interval, boolean);
create or replace function memori.retention_register(
  p_table_name       text,
  p_relation         regclass,
  p_candidate_view   regclass,
  p_id_column        name,
  p_description      text,
  p_default_priority integer default 5,
  p_default_retention interval default null,
  p_default_preserve_important boolean default false,
  p_owner_column     name default 'user_id'
) returns void
as $func$
declare
  v_missing text;
begin
  perform memori._check_identifier('table name', p_table_name, 63);

  if not exists (select 1 from pg_catalog.pg_attribute
                  where attrelid = p_relation and attname = 'expires_at' and not attisdropped
                    and atttypid = 'timestamptz'::regtype) then
    perform memori._invalid(format('%s has no expires_at timestamptz column', p_relation),
                            'Add expires_at timestamptz (NULL = permanent) before registering the table.');
  end if;
  if not exists (select 1 from pg_catalog.pg_attribute
                  where attrelid = p_relation and attname = p_id_column and not attisdropped) then
    perform memori._invalid(format('%s has no column %s', p_relation, p_id_column),
                            'Pass the primary key column as the id column.');
  end if;
  if not exists (select 1 from pg_catalog.pg_attribute
                  where attrelid = p_relation and attname = p_owner_column and not attisdropped) then
    perform memori._invalid(format('%s has no column %s', p_relation, p_owner_column),
                            'Pass the owning user''s column (the distribution column) as the owner column.');
  end if;
  select string_agg(c, ', ') into v_missing
    from unnest(array['id', 'owner', 'category', 'kind', 'expires_at', 'important']) c
   where not exists (select 1 from pg_catalog.pg_attribute
                      where attrelid = p_candidate_view and attname = c and not attisdropped);
  if v_missing is not null then
    perform memori._invalid(format('candidate view %s lacks column(s) %s', p_candidate_view, v_missing),
                            'The view must expose id, owner, category, kind, expires_at and important.');
  end if;

  insert into memori.retention_tables (table_name, relation, candidate_view, id_column, description, owner_column)
  values (p_table_name, memori._qualified_name(p_relation), memori._qualified_name(p_candidate_view),
          p_id_column, p_description, p_owner_column)
  on conflict (table_name) do update
     set relation = excluded.relation, candidate_view = excluded.candidate_view,
         id_column = excluded.id_column, description = excluded.description,
         owner_column = excluded.owner_column;

  -- every table has a default policy; an existing one (maybe tuned by a DBA) is kept
  insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description)
  values (p_table_name, '*', p_default_priority, p_default_retention, p_default_preserve_important,
          'Default for ' || p_table_name)
  on conflict (table_name, kind) do nothing;

  perform memori._retention_rebuild_rows();
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.retention_register(text, regclass, regclass, name, text, integer, interval, boolean, name) is 'Register a table, its candidate view and its owner column with the retention engine (idempotent); the registry keeps qualified names.';

-- The union view must exist before the views below can refer to it.
select memori._retention_rebuild_rows();

-------------------------------------------------------------------------------
-- retention_candidates: every managed row with its resolved policy
-- (created by _retention_rebuild_rows above, from _retention_candidates_sql)


-------------------------------------------------------------------------------
-- retention_status: active | expiring_soon | expired per row, as of now()
create or replace view memori.retention_status with (security_invoker = true) as
select c.table_name,
       c.row_id,
       c.owner,
       c.kind,
       c.expires_at,
       case when c.expires_at is not null and c.expires_at <= now() then 'expired'
            when c.expires_at is not null
             and c.expires_at <= now() + make_interval(days => (select s.value::int from memori.settings s
                                                                  where s.key = 'retention.warning_days'))
                 then 'expiring_soon'
            else 'active' end                                                  as status,
       round((extract(epoch from c.expires_at - now()) / 86400)::numeric, 3)    as days_until_expiry,
       (c.expires_at is not null and c.expires_at <= now() and c.deletable)    as should_cleanup
  -- (the setting is read once by a subquery, not by _setting() per row: see retention_candidates;
  -- a LEFT JOIN of memori.settings here crashed Citus 14.0.1 with signal 11 on the cluster)
  from memori.retention_candidates c;
comment on view memori.retention_status is 'Per managed row: status (active | expiring_soon | expired), days_until_expiry (NULL = permanent) and should_cleanup, as of now().';

-------------------------------------------------------------------------------
-- _cleanup_plan: the rows a cleanup at p_now deletes, in deletion order
-- The single source of truth for both preview and execute. A run plans one
-- priority level at a time, continuing after the last planned row of that
-- level (keyset): within a level the order is expiry first, so each chunk
-- is an index range from the cursor's expiry instead of a scan of every
-- expired row. Text tie-breakers sort byte-wise (COLLATE "C"): cheap and
-- independent of the database's locale.
-- The rows are retention_candidates's (the same rule, _retention_candidates_sql),
-- read one table at a time: each table's due rows in order, at most p_limit,
-- then merged. Only the tables with a policy at the level are read. On a Citus
-- cluster each table's query is one multi-shard statement whose filter, order
-- and limit run on the shards; a filter on the union view was not pushed into
-- its branches, so every plan chunk brought every row of every registered
-- table to the coordinator (issue 20).
create or replace function memori._cleanup_plan(
  p_now              timestamptz,
  p_limit            integer,
  p_priority         integer default null,   -- NULL: every level, in order
  p_after_expires_at timestamptz default null,
  p_after_table      text default null,
  p_after_row_id     text default null
) returns table (table_name text, row_id text, owner text, category text, kind text, policy_kind text,
                 priority integer, expires_at timestamptz, preserve_important boolean, owner_key text)
as $func$
declare
  v_where    text;
  v_branches text;
begin
  v_where := concat_ws(' and ',
    'c.expires_at is not null and c.expires_at <= $1 and c.deletable',
    case when p_priority is not null then 'c.priority = $3' end,
    case when p_after_expires_at is not null then
      -- sargable: an index range on expires_at
      'c.expires_at >= $4 and (c.expires_at, c.table_name collate "C", c.row_id collate "C") > ($4, $5, $6)' end);
  select string_agg(format(
           '(select c.table_name, c.row_id, c.owner, c.category, c.kind, c.policy_kind, c.priority, c.expires_at,'
           ' c.preserve_important, c.owner_key from (%s) c where %s'
           ' order by c.priority, c.expires_at, c.table_name collate "C", c.row_id collate "C" limit $2)',
           memori._retention_candidates_sql(format('(%s)', memori._retention_rows_sql(array[t.table_name]))),
           v_where), ' union all ' order by t.table_name)
    into v_branches
    from memori.retention_tables t
   -- a table has rows at a level only if one of its policies (a kind's or its default) is there
   where p_priority is null
      or exists (select 1 from memori.retention_policies rp
                  where rp.table_name = t.table_name and rp.priority = p_priority);
  if v_branches is null then
    return;
  end if;
  return query execute format(
    'select p.* from (%s) p order by p.priority, p.expires_at, p.table_name collate "C", p.row_id collate "C" limit $2',
    v_branches)
    using p_now, p_limit, p_priority, p_after_expires_at, p_after_table, p_after_row_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_plan(timestamptz, integer, integer, timestamptz, text, text) is 'Rows a cleanup at p_now would delete, in deletion order (priority, then expiry), optionally one priority level after a given row; shared by preview and execute.';

-------------------------------------------------------------------------------
-- cleanup_preview: exactly what cleanup_execute would delete, and why
-- p_now: the time the cleanup runs as of: rows with expires_at <= p_now are due; NULL raises PM001
-- p_batch_size: rows per batch (numbers the batch column), 1 to 100000, else PM001
-- p_max_rows: at most this many rows (the first in deletion order); NULL (default) for no cap; < 0 raises PM001
create or replace function memori.cleanup_preview(
  p_now        timestamptz default now(),
  p_batch_size integer default 1000,
  p_max_rows   integer default null
) returns setof memori.cleanup_candidate
as $func$
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  perform memori._check_batch(p_batch_size, p_max_rows);
  return query
    select p.n::integer, ((p.n - 1) / p_batch_size + 1)::integer, p.table_name, p.row_id, p.owner,
           p.category, p.kind, p.priority, p.expires_at,
           format('expired %s ago; policy %s/%s, priority %s',
                  date_trunc('second', p_now - p.expires_at), p.table_name, p.policy_kind, p.priority)
      from memori._cleanup_plan(p_now, p_max_rows)
           with ordinality as p(table_name, row_id, owner, category, kind, policy_kind, priority, expires_at,
                                preserve_important, owner_key, n)
     order by p.n;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_preview(timestamptz, integer, integer) is 'Rows cleanup_execute would delete with the same arguments, in deletion order, with batch number and reason.';

-------------------------------------------------------------------------------
-- cleanup_count: how many rows a cleanup at p_now would delete (no sorting)
-- p_max_rows: the count is capped at this; NULL (default) for no cap; < 0 raises PM001
create or replace function memori.cleanup_count(p_now timestamptz default now(), p_max_rows integer default null)
returns bigint
as $func$
begin
  perform memori._check_cap('max rows', p_max_rows);
  return (select least(count(*), p_max_rows)
            from memori.retention_candidates c
           where c.expires_at is not null
             and c.expires_at <= p_now
             and c.deletable);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_count(timestamptz, integer) is 'Number of rows cleanup_preview would return (cheaper: no ordering).';

-------------------------------------------------------------------------------
-- cleanup_preview_summary: the preview grouped for people
-- p_max_rows: summarise only the first this many rows in deletion order; NULL (default) for no cap; < 0 raises PM001
create or replace function memori.cleanup_preview_summary(
  p_now      timestamptz default now(),
  p_max_rows integer default null
) returns setof memori.cleanup_group_result
as $func$
  select p.table_name, p.owner, p.category, count(*), min(p.expires_at), max(p.expires_at), min(p.priority)
    from memori.cleanup_preview(p_now, 1000, p_max_rows) p
   group by p.table_name, p.owner, p.category
   order by min(p.priority), min(p.expires_at), p.table_name, p.owner, p.category
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_preview_summary(timestamptz, integer) is 'cleanup_preview grouped by table, owner (namespace) and category with counts and oldest/newest expiry.';

-------------------------------------------------------------------------------
-- _cleanup_lock_key: one advisory lock per database serialises cleanups
create or replace function memori._cleanup_lock_key() returns bigint
as $func$
  select 7310582961174350241::bigint  -- fixed: "memori.cleanup"; advisory locks are per database already
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_lock_key() is 'Advisory lock key held by the running cleanup of this database.';

-------------------------------------------------------------------------------
-- _cleanup_on_coordinator: refuse a cleanup on a Citus worker (PM141)
-- On a cluster the coordinator drives every cleanup, for every shard: its
-- advisory lock is the one cluster-wide cleanup lock (a worker's would be
-- another lock), and the run log and plan are its local tables.
create or replace function memori._cleanup_on_coordinator() returns void
as $func$
declare
  v_coordinator boolean;
begin
  if exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    execute 'select coalesce(pg_catalog.citus_is_coordinator(), false)' into v_coordinator;
    if not v_coordinator then
      raise exception 'a cleanup must run on the Citus coordinator'
        using errcode = 'PM141',
              detail = 'This node is a worker; one cleanup at a time runs on the coordinator, for every shard.',
              hint = 'Connect to the coordinator and run the cleanup there (memori-cleanup, memori.cleanup_run).';
    end if;
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_on_coordinator() is 'Raise PM141 on a Citus worker: cleanups run on the coordinator, whose advisory lock is cluster-wide.';

-------------------------------------------------------------------------------
-- _cleanup_lock_held: does this backend hold the cleanup lock?
create or replace function memori._cleanup_lock_held() returns boolean
as $func$
  select exists (
    select 1 from pg_catalog.pg_locks
     where locktype = 'advisory' and pid = pg_backend_pid() and granted
       and database = (select oid from pg_catalog.pg_database where datname = current_database())
       and ((classid::bigint << 32) | objid::bigint) = memori._cleanup_lock_key()
       and objsubid = 1)
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_lock_held() is 'True when this session holds the cleanup advisory lock.';

-------------------------------------------------------------------------------
-- _cleanup_clock: when a run's own records (events) happen
-- A run acts as of p_as_of. Its events are dated by the real clock, or by
-- p_as_of when that is later: events dated by the clock of a run that looks
-- ahead (memori-cleanup execute --now 2027-01-01) would already be due at
-- that run's as_of, so the run (a later plan chunk, or the next run at the
-- same --now) would delete its own records and execute would delete more
-- than preview showed (issue 16). Dated by as_of they expire after it.
create or replace function memori._cleanup_clock(p_as_of timestamptz) returns timestamptz
as $func$
  select greatest(clock_timestamp(), p_as_of)
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_clock(timestamptz) is 'Time stamp of a cleanup run''s own events: the real clock, or the run''s as_of when that is later (so a run never finds its own events due).';

-------------------------------------------------------------------------------
-- _retention_expiry_events: <prefix>.expired / .expiring_soon since the last run
-- For tables registered with an event prefix: rows that expired, or entered
-- the warning window, between the previous run's as_of and this run's.
create or replace function memori._retention_expiry_events(p_run_id bigint) returns void
as $func$
declare
  v_run   memori.cleanup_runs;
  v_since timestamptz;
  v_warn  interval := make_interval(days => coalesce(memori._setting('retention.warning_days')::int, 7));
  v_table record;
  v_event record;
begin
  select * into v_run from memori.cleanup_runs where id = p_run_id;
  select max(as_of) into v_since from memori.cleanup_runs where id <> p_run_id and as_of <= v_run.as_of;
  v_since := coalesce(v_since, '-infinity');
  for v_table in select table_name, event_prefix from memori.retention_tables where event_prefix is not null loop
    -- (the table's own branch of retention_rows, not the union view filtered by table: on a
    -- cluster that filter is not pushed into the branches, and every table came to the coordinator)
    for v_event in execute format(
      'with expired as materialized ('
      '  select r.row_id, r.expires_at from (%1$s) r where r.expires_at > $1 and r.expires_at <= $2'
      '), soon as materialized ('
      '  select r.row_id, r.expires_at from (%1$s) r'
      '   where r.expires_at > greatest($1 + $3, $2) and r.expires_at <= $2 + $3'
      ') '
      'select ''expired'' as kind, count(*)::integer as n, jsonb_agg(r.row_id) filter (where r.rn <= 1000) as ids'
      '  from (select e.row_id, row_number() over (order by e.expires_at) as rn from expired e) r '
      'union all '
      'select ''expiring_soon'', count(*)::integer, jsonb_agg(r.row_id) filter (where r.rn <= 1000)'
      '  from (select e.row_id, row_number() over (order by e.expires_at) as rn from soon e) r',
      memori._retention_rows_sql(array[v_table.table_name]))
      using v_since, v_run.as_of, v_warn
    loop
      if v_event.n > 0 then
        perform memori._event_emit(v_table.event_prefix || '.' || v_event.kind,
                  jsonb_build_object('run_id', p_run_id, 'count', v_event.n, 'ids', v_event.ids,
                                     'since', v_since, 'as_of', v_run.as_of),
                  memori._cleanup_clock(v_run.as_of));
      end if;
    end loop;
  end loop;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._retention_expiry_events(bigint) is 'Emit <prefix>.expired and <prefix>.expiring_soon (first 1000 ids and a count) for rows that crossed those lines since the previous cleanup run.';

-------------------------------------------------------------------------------
-- _cleanup_start: take the lock, record the run, write its plan
create or replace function memori._cleanup_start(
  p_now timestamptz, p_batch_size integer, p_max_rows integer, p_trigger text, p_session_lock boolean
) returns memori.cleanup_runs
as $func$
declare
  v_run    memori.cleanup_runs;
  v_locked boolean;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  perform memori._check_batch(p_batch_size, p_max_rows);
  if p_trigger is null or p_trigger not in ('cli', 'cron', 'sql') then
    perform memori._invalid(format('unknown cleanup trigger %L', p_trigger), 'Use one of: cli, cron, sql.');
  end if;
  perform memori._cleanup_pause_ms(0);  -- the pacing settings, checked before anything is deleted (PM001)

  perform memori._cleanup_on_coordinator();

  -- advisory locks are re-entrant within a session: refuse a second run here too
  if memori._cleanup_lock_held() then
    v_locked := false;
  elsif p_session_lock then
    v_locked := pg_try_advisory_lock(memori._cleanup_lock_key());
  else
    v_locked := pg_try_advisory_xact_lock(memori._cleanup_lock_key());
  end if;
  if not v_locked then
    raise exception 'cleanup already running in database %', current_database()
      using errcode = 'PM020',
            -- the other run's row may not be committed yet: then say less
            detail = coalesce((select format('run %s started at %s by pid %s', id, started_at, backend_pid)
                                 from memori.cleanup_runs where status = 'running' order by id desc limit 1),
                              'another session holds the cleanup lock'),
            hint = 'Only one cleanup runs per database. Wait for it to finish (memori-cleanup status) and retry.';
  end if;

  -- We hold the lock, so a run still marked running died with its session.
  update memori.cleanup_runs
     set status = 'abandoned', finished_at = clock_timestamp(),
         error = coalesce(error, 'the session running it ended before it finished')
   where status = 'running';
  delete from memori.cleanup_queue q
   where not exists (select 1 from memori.cleanup_runs r where r.id = q.run_id and r.status = 'running');

  insert into memori.cleanup_runs (trigger, as_of, batch_size, max_rows, session_lock)
  values (p_trigger, p_now, p_batch_size, p_max_rows, p_session_lock)
  returning * into v_run;
  perform memori._retention_expiry_events(v_run.id);
  perform memori._cleanup_plan_chunk(v_run.id);
  select * into v_run from memori.cleanup_runs where id = v_run.id;
  return v_run;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_start(timestamptz, integer, integer, text, boolean) is 'Take the cleanup lock (session or transaction scoped), record a run and write the first chunk of its plan.';

-------------------------------------------------------------------------------
-- _cleanup_plan_chunk: write the next chunk of a run's plan
-- Planning 250k rows in one go takes over a second; in chunks of
-- cleanup.plan_chunk_rows every transaction stays short. Levels are planned
-- in priority order, each continuing after its last planned row, so the
-- chunks concatenate to the preview.
create or replace function memori._cleanup_plan_chunk(p_run_id bigint) returns integer
as $func$
declare
  v_run      memori.cleanup_runs;
  v_wanted   integer;
  v_planned  integer := 0;
  v_got      integer;
  v_level    integer;
  v_expires  timestamptz;
  v_table    text;
  v_row_id   text;
  v_work_mem text := current_setting('work_mem');
  v_sort     text := current_setting('enable_sort');
  v_cache    text := current_setting('plan_cache_mode');
  v_jit      text := current_setting('jit');
begin
  select * into v_run from memori.cleanup_runs where id = p_run_id for update;
  if v_run.plan_done then
    return 0;
  end if;
  v_wanted := coalesce(memori._setting('cleanup.plan_chunk_rows')::integer, 50000);
  if v_run.max_rows is not null then
    v_wanted := least(v_wanted, v_run.max_rows - v_run.planned);
  end if;
  -- the cursor: a level, and the last row planned in it (NULL: level not started)
  v_level := coalesce(v_run.cursor_priority, (select min(priority) from memori.retention_policies));
  v_expires := v_run.cursor_expires;
  v_table := v_run.cursor_table;
  v_row_id := v_run.cursor_row_id;
  perform set_config('work_mem', '32MB', true);  -- the chunk's sort stays in memory
  -- The planner cannot estimate how many rows a computed priority matches
  -- (it guesses a few hundred where there may be millions), so it would read
  -- and sort every expired row for each chunk. Discouraging the full sort
  -- makes it walk the expires_at index in order and stop after the chunk
  -- (incremental sort): 130 ms instead of 430 ms per 50k chunk at 250k due.
  perform set_config('enable_sort', 'off', true);
  -- ...and only a plan made for this level's values prunes the other tables:
  -- a generic cached plan (chosen after five calls) would scan them all again.
  perform set_config('plan_cache_mode', 'force_custom_plan', true);
  -- ...and no JIT: before PostgreSQL 17 a disabled sort costs 1e10, far above jit_above_cost,
  -- and compiling the plan of the union of every candidate view took over a minute per chunk
  perform set_config('jit', 'off', true);

  while v_wanted > v_planned and v_level is not null loop
    v_got := 0;
    with chunk as materialized (
      select p.*
        from memori._cleanup_plan(v_run.as_of, v_wanted - v_planned, v_level, v_expires, v_table, v_row_id)
             with ordinality as p(table_name, row_id, owner, category, kind, policy_kind, priority, expires_at,
                                  preserve_important, owner_key, n)
    ), queued as (
      insert into memori.cleanup_queue (run_id, seq, table_name, row_id, preserve_important, owner)
      select v_run.id, v_run.planned + v_planned + c.n::integer, c.table_name, c.row_id, c.preserve_important,
             c.owner_key
        from chunk c
    )
    select c.n::integer, c.expires_at, c.table_name, c.row_id
      into v_got, v_expires, v_table, v_row_id
      from chunk c order by c.n desc limit 1;
    v_planned := v_planned + coalesce(v_got, 0);
    if v_planned < v_wanted then
      -- this level is exhausted: the next one starts from its beginning
      v_level := (select min(priority) from memori.retention_policies where priority > v_level);
      v_expires := null; v_table := null; v_row_id := null;
    end if;
  end loop;
  perform set_config('work_mem', v_work_mem, true);
  perform set_config('enable_sort', v_sort, true);
  perform set_config('plan_cache_mode', v_cache, true);
  perform set_config('jit', v_jit, true);

  update memori.cleanup_runs
     set planned = planned + v_planned,
         plan_done = v_level is null or v_wanted <= 0
                     or (max_rows is not null and planned + v_planned >= max_rows),
         cursor_priority = v_level,
         cursor_expires = v_expires,
         cursor_table = v_table,
         cursor_row_id = v_row_id
   where id = p_run_id;
  return v_planned;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_plan_chunk(bigint) is 'Append the next cleanup.plan_chunk_rows rows (in deletion order, level by level) to a run''s plan; returns how many.';

-------------------------------------------------------------------------------
-- cleanup_begin: start a cleanup run driven batch by batch (CLI, client)
-- p_now: the time the cleanup runs as of: rows with expires_at <= p_now are due; NULL raises PM001
-- p_batch_size: rows per cleanup_batch call unless it passes its own, 1 to 100000, else PM001
-- p_max_rows: delete at most this many rows (the first in deletion order); NULL (default) for no cap; < 0 raises PM001
-- p_trigger: who started the run, recorded in cleanup_runs.trigger: 'cli' (default), 'cron' or 'sql'; else PM001
create or replace function memori.cleanup_begin(
  p_now        timestamptz default now(),
  p_batch_size integer default 1000,
  p_max_rows   integer default null,
  p_trigger    text default 'cli'
) returns memori.cleanup_runs
as $func$
  select memori._cleanup_start(p_now, p_batch_size, p_max_rows, p_trigger, true)
$func$ language sql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_begin(timestamptz, integer, integer, text) is 'Start a cleanup run: takes the session-level cleanup lock and plans the run; follow with cleanup_batch calls (one per transaction) and cleanup_finish.';

-------------------------------------------------------------------------------
-- _cleanup_delete_range: delete the planned rows seq lo..hi that are still due
-- A cleaner never waits for a row a writer holds, so it can never be one end
-- of a deadlock with it (issue 16): the batch's rows are locked in id order
-- with SKIP LOCKED, re-checking expiry on the latest row version, and only
-- the locked rows are deleted. A row skipped because another transaction
-- holds it stays in the plan (attempts + 1) and is tried again when the plan
-- is done; after cleanup.skip_retries attempts it is left to the next run.
-- Only rows still due are reported as skipped: a row a writer extended and
-- committed is simply no longer due. On an idle database nothing is skipped
-- and the rows deleted are exactly the preview's.
-- Every statement names its rows by (owner, id), the owner being the table's
-- owner column (retention_tables.owner_column), passed as arrays: on a Citus
-- cluster the owner is the distribution column, so the statements reach only
-- the shards of the batch's owners (Citus refuses a DELETE joined to the
-- coordinator's queue), and the row locks are taken one shard at a time
-- (Citus refuses FOR UPDATE across shards).
drop function if exists memori._cleanup_delete_range(memori.cleanup_runs, integer, integer);
create or replace function memori._cleanup_delete_range(
  p_run memori.cleanup_runs, p_lo integer, p_hi integer,
  out o_counts jsonb, out o_skipped integer, out o_left integer
)
as $func$
declare
  v_batch   record;
  v_reg     record;
  v_table   record;
  v_match   text;
  v_groups  text := 'select $1::text[] as o, $2::text[] as i';  -- one group: every owner (a local table)
  v_group   record;
  v_owners  text[];
  v_ids     text[];
  v_locked_owners text[];
  v_locked_ids    text[];
  v_keep    text[];
  v_deleted integer;
  v_gone    jsonb;
  v_skipped integer[];
  v_all     integer[] := '{}';
  v_tries   integer := coalesce(memori._setting('cleanup.skip_retries')::int, 3);
  v_citus   boolean := pg_catalog.to_regclass('pg_catalog.pg_dist_partition') is not null;
  v_sharded boolean;
  v_hashjoin  text := current_setting('enable_hashjoin');
  v_mergejoin text := current_setting('enable_mergejoin');
begin
  o_counts := '{}'::jsonb;
  -- (the queue, the registry and the catalog are read separately: on a cluster the registry
  -- is a reference table, which Citus does not join with the coordinator's local tables)
  for v_batch in
    select q.table_name, count(*)::integer as checked, bool_or(q.owner is null) as ownerless,
           array_agg(q.seq order by q.seq) as seqs, array_agg(q.owner order by q.seq) as owners,
           array_agg(q.row_id order by q.seq) as ids, array_agg(q.preserve_important order by q.seq) as preserve
      from memori.cleanup_queue q
     where q.run_id = p_run.id and q.seq between p_lo and p_hi
     group by q.table_name
     order by q.table_name
  loop
    select t.table_name, t.relation, t.candidate_view, t.id_column, t.owner_column, t.event_prefix
      into v_reg from memori.retention_tables t where t.table_name = v_batch.table_name;
    select v_reg.table_name, v_reg.relation, v_reg.candidate_view, v_reg.id_column, v_reg.owner_column,
           v_reg.event_prefix, format_type(a.atttypid, a.atttypmod) as id_type,
           format_type(o.atttypid, o.atttypmod) as owner_type, v_batch.checked, v_batch.ownerless,
           v_batch.seqs, v_batch.owners, v_batch.ids, v_batch.preserve
      into v_table
      from pg_catalog.pg_attribute a
      join pg_catalog.pg_attribute o on o.attrelid = a.attrelid and o.attname = v_reg.owner_column
     where a.attrelid = pg_catalog.to_regclass(v_reg.relation) and a.attname = v_reg.id_column;
    -- the rows ($1 owners, $2 ids) of this table; a NULL owner (a nullable owner column of
    -- a single server) is matched by id and IS NOT DISTINCT FROM. The ids' own condition lets
    -- the planner find the rows by key: without it a shard's lock read walked every expired
    -- row of the shard (the expires_at index) and hashed them against the batch's pairs, a
    -- cost that grew with the rows still due (22 ms instead of 0.4 ms at 25,000 a shard).
    v_match := format(case when v_table.ownerless then
        't.%2$I = any ($2::%4$s[]) and exists (select 1 from unnest($1::%3$s[], $2::%4$s[]) b(o, i)'
        ' where b.i = t.%2$I and b.o is not distinct from t.%1$I)'
      else
        't.%2$I = any ($2::%4$s[]) and t.%1$I = any ($1::%3$s[])'
        ' and (t.%1$I, t.%2$I) in (select * from unnest($1::%3$s[], $2::%4$s[]))'
      end, v_table.owner_column, v_table.id_column, v_table.owner_type, v_table.id_type);
    v_sharded := false;
    if v_citus then
      execute 'select exists (select 1 from pg_catalog.pg_dist_partition where logicalrelid = $1 and partmethod = ''h'')'
        into v_sharded using pg_catalog.to_regclass(v_table.relation);
    end if;

    -- Lock the rows still due, in id order, one shard at a time, skipping rows a writer holds.
    -- The expiry is checked again under the row lock: a writer that extended a TTL after the
    -- plan was written wins, and the row stays.
    v_locked_owners := '{}';
    v_locked_ids := '{}';
    for v_group in execute case when v_sharded then format(
        'select array_agg(x.o order by x.n) as o, array_agg(x.i order by x.n) as i'
        '  from unnest($1::text[], $2::text[]) with ordinality x(o, i, n)'
        ' group by pg_catalog.get_shard_id_for_distribution_column(%L, x.o::%s)'
        ' order by pg_catalog.get_shard_id_for_distribution_column(%1$L, x.o::%2$s)',
        v_table.relation, v_table.owner_type) else v_groups end
      using v_table.owners, v_table.ids
    loop
      execute format(
        'select coalesce(array_agg(l.o), ''{}''), coalesce(array_agg(l.i), ''{}'') from ('
        '  select t.%1$I::text as o, t.%2$I::text as i from %3$s t'
        '   where %4$s and t.expires_at is not null and t.expires_at <= $3'
        '   order by t.%2$I for update of t skip locked) l',
        v_table.owner_column, v_table.id_column, v_table.relation, v_match)
        into v_owners, v_ids using v_group.o, v_group.i, p_run.as_of;
      v_locked_owners := v_locked_owners || v_owners;
      v_locked_ids := v_locked_ids || v_ids;
    end loop;

    -- The preserve-important condition is checked again under the lock too (a writer may
    -- have marked a row important), through the candidate view, only for rows whose policy
    -- preserves important rows: the common case costs no read of the view.
    select coalesce(array_agg(b.i), '{}') into v_ids
      from unnest(v_table.owners, v_table.ids, v_table.preserve) b(o, i, p)
      join unnest(v_locked_owners, v_locked_ids) l(o, i) on l.i = b.i and l.o is not distinct from b.o
     where b.p;
    v_keep := '{}';
    if cardinality(v_ids) > 0 then
      execute format('select coalesce(array_agg(v.id::text), ''{}'') from %s v where v.id = any ($1::%s[]) and v.important',
                     v_table.candidate_view, v_table.id_type)
        into v_keep using v_ids;
    end if;
    -- the locked rows in plan order, which the delete follows (on a cluster: within each shard)
    select coalesce(array_agg(b.o order by b.n), '{}'), coalesce(array_agg(b.i order by b.n), '{}')
      into v_owners, v_ids
      from unnest(v_table.owners, v_table.ids) with ordinality b(o, i, n)
     where b.i <> all (v_keep)
       and exists (select 1 from unnest(v_locked_owners, v_locked_ids) l(o, i)
                    where l.i = b.i and l.o is not distinct from b.o);

    -- in plan order: each row found by its key, one after the other (a hash join would
    -- delete in the table's physical order)
    perform set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true);
    execute format(
      'with gone as ('
      '  delete from %1$s t'
      '   using (select x.o, x.i from unnest($1::%4$s[], $2::%5$s[]) with ordinality x(o, i, n) order by x.n) x'
      '   where %6$s t.%3$I = x.i and t.%2$I %7$s x.o'
      '  returning t.%3$I::text as id)'
      ' select count(*)::integer, case when $3 then coalesce(jsonb_agg(id), ''[]'') end from gone',
      v_table.relation, v_table.owner_column, v_table.id_column, v_table.owner_type, v_table.id_type,
      -- (the owner list routes the delete to the batch's shards on a cluster; on one server it would let
      -- the planner drive the delete from a key that leads with the owner, out of plan order)
      case when v_table.ownerless or not v_sharded then ''
           else format('t.%I = any ($1::%s[]) and', v_table.owner_column, v_table.owner_type) end,
      case when v_table.ownerless then 'is not distinct from' else '=' end)
      into v_deleted, v_gone using v_owners, v_ids, v_table.event_prefix is not null;
    perform set_config('enable_hashjoin', v_hashjoin, true), set_config('enable_mergejoin', v_mergejoin, true);

    -- rows not locked (a writer held them) and still due are skipped: kept in the plan
    v_skipped := '{}';
    select coalesce(array_agg(b.o), '{}'), coalesce(array_agg(b.i), '{}') into v_owners, v_ids
      from unnest(v_table.owners, v_table.ids) b(o, i)
     where not exists (select 1 from unnest(v_locked_owners, v_locked_ids) l(o, i)
                        where l.i = b.i and l.o is not distinct from b.o);
    if cardinality(v_ids) > 0 then
      execute format(
        'select coalesce(array_agg(t.%1$I::text), ''{}''), coalesce(array_agg(t.%2$I::text), ''{}'') from %3$s t'
        ' where %4$s and t.expires_at is not null and t.expires_at <= $3',
        v_table.owner_column, v_table.id_column, v_table.relation, v_match)
        into v_owners, v_ids using v_owners, v_ids, p_run.as_of;
      select coalesce(array_agg(b.n), '{}') into v_skipped
        from unnest(v_table.owners, v_table.ids, v_table.seqs) b(o, i, n)
        join unnest(v_owners, v_ids) d(o, i) on d.i = b.i and d.o is not distinct from b.o;
    end if;

    o_counts := o_counts || jsonb_build_object(v_table.table_name, v_deleted);
    v_all := v_all || v_skipped;
    if v_table.event_prefix is not null then
      perform memori._event_emit(v_table.event_prefix || '.cleaned_up',
                jsonb_build_object('run_id', p_run.id, 'ids', v_gone, 'count', v_deleted),
                memori._cleanup_clock(p_run.as_of));
      perform memori._event_emit(v_table.event_prefix || '.cleanup_batch_completed',
                jsonb_build_object('run_id', p_run.id, 'deleted_count', v_deleted, 'total_checked', v_table.checked),
                memori._cleanup_clock(p_run.as_of));
    end if;
  end loop;

  -- the plan keeps the skipped rows (one more attempt each) and drops the rest of the range;
  -- a row skipped cleanup.skip_retries + 1 times is left to the next run
  o_skipped := cardinality(v_all);
  delete from memori.cleanup_queue q
   where q.run_id = p_run.id and q.seq between p_lo and p_hi and q.seq <> all (v_all);
  o_left := 0;
  if o_skipped > 0 then
    update memori.cleanup_queue q set attempts = q.attempts + 1
     where q.run_id = p_run.id and q.seq = any (v_all);
    -- (a separate statement: one statement cannot delete the rows it has just updated)
    delete from memori.cleanup_queue q
     where q.run_id = p_run.id and q.seq = any (v_all) and q.attempts > v_tries;
    get diagnostics o_left = row_count;
  end if;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_delete_range(memori.cleanup_runs, integer, integer) is 'Delete the planned rows seq lo..hi of a run that are still due, by (owner, id), locking them in id order one shard at a time with SKIP LOCKED (never waiting for a writer); returns counts per table, rows skipped (kept in the plan for another attempt) and rows left to the next run.';

-------------------------------------------------------------------------------
-- _jsonb_add_counts: {"a": 1} + {"a": 2, "b": 1} = {"a": 3, "b": 1}
create or replace function memori._jsonb_add_counts(p_a jsonb, p_b jsonb) returns jsonb
as $func$
  select coalesce(jsonb_object_agg(k, coalesce((p_a->>k)::bigint, 0) + coalesce((p_b->>k)::bigint, 0)), '{}'::jsonb)
    from (select jsonb_object_keys(coalesce(p_a, '{}') || coalesce(p_b, '{}')) as k) keys
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._jsonb_add_counts(jsonb, jsonb) is 'Add two {key: count} objects key by key.';

-------------------------------------------------------------------------------
-- cleanup_batch: delete the next batch of a run
-- First the plan in order, batch by batch; then the rows skipped because a
-- writer held them, again, in batches, after cleanup.skip_retry_pause_ms.
-- A batch that loses a deadlock (40P01) or hits lock_timeout (55P03) anyway
-- (e.g. on a cascade) is rolled back whole (the block is a subtransaction)
-- and retried at half the size, up to cleanup.lock_retries times: the retry
-- policy lives here, not in the clients.
-- p_run_id: the run cleanup_begin returned (cleanup_runs.id); PM021 when it is not running or this
--   session does not hold its cleanup lock
-- p_batch_size: rows in this batch; NULL (default) uses the run's batch size; 1 to 100000, else PM001
create or replace function memori.cleanup_batch(p_run_id bigint, p_batch_size integer default null)
returns memori.cleanup_batch_result
as $func$
declare
  v_run          memori.cleanup_runs;
  v_size         integer;
  v_lo           integer;
  v_hi           integer;
  v_again        boolean := false;
  v_range        record;
  v_deleted      integer;
  v_retried      integer := 0;
  v_retries      integer := coalesce(memori._setting('cleanup.lock_retries')::int, 5);
  v_pending      integer;
  v_lock_timeout text := current_setting('lock_timeout');
  v_result       memori.cleanup_batch_result;
  v_started      timestamptz := clock_timestamp();
begin
  select * into v_run from memori.cleanup_runs where id = p_run_id for update;
  if not found or v_run.status <> 'running' then
    raise exception 'cleanup run % is not running', p_run_id
      using errcode = 'PM021', hint = 'Start a run with memori.cleanup_begin() and pass its id.';
  end if;
  if not memori._cleanup_lock_held() then
    raise exception 'this session does not hold the cleanup lock of run %', p_run_id
      using errcode = 'PM021', hint = 'Call cleanup_batch from the session that called cleanup_begin.';
  end if;

  v_size := coalesce(p_batch_size, v_run.batch_size);
  perform memori._check_batch(v_size, null);

  if v_run.next_seq > v_run.planned then
    perform memori._cleanup_plan_chunk(v_run.id);  -- no-op once every due row is planned
    select * into v_run from memori.cleanup_runs where id = p_run_id;
  end if;
  if v_run.next_seq <= v_run.planned then
    v_lo := v_run.next_seq;
    v_hi := least(v_lo + v_size - 1, v_run.planned);
  else
    -- the plan is done: the rows skipped because a writer held them, oldest first
    select min(s.seq), max(s.seq) into v_lo, v_hi
      from (select q.seq from memori.cleanup_queue q
             where q.run_id = v_run.id and q.seq < v_run.next_seq order by q.seq limit v_size) s;
    if v_lo is null then
      v_result := (v_run.id, v_run.batches, 0, '{}'::jsonb, 0, true, 0, 0);
      return v_result;
    end if;
    v_again := true;
    perform pg_sleep(coalesce(memori._setting('cleanup.skip_retry_pause_ms')::numeric, 50) / 1000);
    v_started := clock_timestamp();  -- the batch's own time, for its rest, starts after that wait
  end if;

  loop
    begin
      perform set_config('lock_timeout',
                         (coalesce(memori._setting('cleanup.lock_timeout_ms')::int, 2000))::text || 'ms', true);
      v_range := memori._cleanup_delete_range(v_run, v_lo, v_hi);
      exit;
    exception when deadlock_detected or lock_not_available then
      v_retried := v_retried + 1;
      if v_retried > v_retries then
        perform set_config('lock_timeout', v_lock_timeout, true);
        raise exception 'cleanup batch of run % could not lock its rows (% retries)', p_run_id, v_retries
          using errcode = 'PM022',
                hint = 'A long transaction holds row locks the cleanup needs; the run can be resumed by calling cleanup_batch again.';
      end if;
      v_hi := v_lo + greatest(0, (v_hi - v_lo + 1) / 2 - 1);
    end;
  end loop;
  perform set_config('lock_timeout', v_lock_timeout, true);

  select coalesce(sum(value::int), 0) into v_deleted from jsonb_each_text(v_range.o_counts);

  update memori.cleanup_runs r
     set next_seq = case when v_again then r.next_seq else v_hi + 1 end,
         batches = r.batches + 1,
         deleted = r.deleted + v_deleted,
         deleted_by_table = memori._jsonb_add_counts(r.deleted_by_table, v_range.o_counts),
         skipped = r.skipped + v_range.o_left,
         retried = r.retried + v_retried
   where r.id = v_run.id
  returning * into v_run;

  perform memori._event_emit('cleanup.batch_completed',
            jsonb_build_object('run_id', v_run.id, 'batch', v_run.batches, 'deleted_count', v_deleted,
                               'total_checked', v_hi - v_lo + 1,
                               'deleted_by_table', v_range.o_counts,
                               'skipped', v_range.o_skipped, 'retried', v_retried),
            memori._cleanup_clock(v_run.as_of));

  select count(*)::integer into v_pending
    from memori.cleanup_queue q where q.run_id = v_run.id and q.seq < v_run.next_seq;
  v_result := (v_run.id, v_run.batches, v_deleted, v_range.o_counts,
               greatest(v_run.planned - v_run.next_seq + 1, 0) + v_pending,
               v_run.next_seq > v_run.planned and v_run.plan_done and v_pending = 0,
               v_range.o_skipped, 0);
  if not v_result.done then  -- the rest before the next batch, from this batch's own time
    v_result.pause_ms := memori._cleanup_pause_ms(
      1000 * date_part('epoch', clock_timestamp() - v_started)::double precision);
  end if;
  return v_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_batch(bigint, integer) is 'Delete the next batch of a running cleanup (call once per transaction): never waits for a row a writer holds (skipped, tried again at the end, else left to the next run); a deadlock or lock timeout is retried at half size.';

-------------------------------------------------------------------------------
-- cleanup_finish: close a run, release the lock, report
-- p_run_id: the run cleanup_begin returned (cleanup_runs.id); PM021 when it is not running
-- p_error: NULL (default) closes the run as succeeded; a text closes it as failed and is stored as its error
create or replace function memori.cleanup_finish(p_run_id bigint, p_error text default null)
returns memori.cleanup_summary
as $func$
declare
  v_run     memori.cleanup_runs;
  v_summary memori.cleanup_summary;
begin
  update memori.cleanup_runs
     set status = case when p_error is null then 'succeeded' else 'failed' end,
         error = p_error,
         finished_at = clock_timestamp()
   where id = p_run_id and status = 'running'
  returning * into v_run;
  if not found then
    raise exception 'cleanup run % is not running', p_run_id
      using errcode = 'PM021', hint = 'memori-cleanup status lists recent runs.';
  end if;
  delete from memori.cleanup_queue where run_id = p_run_id;

  perform memori._event_emit('cleanup.cleaned_up',
            jsonb_build_object('run_id', v_run.id, 'status', v_run.status, 'trigger', v_run.trigger,
                               'deleted_count', v_run.deleted, 'planned', v_run.planned,
                               'deleted_by_table', v_run.deleted_by_table),
            memori._cleanup_clock(v_run.as_of));

  -- a session-level lock (cleanup_begin) is released here; a transaction-level
  -- one (cleanup_execute) goes with the transaction
  if v_run.session_lock then
    perform pg_advisory_unlock(memori._cleanup_lock_key());
  end if;

  v_summary := (v_run.id, v_run.status, v_run.trigger, v_run.as_of, v_run.planned, v_run.deleted,
                v_run.batches, v_run.deleted_by_table,
                round(extract(epoch from v_run.finished_at - v_run.started_at)::numeric, 3), v_run.error,
                v_run.skipped);
  return v_summary;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_finish(bigint, text) is 'Close a cleanup run (succeeded, or failed with p_error), drop its plan, emit cleanup.cleaned_up and release the session lock.';

-------------------------------------------------------------------------------
-- _cleanup_pause_ms: how long a cleanup rests after a batch, so that the workload keeps the cores
-- A run keeps the server busy at most cleanup.work_share of its time: after a
-- batch that took t ms it rests t * (1 - share) / share ms, and never less than
-- cleanup.batch_pause_ms. A cleaner that works without rest takes a core the
-- application's reads then wait for: on 2 cores a reader's p99 went 2.9-3.9x
-- its idle p99 during a cleanup of 250,000 rows; resting ~30x a batch's time
-- kept it at 1.05-1.08x (docs/benchmarks.md, bench ttl), hence the default
-- share 0.03. A session may run faster or gentler with its own share,
-- SET memori.cleanup_work_share (memori-cleanup execute --work-share).
-- cleanup_batch returns the rest as pause_ms, measured on its own time (the
-- commit not included); the client, the CLI and cleanup_run sleep it between
-- batches. A run's start calls it once, so a share or pause that is not a
-- number in range fails the run (PM001) before it deletes anything.
-- p_batch_ms: how long the last batch took, in milliseconds (cleanup_batch's own time); >= 0, else PM001
create or replace function memori._cleanup_pause_ms(p_batch_ms double precision) returns double precision
as $func$
declare
  v_session text := nullif(btrim(current_setting('memori.cleanup_work_share', true)), '');
  v_share   jsonb := memori._setting('cleanup.work_share');
  v_pause   jsonb := memori._setting('cleanup.batch_pause_ms');
begin
  if p_batch_ms is null or p_batch_ms < 0 or p_batch_ms = 'NaN'::float8 then
    perform memori._invalid(format('batch time %s ms is not a duration', coalesce(p_batch_ms::text, 'NULL')),
                            'Pass how long the last batch took, in milliseconds (>= 0).');
  end if;
  if v_session is not null then
    if (case when v_session !~ '^[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?$' then true  -- (the cast would fail)
             else not (v_session::numeric > 0 and v_session::numeric <= 1) end) then
      perform memori._invalid(format('memori.cleanup_work_share is %L; it must be a number above 0 and at most 1',
                                     v_session),
                              'SET memori.cleanup_work_share = 1 runs without rest; RESET it to use the '
                              'cleanup.work_share setting.');
    end if;
    v_share := to_jsonb(v_session::numeric);
  elsif v_share is not null then
    -- the settings' own rules (memori.setting_rules): a write that breaks them is refused, and a
    -- value written before them fails here, with the same PM001 and hint
    perform memori._setting_valid('cleanup.work_share', v_share, memori._setting_rule_book());
  end if;
  if v_pause is not null then
    perform memori._setting_valid('cleanup.batch_pause_ms', v_pause, memori._setting_rule_book());
  end if;
  return greatest(coalesce(v_pause::float8, 0),
                  p_batch_ms * (1 - coalesce(v_share::float8, 1)) / coalesce(v_share::float8, 1));
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cleanup_pause_ms(double precision) is 'Rest after a cleanup batch of p_batch_ms: p_batch_ms * (1 - share) / share (share: SET memori.cleanup_work_share, else cleanup.work_share), at least cleanup.batch_pause_ms; PM001 out of range.';

-------------------------------------------------------------------------------
-- _cleanup_whole: the one batch loop of cleanup_execute and cleanup_run
-- Start a run, call cleanup_batch until it says done, finish the run. With
-- p_commit (cleanup_run) the lock is session-level and every step commits,
-- resting the pause_ms each batch returns between batches; without it (cleanup_execute)
-- everything is one transaction holding a transaction-level lock. COMMIT needs
-- a top-level CALL: no search_path SET clause, every name is schema-qualified.
create or replace procedure memori._cleanup_whole(
  p_now timestamptz, p_batch_size integer, p_max_rows integer, p_trigger text, p_commit boolean,
  inout p_summary memori.cleanup_summary
)
as $proc$
declare
  v_run   memori.cleanup_runs;
  v_batch memori.cleanup_batch_result;
begin
  if p_commit then
    -- Fail before taking the session lock when COMMIT is not allowed (CALL
    -- inside a transaction block): an error after it would leave the lock
    -- held until the connection closes. At top level this commits nothing.
    commit;
  end if;
  v_run := memori._cleanup_start(p_now, p_batch_size, p_max_rows, p_trigger, p_commit);
  if p_commit then
    commit;
  end if;
  loop
    v_batch := memori.cleanup_batch(v_run.id);
    if p_commit then
      commit;
    end if;
    exit when v_batch.done;
    -- rest as the batch says, yielding the cores to the workload (in one transaction
    -- no rest: it would hold the run's locks and snapshot longer)
    if p_commit and v_batch.pause_ms > 0 then
      perform pg_catalog.pg_sleep(v_batch.pause_ms / 1000);
    end if;
  end loop;
  p_summary := memori.cleanup_finish(v_run.id);
  if p_commit then
    commit;
  end if;
end
$proc$ language plpgsql security invoker;
comment on procedure memori._cleanup_whole(timestamptz, integer, integer, text, boolean, memori.cleanup_summary) is 'Start a cleanup run, delete batch by batch until done, finish it: in one transaction, or (p_commit, top-level CALL only) committing every step.';

-------------------------------------------------------------------------------
-- cleanup_execute: a whole cleanup in one call (one transaction)
-- p_now: the time the cleanup runs as of: rows with expires_at <= p_now are due; NULL raises PM001
-- p_batch_size: rows deleted per batch, 1 to 100000, else PM001
-- p_max_rows: delete at most this many rows (the first in deletion order); NULL (default) for no cap; < 0 raises PM001
-- p_trigger: who started the run, recorded in cleanup_runs.trigger: 'sql' (default), 'cli' or 'cron'; else PM001
create or replace function memori.cleanup_execute(
  p_now        timestamptz default now(),
  p_batch_size integer default 1000,
  p_max_rows   integer default null,
  p_trigger    text default 'sql'
) returns memori.cleanup_summary
as $func$
declare
  v_summary memori.cleanup_summary;
begin
  perform memori._cleanup_on_coordinator();  -- before _cleanup_whole, which a worker cannot even compile
  call memori._cleanup_whole(p_now, p_batch_size, p_max_rows, p_trigger, false, v_summary);
  return v_summary;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_execute(timestamptz, integer, integer, text) is 'Delete exactly what cleanup_preview returns for the same arguments, in batches inside one transaction; returns the run summary.';

-------------------------------------------------------------------------------
-- cleanup_run: a whole cleanup, committing after every batch (pg_cron, psql)
-- CALL it at top level: inside a transaction block it fails with 2D000
-- (invalid transaction termination) before taking the cleanup lock.
-- p_batch_size: rows deleted per batch (one transaction each), 1 to 100000, else PM001
-- p_max_rows: delete at most this many rows (the first in deletion order); NULL (default) for no cap; < 0 raises PM001
-- p_trigger: who started the run, recorded in cleanup_runs.trigger: 'cron' (default), 'cli' or 'sql'; else PM001
create or replace procedure memori.cleanup_run(
  p_batch_size integer default 1000,
  p_max_rows   integer default null,
  p_trigger    text default 'cron'
)
as $proc$
declare
  v_summary memori.cleanup_summary;
begin
  -- Transaction control needs a top-level CALL: no search_path SET clause
  -- here (it would forbid COMMIT), every name is schema-qualified instead.
  perform memori._cleanup_on_coordinator();  -- before _cleanup_whole, which a worker cannot even compile
  call memori._cleanup_whole(pg_catalog.now(), p_batch_size, p_max_rows, p_trigger, true, v_summary);
end
$proc$ language plpgsql security invoker;
comment on procedure memori.cleanup_run(integer, integer, text) is 'Cleanup with one transaction per batch (CALL it at top level, e.g. from pg_cron; in a transaction block it fails with 2D000 before taking the lock); an interrupted run is marked abandoned by the next one.';

-------------------------------------------------------------------------------
-- cleanup_runs_recent: the latest cleanup runs, newest first
-- p_limit: how many runs, 1 to 1000 (default 10), else PM001
create or replace function memori.cleanup_runs_recent(p_limit integer default 10)
returns setof memori.cleanup_runs
as $func$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 then
    perform memori._invalid(format('limit must be between 1 and 1000, got %s', p_limit), 'Pass a limit such as 10.');
  end if;
  return query select * from memori.cleanup_runs order by id desc limit p_limit;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_runs_recent(integer) is 'The latest cleanup runs, newest first.';
