-- pymemdb SQL API, last part: roles, ownership and grants (least privilege).
--
--   memori_owner   NOLOGIN, owns every object in schema memori
--   memori_app     what agents use: the read/write API, cleanup preview
--   memori_cleaner cleanup only: run, batch, schedule; reads nothing else
--
-- Grant the roles to login roles: GRANT memori_app TO my_service;
-- Installing as a user that may not create roles skips role setup (a NOTICE
-- says so) and leaves the objects owned by the installing user.

do $roles$
declare
  v_role text;
begin
  foreach v_role in array array['memori_owner', 'memori_app', 'memori_cleaner'] loop
    if not exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
      begin
        execute format('create role %I nologin', v_role);
      exception when insufficient_privilege then
        raise notice 'pymemdb: cannot create role % (needs CREATEROLE); skipping role setup', v_role;
      end;
    end if;
  end loop;
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
         and not exists (select 1 from pg_catalog.pg_class c where c.oid = t.typrelid and c.relkind <> 'c')
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
                             memori.retention_register(text, regclass, regclass, name, text, integer, interval, boolean),
                             memori._retention_rebuild_rows()
    from memori_app;

  -- memori_cleaner: find and delete expired rows, record runs
  grant select, delete on memori.memories, memori.events, memori.checkpoints to memori_cleaner;
  grant insert on memori.events to memori_cleaner;
  grant select, insert, update on memori.cleanup_runs to memori_cleaner;
  grant select, insert, delete on memori.cleanup_queue to memori_cleaner;
  grant select on memori.retention_rows, memori.retention_candidates, memori.retention_status,
                  memori.cleanup_status, memori._retention_memories, memori._retention_events,
                  memori._retention_checkpoints, memori.checkpoint_expiry_status
    to memori_cleaner;
  grant execute on all functions in schema memori to memori_cleaner;
  grant execute on procedure memori.cleanup_run(integer, integer, text) to memori_cleaner;
  revoke execute on function memori.retention_register(text, regclass, regclass, name, text, integer, interval, boolean),
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
                             memori.page_update(text, text, text, jsonb, integer, text, timestamptz),
                             memori.page_flush(text, text[], timestamptz),
                             memori.page_representation_put(text, text, integer, text, jsonb, integer, integer, timestamptz),
                             memori.page_pin(text, text, boolean, text, timestamptz),
                             memori.vm_add_page(text, text, integer, boolean, text, timestamptz),
                             memori.vm_evict(text, integer, text, text, timestamptz),
                             memori.page_fault(text, text, integer, text, text, timestamptz),
                             memori.vm_context(text, integer, text, timestamptz),
                             memori.vm_developer_message(text, text, text, integer, text, timestamptz)
    from memori_cleaner;
end
$grants$;
