-- pymemdb SQL API: drop the functions no sql/ file defines any more.
-- Idempotent: re-applied after every install or upgrade, in file order.
--
-- Every earlier sql/ file re-creates its functions with CREATE OR REPLACE in
-- the install's transaction, which rewrites their pg_proc rows; a function of
-- schema memori whose row is older than this transaction was defined by an
-- earlier pymemdb and dropped from sql/ since (renamed, new signature,
-- retired). Upgrading drops it, so an upgraded schema equals a fresh install.
-- Skipped unless 000-core.sql ran in this same transaction (the installer and
-- `pymemdb init --sql` run every file in one), so applying files one by one
-- never drops anything. Runs before 900-security.sql, whose grants rewrite
-- every function's row; a function defined in a later file (950-distribute.sql)
-- is dropped here and re-created by its file, so it must own its grants and
-- nothing may depend on it.

do $sweep$
declare
  v_fn text;
begin
  if coalesce(pg_catalog.age((select xmin from pg_catalog.pg_proc
                                where oid = pg_catalog.to_regprocedure('memori._setting(text)'))), 1) > 0 then
    return;  -- 000-core.sql was not applied in this transaction (or no longer defines _setting)
  end if;
  for v_fn in
    select p.oid::regprocedure::text
      from pg_catalog.pg_proc p
     where p.pronamespace = 'memori'::regnamespace
       and pg_catalog.age(p.xmin) > 0
       and not exists (select from pg_catalog.pg_depend d
                        where d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
     order by 1
  loop
    raise notice 'pymemdb: dropping %, which this version no longer defines', v_fn;
    execute format('drop %s %s', (select case prokind when 'p' then 'procedure' else 'function' end
                                     from pg_catalog.pg_proc where oid = v_fn::regprocedure), v_fn);
  end loop;
end
$sweep$;
