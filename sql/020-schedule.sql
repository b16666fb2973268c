-- pymemdb SQL API, part 2: scheduled cleanup with pg_cron.
--
-- pg_cron lives in one database per server (cron.database_name); schedule
-- from that database. Without pg_cron the functions raise PM030 with a hint to
-- run `memori-cleanup execute` from the system's cron instead.

-------------------------------------------------------------------------------
-- _cron_field: the values one field of a 5-field cron expression matches
create or replace function memori._cron_field(p_field text, p_min integer, p_max integer, p_what text)
returns integer[]
as $func$
declare
  v_part   text;
  v_range  text;
  v_step   integer;
  v_lo     integer;
  v_hi     integer;
  v_values integer[] := '{}';
  v_m      text[];
begin
  foreach v_part in array string_to_array(p_field, ',') loop
    v_m := regexp_match(v_part, '^(\*|[0-9]+(?:-[0-9]+)?)(?:/([0-9]+))?$');
    if v_m is null then
      perform memori._invalid(format('invalid cron %s field %L', p_what, p_field),
                              'Use numbers, ranges a-b, lists a,b and steps */n, e.g. ''0 3 * * *''.');
    end if;
    v_range := v_m[1];
    v_step := coalesce(v_m[2]::integer, 1);
    if v_range = '*' then
      v_lo := p_min; v_hi := p_max;
    elsif position('-' in v_range) > 0 then
      v_lo := split_part(v_range, '-', 1)::integer; v_hi := split_part(v_range, '-', 2)::integer;
    else
      v_lo := v_range::integer;
      v_hi := case when v_m[2] is null then v_lo else p_max end;
    end if;
    if v_lo < p_min or v_hi > p_max or v_lo > v_hi or v_step < 1 then
      perform memori._invalid(format('cron %s field %L is outside %s-%s', p_what, p_field, p_min, p_max),
                              'Check the ranges: minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-7.');
    end if;
    v_values := v_values || array(select generate_series(v_lo, v_hi, v_step));
  end loop;
  return array(select distinct v from unnest(v_values) v order by v);
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._cron_field(text, integer, integer, text) is 'Expand one cron field (*, a-b, lists, steps) to the sorted values it matches; raises PM001.';

-------------------------------------------------------------------------------
-- cron_next_run: validate a pg_cron schedule and compute its next run (UTC)
-- p_cron: a pg_cron schedule: 5 fields 'minute hour day-of-month month day-of-week' (UTC), an @macro (@yearly,
--   @annually, @monthly, @weekly, @daily, @midnight, @hourly) or '1 seconds'..'59 seconds'; else (NULL too) PM001
-- p_after: the run returned is the first strictly after this time (default now())
create or replace function memori.cron_next_run(p_cron text, p_after timestamptz default now())
returns timestamptz
as $func$
declare
  v_expr    text := lower(btrim(coalesce(p_cron, '')));
  v_fields  text[];
  v_minutes integer[];
  v_hours   integer[];
  v_doms    integer[];
  v_months  integer[];
  v_dows    integer[];
  v_dom_any boolean;
  v_dow_any boolean;
  v_start   timestamp;
  v_day     date;
  v_hour    integer;
  v_minute  integer;
  v_m       text[];
begin
  -- pg_cron's interval form, e.g. '30 seconds'
  v_m := regexp_match(v_expr, '^([0-9]+) seconds?$');
  if v_m is not null then
    if v_m[1]::integer not between 1 and 59 then
      perform memori._invalid(format('invalid cron interval %L', p_cron), 'Use 1 to 59 seconds, e.g. ''30 seconds''.');
    end if;
    return p_after + make_interval(secs => v_m[1]::integer);
  end if;
  v_expr := case v_expr
              when '@yearly' then '0 0 1 1 *' when '@annually' then '0 0 1 1 *'
              when '@monthly' then '0 0 1 * *' when '@weekly' then '0 0 * * 0'
              when '@daily' then '0 0 * * *' when '@midnight' then '0 0 * * *'
              when '@hourly' then '0 * * * *' else v_expr end;
  v_fields := regexp_split_to_array(v_expr, '\s+');
  if array_length(v_fields, 1) is distinct from 5 then
    perform memori._invalid(format('invalid cron schedule %L: expected 5 fields', p_cron),
                            'Use minute hour day-of-month month day-of-week, e.g. ''0 3 * * *'' for 03:00 daily.');
  end if;
  v_minutes := memori._cron_field(v_fields[1], 0, 59, 'minute');
  v_hours   := memori._cron_field(v_fields[2], 0, 23, 'hour');
  v_doms    := memori._cron_field(v_fields[3], 1, 31, 'day-of-month');
  v_months  := memori._cron_field(v_fields[4], 1, 12, 'month');
  v_dows    := array(select distinct d % 7 from unnest(memori._cron_field(v_fields[5], 0, 7, 'day-of-week')) d);
  v_dom_any := v_fields[3] = '*';
  v_dow_any := v_fields[5] = '*';

  -- next whole minute strictly after p_after, in UTC (pg_cron's default cron.timezone)
  v_start := date_trunc('minute', p_after at time zone 'UTC') + interval '1 minute';
  for i in 0 .. 366 * 5 loop
    v_day := v_start::date + i;
    continue when not (extract(month from v_day)::integer = any(v_months));
    -- cron rule: when both day fields are restricted, either may match
    continue when not (
      case when v_dom_any and v_dow_any then true
           when v_dom_any then extract(dow from v_day)::integer = any(v_dows)
           when v_dow_any then extract(day from v_day)::integer = any(v_doms)
           else extract(day from v_day)::integer = any(v_doms) or extract(dow from v_day)::integer = any(v_dows)
      end);
    foreach v_hour in array v_hours loop
      foreach v_minute in array v_minutes loop
        if v_day + make_time(v_hour, v_minute, 0) >= v_start then
          return (v_day + make_time(v_hour, v_minute, 0)) at time zone 'UTC';
        end if;
      end loop;
    end loop;
  end loop;
  perform memori._invalid(format('cron schedule %L never fires', p_cron), 'Check the day-of-month and month fields (e.g. 31 2 never exists).');
  return null;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cron_next_run(text, timestamptz) is 'Validate a pg_cron schedule (5 fields, @macros or ''N seconds'') and return its next run after p_after, in UTC; raises PM001.';

-------------------------------------------------------------------------------
-- cleanup_cron_database: where pg_cron lives, seen from this database
-- pg_cron is installed in one database per server, cron.database_name
-- (usually postgres on managed services); its GUC is visible from every
-- database once the library is preloaded.
create or replace function memori.cleanup_cron_database() returns text
as $func$
  select case when exists (select 1 from pg_catalog.pg_extension where extname = 'pg_cron')
              then current_database()
              else nullif(current_setting('cron.database_name', true), '') end
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_cron_database() is 'The database pg_cron lives in: this one if the extension is installed here, else cron.database_name when pg_cron is preloaded, else NULL.';

-------------------------------------------------------------------------------
-- _require_pg_cron: PM030 without pg_cron; PM012 when it lives in another database
create or replace function memori._require_pg_cron() returns void
as $func$
declare
  v_cron_db text := memori.cleanup_cron_database();
begin
  if v_cron_db is null then
    raise exception 'pg_cron is not installed in database %', current_database()
      using errcode = 'PM030',
            detail = 'Scheduled cleanup inside the database needs the pg_cron extension.',
            hint = 'Run "memori-cleanup execute --yes" from the system cron instead (e.g. 0 3 * * *), '
                   'or install pg_cron: shared_preload_libraries = ''pg_cron'', cron.database_name = '''
                   || current_database() || ''', then CREATE EXTENSION pg_cron.';
  elsif v_cron_db <> current_database() then
    raise exception 'pg_cron lives in database %, not in %', v_cron_db, current_database()
      using errcode = 'PM012',
            detail = 'pg_cron jobs for other databases are created in its own database with cron.schedule_in_database.',
            hint = format('Use "memori-cleanup schedule" (it connects to %s), or run in database %s the statement '
                          'that memori.cleanup_schedule_sql() returns here.', v_cron_db, v_cron_db);
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._require_pg_cron() is 'Raise PM030 when pg_cron is not available, PM012 when it lives in another database (cron.database_name).';

-------------------------------------------------------------------------------
-- cleanup_schedule_sql: the statement a DBA runs in the pg_cron database
-- p_cron: the schedule, as cron_next_run accepts it (PM001 otherwise); default '0 3 * * *', 03:00 UTC daily
-- p_job_name: the pg_cron job name, 1-64 printable characters (PM001 otherwise); default 'memori-cleanup'
create or replace function memori.cleanup_schedule_sql(
  p_cron     text default '0 3 * * *',
  p_job_name text default 'memori-cleanup'
) returns text
as $func$
begin
  perform memori._check_identifier('job name', p_job_name, 64);
  perform memori.cron_next_run(p_cron);  -- PM001 for a bad schedule
  return format('select cron.schedule_in_database(%L, %L, %L, %L)',
                p_job_name, btrim(p_cron), 'CALL memori.cleanup_run(p_trigger => ''cron'')', current_database());
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_schedule_sql(text, text) is 'The statement to run in the pg_cron database (cron.database_name) to schedule this database''s cleanup with cron.schedule_in_database; returns the job id there.';

-------------------------------------------------------------------------------
-- cleanup_unschedule_sql: the statement that removes that job, in the pg_cron database
-- p_job_name: the pg_cron job name, 1-64 printable characters (PM001 otherwise); default 'memori-cleanup'
create or replace function memori.cleanup_unschedule_sql(p_job_name text default 'memori-cleanup') returns text
as $func$
begin
  perform memori._check_identifier('job name', p_job_name, 64);
  return format('select coalesce(bool_or(cron.unschedule(j.jobid)), false) from cron.job j '
                'where j.jobname = %L and j.database = %L and j.username = current_user',
                p_job_name, current_database());
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_unschedule_sql(text) is 'The statement to run in the pg_cron database to remove this database''s cleanup job; returns whether there was one.';

-------------------------------------------------------------------------------
-- cleanup_job_sql: the query of the job and its last run, in the pg_cron database
-- p_job_name: the pg_cron job name, 1-64 printable characters (PM001 otherwise); default 'memori-cleanup'
create or replace function memori.cleanup_job_sql(p_job_name text default 'memori-cleanup') returns text
as $func$
begin
  perform memori._check_identifier('job name', p_job_name, 64);
  -- casts: pg_cron's column types vary between versions (jobname is name in 1.4)
  return format(
    'select j.jobid::bigint as job_id, j.jobname::text as job_name, j.schedule::text as schedule, '
    '       j.command::text as command, j.active::boolean as active, d.status::text as last_status, '
    '       d.start_time::timestamptz as last_start, d.return_message::text as last_message '
    '  from cron.job j '
    '  left join lateral (select status, start_time, return_message from cron.job_run_details r '
    '                      where r.jobid = j.jobid order by r.start_time desc nulls last limit 1) d on true '
    ' where j.jobname = %L and j.database = %L',
    p_job_name, current_database());
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_job_sql(text) is 'The query to run in the pg_cron database for this database''s cleanup job and its last run (next run: memori.cron_next_run(schedule)).';

-------------------------------------------------------------------------------
-- cleanup_schedule: run the cleanup on a pg_cron schedule
-- p_cron: the schedule, as cron_next_run accepts it (PM001 otherwise); default '0 3 * * *', 03:00 UTC daily
-- p_job_name: the pg_cron job name, 1-64 printable characters (PM001 otherwise); default 'memori-cleanup';
--   a job of that name is updated to the new schedule
create or replace function memori.cleanup_schedule(
  p_cron     text default '0 3 * * *',
  p_job_name text default 'memori-cleanup'
) returns bigint
as $func$
declare
  v_job_id bigint;
begin
  perform memori._check_identifier('job name', p_job_name, 64);
  perform memori.cron_next_run(p_cron);  -- our error (PM001) for a bad schedule
  perform memori._require_pg_cron();
  -- dynamic: the cron schema exists only where pg_cron is installed
  execute 'select cron.schedule($1, $2, $3)'
     into v_job_id
    using p_job_name, btrim(p_cron), 'CALL memori.cleanup_run(p_trigger => ''cron'')';
  perform memori._event_emit('cleanup.scheduled',
            jsonb_build_object('job_id', v_job_id, 'job_name', p_job_name, 'schedule', p_cron));
  return v_job_id;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_schedule(text, text) is 'Register (or update) the pg_cron job that runs memori.cleanup_run; returns the job id; PM030 without pg_cron.';

-------------------------------------------------------------------------------
-- cleanup_unschedule: remove the pg_cron job
-- p_job_name: the pg_cron job to remove, of this database and the current role; 1-64 printable characters
--   (PM001 otherwise); default 'memori-cleanup'
create or replace function memori.cleanup_unschedule(p_job_name text default 'memori-cleanup')
returns boolean
as $func$
declare
  v_exists boolean;
begin
  perform memori._check_identifier('job name', p_job_name, 64);
  perform memori._require_pg_cron();
  execute 'select exists (select 1 from cron.job where jobname = $1 and username = current_user '
          '                 and database = current_database())'
     into v_exists using p_job_name;
  if not v_exists then
    return false;
  end if;
  execute 'select cron.unschedule($1)' using p_job_name;
  perform memori._event_emit('cleanup.unscheduled', jsonb_build_object('job_name', p_job_name));
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_unschedule(text) is 'Remove the pg_cron cleanup job; false when there was none; PM030 without pg_cron.';

-------------------------------------------------------------------------------
-- cleanup_job: the scheduled job, its last run and its next run
-- p_job_name: the pg_cron job name in this database (default 'memori-cleanup'); no row when there is no such job
-- p_now: next_run is the job's first run strictly after this time (default now())
create or replace function memori.cleanup_job(p_job_name text default 'memori-cleanup', p_now timestamptz default now())
returns setof memori.cleanup_job_result
as $func$
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'pg_cron') then
    return;  -- no pg_cron, no job: status reports this as "not scheduled"
  end if;
  return query execute
    -- casts: pg_cron's column types vary between versions (jobname is name in 1.4)
    'select j.jobid::bigint, j.jobname::text, j.schedule::text, j.command::text, j.active::boolean,
            d.status::text, d.start_time::timestamptz, d.return_message::text,
            memori.cron_next_run(j.schedule, $2)
       from cron.job j
       left join lateral (select status, start_time, return_message from cron.job_run_details r
                           where r.jobid = j.jobid order by r.start_time desc nulls last limit 1) d on true
      where j.jobname = $1 and j.database = current_database()'
    using p_job_name, p_now;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.cleanup_job(text, timestamptz) is 'The pg_cron cleanup job with its last run and next run (no rows without pg_cron or without the job).';

-------------------------------------------------------------------------------
-- cleanup_status: what is waiting and what ran
create or replace view memori.cleanup_status with (security_invoker = true) as
select (select count(*) from memori.retention_status s where s.should_cleanup)            as expired_waiting,
       (select count(*) from memori.retention_status s where s.status = 'expiring_soon')  as expiring_soon,
       (select max(started_at) from memori.cleanup_runs where status = 'succeeded')       as last_success,
       (select count(*) from memori.cleanup_runs where status = 'running')                as running,
       (select count(*) from memori.cleanup_runs
         where status in ('failed', 'abandoned') and started_at > now() - interval '7 days') as failures_7d;
comment on view memori.cleanup_status is 'One row: rows waiting for cleanup, rows expiring soon, last successful run, running and recent failed runs.';
