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
    ('session_skills',      'reference', 'Citus sees a circular dependency: session_checkpoint_load_latest (a SQL-standard body, inlined) depends on this table'),
    ('chunk_types',         'reference', null),
    ('priority_boosts',     'reference', null),
    ('token_budgets',       'reference', null),
    ('milestone_criteria',  'reference', null),
    ('vm_recall_signals',   'reference', 'trigger vm_recall_signals_check: needs citus.enable_unsafe_triggers or a CHECK constraint instead'),
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
    ('memories',            'distributed', 'distribute by owner_id, not user_id (the namespace): owner_id NOT NULL after a backfill '
                                           '(legacy rows: owner = their namespace, which seed 05 made the user; ownerless namespace '
                                           'memories: owner = the namespace); PK (id) -> (owner_id, id)'),
    ('events',              'distributed', 'PK (id) -> (user_id, id); user_id is nullable (system events): give them a system user'),
    ('checkpoints',         'distributed', 'PK (id) -> (user_id, id); trigger checkpoints_pxyz'),
    ('checkpoint_versions', 'distributed', 'add user_id; PK (user_id, checkpoint_id, version); FK (user_id, checkpoint_id) -> checkpoints (user_id, id)'),
    ('sessions',            'distributed', 'PK (session_id) -> (user_id, session_id); FK project_id -> projects is to a reference table (ON DELETE SET NULL is allowed)'),
    ('context_entries',     'distributed', 'PK (id) -> (user_id, id); FK session_id -> sessions must include user_id; trigger context_entries_pxyz; global and project entries are read by other users (multi-shard or a reference table)'),
    ('context_windows',     'distributed', 'PK (window_id) -> (user_id, window_id); FK (user_id, session_id) -> sessions'),
    ('context_chunks',      'distributed', 'PK (id) -> (user_id, id)'),
    ('context_optimizations','distributed','PK (id) -> (user_id, id)'),
    ('messages',            'distributed', 'PK (id) -> (user_id, id); UNIQUE (session_id, seq) -> (user_id, session_id, seq)'),
    ('compression_state',   'distributed', 'PK (session_id) -> (user_id, session_id)'),
    ('compression_plans',   'distributed', 'PK (id) -> (user_id, id)'),
    ('compression_checkpoints','distributed','PK (id) -> (user_id, id)'),
    ('snapshots',           'distributed', 'PK (id) -> (user_id, id)'),
    ('goals',               'distributed', 'PK (id) -> (user_id, id)'),
    ('goal_checkpoints',    'distributed', 'PK/UNIQUE and FK goal_id -> goals must include user_id'),
    ('goal_decisions',      'distributed', 'PK/UNIQUE and FK goal_id -> goals must include user_id'),
    ('goal_artifacts',      'distributed', 'PK/UNIQUE and FK goal_id -> goals must include user_id'),
    ('lg_threads',          'distributed', 'PK (id) -> (user_id, id)'),
    ('lg_checkpoints',      'distributed', 'PK/UNIQUE and FK thread -> lg_threads must include user_id; trigger lg_checkpoints_writes_gone'),
    ('lg_blobs',            'distributed', 'PK/UNIQUE and FK thread -> lg_threads must include user_id'),
    ('lg_writes',           'distributed', 'PK/UNIQUE (id) and FK thread -> lg_threads must include user_id'),
    ('vm_sessions',         'distributed', 'PK (session_id) -> (user_id, session_id)'),
    ('vm_forks',            'distributed', 'PK/UNIQUE and FK session_id -> vm_sessions must include user_id; ancestors of a fork must belong to the same user'),
    ('vm_segments',         'distributed', 'PK/UNIQUE and FK session_id -> vm_sessions must include user_id'),
    ('vm_pack_cache',       'distributed', 'PK and FK session_id -> vm_sessions must include user_id'),
    ('vm_prefetches',       'distributed', 'PK (id) and FK session_id -> vm_sessions must include user_id'),
    ('pages',               'distributed', 'PK (id), UNIQUE (session_id, page_id) and FK session_id -> vm_sessions must include user_id; triggers pages_notify, pages_cow'),
    ('page_versions',       'distributed', 'PK and FK (session_id, page_id) -> pages must include user_id'),
    ('page_representations','distributed', 'PK and FK (session_id, page_id) -> pages must include user_id; trigger page_representations_cow'),
    ('working_set',         'distributed', 'PK and FK (session_id, page_id) -> pages must include user_id'),
    ('page_mutations',      'distributed', 'PK (id) -> (user_id, id); trigger page_mutations_append_only'),
    ('page_faults',         'distributed', 'PK (id) -> (user_id, id)'),
    ('vm_region_pages',     'distributed', 'PK must include user_id; FK region_id -> vm_regions is to a reference table; FK session_id -> vm_sessions must include user_id; reading a shared region is multi-shard by design'),
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
    -- user triggers: Citus runs them only with citus.enable_unsafe_triggers
    for r in select t.tgname from pg_catalog.pg_trigger t
              where t.tgrelid = p_table and not t.tgisinternal order by t.tgname loop
      v_blockers := v_blockers || format('trigger %s', r.tgname);
    end loop;
  end if;
  return v_blockers;
end
$func$ language plpgsql stable
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._distribution_blockers(regclass, text, text) is 'Constraints, triggers and columns of a table that block its Citus placement today (used by memori.distribute).';

-------------------------------------------------------------------------------
-- distribute: apply the plan on a Citus coordinator, report every table
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
  if exists (select 1 from pg_dist_node where groupid = 0) then
    raise exception 'the coordinator is a node of this Citus cluster (it holds shards)'
      using errcode = 'PM142',
            detail = 'Reference tables would get a placement on the coordinator, and a later pymemdb init '
                     '(which writes reference tables and then changes the schema in one transaction) fails there.',
            hint = 'Keep the coordinator out of pg_dist_node: SELECT citus_remove_node(''<coordinator host>'', <port>) '
                   'before distributing (docs/scale-out.md).';
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
    -- A reference table that a table which cannot be placed yet references waits for it: Citus
    -- would turn the referrer into a Citus-managed local table, recreating its views (and
    -- leaving dangling OIDs in retention_tables).
    if v_plan.placement = 'reference' then
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
end
$func$ language plpgsql volatile
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.distribute(boolean) is 'On a Citus coordinator: place every memori table as memori.distribution_plan() says and report each (PM140 without Citus).';

do $grants$
begin
  if exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_owner') then
    begin
      alter type memori.distribution_plan_row owner to memori_owner;
      alter type memori.distribute_result owner to memori_owner;
      alter function memori.distribution_plan() owner to memori_owner;
      alter function memori._distribution_blockers(regclass, text, text) owner to memori_owner;
      alter function memori.distribute(boolean) owner to memori_owner;
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
                     'memori._distribution_blockers(regclass, text, text), memori.distribute(boolean) from %s',
                     case when v_grantee = 'public' then 'public' else quote_ident(v_grantee) end);
    end if;
  end loop;
end
$revoke$;
