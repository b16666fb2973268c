-- pymemdb SQL API: functions whose definition changed in a way CREATE OR REPLACE refuses.
-- Idempotent: re-applied after every install or upgrade, in file order, before the
-- files that define the current versions. Each drop names the old form exactly,
-- so a database that never had it is untouched.

-------------------------------------------------------------------------------
-- _cleanup_plan: the third parameter was p_after_priority before 2026-11-22
-- (now p_priority); PostgreSQL cannot rename a parameter in place.
do $retired$
begin
  if exists (select from pg_catalog.pg_proc
              where oid = pg_catalog.to_regprocedure(
                'memori._cleanup_plan(timestamptz, integer, integer, timestamptz, text, text)')
                and proargnames[3] = 'p_after_priority') then
    drop function memori._cleanup_plan(timestamptz, integer, integer, timestamptz, text, text);
  end if;
end
$retired$;

-------------------------------------------------------------------------------
-- cleanup_preview_summary, cleanup_job: returned anonymous tables before
-- 2026-11-25 (now the named types memori.cleanup_group_result and
-- memori.cleanup_job_result); CREATE OR REPLACE cannot change a return type.
do $retired$
declare
  v_function text;
begin
  foreach v_function in array array['memori.cleanup_preview_summary(timestamptz, integer)',
                                    'memori.cleanup_job(text, timestamptz)'] loop
    if exists (select from pg_catalog.pg_proc
                where oid = pg_catalog.to_regprocedure(v_function) and prorettype = 'record'::regtype) then
      execute format('drop function %s', pg_catalog.to_regprocedure(v_function));
    end if;
  end loop;
end
$retired$;
