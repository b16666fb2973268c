-- pymemdb SQL API, last part: roles, ownership and grants (least privilege).
--
--   memori_owner   NOLOGIN, owns every object in schema memori
--   memori_app     what agents use: the read/write API, cleanup preview
--   memori_cleaner cleanup only: run, batch, schedule; reads nothing else
--   memori_admin   memori_app plus writing global context entries
--
-- Row-level security (ENABLEd and FORCEd) on every user-scoped table: an app
-- role sees and writes only the rows of current_setting('memori.user_id'),
-- set per transaction by the client (set_config(..., true), so it is safe
-- behind a transaction-mode pooler); unset or empty sees nothing. The cleaner
-- sees and deletes expired rows only.
--
-- Grant the roles to login roles: GRANT memori_app TO my_service;
-- Installing as a user that may not create roles skips role setup (a NOTICE
-- says so) and leaves the objects owned by the installing user.

do $roles$
declare
  v_role text;
begin
  foreach v_role in array array['memori_owner', 'memori_app', 'memori_cleaner', 'memori_admin'] loop
    if not exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
      begin
        execute format('create role %I nologin', v_role);
      exception when insufficient_privilege then
        raise notice 'pymemdb: cannot create role % (needs CREATEROLE); skipping role setup', v_role;
      end;
    end if;
  end loop;
  if exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_admin')
     and exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_app')
     and not pg_catalog.pg_has_role('memori_admin', 'memori_app', 'member') then
    begin
      grant memori_app to memori_admin;
    exception when insufficient_privilege then
      raise notice 'pymemdb: cannot grant memori_app to memori_admin; grant it as a role administrator';
    end;
  end if;
end
$roles$;

-- Hand every object of the schema to memori_owner.
do $owner$
declare
  v_obj record;
begin
  if not exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_owner') then
    return;
  end if;
  begin
    execute 'alter schema memori owner to memori_owner';
    for v_obj in
      select case c.relkind when 'v' then 'view' when 'S' then 'sequence' else 'table' end as kind,
             format('%I.%I', n.nspname, c.relname) as name
        from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
       where n.nspname = 'memori' and c.relkind in ('r', 'p', 'v', 'm')
      union all
      select case p.prokind when 'p' then 'procedure' else 'function' end,
             p.oid::regprocedure::text
        from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'memori'
      union all
      select 'type', format('%I.%I', n.nspname, t.typname)
        from pg_catalog.pg_type t join pg_catalog.pg_namespace n on n.oid = t.typnamespace
       where n.nspname = 'memori' and t.typtype = 'c'
         -- a standalone composite type has a pg_class row of kind c (not: the row type of a
         -- table, nor of a Citus shard, whose pg_class row Citus hides)
         and exists (select 1 from pg_catalog.pg_class c where c.oid = t.typrelid and c.relkind = 'c')
    loop
      execute format('alter %s %s owner to memori_owner', v_obj.kind, v_obj.name);
    end loop;
  exception when insufficient_privilege then
    raise notice 'pymemdb: cannot hand objects to memori_owner (installer is not a member); keeping current owner';
  end;
end
$owner$;

-- Nothing for PUBLIC: functions are executable by PUBLIC by default.
revoke all on schema memori from public;
revoke all on all tables in schema memori from public;
revoke all on all functions in schema memori from public;
revoke all on all procedures in schema memori from public;

do $grants$
declare
  v_prop text;
begin
  if not exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_app')
     or not exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_cleaner') then
    return;
  end if;

  grant usage on schema memori to memori_app, memori_cleaner;

  -- configuration: readable by both, changed by the owner (a DBA)
  grant select on memori.settings, memori.retention_tables, memori.retention_policies,
                  memori.session_skills to memori_app, memori_cleaner;

  -- memori_app: the read/write API
  grant select, insert, update, delete on memori.memories, memori.checkpoints, memori.checkpoint_versions
    to memori_app;
  grant select on memori.milestone_criteria to memori_app, memori_cleaner;
  grant select, insert on memori.events to memori_app;
  grant select on memori.cleanup_runs to memori_app;
  grant select on memori.active_memories, memori.ttl_status, memori.ttl_next_expiry,
                  memori.retention_rows, memori.retention_candidates, memori.retention_status,
                  memori.cleanup_status, memori._retention_memories, memori._retention_events,
                  memori._retention_checkpoints, memori.checkpoint_expiry_status to memori_app;
  grant execute on all functions in schema memori to memori_app;
  -- ...except running and scheduling cleanup, which is the cleaner's job
  revoke execute on function memori.cleanup_begin(timestamptz, integer, integer, text),
                             memori.cleanup_batch(bigint, integer),
                             memori.cleanup_finish(bigint, text),
                             memori.cleanup_execute(timestamptz, integer, integer, text),
                             memori._cleanup_start(timestamptz, integer, integer, text, boolean),
                             memori._cleanup_delete_range(memori.cleanup_runs, integer, integer),
                             memori.cleanup_schedule(text, text),
                             memori.cleanup_unschedule(text),
                             memori.retention_register(text, regclass, regclass, name, text, integer, interval, boolean, name),
                             memori._retention_rebuild_rows()
    from memori_app;

  -- memori_cleaner: find and delete expired rows, record runs
  grant select, delete on memori.memories, memori.events, memori.checkpoints to memori_cleaner;
  -- SELECT ... FOR UPDATE SKIP LOCKED (a batch locks its rows without waiting for writers) needs
  -- UPDATE on a column; the cleaner_lock policy's WITH CHECK (false) lets it change nothing
  grant update (id) on memori.memories, memori.events, memori.checkpoints to memori_cleaner;
  grant insert on memori.events to memori_cleaner;
  grant select, insert, update on memori.cleanup_runs to memori_cleaner;
  grant select, insert, delete on memori.cleanup_queue to memori_cleaner;
  grant update (attempts) on memori.cleanup_queue to memori_cleaner;
  grant select on memori.retention_rows, memori.retention_candidates, memori.retention_status,
                  memori.cleanup_status, memori._retention_memories, memori._retention_events,
                  memori._retention_checkpoints, memori.checkpoint_expiry_status
    to memori_cleaner;
  grant execute on all functions in schema memori to memori_cleaner;
  -- The procedures run on the coordinator only (PM141 elsewhere), and Citus 14.0.1 sends a grant on
  -- a procedure to the workers as a grant on a function, which they refuse ("... is not a function"):
  -- granted here without propagation.
  v_prop := pg_catalog.current_setting('citus.enable_ddl_propagation', true);
  if v_prop is not null then
    perform pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
  end if;
  grant execute on procedure memori.cleanup_run(integer, integer, text),
                            memori._cleanup_whole(timestamptz, integer, integer, text, boolean, memori.cleanup_summary)
    to memori_cleaner;
  if v_prop is not null then
    perform pg_catalog.set_config('citus.enable_ddl_propagation', v_prop, true);
  end if;
  revoke execute on function memori.retention_register(text, regclass, regclass, name, text, integer, interval, boolean, name),
                             memori._retention_rebuild_rows(),
                             memori.session_checkpoint_save(text, text, text, jsonb, timestamptz),
                             memori.memory_save(text, text, text, jsonb, interval, text, timestamptz),
                             memori.checkpoint_create(text, text, text, text, jsonb, text, jsonb, text[], integer, timestamptz),
                             memori.checkpoint_create_many(jsonb, timestamptz),
                             memori.checkpoint_update(uuid, jsonb, timestamptz),
                             memori.checkpoint_preserve(uuid, boolean),
                             memori.checkpoint_auto(text, text, text, jsonb, timestamptz),
                             memori.checkpoint_detect_milestone(text, text, jsonb, timestamptz)
    from memori_cleaner;

  -- what is installed: clients check the revision when they connect
  grant select on memori.alembic_version, memori.installs to memori_app, memori_cleaner;

  -- context store (issue 4)
  grant select, insert, update, delete on memori.projects, memori.project_members, memori.sessions,
                                          memori.context_entries, memori.context_windows to memori_app;
  grant select on memori._retention_context_entries, memori._retention_context_windows,
                  memori._retention_sessions to memori_app, memori_cleaner;
  grant select, delete on memori.context_entries, memori.context_windows, memori.sessions to memori_cleaner;
  revoke execute on function memori.context_set(text, jsonb, text, text, text, text, text, bigint, timestamptz),
                             memori.context_delete(text, text, text, text, text),
                             memori.context_cleanup_by_scope(text, text, text, text, boolean, timestamptz),
                             memori.context_prune_old(interval, text, timestamptz),
                             memori.business_context_set(jsonb, text, timestamptz),
                             memori.business_context_update(jsonb, text, timestamptz),
                             memori.session_context_set(text, text, text, jsonb, timestamptz),
                             memori.session_context_add_window(text, text, jsonb, integer, text, text, timestamptz),
                             memori.session_context_remove_window(text, uuid, text, timestamptz),
                             memori.project_create(text, text, text, jsonb, timestamptz),
                             memori.project_member_add(text, text, text, timestamptz),
                             memori.project_member_remove(text, text, text)
    from memori_cleaner;

  -- compression (issue 8): history is append-only for the app; snapshots are immutable
  grant select, insert on memori.messages to memori_app;
  grant select, insert, update on memori.compression_state to memori_app;
  grant select, insert, update, delete on memori.compression_checkpoints, memori.compression_plans, memori.goals,
                                          memori.goal_checkpoints, memori.goal_decisions, memori.goal_artifacts
    to memori_app;
  grant select, insert, delete on memori.snapshots to memori_app;
  grant select on memori._retention_compression_plans, memori._retention_snapshots to memori_app, memori_cleaner;
  grant select, delete on memori.compression_plans, memori.snapshots to memori_cleaner;
  revoke execute on function memori.message_add(text, text, text, integer, jsonb, timestamptz, text, integer, integer),
                             memori.compression_plan(text, integer, integer, timestamptz, boolean),
                             memori.compression_apply(uuid, text, jsonb, timestamptz, integer),
                             memori.compression_abort(uuid, text, timestamptz),
                             memori.goal_create(text, text, text, text, timestamptz),
                             memori.goal_markers_apply(text, text, text, timestamptz),
                             memori.snapshot_create(text, jsonb, timestamptz),
                             memori.snapshot_restore(uuid, timestamptz)
    from memori_cleaner;

  -- LangGraph checkpointer (issue 9)
  grant select, insert, update, delete on memori.lg_threads, memori.lg_checkpoints, memori.lg_blobs, memori.lg_writes
    to memori_app;
  grant select on memori._retention_lg_threads, memori._retention_lg_checkpoints, memori._retention_lg_blobs,
                  memori._retention_lg_writes
    to memori_app, memori_cleaner;
  -- the cleaner deletes expired threads, checkpoints, blobs and writes
  grant select, delete on memori.lg_threads, memori.lg_checkpoints, memori.lg_blobs, memori.lg_writes
    to memori_cleaner;
  revoke execute on function
    memori.lg_checkpoint_put(text, text, uuid, uuid, jsonb, jsonb, text[], text[], text[], bytea[], text, text, timestamptz,
                             text[], integer[]),
    memori.lg_writes_put(text, text, uuid, text, text, integer[], text[], text[], bytea[], text, text, timestamptz,
                          text),
    memori.lg_thread_copy(text, text, text, text, timestamptz),
    memori.lg_policy_set(text, interval, interval, integer)
    from memori_cleaner;

  -- context window manager (issue 5)
  grant select on memori.chunk_types, memori.token_budgets, memori.priority_boosts to memori_app, memori_cleaner;
  grant select, insert, update, delete on memori.context_chunks to memori_app;
  grant select, insert on memori.context_optimizations to memori_app;
  grant select on memori._retention_context_chunks, memori._retention_context_optimizations to memori_app;
  grant select, delete on memori.context_chunks, memori.context_optimizations to memori_cleaner;
  grant select on memori._retention_context_chunks, memori._retention_context_optimizations to memori_cleaner;
  revoke execute on function memori.chunk_add_many(text, jsonb, text, interval, timestamptz),
                             memori.chunk_clear(text),
                             memori.context_optimize(jsonb, integer, jsonb, timestamptz),
                             memori.context_optimize_stored(text, integer, jsonb, timestamptz),
                             memori._budget_record(memori.optimization_result, text, integer, jsonb, text, text, timestamptz),
                             memori._budget_failed(jsonb, jsonb, text, text, text, text, timestamptz)
    from memori_cleaner;

  -- AI virtual memory (issue 6)
  grant select, insert, update, delete on memori.vm_sessions, memori.pages, memori.page_representations,
                                          memori.page_versions, memori.working_set, memori.vm_pack_cache to memori_app;
  -- the mutation log and the fault record are append-only for the application
  grant select, insert on memori.page_mutations, memori.page_faults to memori_app;
  grant select on memori._retention_pages, memori._retention_page_faults, memori._retention_page_mutations,
                  memori._retention_vm_sessions to memori_app, memori_cleaner;
  grant select, delete on memori.pages, memori.page_faults, memori.page_mutations, memori.vm_sessions
    to memori_cleaner;
  revoke execute on function memori.turn_begin(text, text, timestamptz),
                             memori.vm_session_configure(text, jsonb, text, timestamptz),
                             memori.page_create(text, text, text, text, text, text, jsonb, double precision, text[], text, text, text, text, text, integer, bigint, integer[], numeric, boolean, boolean, text, text, timestamptz, timestamptz),
                             memori.page_update(text, text, text, jsonb, integer, text, timestamptz, text[]),
                             memori.page_flush(text, text[], timestamptz),
                             memori.page_representation_put(text, text, integer, text, jsonb, integer, integer, timestamptz),
                             memori.page_pin(text, text, boolean, text, timestamptz),
                             memori.vm_add_page(text, text, integer, boolean, text, timestamptz),
                             memori.vm_evict(text, integer, text, text, timestamptz),
                             memori.page_fault(text, text, integer, text, text, timestamptz),
                             memori.vm_context(text, integer, text, timestamptz),
                             memori.vm_developer_message(text, text, text, integer, text, timestamptz)
    from memori_cleaner;

  -- AI virtual memory search and page index (issue 7): reads, plus storing a page's embedding
  grant execute on function memori.search_pages(text, text, public.vector, text, text[], integer, text, text, timestamptz, boolean),
                            memori.pages_by_type(text, text, integer, timestamptz),
                            memori.page_provenance_chain(text, text, text, integer, timestamptz),
                            memori.pages_top_importance(text, integer, text, timestamptz),
                            memori.page_embedding_set(text, text, public.vector, timestamptz)
    to memori_app;
  revoke execute on function memori.page_embedding_set(text, text, public.vector, timestamptz) from memori_cleaner;
  -- choosing the embedding dimension retypes a column: the installer's job (pymemdb init --embedding-dim)
  revoke execute on function memori.vm_embedding_dim_set(integer) from memori_app, memori_cleaner;

  -- AI virtual memory fork, GC and shared regions (issue 7)
  grant select, insert, delete on memori.vm_forks to memori_app;
  grant select, insert, update, delete on memori.vm_regions, memori.vm_region_members, memori.vm_region_pages
    to memori_app;
  grant select on memori.vm_visible_pages to memori_app;
  -- deleting an expired page runs the copy-on-write trigger, which looks for forks (the cleaner sees none)
  grant select on memori.vm_forks to memori_cleaner;
  revoke execute on function memori.session_fork(text, text, timestamptz),
                             memori.vm_gc(timestamptz),
                             memori.region_create(text, text, text, text, timestamptz),
                             memori.region_grant(text, text, text, timestamptz),
                             memori.region_revoke(text, text, text, timestamptz),
                             memori.region_page_put(text, text, text, text, timestamptz),
                             memori.region_page_remove(text, text, text, text),
                             memori.region_drop(text, text, timestamptz)
    from memori_cleaner;

  -- AI virtual memory lifecycle (issue 7): segments, claims, pre-pass and prefetch records; recall signals are DBA config
  grant select, insert, update, delete on memori.vm_segments to memori_app;
  grant select, insert, update on memori.vm_prefetches to memori_app;
  grant select on memori.vm_recall_signals to memori_app, memori_cleaner;
  grant select on memori._retention_vm_prefetches to memori_app, memori_cleaner;
  grant select, delete on memori.vm_prefetches to memori_cleaner;
  revoke execute on function memori.claim_create(text, text, text[], double precision, text, text, boolean, text, text, timestamptz),
                             memori.claim_supersede(text, text, text, text[], text, double precision, text, boolean, text, timestamptz),
                             memori.segment_close(text, text, text, double precision, text, timestamptz),
                             memori.vm_prepass(text, text, boolean, integer, integer, integer, timestamptz),
                             memori.vm_prefetch(text, boolean, integer, text[], integer, integer, integer, timestamptz),
                             memori.vm_turn_start(text, text, text, text, timestamptz),
                             memori.vm_cite(text, text[], timestamptz)
    from memori_cleaner;

  -- long-term memory store (issue 17): items, their embeddings and each user's namespace dictionary;
  -- the cleaner deletes expired items (their embeddings go by the foreign key's cascade) and reads the
  -- dictionary entries of the namespaces holding them (the candidate view's category)
  grant select, insert, update, delete on memori.store_items, memori.store_vectors to memori_app;
  grant select, insert, delete on memori.store_namespaces to memori_app;
  grant select on memori._retention_store_items to memori_app, memori_cleaner;
  grant select, delete on memori.store_items to memori_cleaner;
  grant select on memori.store_namespaces to memori_cleaner;
  revoke execute on function
    memori.store_put(text, text[], text, jsonb, interval, text[], timestamptz, text, text[], public.vector[]),
    memori.store_put_many(text, jsonb, timestamptz),
    memori.store_get(text, text[], text, boolean, timestamptz),
    memori.store_get_many(text, jsonb, text[], boolean, timestamptz),
    memori.store_delete(text, text[], text),
    memori.store_namespace_delete(text, text[], timestamptz),
    memori.store_search(text, text[], jsonb, text, public.vector, integer, integer, boolean, timestamptz, text, text)
    from memori_cleaner;
  -- an ANN index is DDL: the installer's job (pymemdb init, MemoriStore.setup() as the owner)
  revoke execute on function memori.store_index_ensure(integer, text, text, text, jsonb) from memori_app, memori_cleaner;
  -- MCP server bearer tokens (issue 18): issued, listed and revoked by memori_admin (or the owner);
  -- the app role verifies (mcp_token_verify, as itself: its policies below show it the row of a
  -- presented secret's hash, and let it stamp its last use) and never reads a hash. Its column
  -- grant serves the retention views (cleanup_preview of its own rows) and the verification.
  grant select (id, user_id, name, token_prefix, created_at, expires_at, revoked_at, last_used_at, created_by)
    on memori.mcp_tokens to memori_app;
  grant update (last_used_at) on memori.mcp_tokens to memori_app;
  grant select on memori._retention_mcp_tokens to memori_app, memori_cleaner;
  grant select, delete on memori.mcp_tokens to memori_cleaner;
  revoke execute on function memori.mcp_token_create(text, text, interval, timestamptz),
                             memori.mcp_token_list(text, boolean, timestamptz),
                             memori.mcp_token_revoke(text, text, bigint, timestamptz)
    from memori_app, memori_cleaner;
  revoke execute on function memori.mcp_token_verify(text, text, timestamptz) from memori_cleaner;
  if exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_admin') then
    grant select, insert, update on memori.mcp_tokens to memori_admin;
    grant execute on function memori.mcp_token_create(text, text, interval, timestamptz),
                              memori.mcp_token_list(text, boolean, timestamptz),
                              memori.mcp_token_revoke(text, text, bigint, timestamptz)
      to memori_admin;
  end if;
end
$grants$;

-------------------------------------------------------------------------------
-- Row-level security. Policies are dropped and re-created on every install,
-- so this block is the whole truth. Without the roles (an installer that may
-- not create them) the user policies apply to PUBLIC.
do $rls$
declare
  v_cur     constant text := 'current_setting(''memori.user_id'', true)';
  -- the hash of the MCP token being verified (mcp_token_verify), NULL outside it
  v_hash    constant text := 'token_hash = decode(nullif(current_setting(''memori.mcp_token_hash'', true), ''''), ''hex'')';
  v_verifying_not constant text := '(coalesce(current_setting(''memori.mcp_token_hash'', true), '''') = '''')';
  v_app     text := case when exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_app')
                         then 'memori_app' else 'public' end;
  v_cleaner boolean := exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_cleaner');
  v_admin   boolean := exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_admin');
  v_member  text;
  v_t       record;
begin
  for v_t in select p.tablename, p.policyname from pg_catalog.pg_policies p where p.schemaname = 'memori' loop
    execute format('drop policy %I on memori.%I', v_t.policyname, v_t.tablename);
  end loop;

  -- Every user-scoped table: each table with a user column gets RLS, and
  -- unless it is listed here with policies of its own below, the plain rule
  -- "the acting user's rows" on that column. New tables are protected by
  -- default; memories' user_id is seed 05's namespace, its user is owner_id.
  for v_t in
    select c.relname as tbl,
           case when c.relname = 'memories' then 'owner_id' else 'user_id' end as col,
           c.relname = any (array['events', 'projects', 'project_members', 'sessions',
                                  'context_entries', 'vm_regions', 'vm_region_members', 'vm_region_pages'])
             as specific,
           exists (select 1 from pg_catalog.pg_attribute a
                    where a.attrelid = c.oid and a.attname = 'expires_at' and not a.attisdropped) as expires
      from pg_catalog.pg_class c
     where c.relnamespace = 'memori'::regnamespace and c.relkind in ('r', 'p')
       and exists (select 1 from pg_catalog.pg_attribute a
                    where a.attrelid = c.oid and a.attname in ('user_id', 'owner_id') and not a.attisdropped)
     order by c.relname
  loop
    execute format('alter table memori.%I enable row level security', v_t.tbl);
    execute format('alter table memori.%I force row level security', v_t.tbl);
    if not v_t.specific then
      execute format('create policy user_rows on memori.%I for all to %I using (%I = %s) with check (%I = %s)',
                     v_t.tbl, v_app, v_t.col, v_cur, v_t.col, v_cur);
    end if;
    if v_cleaner and v_t.expires then
      -- the cleaner finds and deletes expired rows, and sees nothing else
      execute format('create policy cleaner_expired on memori.%I for select to memori_cleaner '
                     'using (expires_at <= now())', v_t.tbl);
      execute format('create policy cleaner_delete on memori.%I for delete to memori_cleaner '
                     'using (expires_at <= now())', v_t.tbl);
      -- row locks only (FOR UPDATE SKIP LOCKED): no row it may lock can be changed
      execute format('create policy cleaner_lock on memori.%I for update to memori_cleaner '
                     'using (expires_at <= now()) with check (false)', v_t.tbl);
    end if;
  end loop;

  -- store namespaces: the cleaner reads the paths (never the items' values) of every user's namespaces, for the
  -- retention category of expired items (the first label). The policy is row-local because Citus refuses
  -- subqueries in the policies of a distributed table; narrowing it to namespaces that hold expired items
  -- needs one, and that made store_namespaces (and with it store_items and store_vectors) undistributable.
  if v_cleaner then
    execute 'create policy cleaner_read on memori.store_namespaces for select to memori_cleaner using (true)';
  end if;

  -- checkpoint versions carry their checkpoint's user_id (the foreign key pairs them): the plain rule above

  -- events: one's own; system events (the system user '') may be written, not read (an empty
  -- memori.user_id, which current_setting returns once it was set in the session, is no user)
  execute format('create policy user_rows on memori.events for select to %I using (user_id = %s and user_id <> '''')',
                 v_app, v_cur);
  execute format('create policy user_insert on memori.events for insert to %I '
                 'with check (user_id = '''' or user_id = %s)', v_app, v_cur);
  if v_cleaner then
    -- (and reads them back: INSERT ... RETURNING needs a SELECT policy too)
    execute 'create policy cleaner_insert on memori.events for insert to memori_cleaner with check (user_id = '''')';
    execute 'create policy cleaner_system on memori.events for select to memori_cleaner using (user_id = '''')';
  end if;

  -- projects: members read; the owner writes. project_members: one's own
  -- memberships, and the owner sees and manages the list. (The member
  -- policy must not read projects: the two would recurse.) Membership is
  -- projects.member_ids, kept by the project functions: on Citus a policy
  -- runs on the shards, where it may read no other table (Citus refuses a
  -- subquery, and a function reading even a reference table fails there).
  v_member := format('%s = any (member_ids)', v_cur);
  execute format('create policy member_read on memori.projects for select to %I using (owner_id = %s or %s)',
                 v_app, v_cur, v_member);

  -- sessions: the user's own. (Only in projects the user is a member of, too,
  -- which the functions check: a policy on Citus may not look the membership
  -- up, and a session row names no member list. A session in another project
  -- shows nothing of it: reads check membership.)
  execute format('create policy user_rows on memori.sessions for all to %I using (user_id = %s) '
                 'with check (user_id = %s)', v_app, v_cur, v_cur);

  -- context entries: the seed's matches_scope. Global entries are read by
  -- every app user and written by memori_admin only; project entries by the
  -- members (the entry's readers; its writer is a member by its foreign key,
  -- and the project's owner keeps the readers current); user and session
  -- entries by their user (a session entry only on one of the user's
  -- sessions: its foreign key (user_id, session_id)).
  v_member := format('%s = any (readers)', v_cur);
  execute format('create policy scope_read on memori.context_entries for select to %I using ('
                 'scope = ''global'' or (scope in (''user'', ''session'') and user_id = %s) '
                 'or (scope = ''project'' and %s))', v_app, v_cur, v_member);
  execute format('create policy scope_change on memori.context_entries for update to %I using ('
                 '(scope in (''user'', ''session'') and user_id = %s) or (scope = ''project'' and %s)) '
                 'with check ((user_id = %s and scope <> ''global'' and (scope <> ''project'' or %s)) '
                 'or (scope = ''project'' and project_owner = %s and %s))',
                 v_app, v_cur, v_member, v_cur, v_member, v_cur, v_member);
  execute format('create policy scope_insert on memori.context_entries for insert to %I '
                 'with check (user_id = %s and scope <> ''global'' and (scope <> ''project'' or %s))',
                 v_app, v_cur, v_member);
  execute format('create policy scope_delete on memori.context_entries for delete to %I using ('
                 '(scope in (''user'', ''session'') and user_id = %s) or (scope = ''project'' and %s))',
                 v_app, v_cur, v_member);
  if v_admin then
    execute format('create policy admin_global on memori.context_entries for all to memori_admin '
                   'using (scope = ''global'') with check (scope = ''global'' and user_id = %s)', v_cur);
  end if;

  -- Projects and shared regions are both an owned row with an access list: the
  -- owner inserts, updates and deletes the row; a member row is seen by its
  -- user and the owner, and only the owner (the list's owner column) writes it.
  for v_t in select * from (values ('projects', 'owner_id', 'owner_write', 'project_members', 'project_owner'),
                                   ('vm_regions', 'user_id', 'owner_insert', 'vm_region_members', 'region_owner'))
                             as o(tbl, owner_col, insert_policy, members, members_owner)
  loop
    execute format('create policy %I on memori.%I for insert to %I with check (%I = %s)',
                   v_t.insert_policy, v_t.tbl, v_app, v_t.owner_col, v_cur);
    execute format('create policy owner_update on memori.%I for update to %I using (%I = %s) with check (%I = %s)',
                   v_t.tbl, v_app, v_t.owner_col, v_cur, v_t.owner_col, v_cur);
    execute format('create policy owner_delete on memori.%I for delete to %I using (%I = %s)',
                   v_t.tbl, v_app, v_t.owner_col, v_cur);
    execute format('create policy member_rows on memori.%I for select to %I using (user_id = %s or %I = %s)',
                   v_t.members, v_app, v_cur, v_t.members_owner, v_cur);
    execute format('create policy owner_write on memori.%I for all to %I using (%I = %s) with check (%I = %s)',
                   v_t.members, v_app, v_t.members_owner, v_cur, v_t.members_owner, v_cur);
  end loop;

  -- shared regions (issue 7): the owner manages a region, its access list and
  -- its entries; a listed user reads the region and its pages, never writes.
  -- Every check binds the member row's region_owner to the owner of the
  -- region or the entry, so rows a user forges in their own name (a member
  -- row naming someone else's region) grant nothing. The checks are
  -- memori._region_member (sql/570), a function over the reference table
  -- vm_region_members: Citus refuses subqueries in policies. (No policy reads
  -- memori.vm_regions from vm_region_members: the two would recurse.)
  execute format('create policy member_read on memori.vm_regions for select to %I using (user_id = %s or '
                 'memori._region_member(region_id, user_id))', v_app, v_cur);
  execute format('create policy member_read on memori.vm_region_pages for select to %I using (user_id = %s or '
                 'memori._region_member(region_id, user_id))', v_app, v_cur);
  execute format('create policy owner_write on memori.vm_region_pages for all to %I '
                 'using (user_id = %s) with check (user_id = %s)', v_app, v_cur, v_cur);
  -- pages (and their representations) of a region: readable by its listed users. Another user's
  -- rows only (the acting user's own pass user_rows; the check is not run for them), through
  -- memori._region_page_shared (sql/570): Citus refuses subqueries in policies.
  execute format('create policy region_read on memori.pages for select to %I using (user_id <> %s and '
                 'memori._region_page_shared(user_id, session_id, page_id))', v_app, v_cur);
  execute format('create policy region_read on memori.page_representations for select to %I using (user_id <> %s and '
                 'memori._region_page_shared(user_id, session_id, page_id))', v_app, v_cur);

  -- MCP token verification (sql/820-mcp.sql): memori.mcp_token_verify runs as the caller (memori_app)
  -- and finds a token across users by the hash of the secret presented, which it puts in
  -- memori.mcp_token_hash while it looks (memori._mcp_presented, with no acting user meanwhile):
  -- that token's row is then the only row of mcp_tokens the app role sees, and the one whose last
  -- use it stamps; it never reads the hash column (no grant). A refusal is recorded as a system
  -- event (the system user ''), read back (INSERT ... RETURNING) while the setting is on. Only
  -- permissive policies: Citus 14.0.1 creates a restrictive policy on the shards as permissive.
  execute format('create policy mcp_verify on memori.mcp_tokens for select to %I using (%s)', v_app, v_hash);
  execute format('create policy mcp_verify_touch on memori.mcp_tokens for update to %I using (%s) with check (%s)',
                 v_app, v_hash, v_hash);
  execute format('create policy mcp_refusal_read on memori.events for select to %I '
                 'using (user_id = '''' and event_type = ''mcp.auth_refused'' and not %s)', v_app, v_verifying_not);

  -- context windows: on the user's own sessions (user_rows and the foreign key (user_id, session_id))
end
$rls$;

-- The cleaner locks a batch's rows with SELECT ... FOR UPDATE SKIP LOCKED
-- before deleting them (never waiting for a writer, issue 16), which needs
-- UPDATE on a column: the id column of every managed table it may delete
-- from. Under row-level security its cleaner_lock policy (WITH CHECK false)
-- lets it change nothing.
do $cleaner_lock$
declare
  v_t record;
begin
  if not exists (select 1 from pg_catalog.pg_roles where rolname = 'memori_cleaner') then
    return;
  end if;
  -- (the privilege is checked here, not in the query: on a cluster the registry is a reference
  -- table read on a worker, where the coordinator's local tables do not exist)
  for v_t in select t.relation, t.id_column from memori.retention_tables t loop
    if pg_catalog.has_table_privilege('memori_cleaner', v_t.relation, 'DELETE') then
      execute format('grant update (%I) on %s to memori_cleaner', v_t.id_column, v_t.relation);
    end if;
  end loop;
end
$cleaner_lock$;
