-- pymemdb SQL API: distributing the schema over a Citus cluster (issue 20, first step).
--
-- memori.distribution_plan() is the placement of every table (docs/scale-out.md):
--   distributed  by its owning user (user_id), all co-located in one group, so
--                the rows of one user live on one node;
--   reference    small global tables (policies, settings, priorities, boosts,
--                cross-user directories), replicated to every node;
--   local        bookkeeping of the coordinator (migrations, installs, cleanup runs).
-- memori.distribute() applies the plan on the coordinator of a Citus cluster,
-- table by table, each in its own subtransaction: what Citus accepts is
-- distributed (existing rows move to the shards), what it refuses stays a local
-- table, and every table is reported with the constraints that block it. It is
-- idempotent: run it again after the keys are fixed.

do $types$
begin
  if to_regtype('memori.distribution_plan_row') is null then
    create type memori.distribution_plan_row as (
      ord                 integer,  -- apply order: reference tables first, then by foreign-key depth
      table_name          text,
      placement           text,     -- distributed | reference | local
      distribution_column text,     -- the owning user's column of a distributed table, null otherwise
      change_needed       text      -- what the next schema migration must change (null: nothing)
    );
  end if;
  if to_regtype('memori.distribute_result') is null then
    create type memori.distribute_result as (
      table_name          text,
      placement           text,     -- the plan's placement
      distribution_column text,
      colocated_with      text,     -- the table that anchors the co-location group
      status              text,     -- distributed | reference | already | local | blocked | missing
      rows_moved          bigint,   -- rows copied from the coordinator into shards
      blockers            text[],   -- constraints, triggers and columns that prevent the placement today
      error               text      -- Citus's own message when it refused
    );
  end if;
end
$types$;
comment on type memori.distribution_plan_row is 'One table of the Citus distribution plan (memori.distribution_plan).';
comment on type memori.distribute_result is 'What memori.distribute() did with one table: placement, status, blockers, Citus''s error.';

-------------------------------------------------------------------------------
-- distribution_plan: the placement of every table of schema memori
create or replace function memori.distribution_plan()
returns setof memori.distribution_plan_row
as $func$
  with recursive plan(table_name, placement, change_needed) as (values
    -- reference: global configuration, read by every per-user call
    ('settings',            'reference', null),
    ('retention_tables',    'reference', null),
    ('retention_policies',  'reference', null),
    ('session_skills',      'reference', null),
    ('chunk_types',         'reference', null),
    ('priority_boosts',     'reference', null),
    ('token_budgets',       'reference', null),
    ('milestone_criteria',  'reference', null),
    ('vm_recall_signals',   'reference', null),
    -- reference: cross-user directories (small, read by members of other users)
    ('projects',            'reference', null),
    ('project_members',     'reference', null),
    ('vm_regions',          'reference', null),
    ('vm_region_members',   'reference', null),
    -- local on the coordinator: bookkeeping and the cleanup driver
    ('alembic_version',     'local', null),
    ('installs',            'local', null),
    ('cleanup_runs',        'local', null),
    ('cleanup_queue',       'local', null),
    -- distributed by the owning user
    -- seed 05: memories.user_id is the namespace (shared by every user of a skill and month);
    -- the owning user is owner_id
    ('memories',            'distributed', null),
    ('events',              'distributed', null),
    ('checkpoints',         'distributed', null),
    ('checkpoint_versions', 'distributed', null),
    ('sessions',            'distributed', null),
    ('context_entries',     'distributed', null),
    ('context_windows',     'distributed', null),
    ('context_chunks',      'distributed', null),
    ('context_optimizations','distributed',null),
    ('messages',            'distributed', null),
    ('compression_state',   'distributed', null),
    ('compression_plans',   'distributed', null),
    ('compression_checkpoints','distributed',null),
    ('snapshots',           'distributed', null),
    ('goals',               'distributed', null),
    ('goal_checkpoints',    'distributed', null),
    ('goal_decisions',      'distributed', null),
    ('goal_artifacts',      'distributed', null),
    ('lg_threads',          'distributed', null),
    ('lg_checkpoints',      'distributed', null),
    ('lg_blobs',            'distributed', null),
    ('lg_writes',           'distributed', null),
    ('vm_sessions',         'distributed', null),
    ('vm_forks',            'distributed', null),
    ('vm_segments',         'distributed', null),
    ('vm_pack_cache',       'distributed', null),
    ('vm_prefetches',       'distributed', null),
    ('pages',               'distributed', 'distribute() drops the fork trigger pages_cow (the functions copy on write through memori._page_write); '
                                           'on a cluster a plain DELETE or UPDATE of a forked session''s source rows no longer copies them into the forks'),
    ('page_versions',       'distributed', null),
    ('page_representations','distributed', 'distribute() drops the fork trigger page_representations_cow, as for pages'),
    ('working_set',         'distributed', null),
    ('page_mutations',      'distributed', null),
    ('page_faults',         'distributed', null),
    ('vm_region_pages',     'distributed', null),
    -- long-term memory (issue 17): keys already lead with the user
    ('store_namespaces',    'distributed', null),
    ('store_items',         'distributed', null),
    ('store_vectors',       'distributed', null),
    -- MCP bearer tokens (issue 18): keyed by user, but mcp_token_verify finds a token by its hash
    -- before the user is known: one multi-shard lookup per HTTP request, by design
    ('mcp_tokens',          'distributed', 'mcp_token_verify looks a token up by hash across users (multi-shard by design); a hash -> user reference table would make it one probe')
  ),
  -- foreign-key depth among memori tables: a referenced table is placed before its referrers
  fk(child, parent) as (
    select c.conrelid, c.confrelid
      from pg_catalog.pg_constraint c
     where c.contype = 'f' and c.conrelid <> c.confrelid
       and c.connamespace = 'memori'::regnamespace
  ),
  depth(rel, d) as (
    select c.oid, 0 from pg_catalog.pg_class c
     where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'p')
    union all
    select fk.child, depth.d + 1 from depth join fk on fk.parent = depth.rel where depth.d < 20
  ),
  depths as (select rel, max(d) as d from depth group by rel)
  select (row_number() over (order by case p.placement when 'local' then 0 when 'reference' then 1 else 2 end,
                                      coalesce(depths.d, 0), p.table_name))::integer,
         p.table_name, p.placement,
         case when p.placement <> 'distributed' then null
              when p.table_name = 'memories' then 'owner_id'
              else 'user_id' end,
         p.change_needed
    from plan p
    left join depths on depths.rel = pg_catalog.to_regclass('memori.' || p.table_name)
$func$ language sql stable
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.distribution_plan() is 'The Citus placement of every memori table (distributed by user_id, reference, or coordinator-local), in apply order.';

-------------------------------------------------------------------------------
-- _cluster_dropped_trigger: the triggers distribute() drops instead of refusing the table
-- The forks' copy-on-write triggers (sql/560) guard direct DML and the deletion of a forked
-- session's source on one server. Every page writer of sql/ copies on write itself
-- (memori._page_write), so on a cluster, where Citus refuses tables with triggers, the
-- triggers go and only those two guards are lost (docs/scale-out.md).
create or replace function memori._cluster_dropped_trigger(p_table regclass, p_trigger name) returns boolean
as $func$
  select (p_table, p_trigger) in (('memori.pages'::regclass, 'pages_cow'::name),
                                  ('memori.page_representations'::regclass, 'page_representations_cow'::name))
$func$ language sql stable
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cluster_dropped_trigger(regclass, name) is 'True for the triggers memori.distribute() drops before placing their table (the forks'' copy-on-write triggers).';

-------------------------------------------------------------------------------
-- _distribution_blockers: what in the catalog prevents placing a table today
create or replace function memori._distribution_blockers(p_table regclass, p_placement text, p_column text)
returns text[]
as $func$
declare
  v_blockers text[] := '{}';
  v_col      smallint;
  r          record;
begin
  if p_placement = 'distributed' then
    select a.attnum into v_col from pg_catalog.pg_attribute a
     where a.attrelid = p_table and a.attname = p_column and not a.attisdropped;
    if v_col is null then
      v_blockers := v_blockers || format('no column %s', p_column);
    elsif exists (select 1 from pg_catalog.pg_attribute a where a.attrelid = p_table and a.attnum = v_col and not a.attnotnull) then
      v_blockers := v_blockers || format('%s is nullable (Citus refuses NULL distribution values)', p_column);
    end if;
    -- primary keys, unique and exclusion constraints must contain the distribution column
    for r in select c.conname, pg_catalog.pg_get_constraintdef(c.oid) as def from pg_catalog.pg_constraint c
              where c.conrelid = p_table and c.contype in ('p', 'u', 'x')
                and (v_col is null or not v_col = any (c.conkey)) order by c.conname loop
      v_blockers := v_blockers || format('%s %s', r.conname, r.def);
    end loop;
    -- unique indexes that are not constraints
    for r in select i.indexrelid::regclass::text as name from pg_catalog.pg_index i
              where i.indrelid = p_table and i.indisunique
                and not exists (select 1 from pg_catalog.pg_constraint c where c.conindid = i.indexrelid)
                and (v_col is null or not v_col = any (i.indkey::smallint[])) loop
      v_blockers := v_blockers || format('unique index %s without %s', r.name, p_column);
    end loop;
    -- foreign keys to distributed tables must pair the distribution columns
    for r in select c.conname, pg_catalog.pg_get_constraintdef(c.oid) as def, c.confrelid, c.conkey, c.confkey
               from pg_catalog.pg_constraint c
              where c.conrelid = p_table and c.contype = 'f' order by c.conname loop
      if exists (select 1 from memori.distribution_plan() pl
                  where pl.placement = 'distributed' and pg_catalog.to_regclass('memori.' || pl.table_name) = r.confrelid)
         and not exists (select 1 from pg_catalog.generate_subscripts(r.conkey, 1) k
                          join pg_catalog.pg_attribute pa on pa.attrelid = r.confrelid and pa.attnum = r.confkey[k]
                          where r.conkey[k] = v_col and pa.attname = p_column) then
        v_blockers := v_blockers || format('%s %s', r.conname, r.def);
      end if;
    end loop;
  end if;
  if p_placement in ('distributed', 'reference') then
    -- foreign keys to tables that stay local; and a reference table may not
    -- reference a distributed one (the local ones are listed first)
    for r in select c.conname, pg_catalog.pg_get_constraintdef(c.oid) as def, t.placement
               from pg_catalog.pg_constraint c
              cross join lateral (select pl.placement from memori.distribution_plan() pl
                                   where pg_catalog.to_regclass('memori.' || pl.table_name) = c.confrelid
                                     and (pl.placement = 'local' or (pl.placement = 'distributed' and p_placement = 'reference'))
                                   limit 1) t
              where c.conrelid = p_table and c.contype = 'f'
              order by t.placement = 'distributed'
    loop
      v_blockers := v_blockers || format('%s %s (%s)', r.conname, r.def,
                                         case r.placement when 'local' then 'to a coordinator-local table'
                                                          else 'reference table to a distributed table' end);
    end loop;
    -- object identifiers are node-local: a replicated or distributed copy read on a worker names
    -- another object or none (retention_tables.relation and .candidate_view)
    for r in select a.attname, a.atttypid::regtype::text as typ from pg_catalog.pg_attribute a
              where a.attrelid = p_table and a.attnum > 0 and not a.attisdropped
                and a.atttypid in ('pg_catalog.oid'::regtype, 'pg_catalog.regclass'::regtype, 'pg_catalog.regproc'::regtype,
                                   'pg_catalog.regprocedure'::regtype, 'pg_catalog.regtype'::regtype,
                                   'pg_catalog.regnamespace'::regtype, 'pg_catalog.regrole'::regtype)
              order by a.attnum loop
      v_blockers := v_blockers || format('column %s is %s (an OID of the coordinator)', r.attname, r.typ);
    end loop;
    -- row-level security policies with subqueries: Citus refuses to create them on shards
    for r in select p.polname from pg_catalog.pg_policy p
              where p.polrelid = p_table
                and (p.polqual::text like '%{SUBLINK%' or coalesce(p.polwithcheck::text, '') like '%{SUBLINK%')
              order by p.polname loop
      v_blockers := v_blockers || format('policy %s has a subquery', r.polname);
    end loop;
    -- user triggers: Citus runs them only with citus.enable_unsafe_triggers (the forks'
    -- copy-on-write triggers are dropped by distribute(): see memori._cluster_dropped_trigger)
    for r in select t.tgname from pg_catalog.pg_trigger t
              where t.tgrelid = p_table and not t.tgisinternal
                and not memori._cluster_dropped_trigger(p_table, t.tgname) order by t.tgname loop
      v_blockers := v_blockers || format('trigger %s', r.tgname);
    end loop;
  end if;
  return v_blockers;
end
$func$ language plpgsql stable
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._distribution_blockers(regclass, text, text) is 'Constraints, triggers and columns of a table that block its Citus placement today (used by memori.distribute).';

-------------------------------------------------------------------------------
-- _coordinator_reference_gap: why the coordinator does not read the reference tables locally
-- No row when it holds a placement of every memori reference table: it is a node of
-- pg_dist_node (citus_set_coordinator_host adds it with shouldhaveshards = false, so it gets
-- reference placements and no distributed shards), and memori.settings, the retention policies
-- and the priority tables are read there without a round trip. Else one row: what is missing
-- and what a DBA runs (memori.distribute() raises it as a notice; pymemdb init --distribute
-- prints it). The function cannot add the coordinator itself: only the DBA knows the host and
-- port the workers reach it at.
create or replace function memori._coordinator_reference_gap(out problem text, out hint text)
returns setof record
as $func$
declare
  v_missing text[];
  v_total   integer;
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    return;
  end if;
  if not exists (select 1 from pg_dist_node where groupid = 0) then
    problem := 'the coordinator is not a node of this Citus cluster: the reference tables (memori.settings, '
               'the retention policies, the priority tables) have no placement on it, so every read of one '
               'by a call on the coordinator is a round trip to a worker';
    hint := 'Add it with the host and port the workers reach it at: SELECT citus_set_coordinator_host(''<coordinator host>'', <port>); '
            'it gets the reference tables'' placements and no distributed shards (docs/scale-out.md).';
    return next;
    return;
  end if;
  select pg_catalog.array_agg(dp.logicalrelid::text order by dp.logicalrelid::text)
           filter (where not exists (select 1 from pg_dist_shard sh join pg_dist_placement pp using (shardid)
                                      where sh.logicalrelid = dp.logicalrelid and pp.groupid = 0)),
         count(*)
    into v_missing, v_total
    from pg_dist_partition dp join pg_catalog.pg_class c on c.oid = dp.logicalrelid
   where c.relnamespace = 'memori'::regnamespace and dp.partmethod = 'n' and dp.repmodel = 't';
  if v_missing is not null then
    problem := format('the coordinator holds no placement of %s of the %s memori reference tables (%s): '
                      'their reads there are round trips to a worker',
                      pg_catalog.cardinality(v_missing), v_total, pg_catalog.array_to_string(v_missing, ', '));
    hint := 'Copy them there: Citus copies a shard as its owner, memori_owner, which must log in meanwhile: '
            'ALTER ROLE memori_owner LOGIN; SELECT replicate_reference_tables(); ALTER ROLE memori_owner NOLOGIN; '
            '(docs/scale-out.md).';
    return next;
  end if;
end
$func$ language plpgsql stable
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._coordinator_reference_gap() is 'Why the Citus coordinator does not read the memori reference tables locally (no placement there), with the DBA''s remedy; no row when it does.';

-------------------------------------------------------------------------------
-- distribute: apply the plan on a Citus coordinator, report every table
-- p_dry_run: true: change nothing (roles, settings, tables, functions), report what would be done: status ready
--   or blocked (with the blockers) for a table not placed yet; PM140, PM141 and PM142 are raised all the same
create or replace function memori.distribute(p_dry_run boolean default false)
returns setof memori.distribute_result
as $func$
declare
  v_plan     record;
  v_fk       record;
  v_rel      regclass;
  v_anchor   text;            -- first distributed table: the co-location group
  v_result   memori.distribute_result;
  v_kind     text;
  v_rows     bigint;
  v_moved    text[] := '{}';  -- tables whose local rows are truncated at the end
  v_t        text;
  v_detail   text;
  v_state    text;
  v_blocked  regclass[] := '{}';  -- tables that stay where they are: their referrers cannot follow
  v_role     text;
  v_failed   text;
  v_gap      record;
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    raise exception 'the citus extension is not installed in this database'
      using errcode = 'PM140',
            detail = 'memori.distribute() places the memori tables on a Citus cluster.',
            hint = 'Install Citus on every node (shared_preload_libraries = ''citus''), run CREATE EXTENSION citus here, '
                   'add the workers with citus_add_node(host, port), then call memori.distribute() on the coordinator (docs/scale-out.md).';
  end if;
  if not coalesce((select pg_catalog.citus_is_coordinator()), false) then
    raise exception 'memori.distribute() must run on the Citus coordinator'
      using errcode = 'PM141',
            hint = 'Connect to the coordinator (the node whose pg_dist_node row has groupid 0); '
                   'on a single-node Citus call citus_set_coordinator_host() first.';
  end if;
  -- The coordinator may be a node of the metadata (citus_set_coordinator_host, which adds it with
  -- shouldhaveshards = false): it then holds a placement of every reference table and reads them
  -- locally. It must not hold distributed shards: every user's rows stay on the workers.
  if exists (select 1 from pg_dist_node where groupid = 0 and shouldhaveshards) then
    raise exception 'the coordinator of this Citus cluster may hold distributed shards (shouldhaveshards = true)'
      using errcode = 'PM142',
            detail = 'pymemdb keeps every user''s rows on the workers: the coordinator routes per-user calls '
                     'and holds only the reference tables'' placements.',
            hint = 'SELECT citus_set_node_property(''<coordinator host>'', <port>, ''shouldhaveshards'', false) '
                   'before distributing; shards already there move off with citus_drain_node(''<coordinator host>'', <port>) '
                   '(docs/scale-out.md).';
  end if;
  -- Delegated calls run on the workers as the calling role: every memori role must exist on
  -- every node. The install created them on the coordinator only (DDL propagation was off);
  -- Citus brings a role along only when a placed object depends on it (memori_admin: none).
  if not p_dry_run then
    for v_role in select r.rolname::text from pg_catalog.pg_roles r
                   where r.rolname in ('memori_owner', 'memori_app', 'memori_cleaner', 'memori_admin')
                   order by r.rolname loop
      select string_agg(w.nodename || ':' || w.nodeport || ' ' || w.result, '; ') into v_failed
        from run_command_on_workers(format(
               'set citus.enable_ddl_propagation to off; '
               'do $r$ begin if not exists (select 1 from pg_catalog.pg_roles where rolname = %L) then '
               'create role %I nologin; end if; end $r$', v_role, v_role)) w
       where not w.success;
      if v_failed is not null then
        raise exception 'memori.distribute() could not create role % on every worker', v_role
          using errcode = 'PM144', detail = v_failed,
                hint = 'Create the memori roles (memori_owner, memori_app, memori_cleaner, memori_admin, NOLOGIN) '
                       'on every node as a superuser, then call memori.distribute() again.';
      end if;
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_admin')
       and pg_catalog.pg_has_role('memori_admin', 'memori_app', 'member') then
      perform run_command_on_workers('set citus.enable_ddl_propagation to off; grant memori_app to memori_admin');
    end if;
  end if;
  -- Row-level security runs on the shards, where the coordinator's memori.user_id is unknown
  -- unless the transaction sets it with SET LOCAL and Citus propagates it (the Python client
  -- does; set_config() is a function call Citus cannot see). New sessions of this database get it.
  if not p_dry_run then
    execute format('alter database %I set citus.propagate_set_commands = %L', pg_catalog.current_database(), 'local');
    perform pg_catalog.set_config('citus.propagate_set_commands', 'local', false);
  end if;
  -- several create_distributed_table calls with foreign keys to reference tables in one transaction
  perform pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
  -- The coordinator's own placements of reference tables are written through a connection, as the
  -- workers' are: Citus copies a table's rows into every placement at once, and a CHECK whose
  -- function opens a subtransaction (vm_recall_signals) would otherwise run on the coordinator's
  -- copy while the workers' copies are in progress ("another command is already in progress").
  perform pg_catalog.set_config('citus.enable_local_execution', 'off', true);

  -- Foreign keys between tables that are not placed yet are set aside and re-added once both
  -- sides are placed: otherwise Citus turns a local table that references a new reference
  -- table into a Citus-managed local table, a detour that refuses identity columns.
  create temporary table if not exists pg_temp.memori_distribute_fks (
    conrelid regclass, confrelid regclass, conname name, def text) on commit drop;
  truncate pg_temp.memori_distribute_fks;

  -- an existing co-location anchor (a rerun after some tables were distributed)
  select pl.table_name into v_anchor
    from memori.distribution_plan() pl
    join pg_dist_partition dp on dp.logicalrelid = pg_catalog.to_regclass('memori.' || pl.table_name)
   where pl.placement = 'distributed' and dp.partmethod = 'h'
   order by pl.ord limit 1;

  for v_plan in select * from memori.distribution_plan() order by ord loop
    v_rel := pg_catalog.to_regclass('memori.' || v_plan.table_name);
    v_result := row(v_plan.table_name, v_plan.placement, v_plan.distribution_column, null, null, 0, '{}', null);
    if v_rel is null then
      v_result.status := 'missing';
      return next v_result;
      continue;
    end if;
    v_result.blockers := memori._distribution_blockers(v_rel, v_plan.placement, v_plan.distribution_column)
      || coalesce((select array_agg(format('%s references %s, which is not placed', c.conname, c.confrelid::regclass)
                                     order by c.conname)
                     from pg_catalog.pg_constraint c
                    where c.conrelid = v_rel and c.contype = 'f' and c.confrelid = any (v_blocked)), '{}');
    -- A table that a table which cannot be placed yet references waits for it: Citus would turn
    -- the referrer into a Citus-managed local table, recreating its views (and leaving dangling
    -- OIDs in retention_tables). So does a distributed parent whose key its children already
    -- share (vm_sessions, while pages waits for its triggers).
    if v_plan.placement in ('reference', 'distributed') then
      v_result.blockers := v_result.blockers
        || coalesce((select array_agg(format('referenced by %s (%s), which cannot be placed yet', c.conrelid::regclass, c.conname)
                                      order by c.conname)
                       from pg_catalog.pg_constraint c
                       left join memori.distribution_plan() rp on pg_catalog.to_regclass('memori.' || rp.table_name) = c.conrelid
                      where c.contype = 'f' and c.confrelid = v_rel and c.conrelid <> v_rel
                        and not exists (select 1 from pg_dist_partition dp where dp.logicalrelid = c.conrelid
                                           and (dp.partmethod = 'h' or dp.repmodel = 't'))
                        and (coalesce(rp.placement, 'local') = 'local'
                             or cardinality(memori._distribution_blockers(c.conrelid, rp.placement, rp.distribution_column)) > 0)), '{}');
    end if;
    -- h: distributed; n with replication model t: reference; n otherwise: a Citus-managed local table
    select case when dp.partmethod = 'h' then 'distributed'
                when dp.partmethod = 'n' and dp.repmodel = 't' then 'reference' end
      into v_kind from pg_dist_partition dp where dp.logicalrelid = v_rel;
    if v_plan.placement = 'local' then
      v_result.status := 'local';
    elsif v_kind = v_plan.placement then
      v_result.status := 'already';
      v_result.colocated_with := case when v_plan.placement = 'distributed' then v_anchor end;
    elsif p_dry_run then
      v_result.status := case when cardinality(v_result.blockers) = 0 then 'ready' else 'blocked' end;
      v_result.colocated_with := case when v_plan.placement = 'distributed' then coalesce(v_anchor, v_plan.table_name) end;
      if v_plan.placement = 'distributed' and v_anchor is null and cardinality(v_result.blockers) = 0 then
        v_anchor := v_plan.table_name;
      end if;
    else
      execute format('select count(*) from %s', v_rel) into v_rows;
      if exists (select 1 from pg_catalog.unnest(v_result.blockers) b
                  where b like '% (an OID of the coordinator)' or b like 'referenced by %, which cannot be placed yet') then
        -- Citus would accept the table, and then workers would read meaningless OIDs, or a
        -- referrer would be converted behind our back
        v_result.status := 'blocked';
        v_result.error := 'not attempted: ' || (select string_agg(b, '; ') from pg_catalog.unnest(v_result.blockers) b
                                                 where b like '% (an OID of the coordinator)'
                                                    or b like 'referenced by %, which cannot be placed yet');
        v_blocked := v_blocked || v_rel;
        return next v_result;
        continue;
      end if;
      begin
        -- set aside the foreign keys of unplaced tables that point at this one
        for v_fk in select c.conrelid::regclass as conrelid, c.conname, pg_catalog.pg_get_constraintdef(c.oid) as def
                      from pg_catalog.pg_constraint c
                     where c.contype = 'f' and c.confrelid = v_rel and c.conrelid <> v_rel
                       and not exists (select 1 from pg_dist_partition dp where dp.logicalrelid = c.conrelid) loop
          insert into pg_temp.memori_distribute_fks values (v_fk.conrelid, v_rel, v_fk.conname, v_fk.def);
          execute format('alter table %s drop constraint %I', v_fk.conrelid, v_fk.conname);
        end loop;
        for v_t in select t.tgname from pg_catalog.pg_trigger t
                    where t.tgrelid = v_rel and not t.tgisinternal and memori._cluster_dropped_trigger(v_rel, t.tgname) loop
          execute format('drop trigger %I on %s', v_t, v_rel);
        end loop;
        if v_plan.placement = 'reference' then
          perform create_reference_table(v_rel);
          v_result.status := 'reference';
        else
          perform create_distributed_table(v_rel, v_plan.distribution_column,
                                           colocate_with => coalesce('memori.' || v_anchor, 'default'));
          v_result.status := 'distributed';
          v_result.colocated_with := coalesce(v_anchor, v_plan.table_name);
        end if;
        -- this table's own set-aside keys whose other side is placed come back now
        for v_fk in delete from pg_temp.memori_distribute_fks f
                     where f.conrelid = v_rel
                       and exists (select 1 from pg_dist_partition dp where dp.logicalrelid = f.confrelid)
                    returning f.* loop
          execute format('alter table %s add constraint %I %s', v_fk.conrelid, v_fk.conname, v_fk.def);
        end loop;
        if v_plan.placement = 'distributed' then
          v_anchor := coalesce(v_anchor, v_plan.table_name);
        end if;
        v_result.rows_moved := v_rows;
        if v_rows > 0 then
          v_moved := v_moved || v_rel::text;
        end if;
      exception when others then
        get stacked diagnostics v_detail = pg_exception_detail, v_state = returned_sqlstate;
        v_result.status := 'blocked';
        v_result.error := sqlerrm || case when v_detail <> '' then ': ' || v_detail else '' end
                          || ' (' || v_state || ')';
      end;
    end if;
    if v_result.status = 'blocked' then
      v_blocked := v_blocked || v_rel;
    end if;
    return next v_result;
  end loop;

  -- tables the plan does not know yet (a newer migration): reported, left local
  for v_rel in select c.oid::regclass from pg_catalog.pg_class c
                where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'p') and not c.relispartition
                  and not exists (select 1 from memori.distribution_plan() pl
                                   where pg_catalog.to_regclass('memori.' || pl.table_name) = c.oid)
                order by c.relname loop
    v_result := row((select c.relname::text from pg_catalog.pg_class c where c.oid = v_rel), 'unplanned', null, null, 'local', 0,
                    memori._distribution_blockers(v_rel, 'distributed', 'user_id'),
                    'not in memori.distribution_plan(): add it to sql/950-distribute.sql');
    return next v_result;
  end loop;

  -- Keys of tables that stayed local come back as they were (a local table referencing a
  -- reference table becomes a Citus-managed local table). A key that cannot come back
  -- aborts the whole call: distribute() never loses a constraint.
  for v_fk in delete from pg_temp.memori_distribute_fks returning * loop
    if exists (select 1 from pg_dist_partition dp where dp.logicalrelid = v_fk.confrelid)
       and not exists (select 1 from pg_dist_partition dp where dp.logicalrelid = v_fk.conrelid) then
      raise exception 'memori.distribute() would turn % into a Citus-managed local table (its key % references %)',
                      v_fk.conrelid, v_fk.conname, v_fk.confrelid
        using errcode = 'PM143',
              detail = 'Nothing was changed: the whole call is rolled back.',
              hint = 'See memori.distribute(p_dry_run => true) for the blockers of ' || v_fk.conrelid::text
                     || ', fix them, and call memori.distribute() again.';
    end if;
    execute format('alter table %s add constraint %I %s', v_fk.conrelid, v_fk.conname, v_fk.def);
  end loop;

  -- the rows now live in the shards: drop the coordinator's local copies, unless a table
  -- outside Citus references the table (the truncate would cascade into it)
  foreach v_t in array v_moved loop
    if exists (select 1 from pg_catalog.pg_constraint c
                where c.contype = 'f' and c.confrelid = v_t::regclass and c.conrelid <> c.confrelid
                  and not exists (select 1 from pg_dist_partition dp
                                   where dp.logicalrelid = c.conrelid and (dp.partmethod = 'h' or dp.repmodel = 't'))) then
      raise notice 'pymemdb: local rows of % kept on the coordinator (a local table references it); '
                   'run truncate_local_data_after_distributing_table() once its referrers are distributed', v_t;
      continue;
    end if;
    begin
      perform truncate_local_data_after_distributing_table(v_t::regclass);
    exception when others then
      raise notice 'pymemdb: local rows of % kept on the coordinator: %', v_t, sqlerrm;
    end;
  end loop;

  -- reference tables are read locally on the coordinator only where it holds their placements
  for v_gap in select * from memori._coordinator_reference_gap() loop
    raise notice 'pymemdb: %', v_gap.problem using hint = v_gap.hint;
  end loop;

  -- the helpers of every per-user function over placed tables go to the workers (Citus ships
  -- their calls inside statements to the shards); delegation itself stays opt-in
  perform count(*) from memori.distribute_functions(p_dry_run => p_dry_run);
end
$func$ language plpgsql volatile
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.distribute(boolean) is 'On a Citus coordinator: place every memori table as memori.distribution_plan() says and report each (PM140 without Citus).';

-------------------------------------------------------------------------------
-- _delegated_plans_per_call: a delegated function plans its statements at every call
--
-- On a worker, Citus 14.0.1 re-plans the shard query of a kept (generic) plan of a statement on
-- one table at every call and appends that plan to the kept one, never freed
-- (citusdata/citus#8824, fixed after 14.0.1): the worker backend of a pooled coordinator
-- connection grew by up to 294 kB per delegated call, 15 of 38 functions (docs/scale-out.md,
-- "Delegated calls and the acting user"). A delegated function therefore runs with plan_cache_mode = force_custom_plan
-- (its SET clause, which holds for the functions it calls and is undone when it returns): its
-- statements are planned per call and no generic plan is kept. So does a function that writes a
-- reference table (kind coordinator): the coordinator holds a copy, written by local execution,
-- and leaked the same way (project_create, 64 kB a call). Set on the coordinator (Citus
-- propagates the ALTER to the workers) by distribute_functions() (not in a dry run), and again
-- at every install (CREATE OR REPLACE drops a SET clause the file does not name). The other
-- functions, and one server, keep their plans.
create or replace function memori._delegated_plans_per_call(p_fn regprocedure) returns void
as $func$
declare
  v_path text := pg_catalog.current_setting('search_path');
begin
  if exists (select 1 from pg_catalog.pg_proc p where p.oid = p_fn
                and 'plan_cache_mode=force_custom_plan' = any (coalesce(p.proconfig, '{}'))) then
    return;
  end if;
  -- Citus deparses the function under the current search path and runs the text on the workers
  perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  execute pg_catalog.format('alter function %s set plan_cache_mode = force_custom_plan', p_fn);
  perform pg_catalog.set_config('search_path', v_path, true);
end
$func$ language plpgsql volatile
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._delegated_plans_per_call(regprocedure) is 'Give a function Citus delegates the SET clause plan_cache_mode = force_custom_plan (Citus 14.0.1 leaks a worker''s kept plans, citusdata/citus#8824).';

-------------------------------------------------------------------------------
-- distribute_functions: which per-user functions Citus can delegate to their user's node
--
-- Every public function with a user argument (p_user_id; p_owner_id for memory_save) is
-- classified from the catalog:
--   delegate     every table it reaches (itself and the memori functions it calls) is
--                distributed or a reference table it only reads: registered with
--                create_distributed_function(fn, arg, colocate_with, force_delegation => true)
--                the whole call runs on the worker that holds the user's shards (the
--                client's SET LOCAL memori.user_id travels with it; row-level security
--                holds there);
--   coordinator  it writes a reference table (a write to every node cannot start from a
--                delegated call) or reads other users' rows by design (Citus refuses both
--                in a forced delegation): it runs on the coordinator, statement by statement;
--   waiting      it reaches a table that is not placed yet (named in reason).
-- Registration is opt-in (p_delegate => true): Citus 14.0.1 crashes the coordinator
-- (signal 11, every session dropped) when a registered function is called with a NULL
-- distribution argument, inside or outside a transaction block, and every per-user
-- function accepts a NULL user (it then acts for memori.user_id). Delegate only when every
-- caller passes the user (docs/scale-out.md, "Delegated calls and the acting user").
do $types$
begin
  if to_regtype('memori.delegation_row') is null then
    create type memori.delegation_row as (
      function_name         text,  -- regprocedure
      distribution_argument text,  -- p_user_id | p_owner_id
      colocate_with         text,  -- the co-location anchor table
      kind                  text,  -- delegate | coordinator | waiting
      reason                text,  -- why not delegate (null for delegate)
      status                text,  -- registered | already | not registered | would register | failed: <error>
      helpers               text[] -- the memori functions it calls, propagated to the workers with it
    );
  end if;
end
$types$;
comment on type memori.delegation_row is 'One per-user function in memori.distribute_functions(): its delegation kind, why, and what was done.';

create or replace function memori.distribute_functions(
  p_delegate boolean default false,  -- true: also register the kind delegate functions (every caller must pass the user)
  p_dry_run  boolean default false   -- true: classify only, nothing created on the workers (status would register)
) returns setof memori.delegation_row
as $func$
declare
  v_anchor text;
  v_row    memori.delegation_row;
  v_fn     record;
  v_helper regprocedure;
  v_done   boolean;
  v_failed text;
  v_revoke text;   -- the PUBLIC execute privilege the workers have and the coordinator has not
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    raise exception 'the citus extension is not installed in this database'
      using errcode = 'PM140',
            detail = 'memori.distribute_functions() registers the per-user functions on a Citus cluster.',
            hint = 'Install Citus, distribute the tables with memori.distribute(), then call this (docs/scale-out.md).';
  end if;
  select 'memori.' || pl.table_name into v_anchor
    from memori.distribution_plan() pl
    join pg_dist_partition dp on dp.logicalrelid = pg_catalog.to_regclass('memori.' || pl.table_name)
   where pl.placement = 'distributed' and dp.partmethod = 'h'
   order by pl.ord limit 1;

  for v_fn in
    with recursive
    tables as (   -- every memori table with its placement today
      select c.oid as rel, c.relname::text as relname,
             case when dp.partmethod = 'h' then 'distributed'
                  when dp.partmethod = 'n' and dp.repmodel = 't' then 'reference' else 'local' end as placed
        from pg_catalog.pg_class c
        left join pg_dist_partition dp on dp.logicalrelid = c.oid
       where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'p')
    ),
    view_tables(view, rel) as (   -- a view reaches the tables (and views) its query reads
      select r.ev_class, d.refobjid
        from pg_catalog.pg_rewrite r
        join pg_catalog.pg_class v on v.oid = r.ev_class and v.relkind in ('v', 'm')
                                  and v.relnamespace = 'memori'::regnamespace
        join pg_catalog.pg_depend d on d.classid = 'pg_catalog.pg_rewrite'::regclass and d.objid = r.oid
                                   and d.refclassid = 'pg_catalog.pg_class'::regclass and d.refobjid <> r.ev_class
      union
      select vt.view, d.refobjid from view_tables vt
        join pg_catalog.pg_rewrite r on r.ev_class = vt.rel
        join pg_catalog.pg_depend d on d.classid = 'pg_catalog.pg_rewrite'::regclass and d.objid = r.oid
                                   and d.refclassid = 'pg_catalog.pg_class'::regclass and d.refobjid <> r.ev_class
    ),
    rels as (   -- tables, and views standing for the tables they read
      select t.relname, t.placed from tables t
      union all
      select v.relname::text, t.placed
        from view_tables vt join tables t on t.rel = vt.rel
        join pg_catalog.pg_class v on v.oid = vt.view
    ),
    fns as (    -- memori's own functions (not an extension's), bodies without comments and literals
      select p.oid, p.proname::text as proname,
             pg_catalog.regexp_replace(pg_catalog.regexp_replace(
               case when p.prosqlbody is not null then pg_catalog.pg_get_functiondef(p.oid) else p.prosrc end,
               '--[^\n]*', '', 'g'), '''([^'']|'''')*''', '''''', 'g') as prosrc
        from pg_catalog.pg_proc p
       where p.pronamespace = 'memori'::regnamespace and p.prokind = 'f'
         and not exists (select 1 from pg_catalog.pg_depend d
                          where d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
    ),
    words as (  -- every identifier of every body, once
      select distinct f.oid, lower(m[1]) as word, m[2] like '%(' as called
        from fns f cross join lateral pg_catalog.regexp_matches(f.prosrc, '([A-Za-z_][A-Za-z0-9_]*)(\s*\(?)', 'g') m
    ),
    written as (  -- the tables a body inserts into, updates or deletes from
      select distinct f.oid, lower(m[2]) as relname
        from fns f cross join lateral pg_catalog.regexp_matches(
               f.prosrc, '(insert\s+into|update|delete\s+from)\s+(?:memori\.)?([A-Za-z_][A-Za-z0-9_]*)', 'gi') m
    ),
    calls(caller, callee) as (   -- a body that names another memori function followed by (
      select distinct w.oid, b.oid from words w join fns b on b.proname = w.word and b.oid <> w.oid where w.called
    ),
    below(fn, callee, depth) as (   -- the functions each function calls, directly or not, and how deep
      select c.caller, c.callee, 1 from calls c
      union
      select b.fn, c.callee, b.depth + 1 from below b join calls c on c.caller = b.callee where b.depth < 12
    ),
    heights as (  -- the longest call chain under a function: a callee's height is below its caller's
      select b.fn, max(b.depth) as height from below b group by b.fn
    ),
    roots as (  -- the public per-user functions
      select p.oid, a.arg
        from pg_catalog.pg_proc p
        join fns f on f.oid = p.oid
        cross join lateral (select n.arg from pg_catalog.unnest(p.proargnames) n(arg)
                             where n.arg in ('p_user_id', 'p_owner_id')
                             order by n.arg = 'p_owner_id' desc limit 1) a
       where p.proname !~ '^_' and p.proname not in ('distribute', 'distribute_functions', 'distribution_plan')
    ),
    reach(root, fn) as (
      select r.oid, r.oid from roots r
      union
      select reach.root, calls.callee from reach join calls on calls.caller = reach.fn
    ),
    touches as (  -- the tables each root reaches, and whether it writes them
      select reach.root, rels.relname, rels.placed,
             bool_or(exists (select 1 from written wr where wr.oid = reach.fn and wr.relname = rels.relname)) as writes
        from reach join words w on w.oid = reach.fn
        join rels on rels.relname = w.word
       group by reach.root, rels.relname, rels.placed
    )
    select r.oid::regprocedure as fn, r.arg,
           -- callees first: a worker checks a SQL function's body when it is created, so a
           -- helper must not reach a worker before the helpers it calls (_age_ms calls _epoch_us)
           (select array_agg(reach.fn::regprocedure
                             order by coalesce(h.height, 0), reach.fn::regprocedure::text)
              from reach left join heights h on h.fn = reach.fn
             where reach.root = r.oid and reach.fn <> r.oid) as helpers,
           (select string_agg(t.relname, ', ' order by t.relname) from touches t
             where t.root = r.oid and t.placed = 'local') as unplaced,
           (select string_agg(t.relname, ', ' order by t.relname) from touches t
             where t.root = r.oid and t.placed = 'reference' and t.writes) as ref_writes,
           x.why as cross_user,
           -- on a worker Citus rewrites a table to its shard (memori.t_102008): a whole row passed
           -- to a function taking memori.t is then of another type and the call does not resolve
           (select string_agg(distinct reach.fn::regprocedure::text, ', ') from reach
              join pg_catalog.pg_proc h on h.oid = reach.fn
              join pg_catalog.pg_type t on t.oid = any (h.proargtypes::oid[]) and t.typrelid <> 0
              join tables tb on tb.rel = t.typrelid
             where reach.root = r.oid) as row_args
      from roots r
      join pg_catalog.pg_proc p on p.oid = r.oid
      -- reads other users' rows by design (docs/scale-out.md, "Multi-shard by design"), or not delegable
      left join (values
        ('context_get',     'resolves project and global entries written by other users'),
        ('context_resolve', 'resolves project and global entries written by other users'),
        ('context_search',  'searches project and global entries written by other users'),
        ('context_stats',   'counts the project and global entries the user reads, written by other users'),
        ('context_expiring_soon', 'lists the project and global entries the user reads, written by other users'),
        ('region_pages',    'reads the pages of a shared region, which live with their owners'),
        ('region_list',     'counts the entries of regions other users shared, which live with their owners'),
        ('mcp_token_list',  'a NULL user lists every user''s tokens (an admin''s listing)'),
        ('mcp_token_revoke', 'a NULL user revokes a token by id across users (an admin''s call)'),
        -- not cross-user, but not delegable: one statement reads a reference table beside the user's
        -- rows (as a join before 2026-11-29, as key probes since: both tried), which Citus's forced
        -- delegation refuses ("queries must filter by the distribution argument"); run on the
        -- coordinator it is already one round trip to the user's shard
        ('session_checkpoint_load_latest', 'one statement reads the skills (a reference table) beside the user''s rows, '
                                           'which a delegated call may not run; on the coordinator one round trip')
      ) x(proname, why) on x.proname = p.proname
     order by r.oid::regprocedure::text
  loop
    v_row := row(v_fn.fn::text, v_fn.arg, v_anchor, null, null, null, coalesce(v_fn.helpers::text[], '{}'));
    if v_fn.unplaced is not null then
      v_row.kind := 'waiting';
      v_row.reason := format('reaches %s, not distributed yet', v_fn.unplaced);
    elsif v_fn.cross_user is not null then
      v_row.kind := 'coordinator';
      v_row.reason := v_fn.cross_user;
    elsif v_fn.row_args is not null then
      v_row.kind := 'coordinator';
      v_row.reason := format('calls %s with a whole table row (on a worker the row is of the shard''s type)', v_fn.row_args);
    elsif v_fn.ref_writes is not null then
      v_row.kind := 'coordinator';
      v_row.reason := format('writes reference table %s (a write to every node)', v_fn.ref_writes);
    elsif v_anchor is null then
      v_row.kind := 'waiting';
      v_row.reason := 'no table is distributed yet (memori.distribute())';
    else
      v_row.kind := 'delegate';
    end if;
    select coalesce(o.distribution_argument_index is not null and o.force_delegation, false) into v_done
      from pg_dist_object o
     where o.classid = 'pg_catalog.pg_proc'::regclass and o.objid = v_fn.fn;
    v_done := coalesce(v_done, false);
    v_row.status := case when v_done and v_row.kind = 'delegate' then 'already'
                         when v_done then 'registered earlier'
                         when v_row.kind = 'delegate' and p_delegate and p_dry_run then 'would register'
                         else 'not registered' end;
    if v_row.kind <> 'waiting' and not p_dry_run and v_failed is not null then
      v_row.status := 'not attempted: ' || v_failed;
    elsif v_row.kind <> 'waiting' and not p_dry_run then
      -- Citus deparses each function under the current search path and runs the text on the
      -- workers: with memori on the path, memori types would be printed unqualified there
      perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      begin
        -- its helpers go to every worker whatever the kind: Citus ships the expressions of a
        -- statement to the shards (memori._store_ns_match(...) in a WHERE), and a delegated
        -- call runs its callees there
        foreach v_helper in array coalesce(v_fn.helpers, '{}') loop
          if not exists (select 1 from pg_dist_object o
                          where o.classid = 'pg_catalog.pg_proc'::regclass and o.objid = v_helper) then
            perform create_distributed_function(v_helper);
          end if;
        end loop;
        if v_row.kind = 'delegate' and p_delegate and not v_done then
          perform create_distributed_function(v_fn.fn, v_fn.arg, colocate_with => v_anchor, force_delegation => true);
          v_row.status := 'registered';
        end if;
        if (v_row.kind = 'delegate' and v_row.status in ('registered', 'already'))
           or v_fn.ref_writes is not null then
          perform memori._delegated_plans_per_call(v_fn.fn);
        end if;
      exception when others then
        v_row.status := 'failed: ' || sqlerrm;
        -- a command that failed on a worker leaves that worker's transaction aborted: stop here
        v_failed := 'an earlier registration failed (' || v_fn.fn::text || ')';
      end;
      perform pg_catalog.set_config('search_path', 'pg_catalog, memori, pg_temp', true);
    end if;
    return next v_row;
  end loop;
  -- Citus creates a function on the workers with PostgreSQL's default privileges (PUBLIC may
  -- execute) and then replays its GRANTs, not its REVOKEs: a delegated call runs there with the
  -- worker's privileges. Take PUBLIC's back wherever the coordinator has (Citus propagates it).
  if not p_dry_run and v_failed is null then
    perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    select 'revoke execute on function ' || string_agg(o.objid::regprocedure::text, ', ') || ' from public'
      into v_revoke
      from pg_dist_object o
      join pg_catalog.pg_proc p on p.oid = o.objid
     where o.classid = 'pg_catalog.pg_proc'::regclass and p.pronamespace = 'memori'::regnamespace and p.prokind = 'f'
       and p.proacl is not null
       and not exists (select 1 from pg_catalog.aclexplode(p.proacl) a where a.grantee = 0);
    if v_revoke is not null then
      execute v_revoke;
    end if;
    perform pg_catalog.set_config('search_path', 'pg_catalog, memori, pg_temp', true);
  end if;
end
$func$ language plpgsql volatile
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.distribute_functions(boolean, boolean) is 'On a Citus coordinator: classify every per-user function (kind delegate, coordinator or waiting) and, with p_delegate, register the delegable ones with create_distributed_function (PM140 without Citus).';

-- every install: the SET clause of the functions registered for delegation and of those that write
-- a reference table (CREATE OR REPLACE above and in the other files dropped it)
do $plans$
declare
  v_fn   regprocedure;
  v_path text := pg_catalog.current_setting('search_path');
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    return;
  end if;
  perform pg_catalog.set_config('search_path', 'pg_catalog, memori, pg_temp', true);  -- the names as printed
  for v_fn in
    select d.function_name::regprocedure from memori.distribute_functions(p_dry_run => true) d
     where (d.kind = 'delegate' and d.status = 'already')
        or (d.kind = 'coordinator' and d.reason like 'writes reference table %')
  loop
    perform memori._delegated_plans_per_call(v_fn);
  end loop;
  perform pg_catalog.set_config('search_path', v_path, true);
end
$plans$;

do $grants$
begin
  if exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_owner') then
    begin
      alter type memori.distribution_plan_row owner to memori_owner;
      alter type memori.distribute_result owner to memori_owner;
      alter function memori.distribution_plan() owner to memori_owner;
      alter function memori._distribution_blockers(regclass, text, text) owner to memori_owner;
      alter function memori._cluster_dropped_trigger(regclass, name) owner to memori_owner;
      alter function memori.distribute(boolean) owner to memori_owner;
      alter function memori._coordinator_reference_gap() owner to memori_owner;
      alter type memori.delegation_row owner to memori_owner;
      alter function memori.distribute_functions(boolean, boolean) owner to memori_owner;
      alter function memori._delegated_plans_per_call(regprocedure) owner to memori_owner;
    exception when insufficient_privilege then
      raise notice 'pymemdb: cannot hand the distribution functions to memori_owner; keeping current owner';
    end;
  end if;
end
$grants$;
-- A DBA's functions: nobody but the owner and superusers (900-security.sql grants every
-- function of the schema to the app roles on a re-install: take that back too).
do $revoke$
declare
  v_grantee text;
begin
  -- (memori_admin has them through memori_app; on a Citus cluster it may exist on the coordinator only)
  foreach v_grantee in array array['public', 'memori_app', 'memori_cleaner'] loop
    if v_grantee = 'public' or exists (select 1 from pg_catalog.pg_roles where rolname = v_grantee) then
      execute format('revoke all on function memori.distribution_plan(), '
                     'memori._distribution_blockers(regclass, text, text), memori.distribute(boolean), memori._cluster_dropped_trigger(regclass, name), '
                     'memori.distribute_functions(boolean, boolean), memori._coordinator_reference_gap(), '
                     'memori._delegated_plans_per_call(regprocedure) from %s',
                     case when v_grantee = 'public' then 'public' else quote_ident(v_grantee) end);
    end if;
  end loop;
end
$revoke$;
