-- pymemdb SQL API, part 4: events (append-only, retained by the engine).
-- Writers call memori._event_emit; listeners LISTEN memori_events.

comment on table memori.events is 'Append-only event log, also sent with pg_notify on channel memori_events; retained 30 days. user_id '''' is the system user (events of no user).';

-------------------------------------------------------------------------------
-- _retention_events: events in the retention engine's shape
create or replace view memori._retention_events with (security_invoker = true) as
select e.id,
       null::text    as owner,
       'event'::text as category,
       e.event_type  as kind,
       e.expires_at,
       false         as important,
       e.user_id     -- the owning user: the cleaner deletes by (user_id, id)
  from memori.events e;
comment on view memori._retention_events is 'memori.events as retention candidates: event type as kind; user_id is the owner column.';

-- Events are the least valuable rows: cleaned first, kept 30 days.
select memori.retention_register('events', 'memori.events', 'memori._retention_events', 'id',
                                 'Append-only event log (also sent with pg_notify)', 0, interval '30 days');

-------------------------------------------------------------------------------
-- event_list: recent events, newest first
-- p_event_type: only events of this type (exact match, e.g. 'cleanup.cleaned_up'); NULL (default) for every type
-- p_limit: at most this many events, 1 to 10000 (default 50), else PM001
create or replace function memori.event_list(
  p_event_type text default null,
  p_limit      integer default 50,
  p_now        timestamptz default now()
) returns setof memori.events
as $func$
declare
  v_user text := nullif(current_setting('memori.user_id', true), '');
begin
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    perform memori._invalid(format('limit must be between 1 and 10000, got %s', p_limit), 'Pass a limit such as 50.');
  end if;
  -- with memori.user_id set, that user's events (one shard on Citus); without, every event
  return query
    select * from memori.events e
     where (v_user is null or e.user_id = v_user)
       and (p_event_type is null or e.event_type = p_event_type)
       and (e.expires_at is null or e.expires_at > p_now)
     order by e.occurred_at desc, e.id desc
     limit p_limit;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.event_list(text, integer, timestamptz) is 'Newest unexpired events, optionally of one type: the acting user''s when memori.user_id is set, else every user''s and system events.';

-------------------------------------------------------------------------------
-- event_get: one event by id, if the acting user may see it
-- (listeners read the body of a private notification through this: LISTEN
-- is not subject to row-level security, memori.events is)
-- p_id: the event's id (memori.events.id, the "id" of a LISTEN memori_events notification)
create or replace function memori.event_get(p_id bigint) returns setof memori.events
as $func$
declare
  v_user text := nullif(current_setting('memori.user_id', true), '');
begin
  -- the user's event or a system event ('': two shards on Citus); every event without a user
  return query
    select e.*
      from memori.events e
     where (v_user is null or e.user_id = any (array['', v_user])) and e.id = p_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.event_get(bigint) is 'The event with this id if the acting user may see it (row-level security, and only the acting user''s own events when memori.user_id is set); no row otherwise.';
