-- pymemdb SQL API, part 12: LangGraph checkpointer storage (issue 9).
--
-- pymemdb.integrations.langgraph.MemoriSaver serialises with LangGraph's serde
-- and calls these functions; every rule is here. A thread is one row of
-- memori.lg_threads per (user, thread_id); its checkpoints, channel blobs and
-- pending writes hang off it.
--
-- Retention, per saver policy (a kind in memori.retention_policies):
--   * the latest checkpoint of each namespace never expires (expires_at NULL);
--     a checkpoint superseded by a newer one expires after the lg_checkpoints
--     policy's retention, and so do the blobs only superseded checkpoints use;
--   * a whole thread expires after the lg_threads policy's retention without
--     a put (idle), taking everything of it along;
--   * threads of a DeltaChannel graph are never thinned (their latest value is
--     rebuilt from older checkpoints), only expired whole.
-- The retention engine deletes them (memori-cleanup preview|execute); reads
-- never show an expired row.

-------------------------------------------------------------------------------
-- tables (migrations/versions/0007_langgraph.py)
comment on table memori.lg_threads is 'LangGraph threads per user: retention policy, last put, idle expiry.';
comment on table memori.lg_checkpoints is 'LangGraph checkpoints (channel values that are not primitives live in lg_blobs); expires_at set once superseded.';
comment on table memori.lg_blobs is 'LangGraph channel values by (namespace, channel, version), shared by the checkpoints that carry that version.';
comment on table memori.lg_writes is 'LangGraph pending writes of a checkpoint; they expire with it once it is superseded, and go when it is pruned or deleted.';

-------------------------------------------------------------------------------
-- _retention_lg_*: each saver table in the retention engine's shape, registered
-- One view per table, all alike: the saver policy as kind; as category the
-- thread id for threads, the thread key (lg_threads.id) for checkpoints, blobs
-- and writes (no join to lg_threads: the cleaner may see only expired rows, and
-- a superseded checkpoint's thread is usually alive).
do $do$
declare
  v record;
begin
  for v in
    select * from (values
      ('lg_threads', 't.thread_id', 4, 'LangGraph threads idle past their policy (issue 9)',
       'memori.lg_threads as retention candidates: the saver policy as kind, thread_id as category.'),
      ('lg_checkpoints', 't.thread::text', 3, 'Superseded LangGraph checkpoints (issue 9)',
       'memori.lg_checkpoints as retention candidates: the saver policy as kind, the thread key (lg_threads.id) as category.'),
      ('lg_blobs', 't.thread::text', 3, 'LangGraph channel blobs no latest checkpoint uses (issue 9)',
       'memori.lg_blobs as retention candidates: the saver policy as kind, the thread key (lg_threads.id) as category.'),
      ('lg_writes', 't.thread::text', 3, 'Pending writes of superseded LangGraph checkpoints (issue 9)',
       'memori.lg_writes as retention candidates: they expire with their checkpoint; the saver policy as kind, the thread key as category.')
    ) as x(table_name, category, priority, description, comment)
  loop
    execute format('create or replace view memori.%I with (security_invoker = true) as '
                   'select t.id, t.user_id as owner, %s as category, t.policy as kind, t.expires_at, false as important '
                   'from memori.%I t', '_retention_' || v.table_name, v.category, v.table_name);
    execute format('comment on view memori.%I is %L', '_retention_' || v.table_name, v.comment);
    perform memori.retention_register(v.table_name, format('memori.%I', v.table_name)::regclass,
                                      format('memori.%I', '_retention_' || v.table_name)::regclass, 'id',
                                      v.description, v.priority, null, false);
  end loop;
end
$do$;
update memori.retention_tables set event_prefix = 'langgraph.thread' where table_name = 'lg_threads';

-- The saver's default policy (kept when re-installing): superseded checkpoints
-- kept 30 days, threads however long they are idle. lg_blobs and lg_writes
-- follow lg_checkpoints' retention.
insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description) values
  ('lg_threads',     'default', 4, null,               false, 'LangGraph threads of the default saver policy: kept while idle'),
  ('lg_checkpoints', 'default', 3, interval '30 days', false, 'Superseded LangGraph checkpoints of the default saver policy'),
  ('lg_blobs',       'default', 3, interval '30 days', false, 'Unused LangGraph blobs of the default saver policy (follows lg_checkpoints)'),
  ('lg_writes',      'default', 3, interval '30 days', false, 'Writes of superseded LangGraph checkpoints, default saver policy (follows lg_checkpoints)')
on conflict (table_name, kind) do nothing;

-------------------------------------------------------------------------------
-- _lg_user: the acting user (argument, else memori.user_id), PM001 without one
create or replace function memori._lg_user(p_user_id text) returns text
as $func$
declare
  v_user text := coalesce(p_user_id, nullif(current_setting('memori.user_id', true), ''));
begin
  if v_user is null then
    perform memori._invalid('no user id: LangGraph state belongs to a user',
                            'Pass MemoriSaver(db, user_id=...) or p_user_id, or SET memori.user_id.');
  end if;
  perform memori._check_identifier('user id', v_user);
  return v_user;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._lg_user(text) is 'The user LangGraph state is read and written for: p_user_id, else setting memori.user_id; PM001 when neither.';

-------------------------------------------------------------------------------
-- _lg_acting: memori._lg_user in an inlinable form, for the saver's inlined reads
-- (lg_checkpoint_stamp, lg_checkpoint_get): p_user_id, else memori.user_id, else
-- memori._lg_user's PM001. It reads no table and has no SET clause, so it is
-- inlined too: in a read's index conditions it is an expression computed at
-- the start of each scan, not a function call. Does not check the id's form as
-- _lg_user does: a read of an id that cannot exist finds nothing.
create or replace function memori._lg_acting(p_user_id text)
returns text
language sql stable
begin atomic
  select coalesce(p_user_id, nullif(pg_catalog.current_setting('memori.user_id', true), ''),
                  memori._lg_user(p_user_id));
end;
comment on function memori._lg_acting(text) is 'The user of a LangGraph read: p_user_id, else setting memori.user_id; PM001 when neither (memori._lg_user); inlined.';

-------------------------------------------------------------------------------
-- _lg_policy: the retention of a saver policy (superseded checkpoints, idle threads)
create or replace function memori._lg_policy(p_policy text, out superseded interval, out idle interval)
as $func$
declare
  v_found integer;
begin
  select max(p.retention) filter (where p.table_name = 'lg_checkpoints'),
         max(p.retention) filter (where p.table_name = 'lg_threads'),
         count(*) filter (where p.table_name in ('lg_checkpoints', 'lg_threads'))
    into superseded, idle, v_found
    from memori.retention_policies p
   where p.table_name in ('lg_checkpoints', 'lg_threads') and p.kind = p_policy and p.kind <> '*';
  if v_found < 2 then
    raise exception 'unknown LangGraph retention policy %', coalesce(quote_literal(p_policy), 'NULL')
      using errcode = 'PM004',
            hint = 'Use one of: ' || coalesce((select string_agg(distinct kind, ', ') from memori.retention_policies
                                                 where table_name = 'lg_checkpoints' and kind <> '*'), 'none')
                   || ', or create one with memori.lg_policy_set(...).';
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._lg_policy(text) is 'Retention of a LangGraph saver policy: superseded checkpoints and idle threads (NULL: kept); PM004 when unknown.';

-------------------------------------------------------------------------------
-- _lg_thread: the live thread row of a put (created, or its idle expiry renewed)
-- A thread that expired but was not cleaned up yet is replaced, not revived:
-- its old state must not become visible again. The idle expiry is renewed at
-- most once a minute (a thread row rewritten on every step would cost an
-- update per put): a thread may expire up to a minute before its idle time.
-- lg_checkpoint_put and lg_writes_put repeat its renewal test inline (they
-- call it only for a missing thread or a due renewal): keep the three in step.
create or replace function memori._lg_thread(
  p_user_id text, p_thread_id text, p_policy text, p_idle interval, p_delta boolean, p_now timestamptz
) returns memori.lg_threads
as $func$
declare
  v_row memori.lg_threads;
begin
  select * into v_row from memori.lg_threads t
   where t.user_id = p_user_id and t.thread_id = p_thread_id and (t.expires_at is null or t.expires_at > p_now);
  if found then
    if v_row.updated_at <= p_now - interval '1 minute' or v_row.updated_at > p_now
       or v_row.policy <> p_policy or (p_delta and not v_row.uses_delta)
       or v_row.expires_at is distinct from v_row.updated_at + p_idle then
      update memori.lg_threads t
         set updated_at = p_now, expires_at = p_now + p_idle, policy = p_policy, uses_delta = t.uses_delta or p_delta
       where t.user_id = p_user_id and t.id = v_row.id
      returning * into v_row;
    end if;
    return v_row;
  end if;
  perform memori._check_identifier('user id', p_user_id);
  perform memori._check_identifier('thread id', p_thread_id);
  delete from memori.lg_threads t
   where t.user_id = p_user_id and t.thread_id = p_thread_id and t.expires_at <= p_now;
  insert into memori.lg_threads (user_id, thread_id, policy, uses_delta, created_at, updated_at, expires_at)
  values (p_user_id, p_thread_id, p_policy, p_delta, p_now, p_now, p_now + p_idle)
  on conflict (user_id, thread_id) do update
     set updated_at = excluded.updated_at, expires_at = excluded.expires_at, policy = excluded.policy,
         uses_delta = memori.lg_threads.uses_delta or excluded.uses_delta
  returning * into v_row;
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._lg_thread(text, text, text, interval, boolean, timestamptz) is 'Create a LangGraph thread or renew its idle expiry (at most once a minute); an expired one is replaced. Returns its row.';

-------------------------------------------------------------------------------
-- _lg_msgpack_array / _lg_msgpack_array_header: a msgpack array's header (fixarray,
-- array 16, array 32), read and written, where a read joins a delta blob to its
-- chain (lg_checkpoint_list, lg_blob_value; lg_checkpoint_get writes their bodies
-- out, see there): the root's header is read (its item count and length), the
-- chain's items are counted and the whole list's header is written in front.
-- They read no table and have no SET clause, so PostgreSQL inlines them into
-- those statements (the same plan as the expressions written out; on Citus the
-- routed statement names them and the shard inlines them: a function that reads
-- no table may be called there).
create or replace function memori._lg_msgpack_array(p_blob bytea)
returns table (items bigint, header integer)
language sql immutable
begin atomic
  select case when h.b between 144 and 159 then h.b - 144
              when h.b = 220 then (pg_catalog.get_byte(p_blob, 1) << 8) | pg_catalog.get_byte(p_blob, 2)
              when h.b = 221 then (pg_catalog.get_byte(p_blob, 1)::bigint << 24)
                                  | (pg_catalog.get_byte(p_blob, 2) << 16)
                                  | (pg_catalog.get_byte(p_blob, 3) << 8) | pg_catalog.get_byte(p_blob, 4) end,
         case when h.b between 144 and 159 then 1 when h.b = 220 then 3 else 5 end
    from (select pg_catalog.get_byte(p_blob, 0) as b) h;
end;
comment on function memori._lg_msgpack_array(bytea) is 'Item count and header length of a msgpack array''s header (fixarray, array 16, array 32); NULL items for NULL or another type; inlined.';

create or replace function memori._lg_msgpack_array_header(p_items integer) returns bytea
language sql immutable
begin atomic
  select case when p_items < 16 then pg_catalog.set_byte('\x00'::bytea, 0, 144 + p_items)
              when p_items < 65536 then '\xdc'::bytea || pg_catalog.substring(pg_catalog.int4send(p_items), 3, 2)
              else '\xdd'::bytea || pg_catalog.int4send(p_items) end;
end;
comment on function memori._lg_msgpack_array_header(integer) is 'The msgpack header of an array of p_items items (fixarray, array 16 or array 32); inlined.';

-------------------------------------------------------------------------------
-- Retired helpers: the saver's statements read no table through a function
-- (Citus ships a routed statement's function calls to the shard, where a
-- function reading a distributed table fails, and it refuses inlined SQL
-- functions over distributed tables): their bodies are now in their callers.
drop function if exists memori._lg_live_thread(text, text, timestamptz);
drop function if exists memori._lg_tuple(text, memori.lg_checkpoints, timestamptz);
drop function if exists memori._lg_blob_full(text, bigint, text, text, text[], integer, bytea);
drop function if exists memori._lg_versions_closure(text, bigint, text, jsonb);

-------------------------------------------------------------------------------
-- _lg_namespace_settle: after deletions, the latest checkpoint is kept and unused blobs go
-- (a version in use is each (channel, version) of a checkpoint's channel_versions
-- and, for a delta blob, every version of its chain, base: root first)
create or replace function memori._lg_namespace_settle(p_user text, p_thread bigint, p_ns text, p_now timestamptz)
returns integer
as $func$
declare
  v_blobs    integer;
  v_versions jsonb;
begin
  update memori.lg_checkpoints c set expires_at = null
   where c.user_id = p_user
     and c.id = (select l.id from memori.lg_checkpoints l
                  where l.user_id = p_user and l.thread = p_thread and l.checkpoint_ns = p_ns
                    and (l.expires_at is null or l.expires_at > p_now)  -- an expired one stays expired
                  order by l.checkpoint_id desc limit 1)
     and c.expires_at is not null
  returning c.checkpoint -> 'channel_versions' into v_versions;
  if v_versions is not null then
    -- its blobs and the chains of its delta blobs are in use again
    update memori.lg_blobs b set expires_at = null
      from (select v.key as channel, a.version
              from pg_catalog.jsonb_each_text(v_versions) v
              left join lateral (select x.base from memori.lg_blobs x
                                  where x.user_id = p_user and x.thread = p_thread and x.checkpoint_ns = p_ns
                                    and x.channel = v.key and x.version = v.value and x.base is not null
                                  limit 1) x on true
             cross join lateral unnest(coalesce(x.base, '{}') || v.value) a(version)) v
     where b.user_id = p_user and b.thread = p_thread and b.checkpoint_ns = p_ns and b.channel = v.channel and b.version = v.version
       and b.expires_at is not null;
  end if;
  update memori.lg_writes w set expires_at = null
    from memori.lg_checkpoints c
   where c.user_id = p_user and c.thread = p_thread and c.checkpoint_ns = p_ns and c.expires_at is null
     and w.user_id = p_user and w.thread = c.thread and w.checkpoint_ns = c.checkpoint_ns and w.checkpoint_id = c.checkpoint_id
     and w.expires_at is not null;

  -- the versions still in use (with the chains they are built on), gathered once
  with used as materialized (
    select distinct v.key as channel, a.version
      from memori.lg_checkpoints c
     cross join lateral pg_catalog.jsonb_each_text(c.checkpoint -> 'channel_versions') v
      left join lateral (select x.base from memori.lg_blobs x
                          where x.user_id = p_user and x.thread = p_thread and x.checkpoint_ns = p_ns
                            and x.channel = v.key and x.version = v.value and x.base is not null
                          limit 1) x on true
     cross join lateral unnest(coalesce(x.base, '{}') || v.value) a(version)
     where c.user_id = p_user and c.thread = p_thread and c.checkpoint_ns = p_ns
  )
  delete from memori.lg_blobs b
   where b.user_id = p_user and b.thread = p_thread and b.checkpoint_ns = p_ns
     and not exists (select 1 from used u where u.channel = b.channel and u.version = b.version);
  get diagnostics v_blobs = row_count;
  return v_blobs;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._lg_namespace_settle(text, bigint, text, timestamptz) is 'After checkpoints of a namespace were deleted: its latest checkpoint (and blobs) never expire, blobs no checkpoint uses (directly or as a delta''s base) are deleted; returns how many.';

-------------------------------------------------------------------------------
-- lg_checkpoint_put: store a checkpoint, its new blobs, and supersede the older ones
-- (0011 added the delta arguments and the stamp result: the old signature goes)
-- p_thread_id: LangGraph's thread_id; a new thread's id is non-empty, at most 256 characters, without control
--   characters (else PM001); an expired thread not yet cleaned up is replaced
-- p_checkpoint_ns: the checkpoint namespace (LangGraph's checkpoint_ns, '' for the root graph); NULL: ''
-- p_checkpoint_id: the checkpoint's id (LangGraph's, ordered by time); NULL: PM001; a put of an existing id
--   replaces its checkpoint and metadata
-- p_parent_id: the checkpoint this one follows (NULL for the first); another than the latest (a fork) makes the
--   blobs it carries live again
-- p_checkpoint: the checkpoint as a JSON object (else PM001), with channel_versions; values that are not
--   primitives come as blobs
-- p_metadata: the checkpoint's metadata, a JSON object (else PM001); counters_since_delta_snapshot or
--   delta_writes_versioned mark a DeltaChannel graph (its checkpoints then never expire alone), as does a
--   DeltaChannel snapshot (a blob whose channel_values entry is LangGraph's marker, true)
-- p_blob_channels: the channel of each new blob; the blob arrays have one entry per blob (lengths differ: PM001)
-- p_blob_versions: the channel version of each blob (a version the thread already has is kept as it is)
-- p_blob_types: LangGraph serde's type tag of each blob (e.g. 'msgpack')
-- p_blob_values: the serialised value of each blob, as serde wrote it
-- p_policy: the saver's retention policy, a kind of memori.retention_policies for lg_checkpoints and lg_threads
--   (lg_policy_set makes one; 'default': superseded checkpoints kept 30 days); unknown: PM004
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
-- p_blob_bases: per blob, the version of the same channel and type it extends as a delta, or NULL (a full
--   value); NULL: every blob full. A base the thread lacks unexpired: PM081, nothing written
-- p_blob_items: per blob, how many list items a delta appends; given with p_blob_bases (both or neither: PM001)
drop function if exists memori.lg_checkpoint_put(text, text, uuid, uuid, jsonb, jsonb, text[], text[], text[], bytea[], text, text, timestamptz);
create or replace function memori.lg_checkpoint_put(
  p_thread_id     text,
  p_checkpoint_ns text,
  p_checkpoint_id uuid,
  p_parent_id     uuid,
  p_checkpoint    jsonb,
  p_metadata      jsonb,
  p_blob_channels text[] default '{}',
  p_blob_versions text[] default '{}',
  p_blob_types    text[] default '{}',
  p_blob_values   bytea[] default '{}',
  p_policy        text default 'default',
  p_user_id       text default null,
  p_now           timestamptz default now(),
  p_blob_bases    text[] default null,
  p_blob_items    integer[] default null
) returns text
as $func$
declare
  v_user       text := coalesce(p_user_id, nullif(current_setting('memori.user_id', true), ''));
  v_ns         text := coalesce(p_checkpoint_ns, '');
  v_superseded interval;
  v_idle       interval;
  v_policies   integer;
  v_delta      boolean;
  v_row        memori.lg_threads;
  v_thread     bigint;
  v_uses_delta boolean;
  v_renew      boolean;
  v_expires    timestamptz;
  v_previous   uuid;
  v_ids        uuid[];
  v_old        jsonb;
  v_channel    text;
  v_version    text;
  v_blob       bigint;
  v_chain      text[];
  v_blob_expires timestamptz;
  v_kept_chain text[];
  v_chains     jsonb;
  v_newer      boolean;
  v_missing    text;
  v_revive     boolean := false;
  v_fresh      boolean;
  v_count      integer;
  v_xmin       text;
begin
  if v_user is null then
    perform memori._lg_user(null);  -- raises PM001 with its hint
  end if;
  if p_checkpoint_id is null or jsonb_typeof(p_checkpoint) is distinct from 'object'
     or jsonb_typeof(p_metadata) is distinct from 'object' then
    perform memori._invalid('a checkpoint needs an id, a checkpoint object and a metadata object',
                            'Call it through MemoriSaver.put, which serialises LangGraph''s checkpoint.');
  end if;
  if cardinality(p_blob_channels) is distinct from cardinality(p_blob_versions)
     or cardinality(p_blob_channels) is distinct from cardinality(p_blob_types)
     or cardinality(p_blob_channels) is distinct from cardinality(p_blob_values)
     or (p_blob_bases is not null and cardinality(p_blob_channels) is distinct from cardinality(p_blob_bases))
     or (p_blob_bases is not null and cardinality(p_blob_bases) is distinct from cardinality(p_blob_items))
     or ((p_blob_bases is null) <> (p_blob_items is null)) then
    perform memori._invalid('blob channels, versions, types, values, bases and item counts differ in length',
                            'Pass one entry per blob in each array (bases and items: both or neither).');
  end if;
  -- a DeltaChannel graph: its update counters or LangGraph.js's mark in the metadata, or a snapshot (the
  -- inline true marker of a channel whose value comes as a blob: a plain true is never a blob)
  v_delta := p_metadata ? 'counters_since_delta_snapshot' or p_metadata ? 'delta_writes_versioned'
             or exists (select from unnest(p_blob_channels) c(ch)
                         where p_checkpoint -> 'channel_values' -> c.ch = 'true'::jsonb);
  -- What this runs on every step of every graph: the saver's policy (key probes
  -- joined, no aggregate: (table_name, kind) is retention_policies' key), then the
  -- live thread (and whether _lg_thread would renew it: the same test) and whether
  -- a newer checkpoint exists. A thread that is missing or due for renewal goes
  -- through _lg_thread. (Two statements: a delegated call on a Citus worker refuses
  -- one that joins a reference table to the user's tables.)
  select pc.retention, pt.retention, (pc.kind is not null)::integer + (pt.kind is not null)::integer
    into v_superseded, v_idle, v_policies
    from (select 1) one
    left join memori.retention_policies pc on pc.table_name = 'lg_checkpoints' and pc.kind = p_policy and pc.kind <> '*'
    left join memori.retention_policies pt on pt.table_name = 'lg_threads' and pt.kind = p_policy and pt.kind <> '*';
  if v_policies < 2 then
    perform memori._lg_policy(p_policy);  -- raises PM004 with the known policies
  end if;
  select t.id, t.uses_delta,
         t.updated_at <= p_now - interval '1 minute' or t.updated_at > p_now
           or t.policy <> p_policy or (v_delta and not t.uses_delta)
           or t.expires_at is distinct from t.updated_at + v_idle,
         exists (select 1 from memori.lg_checkpoints c
                  where c.user_id = v_user and c.thread = t.id and c.checkpoint_ns = v_ns
                    and c.checkpoint_id > p_checkpoint_id)
    into v_thread, v_uses_delta, v_renew, v_newer
    from memori.lg_threads t
   where t.user_id = v_user and t.thread_id = p_thread_id and (t.expires_at is null or t.expires_at > p_now);
  if v_thread is null or v_renew then
    v_row := memori._lg_thread(v_user, p_thread_id, p_policy, v_idle, v_delta, p_now);
    if v_thread is null then  -- created (or replaced): probe its checkpoints again
      v_newer := exists (select 1 from memori.lg_checkpoints c
                          where c.user_id = v_user and c.thread = v_row.id and c.checkpoint_ns = v_ns
                            and c.checkpoint_id > p_checkpoint_id);
    end if;
    v_thread := v_row.id;
    v_uses_delta := v_row.uses_delta;
  end if;
  -- a DeltaChannel graph rebuilds values from older checkpoints: none of them expires alone
  v_expires := case when v_uses_delta then null else p_now + v_superseded end;

  -- blobs: full values, or deltas (the items appended to a base version of the
  -- same channel and type, which must exist unexpired: PM081 otherwise, and the
  -- saver sends the full value). Plain statements, no CTEs: the bases are
  -- checked, and their chains read, first; then the insert.
  if p_blob_bases is null then
    insert into memori.lg_blobs (thread, checkpoint_ns, channel, version, user_id, policy, type, blob)
    select v_thread, v_ns, u.channel, u.version, v_user, p_policy, u.type, u.value
      from unnest(p_blob_channels, p_blob_versions, p_blob_types, p_blob_values) as u(channel, version, type, value)
    on conflict (user_id, thread, checkpoint_ns, channel, version) do nothing;
    get diagnostics v_count = row_count;
  else
    select string_agg(u.channel || '@' || u.base, ', ') filter (where u.base is not null and x.chain is null),
           coalesce(bool_or(x.expires_at is not null), false),
           jsonb_agg(to_jsonb(x.chain) order by u.ord)
      into v_missing, v_revive, v_chains
      from unnest(p_blob_channels, p_blob_types, p_blob_bases) with ordinality as u(channel, type, base, ord)
      left join lateral (select coalesce(x.base, '{}') || x.version as chain, x.expires_at
                           from memori.lg_blobs x
                          where x.user_id = v_user and x.thread = v_thread and x.checkpoint_ns = v_ns
                            and x.channel = u.channel and x.version = u.base and x.type = u.type
                            and (x.expires_at is null or x.expires_at > p_now)
                          limit 1) x on true;
    if v_missing is not null then
      raise exception 'delta blob without its base version: %', v_missing
        using errcode = 'PM081',
              detail = 'A delta blob extends a base version of its channel that this thread does not have unexpired.',
              hint = 'Send the full value (MemoriSaver does so by itself when it gets this error).';
    end if;
    -- the chains found above, by position: the INSERT reads no table (Citus plans an
    -- INSERT ... SELECT apart from a router query, and refuses a lateral join in it)
    insert into memori.lg_blobs (thread, checkpoint_ns, channel, version, user_id, policy, type, blob, base, items)
    select v_thread, v_ns, u.channel, u.version, v_user, p_policy, u.type, u.value,
           case when u.base is not null then array(select jsonb_array_elements_text(v_chains -> (u.ord::integer - 1))) end,
           case when u.base is not null then coalesce(u.items, 0) end
      from unnest(p_blob_channels, p_blob_versions, p_blob_types, p_blob_values, p_blob_bases, p_blob_items)
             with ordinality as u(channel, version, type, value, base, items, ord)
    on conflict (user_id, thread, checkpoint_ns, channel, version) do nothing;
    get diagnostics v_count = row_count;
  end if;
  -- every blob written now: the caller's copy of them is the stored one
  v_fresh := v_count = coalesce(cardinality(p_blob_channels), 0);

  -- a put below the latest (copying, or racing a newer put) is superseded at once (v_newer: above)
  insert into memori.lg_checkpoints (thread, checkpoint_ns, checkpoint_id, parent_id, user_id, policy, checkpoint,
                                     metadata, expires_at)
  values (v_thread, v_ns, p_checkpoint_id, p_parent_id, v_user, p_policy, p_checkpoint, p_metadata,
          case when v_newer then v_expires end)
  on conflict (user_id, thread, checkpoint_ns, checkpoint_id) do update
     set checkpoint = excluded.checkpoint, metadata = excluded.metadata
  returning xmin::text into v_xmin;

  if v_newer then
    update memori.lg_writes w set expires_at = v_expires  -- writes that came first expire with it
     where w.user_id = v_user and w.thread = v_thread and w.checkpoint_ns = v_ns
       and w.checkpoint_id = p_checkpoint_id;
    return null;
  end if;
  -- the checkpoints this one supersedes start expiring, with the blobs only they use
  -- (a delta blob uses its chain: those versions stay while it is in use)
  if v_expires is not null then
    with superseded as (
      update memori.lg_checkpoints c set expires_at = v_expires
       where c.user_id = v_user and c.thread = v_thread and c.checkpoint_ns = v_ns and c.expires_at is null
         and c.checkpoint_id < p_checkpoint_id
      returning c.checkpoint_id, c.checkpoint -> 'channel_versions' as versions,
                c.checkpoint -> 'channel_values' as inline
    ), writes as (
      update memori.lg_writes w set expires_at = v_expires
       where w.user_id = v_user and w.thread = v_thread and w.checkpoint_ns = v_ns
         and w.checkpoint_id = any (array(select s.checkpoint_id from superseded s))
    )
    -- Their versions that may leave a blob behind: the channels whose version
    -- changed, less those held inline (a primitive: no blob; true marks a
    -- DeltaChannel snapshot, which is a blob) and those the new checkpoint's
    -- delta blobs extend (the old version and its chain stay in use). Most steps
    -- leave none: then no probe below. (A checkpoint without channel_versions
    -- has no blobs to expire.)
    select array_agg(s.checkpoint_id order by s.checkpoint_id desc),
           jsonb_agg(jsonb_build_object(d.key, d.value)) filter (where d.key is not null)
      into v_ids, v_old
      from superseded s
      left join lateral jsonb_each_text(s.versions) d
        on (p_checkpoint -> 'channel_versions' ->> d.key) is distinct from d.value
       and (s.inline -> d.key is null or s.inline -> d.key = 'true'::jsonb)
       and not coalesce(p_blob_bases[array_position(p_blob_channels, d.key)] = d.value, false);
    v_previous := v_ids[1];
  end if;
  -- per channel whose version changed (and may have a blob: above): the old
  -- version and its chain, less the new version and its chain. One query
  -- of key probes (an old version without a blob, a primitive, has nothing to
  -- expire), then an update only where a blob goes: one statement doing it all
  -- costs more in plan setup than these.
  if v_old is not null then
    for v_channel, v_blob, v_version, v_chain, v_blob_expires, v_kept_chain in
      select d.key, o.id, d.value, o.base, o.expires_at,
             array_remove(coalesce(n.base, '{}') || (p_checkpoint -> 'channel_versions' ->> d.key), null)
        from jsonb_array_elements(v_old) s(versions)
       cross join lateral jsonb_each_text(s.versions) d
       cross join lateral (select x.id, x.base, x.expires_at from memori.lg_blobs x
                            where x.user_id = v_user and x.thread = v_thread and x.checkpoint_ns = v_ns
                              and x.channel = d.key and x.version = d.value
                            limit 1) o
        left join lateral (select x.base from memori.lg_blobs x
                            where x.user_id = v_user and x.thread = v_thread and x.checkpoint_ns = v_ns
                              and x.channel = d.key and x.version = p_checkpoint -> 'channel_versions' ->> d.key
                            limit 1) n on true
       where (p_checkpoint -> 'channel_versions' ->> d.key) is distinct from d.value
    loop
      if v_blob_expires is null and v_version <> all (v_kept_chain) then
        update memori.lg_blobs b set expires_at = v_expires where b.user_id = v_user and b.id = v_blob;
      end if;
      if v_chain is not null and not v_chain <@ v_kept_chain then
        update memori.lg_blobs b set expires_at = v_expires
         where b.user_id = v_user and b.thread = v_thread and b.checkpoint_ns = v_ns and b.channel = v_channel
           and b.version = any (array(select a.version from unnest(v_chain) a(version)
                                       where a.version <> all (v_kept_chain)))
           and b.expires_at is null;
      end if;
    end loop;
  end if;
  -- forking from an older checkpoint (or extending a superseded base): the blobs it
  -- carries, and the chains they are built on, are in use again
  if (p_parent_id is not null and p_parent_id is distinct from v_previous) or v_revive then
    update memori.lg_blobs b set expires_at = null
     where b.user_id = v_user
       and b.id in (select x.id
                      from jsonb_each_text(p_checkpoint -> 'channel_versions') c
                      left join lateral (select x.base from memori.lg_blobs x
                                          where x.user_id = v_user and x.thread = v_thread and x.checkpoint_ns = v_ns
                                            and x.channel = c.key and x.version = c.value and x.base is not null
                                          limit 1) d on true
                     cross join lateral (select c.key as channel, a.version
                                           from unnest(coalesce(d.base, '{}') || c.value) a(version)) v
                     cross join lateral (select x.id from memori.lg_blobs x
                                          where x.user_id = v_user and x.thread = v_thread and x.checkpoint_ns = v_ns
                                            and x.channel = v.channel and x.version = v.version
                                            and x.expires_at is not null
                                          limit 1) x);
  end if;
  return case when v_fresh then v_thread::text || '.' || v_xmin || '.' || p_checkpoint_id::text end;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp
set plan_cache_mode = force_generic_plan;  -- key probes: replanning them on every call cost more than running them
comment on function memori.lg_checkpoint_put(text, text, uuid, uuid, jsonb, jsonb, text[], text[], text[], bytea[], text, text, timestamptz, text[], integer[]) is 'Store a LangGraph checkpoint and its new channel blobs (full, or delta on a base version) for a user; older checkpoints start expiring per the saver policy. Returns the read stamp when every blob was new.';

-------------------------------------------------------------------------------
-- lg_writes_put: store the pending writes of a task
-- (it gained p_known_writes and the writes' stamp in its result: the old signature goes)
-- p_thread_id: LangGraph's thread_id (writes may come before their checkpoint: they create the thread too)
-- p_checkpoint_ns: the checkpoint namespace (LangGraph's checkpoint_ns, '' for the root graph); NULL: ''
-- p_checkpoint_id: the checkpoint the writes belong to (it need not be stored yet); NULL: PM001
-- p_task_id: the task that made the writes; NULL: PM001
-- p_task_path: the task's path (LangGraph's task_path); NULL: ''
-- p_idx: each write's index in the task; all negative (special writes: error, interrupt, resume, scheduled):
--   each replaces the task's write of its index, else a saved write is kept. Four arrays of one length (PM001)
-- p_channels: the channel of each write
-- p_types: LangGraph serde's type tag of each write's value
-- p_values: the serialised value of each write
-- p_policy: the saver's retention policy, a kind of memori.retention_policies for lg_checkpoints and lg_threads
--   (lg_policy_set makes one; 'default': superseded checkpoints kept 30 days); unknown: PM004
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
-- p_known_writes: the writes' stamp of the copy the caller holds; writes_stamp is then the new stamp when that
--   copy plus these writes is all of the checkpoint's writes, else NULL. NULL: writes_stamp NULL
drop function if exists memori.lg_writes_put(text, text, uuid, text, text, integer[], text[], text[], bytea[], text, text, timestamptz);
create or replace function memori.lg_writes_put(
  p_thread_id      text,
  p_checkpoint_ns  text,
  p_checkpoint_id  uuid,
  p_task_id        text,
  p_task_path      text,
  p_idx            integer[],
  p_channels       text[],
  p_types          text[],
  p_values         bytea[],
  p_policy         text default 'default',
  p_user_id        text default null,
  p_now            timestamptz default now(),
  p_known_writes   text default null,
  out written      integer,
  out writes_stamp text
)
as $func$
declare
  v_user    text := coalesce(p_user_id, nullif(current_setting('memori.user_id', true), ''));
  v_ns      text := coalesce(p_checkpoint_ns, '');
  v_idle    interval;
  v_found   integer;
  v_thread  bigint;
  v_renew   boolean;
  v_expires timestamptz;
begin
  if v_user is null then
    perform memori._lg_user(null);  -- raises PM001 with its hint (a new thread checks the id's form)
  end if;
  if p_checkpoint_id is null or p_task_id is null then
    perform memori._invalid('pending writes need a checkpoint id and a task id',
                            'Call it through MemoriSaver.put_writes with the config put returned.');
  end if;
  if cardinality(p_idx) is distinct from cardinality(p_channels)
     or cardinality(p_idx) is distinct from cardinality(p_types)
     or cardinality(p_idx) is distinct from cardinality(p_values) then
    perform memori._invalid('write indexes, channels, types and values differ in length',
                            'Pass one entry per write in each of the four arrays.');
  end if;
  -- This runs after every step's put: the policy's idle time, then the live
  -- thread (and whether _lg_thread would renew it: the same test) and the
  -- checkpoint's expiry: writes of a superseded checkpoint expire with it (NULL:
  -- the latest, or not saved yet). (Two statements, as in lg_checkpoint_put.)
  select pt.retention, (pc.kind is not null)::integer + (pt.kind is not null)::integer
    into v_idle, v_found
    from (select 1) one
    left join memori.retention_policies pc on pc.table_name = 'lg_checkpoints' and pc.kind = p_policy and pc.kind <> '*'
    left join memori.retention_policies pt on pt.table_name = 'lg_threads' and pt.kind = p_policy and pt.kind <> '*';
  if v_found < 2 then
    perform memori._lg_policy(p_policy);  -- raises PM004 with the known policies
  end if;
  select t.id,
         t.updated_at <= p_now - interval '1 minute' or t.updated_at > p_now
           or t.policy <> p_policy or t.expires_at is distinct from t.updated_at + v_idle,
         (select c.expires_at from memori.lg_checkpoints c
           where c.user_id = v_user and c.thread = t.id and c.checkpoint_ns = v_ns
             and c.checkpoint_id = p_checkpoint_id)
    into v_thread, v_renew, v_expires
    from memori.lg_threads t
   where t.user_id = v_user and t.thread_id = p_thread_id and (t.expires_at is null or t.expires_at > p_now);
  if v_thread is null or v_renew then
    -- writes may arrive before their checkpoint: they create the thread too
    v_thread := (memori._lg_thread(v_user, p_thread_id, p_policy, v_idle, false, p_now)).id;
    select c.expires_at into v_expires from memori.lg_checkpoints c
     where c.user_id = v_user and c.thread = v_thread and c.checkpoint_ns = v_ns
       and c.checkpoint_id = p_checkpoint_id;
  end if;
  if cardinality(p_idx) > 0 and 0 > all (p_idx) then
    -- special writes (error, interrupt, resume, scheduled) replace the task's previous ones
    insert into memori.lg_writes (thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, user_id, policy,
                                  channel, type, blob, expires_at)
    select v_thread, coalesce(p_checkpoint_ns, ''), p_checkpoint_id, p_task_id, u.idx, coalesce(p_task_path, ''),
           v_user, p_policy, u.channel, u.type, u.value, v_expires
      from unnest(p_idx, p_channels, p_types, p_values) as u(idx, channel, type, value)
    on conflict (user_id, thread, checkpoint_ns, checkpoint_id, task_id, idx) do update
       set channel = excluded.channel, type = excluded.type, blob = excluded.blob;
  else
    -- a task's regular writes are saved once: a retry does not duplicate them
    insert into memori.lg_writes (thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, user_id, policy,
                                  channel, type, blob, expires_at)
    select v_thread, coalesce(p_checkpoint_ns, ''), p_checkpoint_id, p_task_id, u.idx, coalesce(p_task_path, ''),
           v_user, p_policy, u.channel, u.type, u.value, v_expires
      from unnest(p_idx, p_channels, p_types, p_values) as u(idx, channel, type, value)
    on conflict (user_id, thread, checkpoint_ns, checkpoint_id, task_id, idx) do nothing;
  end if;
  get diagnostics written = row_count;
  if p_known_writes is not null then
    -- A caller holding the checkpoint's writes under p_known_writes learns the
    -- stamp they have now, if its copy plus these writes is all there is: the
    -- rows this transaction did not write must be exactly the ones it knew (a
    -- write of another process, or a row this call replaced, makes it NULL).
    select case when coalesce(string_agg(w.xmin::text, '.' order by w.task_id, w.idx)
                                filter (where w.xmin <> xid(pg_current_xact_id())), '') = p_known_writes
                then coalesce(string_agg(w.xmin::text, '.' order by w.task_id, w.idx), '') end
      into writes_stamp
      from memori.lg_writes w
     where w.user_id = v_user and w.thread = v_thread and w.checkpoint_ns = coalesce(p_checkpoint_ns, '')
       and w.checkpoint_id = p_checkpoint_id and (w.expires_at is null or w.expires_at > p_now);
  end if;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp
set plan_cache_mode = force_generic_plan;  -- key probes: replanning them on every call cost more than running them
comment on function memori.lg_writes_put(text, text, uuid, text, text, integer[], text[], text[], bytea[], text, text, timestamptz, text) is 'Store a task''s pending writes for a LangGraph checkpoint (special writes upsert, regular ones are written once): rows written, and with p_known_writes the stamp of all the checkpoint''s writes when the caller''s copy plus these is all of them (else NULL).';

-------------------------------------------------------------------------------
-- lg_checkpoint_stamp: what a cached copy of a checkpoint is checked against
-- The stamp (thread key, row version, checkpoint id) changes with any put,
-- update, delete or re-creation of the checkpoint or its thread; the writes'
-- stamp (their row versions in key order, (task_id, idx), as the primary key
-- index returns them: no sort) with any change of its pending writes. A saver
-- that holds a copy under both reads only these (three key probes);
-- lg_checkpoint_get returns the whole tuple.
--
-- The saver's reads are one statement each, every table in it filtered by the
-- user (so that Citus routes the statement to the user's shard). On one server
-- they are SQL functions that PostgreSQL inlines into the saver's prepared
-- statement (the stamp check's server time: +29-30 us over a bare select
-- inlined, +48-49 us as a PL/pgSQL call; docs/benchmarks.md). Inlining needs
-- LANGUAGE sql without a SET clause, so the body is a string parsed with the
-- caller's search_path: every table and function in it is qualified (memori.,
-- pg_catalog.), and it runs with the caller's rights (security invoker). Not a
-- SQL-standard body: Citus refuses one that depends on the tables it reads.
-- Where the citus extension is installed, the end of this file re-creates each
-- as PL/pgSQL of the same statement (memori._as_plpgsql): Citus
-- refuses SQL functions over distributed tables, inlined or not
-- (docs/scale-out.md, "LangGraph saver"), and routes on the user held in a
-- PL/pgSQL variable. The user is memori._lg_acting(p_user_id) in the statement,
-- v_user in the PL/pgSQL form; no function in it reads a table (Citus ships a
-- routed statement's calls to the shard).
-- p_thread_id: LangGraph's thread_id; no row when the thread is absent or expired
-- p_checkpoint_ns: the checkpoint namespace (LangGraph's checkpoint_ns, '' for the root graph); NULL: ''
-- p_checkpoint_id: the checkpoint; NULL: the latest unexpired one of the namespace
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_checkpoint_stamp(
  p_thread_id     text,
  p_checkpoint_ns text default '',
  p_checkpoint_id uuid default null,
  p_user_id       text default null,
  p_now           timestamptz default now()
) returns table (checkpoint_id uuid, stamp text, writes_stamp text)
as $func$
  select c.checkpoint_id, t.id::text || '.' || c.xmin::text || '.' || c.checkpoint_id::text,
         (select coalesce(pg_catalog.string_agg(w.xmin::text, '.' order by w.task_id, w.idx), '')
            from memori.lg_writes w
           where w.user_id = memori._lg_acting(p_user_id) and w.thread = t.id and w.checkpoint_ns = c.checkpoint_ns
             and w.checkpoint_id = c.checkpoint_id
             and (w.expires_at is null or w.expires_at > p_now))
    from memori.lg_threads t
   cross join lateral (
     -- the given id, else the latest unexpired of the namespace: one backward index scan, its
     -- checkpoint_id bounded to [id, id], else to every id (index conditions in a generic plan
     -- too; a UNION ALL of a latest and a by-id branch cost 8-11 µs a call more to set up)
     select c.xmin, c.checkpoint_ns, c.checkpoint_id from memori.lg_checkpoints c
      where c.user_id = memori._lg_acting(p_user_id) and c.thread = t.id
        and c.checkpoint_ns = coalesce(p_checkpoint_ns, '')
        and c.checkpoint_id between coalesce(p_checkpoint_id, '00000000-0000-0000-0000-000000000000'::uuid)
                                and coalesce(p_checkpoint_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
        and (c.expires_at is null or c.expires_at > p_now)
      order by c.checkpoint_id desc limit 1) c
   where t.user_id = memori._lg_acting(p_user_id) and t.thread_id = p_thread_id
     and (t.expires_at is null or t.expires_at > p_now)
$func$ language sql stable security invoker;
comment on function memori.lg_checkpoint_stamp(text, text, uuid, text, timestamptz) is 'The read stamps of a LangGraph checkpoint (the given id, else the latest of the namespace): of the checkpoint and of its pending writes, what a cached copy is checked against. No row when absent or expired.';

-------------------------------------------------------------------------------
-- lg_checkpoint_get: one checkpoint (the latest of the namespace without an id)
-- The hot read of every graph step: one statement (see lg_checkpoint_stamp).
-- A delta blob's full value (as in lg_blob_value and lg_checkpoint_list: keep them in step;
-- test_the_three_reads_of_a_delta_chain_agree checks it) is its chain's items (root first) and its own
-- tail under one msgpack array header: a delta stores only the items appended
-- to its base version; the msgpack array of the whole list is a header for
-- the total count, then the root's items, then every delta's items in chain
-- order (msgpack arrays are their items back to back). A full value is itself.
-- p_known_stamp: the stamp of a copy the caller holds; when it is still the
--   stamp of that checkpoint, the row carries the stamp and the pending writes
--   only (checkpoint, metadata and blobs NULL): the caller's copy is current.
-- p_thread_id: LangGraph's thread_id; no row when the thread is absent or expired
-- p_checkpoint_ns: the checkpoint namespace (LangGraph's checkpoint_ns, '' for the root graph); NULL: ''
-- p_checkpoint_id: the checkpoint; NULL: the latest unexpired one of the namespace
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
-- p_known_writes: the writes' stamp of the caller's copy of the pending writes; when it and p_known_stamp are
--   both current, the pending writes come back NULL too
drop function if exists memori.lg_checkpoint_get(text, text, uuid, text, timestamptz);
drop function if exists memori.lg_checkpoint_get(text, text, uuid, text, timestamptz, text);
create or replace function memori.lg_checkpoint_get(
  p_thread_id     text,
  p_checkpoint_ns text default '',
  p_checkpoint_id uuid default null,
  p_user_id       text default null,
  p_now           timestamptz default now(),
  p_known_stamp   text default null,
  p_known_writes  text default null
) returns setof memori.lg_tuple
as $func$
  select t.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id,
         case when c.changed then c.checkpoint end, case when c.changed then c.metadata end,
         b.channels, b.types, b.vals,
         -- pending writes unless the caller's copy of them is current
         case when w.sent then w.task_ids end, case when w.sent then w.channels end,
         case when w.sent then w.types end, case when w.sent then w.vals end,
         case when w.sent then w.paths end, case when w.sent then w.idx end, c.stamp, w.stamp
    from memori.lg_threads t
   cross join lateral (select s.*, s.stamp is distinct from p_known_stamp as changed
                         from (select c.thread, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.checkpoint,
                                      c.metadata, t.id::text || '.' || c.xmin::text || '.' || c.checkpoint_id::text
                                        as stamp
                                 from (
                                   -- the given id, else the latest: one backward index scan bounded
                                   -- to [id, id], else to every id (as in lg_checkpoint_stamp)
                                   select c.xmin, c.* from memori.lg_checkpoints c
                                    where c.user_id = memori._lg_acting(p_user_id) and c.thread = t.id
                                      and c.checkpoint_ns = coalesce(p_checkpoint_ns, '')
                                      and c.checkpoint_id
                                          between coalesce(p_checkpoint_id, '00000000-0000-0000-0000-000000000000'::uuid)
                                              and coalesce(p_checkpoint_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
                                      and (c.expires_at is null or c.expires_at > p_now)
                                    order by c.checkpoint_id desc limit 1) c) s) c
   cross join lateral (
     -- one primary-key probe per channel (LATERAL ... LIMIT 1): a join would be
     -- planned for the namespace's whole blob history, which grows with every step
     select pg_catalog.array_agg(v.key) as channels, pg_catalog.array_agg(bl.type) as types,
            pg_catalog.array_agg(bl.blob) as vals
       from pg_catalog.jsonb_each_text(case when c.changed then c.checkpoint -> 'channel_versions' end) v
      cross join lateral (
        select x.type,
               case when x.base is null then x.blob else (
                 -- a delta: one index scan for the whole chain (= ANY), put in chain order by
                 -- array_position; the root's array header parsed inline. The bodies of
                 -- memori._lg_msgpack_array and _lg_msgpack_array_header, written out (keep them in
                 -- step): the hot read, and calling the two there cost ~9% with the same plan
                 -- (1,000 reads of a 40-version delta chain: 672-685 ms, 726-748 ms with the calls)
                 select case when j.n < 16 then pg_catalog.set_byte('\x00'::bytea, 0, 144 + j.n)
                             when j.n < 65536 then '\xdc'::bytea || substring(pg_catalog.int4send(j.n) from 3 for 2)
                             else '\xdd'::bytea || pg_catalog.int4send(j.n) end
                        || j.body || x.blob
                   from (select (pg_catalog.sum(coalesce(y.items, r.items)) + x.items)::integer as n,
                                pg_catalog.string_agg(case when y.items is null then substring(y.blob from r.header + 1)
                                                else y.blob end,
                                           ''::bytea order by pg_catalog.array_position(x.base, y.version))
                                  as body
                           -- the root is TOASTed (a whole list): detoasted once here (|| and OFFSET 0),
                           -- not by every get_byte and substring below (they read its chunks again each)
                           from (select y.version, y.items, y.blob || ''::bytea as blob
                                   from memori.lg_blobs y
                                  where y.user_id = memori._lg_acting(p_user_id) and y.thread = x.thread
                                    and y.checkpoint_ns = x.checkpoint_ns
                                    and y.channel = x.channel and y.version = any (x.base)
                                 offset 0) y
                           left join lateral (
                             select case when h.b between 144 and 159 then h.b - 144
                                         when h.b = 220 then (pg_catalog.get_byte(y.blob, 1) << 8)
                                                             | pg_catalog.get_byte(y.blob, 2)
                                         when h.b = 221 then (pg_catalog.get_byte(y.blob, 1)::bigint << 24)
                                                             | (pg_catalog.get_byte(y.blob, 2) << 16)
                                                             | (pg_catalog.get_byte(y.blob, 3) << 8)
                                                             | pg_catalog.get_byte(y.blob, 4) end
                                      as items,
                                    case when h.b between 144 and 159 then 1 when h.b = 220 then 3 else 5 end as header
                               from (select case when y.items is null then pg_catalog.get_byte(y.blob, 0) end as b) h) r
                             on y.items is null) j) end as blob
          from memori.lg_blobs x
         where x.user_id = memori._lg_acting(p_user_id) and x.thread = c.thread and x.checkpoint_ns = c.checkpoint_ns
           and x.channel = v.key and x.version = v.value
           and (x.expires_at is null or x.expires_at > p_now)
         limit 1) bl) b
   cross join lateral (
     -- one scan of the pending writes: their row versions in key order (what a cached copy of
     -- them is checked against) and the writes in LangGraph's writes_sort_key order: (task_path,
     -- task_id, idx) by code point, as Python compares strings, whatever the database's collation
     select s.*, c.changed or s.stamp is distinct from p_known_writes as sent
       from (select coalesce(pg_catalog.string_agg(wr.xmin::text, '.' order by wr.task_id, wr.idx), '') as stamp,
                    pg_catalog.array_agg(wr.task_id) as task_ids, pg_catalog.array_agg(wr.channel) as channels,
                    pg_catalog.array_agg(wr.type) as types, pg_catalog.array_agg(wr.blob) as vals,
                    pg_catalog.array_agg(wr.task_path) as paths,
                    pg_catalog.array_agg(wr.idx) as idx
               from (select wr.xmin, wr.task_id, wr.channel, wr.type, wr.blob, wr.task_path, wr.idx
                       from memori.lg_writes wr
                      where wr.user_id = memori._lg_acting(p_user_id) and wr.thread = c.thread
                        and wr.checkpoint_ns = c.checkpoint_ns
                        and wr.checkpoint_id = c.checkpoint_id and (wr.expires_at is null or wr.expires_at > p_now)
                      order by wr.task_path collate "C", wr.task_id collate "C", wr.idx) wr) s) w
   where t.user_id = memori._lg_acting(p_user_id) and t.thread_id = p_thread_id
     and (t.expires_at is null or t.expires_at > p_now)
$func$ language sql stable security invoker;
comment on function memori.lg_checkpoint_get(text, text, uuid, text, timestamptz, text, text) is 'A LangGraph checkpoint tuple (checkpoint, blobs, pending writes, stamps): the given id, else the latest of the namespace; no row when absent or expired; the parts whose known stamp is current come back NULL.';

-------------------------------------------------------------------------------
-- lg_blob_value: the full serialised value of a channel version, as LangGraph's serde wrote it
-- (a delta blob joined to its chain as in lg_checkpoint_get: keep the two in step; tests/test_langgraph_delta.py's
-- test_the_three_reads_of_a_delta_chain_agree checks it)
-- p_thread_id: LangGraph's thread_id; NULL result when the thread is absent or expired
-- p_channel: the channel's name
-- p_version: the channel version (as in a checkpoint's channel_versions); NULL result when absent or expired
-- p_checkpoint_ns: the checkpoint namespace (LangGraph's checkpoint_ns, '' for the root graph); NULL: ''
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_blob_value(
  p_thread_id     text,
  p_channel       text,
  p_version       text,
  p_checkpoint_ns text default '',
  p_user_id       text default null,
  p_now           timestamptz default now()
) returns bytea
as $func$
declare
  v_user text := memori._lg_user(p_user_id);
begin
  return (select
               case when x.base is null then x.blob else (
                 -- a delta: one index scan for the whole chain (= ANY), put in chain order by
                 -- array_position; the root's array header read and the whole one written by the
                 -- msgpack helpers (inlined)
                 select memori._lg_msgpack_array_header(j.n) || j.body || x.blob
                   from (select (sum(coalesce(y.items, r.items)) + x.items)::integer as n,
                                string_agg(case when y.items is null then substring(y.blob from r.header + 1)
                                                else y.blob end, ''::bytea order by array_position(x.base, y.version))
                                  as body
                           -- the root is TOASTed (a whole list): detoasted once here (|| and OFFSET 0),
                           -- not by every get_byte and substring below (they read its chunks again each)
                           from (select y.version, y.items, y.blob || ''::bytea as blob
                                   from memori.lg_blobs y
                                  where y.user_id = v_user and y.thread = x.thread and y.checkpoint_ns = x.checkpoint_ns
                                    and y.channel = x.channel and y.version = any (x.base)
                                 offset 0) y
                           left join lateral memori._lg_msgpack_array(case when y.items is null then y.blob end) r
                             on y.items is null) j) end as blob
            from memori.lg_threads t
            join memori.lg_blobs x on x.user_id = t.user_id and x.thread = t.id
           where t.user_id = v_user and x.user_id = v_user and t.thread_id = p_thread_id
             and (t.expires_at is null or t.expires_at > p_now)
             and x.checkpoint_ns = coalesce(p_checkpoint_ns, '') and x.channel = p_channel and x.version = p_version
             and (x.expires_at is null or x.expires_at > p_now));
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_blob_value(text, text, text, text, text, timestamptz) is 'The full serialised value of a LangGraph channel version (a delta blob joined to its chain); NULL when absent or expired.';

-------------------------------------------------------------------------------
-- lg_checkpoint_list: checkpoints by thread, namespace, metadata, before, newest first
-- p_thread_id: only this thread's checkpoints; NULL: every unexpired thread of the user
-- p_checkpoint_ns: only this namespace ('' for the root graph); NULL: every namespace
-- p_checkpoint_id: only this checkpoint; NULL: any
-- p_filter: only checkpoints whose metadata contains this JSON object (@>); not an object: PM001; NULL: any
-- p_before: only checkpoints with a smaller id (older) than this one; NULL: no bound
-- p_limit: the most rows, newest first (>= 0, else PM001); NULL: all
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_checkpoint_list(
  p_thread_id     text default null,
  p_checkpoint_ns text default null,
  p_checkpoint_id uuid default null,
  p_filter        jsonb default null,
  p_before        uuid default null,
  p_limit         integer default null,
  p_user_id       text default null,
  p_now           timestamptz default now()
) returns setof memori.lg_tuple
as $func$
declare
  v_user text := memori._lg_user(p_user_id);
begin
  if p_limit is not null and p_limit < 0 then
    perform memori._invalid(format('limit must be NULL or >= 0, got %s', p_limit), 'Pass limit=None for all.');
  end if;
  if p_filter is not null and jsonb_typeof(p_filter) <> 'object' then
    perform memori._invalid('the metadata filter must be a JSON object', 'Pass filter={"source": "loop"}.');
  end if;
  -- "p is null or ...": PL/pgSQL plans the statement for the values of each call
  -- (a custom plan: the generic one would be far costlier), so only the filters
  -- given reach the plan, and the (thread, namespace, id) index serves them.
  -- Each checkpoint's blobs and writes as lg_checkpoint_get reads them (keep the
  -- two in step: test_the_three_reads_of_a_delta_chain_agree); one statement, every table
  -- filtered by the user (Citus routes it).
  return query
  select c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.checkpoint, c.metadata,
         b.channels, b.types, b.vals, w.task_ids, w.channels, w.types, w.vals, w.paths, w.idx, null::text, null::text
    from (select t.thread_id, c.thread, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.checkpoint, c.metadata
            from memori.lg_threads t
            join memori.lg_checkpoints c on c.user_id = t.user_id and c.thread = t.id
           where t.user_id = v_user and c.user_id = v_user
             and (p_thread_id is null or t.thread_id = p_thread_id)
             and (t.expires_at is null or t.expires_at > p_now)
             and (p_checkpoint_ns is null or c.checkpoint_ns = p_checkpoint_ns)
             and (p_checkpoint_id is null or c.checkpoint_id = p_checkpoint_id)
             and (p_before is null or c.checkpoint_id < p_before)
             and (p_filter is null or c.metadata @> p_filter)
             and (c.expires_at is null or c.expires_at > p_now)
           order by c.checkpoint_id desc
           limit p_limit) c
   cross join lateral (
     -- one primary-key probe per channel (LATERAL ... LIMIT 1): a join would be
     -- planned for the namespace's whole blob history, which grows with every step
     select array_agg(v.key) as channels, array_agg(bl.type) as types, array_agg(bl.blob) as vals
       from jsonb_each_text(c.checkpoint -> 'channel_versions') v
      cross join lateral (
        select x.type,
               case when x.base is null then x.blob else (
                 -- a delta: one index scan for the whole chain (= ANY), put in chain order by
                 -- array_position; the root's array header read and the whole one written by the
                 -- msgpack helpers (inlined)
                 select memori._lg_msgpack_array_header(j.n) || j.body || x.blob
                   from (select (sum(coalesce(y.items, r.items)) + x.items)::integer as n,
                                string_agg(case when y.items is null then substring(y.blob from r.header + 1)
                                                else y.blob end, ''::bytea order by array_position(x.base, y.version))
                                  as body
                           -- the root is TOASTed (a whole list): detoasted once here (|| and OFFSET 0),
                           -- not by every get_byte and substring below (they read its chunks again each)
                           from (select y.version, y.items, y.blob || ''::bytea as blob
                                   from memori.lg_blobs y
                                  where y.user_id = v_user and y.thread = x.thread and y.checkpoint_ns = x.checkpoint_ns
                                    and y.channel = x.channel and y.version = any (x.base)
                                 offset 0) y
                           left join lateral memori._lg_msgpack_array(case when y.items is null then y.blob end) r
                             on y.items is null) j) end as blob
          from memori.lg_blobs x
         where x.user_id = v_user and x.thread = c.thread and x.checkpoint_ns = c.checkpoint_ns
           and x.channel = v.key and x.version = v.value
           and (x.expires_at is null or x.expires_at > p_now)
         limit 1) bl) b
   cross join lateral (
     -- the pending writes sorted once, in LangGraph's writes_sort_key order (by code point)
     select array_agg(wr.task_id) as task_ids, array_agg(wr.channel) as channels, array_agg(wr.type) as types,
            array_agg(wr.blob) as vals, array_agg(wr.task_path) as paths, array_agg(wr.idx) as idx
       from (select wr.task_id, wr.channel, wr.type, wr.blob, wr.task_path, wr.idx
               from memori.lg_writes wr
              where wr.user_id = v_user and wr.thread = c.thread and wr.checkpoint_ns = c.checkpoint_ns
                and wr.checkpoint_id = c.checkpoint_id and (wr.expires_at is null or wr.expires_at > p_now)
              order by wr.task_path collate "C", wr.task_id collate "C", wr.idx) wr) w
   order by c.checkpoint_id desc;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_checkpoint_list(text, text, uuid, jsonb, uuid, integer, text, timestamptz) is 'LangGraph checkpoint tuples of a user, newest first: by thread, namespace, id, metadata containment, before an id, up to a limit.';

-------------------------------------------------------------------------------
-- lg_delta_history: what a DeltaChannel needs to rebuild its value, in one call
-- LangGraph's get_delta_channel_history: from the checkpoint's parent up the
-- parent chain, per channel, the pending writes of each ancestor until the
-- nearest ancestor that stores a value of the channel (its seed: a blob, e.g. a
-- _DeltaSnapshot, or an inline value in the checkpoint's channel_values),
-- whose writes count too. The checkpoint's own writes are pending for the next
-- step and do not. The walk stops at the root, at a parent that is absent or
-- expired (as reading it with lg_checkpoint_get would), and when every channel
-- has its seed. Writes come oldest checkpoint first, within one checkpoint in
-- LangGraph's writes_sort_key order (task_path, task_id, idx: by code point,
-- hence COLLATE "C"). One statement walks the chain (a recursive CTE, one key
-- probe per ancestor and per wanted channel); the seed's full value is
-- memori.lg_blob_value's (a delta blob joined to its chain).
-- p_thread_id: LangGraph's thread_id; a row per channel with no writes and no seed when the thread or
--   checkpoint is absent or expired
-- p_channels: the channels to walk for (LangGraph's DeltaChannel names); a row per distinct name, in the
--   order given; NULL: PM001
-- p_checkpoint_ns: the checkpoint namespace (LangGraph's checkpoint_ns, '' for the root graph); NULL: ''
-- p_checkpoint_id: the checkpoint whose ancestors are walked; NULL: the latest unexpired one of the namespace
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_delta_history(
  p_thread_id     text,
  p_channels      text[],
  p_checkpoint_ns text default '',
  p_checkpoint_id uuid default null,
  p_user_id       text default null,
  p_now           timestamptz default now()
) returns table (channel text, seeded boolean, seed_version text, seed_type text, seed_value bytea,
                 seed_inline jsonb, write_task_ids text[], write_types text[], write_values bytea[])
as $func$
declare
  v_user text := memori._lg_user(p_user_id);
  v_row  record;
begin
  if p_channels is null then
    perform memori._invalid('the channels to walk for are required', 'Pass the DeltaChannel names, e.g. {messages}.');
  end if;
  for v_row in
    with recursive target as (
      -- the checkpoint: the given id, else the latest (a backward probe of the key, as lg_checkpoint_get)
      select t.id as thread, c.checkpoint_ns, c.checkpoint_id, c.parent_id
        from memori.lg_threads t
       cross join lateral (
         select c.checkpoint_ns, c.checkpoint_id, c.parent_id from memori.lg_checkpoints c
          where c.user_id = v_user and c.thread = t.id and c.checkpoint_ns = coalesce(p_checkpoint_ns, '')
            -- the given id, else the latest: bounds the index scan in a generic plan too (lg_checkpoint_stamp)
            and c.checkpoint_id between coalesce(p_checkpoint_id, '00000000-0000-0000-0000-000000000000'::uuid)
                                    and coalesce(p_checkpoint_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
            and (c.expires_at is null or c.expires_at > p_now)
          order by c.checkpoint_id desc
          limit 1) c
       where t.user_id = v_user and t.thread_id = p_thread_id and (t.expires_at is null or t.expires_at > p_now)),
    -- the checkpoint (depth 0: it seeds nothing, its writes are pending), then each ancestor: the channels
    -- still wanted there (its writes count for them) and which of them it seeds (channel -> version); the path
    -- guards against a cycle of parent ids (LangGraph's ids never make one; a put could)
    walk (depth, thread, checkpoint_ns, checkpoint_id, parent_id, path, wanted, seeds) as (
      select 0, x.thread, x.checkpoint_ns, x.checkpoint_id, x.parent_id, array[x.checkpoint_id],
             array(select distinct u.ch from unnest(p_channels) u(ch) where u.ch is not null), '{}'::jsonb
        from target x
      union all
      select w.depth + 1, w.thread, w.checkpoint_ns, a.checkpoint_id, a.parent_id, w.path || a.checkpoint_id,
             s.wanted, s.seeds
        from walk w
       cross join lateral (  -- a key probe (LIMIT 1 keeps it one, whatever the statistics of a new user say)
         select a.checkpoint_id, a.parent_id, a.checkpoint from memori.lg_checkpoints a
          where a.user_id = v_user and a.thread = w.thread and a.checkpoint_ns = w.checkpoint_ns
            and a.checkpoint_id = w.parent_id and (a.expires_at is null or a.expires_at > p_now)
          limit 1) a
       cross join lateral (
         -- stored there: an inline value in channel_values (JSON null too), or a blob of its version
         select array_agg(u.ch) as wanted,
                coalesce(jsonb_object_agg(u.ch, a.checkpoint -> 'channel_versions' -> u.ch)
                           filter (where (a.checkpoint -> 'channel_values') ? u.ch
                                      or exists (select from memori.lg_blobs b
                                                  where b.user_id = v_user and b.thread = w.thread
                                                    and b.checkpoint_ns = w.checkpoint_ns and b.channel = u.ch
                                                    and b.version = a.checkpoint -> 'channel_versions' ->> u.ch
                                                    and b.type <> 'empty'
                                                    and (b.expires_at is null or b.expires_at > p_now))), '{}')
                  as seeds
           from unnest(w.wanted) u(ch)
          where not w.seeds ? u.ch) s
       where s.wanted is not null and a.checkpoint_id <> all (w.path))
    select n.ch as channel, sd.checkpoint_id is not null as seeded, sd.version, sd.inline,
           wr.task_ids, wr.types, wr.vals, (select x.thread from target x) as thread
      from (select u.ch, min(u.n) as n from unnest(p_channels) with ordinality u(ch, n)
             where u.ch is not null group by u.ch) n
      left join lateral (
        select w.checkpoint_id, w.seeds ->> n.ch as version,
               (select a.checkpoint -> 'channel_values' -> n.ch from memori.lg_checkpoints a
                 where a.user_id = v_user and a.thread = w.thread and a.checkpoint_ns = w.checkpoint_ns
                   and a.checkpoint_id = w.checkpoint_id) as inline
          from walk w
         where w.seeds ? n.ch) sd on true
      left join lateral (
        -- the chain's writes in one scan of the writes' key (= ANY, as the delta join reads a chain's blobs),
        -- the oldest checkpoint first by its place in the chain
        select array_agg(x.task_id order by array_position(ch.ids, x.checkpoint_id) desc, x.task_path collate "C",
                                            x.task_id collate "C", x.idx) as task_ids,
               array_agg(x.type order by array_position(ch.ids, x.checkpoint_id) desc, x.task_path collate "C",
                                         x.task_id collate "C", x.idx) as types,
               array_agg(x.blob order by array_position(ch.ids, x.checkpoint_id) desc, x.task_path collate "C",
                                         x.task_id collate "C", x.idx) as vals
          from (select array(select w.checkpoint_id from walk w
                              where w.depth > 0 and n.ch = any (w.wanted) order by w.depth) as ids,
                       (select x.thread from target x) as thread) ch
          join memori.lg_writes x
            on x.user_id = v_user and x.thread = ch.thread and x.checkpoint_ns = coalesce(p_checkpoint_ns, '')
           and x.checkpoint_id = any (ch.ids) and x.channel = n.ch
           and (x.expires_at is null or x.expires_at > p_now)) wr on true
     order by n.n
  loop
    channel := v_row.channel;
    seeded := v_row.seeded;
    seed_version := v_row.version;
    seed_type := null;
    seed_value := null;
    seed_inline := null;
    if v_row.seeded then
      -- a blob wins over the inline reading (for a _DeltaSnapshot that is LangGraph's true marker)
      select b.type into seed_type
        from memori.lg_blobs b
       where b.user_id = v_user and b.thread = v_row.thread and b.checkpoint_ns = coalesce(p_checkpoint_ns, '')
         and b.channel = v_row.channel and b.version = v_row.version and b.type <> 'empty'
         and (b.expires_at is null or b.expires_at > p_now);
      if seed_type is not null then
        seed_value := memori.lg_blob_value(p_thread_id, v_row.channel, v_row.version, p_checkpoint_ns, v_user, p_now);
      else
        seed_inline := coalesce(v_row.inline, 'null'::jsonb);
      end if;
    end if;
    write_task_ids := coalesce(v_row.task_ids, '{}');
    write_types := coalesce(v_row.types, '{}');
    write_values := coalesce(v_row.vals, '{}');
    return next;
  end loop;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_delta_history(text, text[], text, uuid, text, timestamptz) is 'LangGraph''s DeltaChannel history of a checkpoint: per channel, the pending writes up its parent chain (oldest first) to the nearest ancestor storing a value, and that value (the seed).';

-------------------------------------------------------------------------------
-- lg_thread_delete: a thread with everything of it
-- p_thread_id: the thread to delete (expired or not) with its checkpoints, blobs and writes
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_thread_delete(p_thread_id text, p_user_id text default null)
returns integer
as $func$
declare
  v_user  text := memori._lg_user(p_user_id);
  v_count integer;
begin
  delete from memori.lg_threads t where t.user_id = v_user and t.thread_id = p_thread_id;
  get diagnostics v_count = row_count;
  if v_count > 0 then
    perform memori._event_emit('langgraph.thread_deleted', jsonb_build_object('user_id', v_user, 'thread_id', p_thread_id));
  end if;
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_thread_delete(text, text) is 'Delete a user''s LangGraph thread with its checkpoints, blobs and writes; returns 1, or 0 when there was none.';

-------------------------------------------------------------------------------
-- lg_thread_copy: every unexpired checkpoint, blob and write of a thread into another
-- p_source_thread_id: the thread to copy; absent or expired: nothing is copied (0)
-- p_target_thread_id: the thread copied into, created or renewed; rows it already has stay; the source itself: 0
-- p_policy: the retention policy of the target and of the copied rows, as for lg_checkpoint_put (unknown: PM004)
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_thread_copy(
  p_source_thread_id text,
  p_target_thread_id text,
  p_policy           text default 'default',
  p_user_id          text default null,
  p_now              timestamptz default now()
) returns integer
as $func$
declare
  v_user   text := memori._lg_user(p_user_id);
  v_source memori.lg_threads;
  v_target bigint;
  v_count  integer;
  v_rows   jsonb;
begin
  select * into v_source from memori.lg_threads t
   where t.user_id = v_user and t.thread_id = p_source_thread_id and (t.expires_at is null or t.expires_at > p_now);
  if not found then
    return 0;  -- LangGraph: copying a thread that does not exist copies nothing
  end if;
  v_target := (memori._lg_thread(v_user, p_target_thread_id, p_policy, (memori._lg_policy(p_policy)).idle,
                                 v_source.uses_delta, p_now)).id;
  if v_target = v_source.id then
    return 0;
  end if;
  -- each table's rows read first (one statement on the user's shard), then inserted from
  -- that value: Citus plans an INSERT ... SELECT over a distributed table apart, and with
  -- the call's values as parameters it read every shard
  select jsonb_agg(to_jsonb(b)) into v_rows from memori.lg_blobs b
   where b.user_id = v_user and b.thread = v_source.id and (b.expires_at is null or b.expires_at > p_now);
  insert into memori.lg_blobs (thread, checkpoint_ns, channel, version, user_id, policy, type, blob, expires_at,
                               base, items)
  select v_target, b.checkpoint_ns, b.channel, b.version, v_user, p_policy, b.type, b.blob, b.expires_at,
         b.base, b.items
    from jsonb_populate_recordset(null::memori.lg_blobs, v_rows) b
  on conflict (user_id, thread, checkpoint_ns, channel, version) do nothing;
  select jsonb_agg(to_jsonb(c) order by c.checkpoint_ns, c.checkpoint_id) into v_rows from memori.lg_checkpoints c
   where c.user_id = v_user and c.thread = v_source.id and (c.expires_at is null or c.expires_at > p_now);
  insert into memori.lg_checkpoints (thread, checkpoint_ns, checkpoint_id, parent_id, user_id, policy, checkpoint,
                                     metadata, expires_at)
  select v_target, c.checkpoint_ns, c.checkpoint_id, c.parent_id, v_user, p_policy, c.checkpoint, c.metadata,
         c.expires_at
    from jsonb_populate_recordset(null::memori.lg_checkpoints, v_rows) c
   order by c.checkpoint_ns, c.checkpoint_id
  on conflict (user_id, thread, checkpoint_ns, checkpoint_id) do nothing;
  get diagnostics v_count = row_count;
  select jsonb_agg(to_jsonb(w)) into v_rows from memori.lg_writes w
   where w.user_id = v_user and w.thread = v_source.id and (w.expires_at is null or w.expires_at > p_now);
  insert into memori.lg_writes (thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, user_id, policy, channel,
                                type, blob, expires_at)
  select v_target, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.task_path, v_user, p_policy, w.channel, w.type,
         w.blob, w.expires_at
    from jsonb_populate_recordset(null::memori.lg_writes, v_rows) w
  on conflict (user_id, thread, checkpoint_ns, checkpoint_id, task_id, idx) do nothing;
  perform memori._event_emit('langgraph.thread_copied',
            jsonb_build_object('user_id', v_user, 'source', p_source_thread_id, 'target', p_target_thread_id,
                               'checkpoints', v_count), p_now);
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_thread_copy(text, text, text, text, timestamptz) is 'Copy a user''s LangGraph thread (unexpired checkpoints with their blobs and writes, same ids) into another thread; returns checkpoints copied.';

-------------------------------------------------------------------------------
-- lg_threads_prune: LangGraph's prune strategies, keep_latest and delete
-- p_thread_ids: the threads (thread_id) to prune; NULL or empty: nothing
-- p_strategy: 'keep_latest' (the latest checkpoint of each namespace stays; PM080 for a thread that uses a
--   DeltaChannel) or 'delete' (the whole threads); any other value or NULL: PM001
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_threads_prune(
  p_thread_ids text[],
  p_strategy   text default 'keep_latest',
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns memori.lg_prune_result
as $func$
declare
  v_user   text := memori._lg_user(p_user_id);
  v_result memori.lg_prune_result := (0, 0, 0);
  v_delta  text;
  v_ns     record;
  v_count  integer;
begin
  if p_strategy is null or p_strategy not in ('keep_latest', 'delete') then
    perform memori._invalid(format('unknown prune strategy %s', coalesce(quote_literal(p_strategy), 'NULL')),
                            'Use keep_latest (the latest checkpoint of each namespace stays) or delete.');
  end if;
  if coalesce(cardinality(p_thread_ids), 0) = 0 then
    return v_result;
  end if;
  if p_strategy = 'delete' then
    delete from memori.lg_threads t where t.user_id = v_user and t.thread_id = any (p_thread_ids);
    get diagnostics v_count = row_count;
    v_result.threads := v_count;
  else
    -- a DeltaChannel rebuilds its value from older checkpoints: refuse, as LangGraph's own savers do
    select string_agg(t.thread_id, ', ' order by t.thread_id) into v_delta
      from memori.lg_threads t
     where t.user_id = v_user and t.thread_id = any (p_thread_ids) and t.uses_delta;
    if v_delta is not null then
      raise exception 'keep_latest cannot prune threads that use a DeltaChannel: %', v_delta
        using errcode = 'PM080',
              detail = 'Their latest values are rebuilt from older checkpoints and writes, which keep_latest deletes.',
              hint = 'Prune them with strategy delete, or let them expire whole (lg_threads idle retention).';
    end if;
    for v_ns in
      select distinct c.thread, c.checkpoint_ns
        from memori.lg_threads t join memori.lg_checkpoints c on c.user_id = t.user_id and c.thread = t.id
       where t.user_id = v_user and c.user_id = v_user and t.thread_id = any (p_thread_ids)
    loop
      -- one statement, one snapshot: a checkpoint put meanwhile is newer and stays
      -- (their pending writes go with them: no trigger, Citus refuses tables with one)
      with gone as (
        delete from memori.lg_checkpoints c
         where c.user_id = v_user and c.thread = v_ns.thread and c.checkpoint_ns = v_ns.checkpoint_ns
           and c.checkpoint_id < (select l.checkpoint_id from memori.lg_checkpoints l
                                   where l.user_id = v_user and l.thread = v_ns.thread
                                     and l.checkpoint_ns = v_ns.checkpoint_ns
                                   order by l.checkpoint_id desc limit 1)
        returning c.checkpoint_id
      ), orphaned as (
        update memori.lg_checkpoints c set parent_id = null
         where c.user_id = v_user and c.thread = v_ns.thread and c.checkpoint_ns = v_ns.checkpoint_ns
           and c.parent_id in (select g.checkpoint_id from gone g)
      ), writes as (
        delete from memori.lg_writes w
         where w.user_id = v_user and w.thread = v_ns.thread and w.checkpoint_ns = v_ns.checkpoint_ns
           and w.checkpoint_id in (select g.checkpoint_id from gone g)
      )
      select count(*) into v_count from gone;
      v_result.checkpoints := v_result.checkpoints + v_count;
      v_result.blobs := v_result.blobs + memori._lg_namespace_settle(v_user, v_ns.thread, v_ns.checkpoint_ns, p_now);
    end loop;
  end if;
  perform memori._event_emit('langgraph.pruned',
            jsonb_build_object('user_id', v_user, 'thread_ids', to_jsonb(p_thread_ids), 'strategy', p_strategy,
                               'threads', v_result.threads, 'checkpoints', v_result.checkpoints,
                               'blobs', v_result.blobs), p_now);
  return v_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_threads_prune(text[], text, text, timestamptz) is 'Prune a user''s LangGraph threads: keep_latest keeps the latest checkpoint of each namespace (refused for DeltaChannel threads, PM080), delete removes the threads.';

-------------------------------------------------------------------------------
-- lg_runs_delete: every checkpoint (and its writes) a run created
-- p_run_ids: the run ids (the checkpoint metadata's run_id) whose checkpoints go, with their writes and unused
--   blobs; NULL or empty: nothing
-- p_user_id: whose LangGraph state; NULL: memori.user_id (PM001 when neither). Not the acting-user rule (no
--   PM040): row-level security keeps an app role to memori.user_id's rows
create or replace function memori.lg_runs_delete(
  p_run_ids text[],
  p_user_id text default null,
  p_now     timestamptz default now()
) returns integer
as $func$
declare
  v_user  text := memori._lg_user(p_user_id);
  v_count integer := 0;
  v_ns    record;
begin
  if coalesce(cardinality(p_run_ids), 0) = 0 then
    return 0;
  end if;
  for v_ns in
    -- (their pending writes go with them: no trigger, Citus refuses tables with one)
    with gone as (
      delete from memori.lg_checkpoints c
       where c.user_id = v_user and c.metadata ->> 'run_id' = any (p_run_ids)
      returning c.thread, c.checkpoint_ns, c.checkpoint_id
    ), writes as (
      delete from memori.lg_writes w
       using gone g
       where w.user_id = v_user and w.thread = g.thread and w.checkpoint_ns = g.checkpoint_ns
         and w.checkpoint_id = g.checkpoint_id
    )
    select g.thread, g.checkpoint_ns, count(*)::integer as n from gone g group by g.thread, g.checkpoint_ns
  loop
    v_count := v_count + v_ns.n;
    perform memori._lg_namespace_settle(v_user, v_ns.thread, v_ns.checkpoint_ns, p_now);
  end loop;
  if v_count > 0 then
    perform memori._event_emit('langgraph.runs_deleted',
              jsonb_build_object('user_id', v_user, 'run_ids', to_jsonb(p_run_ids), 'checkpoints', v_count), p_now);
  end if;
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_runs_delete(text[], text, timestamptz) is 'Delete a user''s LangGraph checkpoints whose metadata run_id is one of the given, with their writes and unused blobs; returns checkpoints deleted.';

-------------------------------------------------------------------------------
-- lg_policy_set: create or change a saver retention policy (a DBA's call)
-- p_policy: the policy's name (a kind of memori.retention_policies): non-empty, at most 63 characters, no
--   control characters, not '*' (else PM001); an existing policy is changed
-- p_superseded_after: how long a superseded checkpoint (with the blobs and writes only it uses) is kept;
--   > 0 (else PM001), NULL: kept
-- p_idle_after: how long a thread is kept without a put, then deleted whole; > 0 (else PM001), NULL: kept
-- p_priority: the cleanup priority (lower is deleted first) of its checkpoints, blobs and writes; threads get
--   one more
create or replace function memori.lg_policy_set(
  p_policy           text,
  p_superseded_after interval,
  p_idle_after       interval default null,
  p_priority         integer default 3
) returns void
as $func$
begin
  perform memori._check_identifier('policy', p_policy, 63);
  if p_policy = '*' then
    perform memori._invalid('policy * is the engine''s table default', 'Name the policy, e.g. short.');
  end if;
  if p_superseded_after <= interval '0' or p_idle_after <= interval '0' then
    perform memori._invalid('retention must be positive or NULL (kept)', 'Pass an interval such as 7 days.');
  end if;
  insert into memori.retention_policies (table_name, kind, priority, retention, preserve_important, description)
  values ('lg_checkpoints', p_policy, p_priority, p_superseded_after, false,
          format('Superseded LangGraph checkpoints of saver policy %s', p_policy)),
         ('lg_blobs', p_policy, p_priority, p_superseded_after, false,
          format('Unused LangGraph blobs of saver policy %s (follows lg_checkpoints)', p_policy)),
         ('lg_writes', p_policy, p_priority, p_superseded_after, false,
          format('Writes of superseded LangGraph checkpoints, saver policy %s (follows lg_checkpoints)', p_policy)),
         ('lg_threads', p_policy, p_priority + 1, p_idle_after, false,
          format('Idle LangGraph threads of saver policy %s', p_policy))
  on conflict (table_name, kind) do update
     set priority = excluded.priority, retention = excluded.retention, description = excluded.description;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.lg_policy_set(text, interval, interval, integer) is 'Create or change a LangGraph saver retention policy: superseded checkpoints kept p_superseded_after, threads kept p_idle_after idle (NULL: kept). Applies to rows written afterwards.';

-------------------------------------------------------------------------------
-- On a Citus server: custom plans for every saver function's statements (planned per call)
-- One server plans the saver's key probes once (generic plans: the saver's
-- connections, lg_checkpoint_put and lg_writes_put force them; replanning cost
-- more than running them). Citus routes a statement to the user's shard only
-- when it sees the user's value (a custom plan): a generic plan fails ("could
-- not create distributed plan"). Under plan_cache_mode auto Citus makes its
-- generic plans look dear, so PostgreSQL kept planning each call, but not
-- every statement: on a worker (a delegated call) some kept a generic plan, and
-- Citus 14.0.1 then re-plans its shard query at every call and keeps the copy
-- (citusdata/citus#8824): lg_checkpoint_put and lg_thread_copy grew the worker
-- backend by 90 kB a call through the helpers they call (a helper's SET clause
-- overrides its caller's). So force_custom_plan, as every delegated function
-- (memori._delegated_plans_per_call, sql/950-distribute.sql). Set here, by the
-- catalog, so that no saver function (and no caller's setting) is left out;
-- sql/ is applied again after memori.distribute().
--
-- And, first, the saver's inlined reads as PL/pgSQL of the same statement
-- (memori._as_plpgsql): Citus refuses SQL functions over distributed tables.
do $do$
declare
  v_fn regprocedure;
begin
  if not exists (select from pg_catalog.pg_extension where extname = 'citus') then
    return;
  end if;
  perform memori._as_plpgsql('memori.lg_checkpoint_stamp(text, text, uuid, text, timestamptz)',
                             'memori._lg_acting(p_user_id)');
  perform memori._as_plpgsql('memori.lg_checkpoint_get(text, text, uuid, text, timestamptz, text, text)',
                             'memori._lg_acting(p_user_id)');
  for v_fn in
    select p.oid::regprocedure from pg_catalog.pg_proc p
     where p.pronamespace = 'memori'::regnamespace and p.proname ~ '^_?lg_' and p.prokind = 'f'
       and p.proname <> '_lg_acting'  -- an expression inlined into its callers (a SET clause would make it a call)
     order by 1
  loop
    execute format('alter function %s set plan_cache_mode = force_custom_plan', v_fn);
  end loop;
end
$do$;
