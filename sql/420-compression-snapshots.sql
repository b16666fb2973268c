-- pymemdb SQL API: session snapshots (seed 04).
--
-- An immutable copy of a session's active state (message markers by
-- sequence, checkpoints and goals whole, the virtual memory's pages and
-- working set); restoring one first snapshots the state it replaces.

-------------------------------------------------------------------------------
-- _snapshot_take: an immutable copy of a session's active state
create or replace function memori._snapshot_take(
  p_state    memori.compression_state,
  p_kind     text,
  p_metadata jsonb,
  p_now      timestamptz
) returns memori.snapshots
as $func$
declare
  v_user      text := p_state.user_id;
  v_row       memori.snapshots;
  v_retention interval;
  v_messages  bigint;
  v_parts     jsonb;
  v_vm        jsonb;
begin
  select coalesce(pk.retention, pd.retention) into v_retention
    from memori.retention_policies pd
    left join memori.retention_policies pk on pk.table_name = pd.table_name and pk.kind = p_kind
   where pd.table_name = 'snapshots' and pd.kind = '*';
  -- Messages are append-only and never deleted, so the snapshot names them
  -- by sequence (last_seq and the rolled-back ranges); checkpoints and goals,
  -- which compression and markers change, are copied whole. One statement
  -- per table, each on the user's shard on Citus (which refuses subqueries
  -- in INSERT ... VALUES and would run the whole INSERT ... SELECT there).
  select count(*) into v_messages from memori.messages m
   where m.user_id = v_user and m.session_id = p_state.session_id and m.seq <= p_state.last_seq
     and not p_state.rolled_back @> m.seq;
  select jsonb_build_object('checkpoints', coalesce(jsonb_agg(to_jsonb(c) order by c.from_seq), '[]')) into v_parts
    from memori.compression_checkpoints c where c.user_id = v_user and c.session_id = p_state.session_id;
  select v_parts || jsonb_build_object('goals', coalesce(jsonb_agg(to_jsonb(g) order by g.created_at), '[]')) into v_parts
    from memori.goals g where g.user_id = v_user and g.session_id = p_state.session_id;
  select v_parts || jsonb_build_object('goal_checkpoints', coalesce(jsonb_agg(to_jsonb(x)), '[]')) into v_parts
    from memori.goal_checkpoints x join memori.goals g on g.user_id = x.user_id and g.id = x.goal_id
   where g.user_id = v_user and g.session_id = p_state.session_id;
  select v_parts || jsonb_build_object('goal_decisions', coalesce(jsonb_agg(to_jsonb(x)), '[]')) into v_parts
    from memori.goal_decisions x join memori.goals g on g.user_id = x.user_id and g.id = x.goal_id
   where g.user_id = v_user and g.session_id = p_state.session_id;
  select v_parts || jsonb_build_object('goal_artifacts', coalesce(jsonb_agg(to_jsonb(x)), '[]')) into v_parts
    from memori.goal_artifacts x join memori.goals g on g.user_id = x.user_id and g.id = x.goal_id
   where g.user_id = v_user and g.session_id = p_state.session_id;
  -- the virtual memory's pages and working set (sql/525-vm-snapshot.sql), NULL without one: looked
  -- up here by the user first (one shard on Citus), the VM's reader runs only for a VM session
  if exists (select from memori.vm_sessions s where s.user_id = v_user and s.session_id = p_state.session_id) then
    v_vm := memori._vm_snapshot_state(p_state.session_id);
  end if;
  insert into memori.snapshots (session_id, user_id, kind, created_at, token_count, message_count, checkpoint_count,
                                metadata, state, expires_at)
  values (p_state.session_id, v_user, p_kind, p_now,
          p_state.used_tokens + p_state.system_tokens + p_state.goal_tokens + p_state.checkpoint_tokens,
          v_messages, p_state.checkpoint_count, coalesce(p_metadata, '{}'::jsonb),
          v_parts || jsonb_build_object(
            'state', jsonb_build_object('last_seq', p_state.last_seq,
                                        'compressed_through_seq', p_state.compressed_through_seq,
                                        'rolled_back', p_state.rolled_back::text,
                                        'compression_count', p_state.compression_count,
                                        'context_size', p_state.context_size,
                                        'version', p_state.version),
            'vm', v_vm),
          p_now + v_retention)
  returning * into v_row;
  perform memori._event_emit(case p_kind when 'auto' then 'snapshot.auto_created' else 'snapshot.created' end,
            jsonb_build_object('snapshot_id', v_row.id, 'session_id', v_row.session_id, 'kind', p_kind), p_now);
  return v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._snapshot_take(memori.compression_state, text, jsonb, timestamptz) is 'Store a snapshot (kind manual, auto or pre_restore) of a session: markers by sequence, checkpoints and goals whole, page versions and the working set.';

-------------------------------------------------------------------------------
-- snapshot_create: an immutable snapshot of the session's active state
-- p_session_id: an existing conversation of the acting user (message_add starts one), else PM005
-- p_metadata: a JSON object kept with the snapshot, e.g. {"model": ...} (else PM001); NULL: {}
create or replace function memori.snapshot_create(
  p_session_id text,
  p_metadata   jsonb default '{}'::jsonb,
  p_now        timestamptz default now()
) returns memori.snapshots
as $func$
declare
  v_state memori.compression_state := memori._compression_session(p_session_id, null, p_now, false);
begin
  if p_metadata is not null and jsonb_typeof(p_metadata) <> 'object' then
    perform memori._invalid('snapshot metadata must be a JSON object', 'Pass {"model": "llama3.2:3b", ...}, or omit it.');
  end if;
  return memori._snapshot_take(v_state, 'manual', p_metadata, p_now);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.snapshot_create(text, jsonb, timestamptz) is 'Snapshot a session''s active state (message markers, checkpoints, goals, page versions and working set); immutable, retention-managed.';

-------------------------------------------------------------------------------
-- snapshot_list: a session's unexpired snapshots, newest first
create or replace function memori.snapshot_list(p_session_id text, p_now timestamptz default now())
returns setof memori.snapshots
as $func$
declare
  v_user text := memori._acting_user(null);
begin
  return query select * from memori.snapshots s
                where s.user_id = v_user and s.session_id = p_session_id
                  and (s.expires_at is null or s.expires_at > p_now)
                order by s.created_at desc, s.id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.snapshot_list(text, timestamptz) is 'Unexpired snapshots of a session, newest first.';

-------------------------------------------------------------------------------
-- snapshot_restore: bring a session's active state back to a snapshot
-- Nothing is lost: the replaced state is snapshotted first (kind
-- pre_restore, returned), and messages added after the snapshot stay in the
-- history, hidden from the active context as a rolled-back range.
-- p_snapshot_id: an unexpired snapshot of the acting user (memori.snapshot_list), else PM005
create or replace function memori.snapshot_restore(p_snapshot_id uuid, p_now timestamptz default now())
returns memori.snapshots
as $func$
declare
  v_user  text := memori._acting_user(null);
  v_snap  memori.snapshots;
  v_state memori.compression_state;
  v_s     jsonb;
  v_pre   memori.snapshots;
  v_rb    int4multirange;
  v_vm    jsonb;
  v_cp    memori.compression_checkpoints;
  v_goal  memori.goals;
  v_gc    memori.goal_checkpoints;
  v_gd    memori.goal_decisions;
  v_ga    memori.goal_artifacts;
begin
  select * into v_snap from memori.snapshots s
   where s.user_id = v_user and s.id = p_snapshot_id and (s.expires_at is null or s.expires_at > p_now);
  if not found then
    raise exception 'snapshot % not found', p_snapshot_id
      using errcode = 'PM005', hint = 'It does not exist or has expired; memori.snapshot_list lists a session''s snapshots.';
  end if;
  v_state := memori._compression_session(v_snap.session_id, null, p_now, false);
  v_pre := memori._snapshot_take(v_state, 'pre_restore', jsonb_build_object('restoring', p_snapshot_id), p_now);
  v_s := v_snap.state;

  -- row by row (INSERT ... VALUES): Citus would copy an INSERT ... SELECT from a function into the shards,
  -- which row-level security refuses; only the acting user's rows are taken
  delete from memori.compression_checkpoints where user_id = v_user and session_id = v_snap.session_id;
  for v_cp in select * from jsonb_populate_recordset(null::memori.compression_checkpoints, v_s->'checkpoints') r
               where r.user_id = v_user loop
    insert into memori.compression_checkpoints values (v_cp.*);
  end loop;
  delete from memori.goals where user_id = v_user and session_id = v_snap.session_id;  -- cascades to their parts
  for v_goal in select * from jsonb_populate_recordset(null::memori.goals, v_s->'goals') r where r.user_id = v_user loop
    insert into memori.goals values (v_goal.*);
  end loop;
  for v_gc in select * from jsonb_populate_recordset(null::memori.goal_checkpoints, v_s->'goal_checkpoints') r
               where r.user_id = v_user loop
    insert into memori.goal_checkpoints values (v_gc.*);
  end loop;
  for v_gd in select * from jsonb_populate_recordset(null::memori.goal_decisions, v_s->'goal_decisions') r
               where r.user_id = v_user loop
    insert into memori.goal_decisions values (v_gd.*);
  end loop;
  for v_ga in select * from jsonb_populate_recordset(null::memori.goal_artifacts, v_s->'goal_artifacts') r
               where r.user_id = v_user loop
    insert into memori.goal_artifacts values (v_ga.*);
  end loop;

  -- what the snapshot had rolled back, plus everything added after it
  v_rb := (v_s->'state'->>'rolled_back')::int4multirange;
  if v_state.last_seq > (v_s->'state'->>'last_seq')::integer then
    v_rb := v_rb + int4multirange(int4range((v_s->'state'->>'last_seq')::integer + 1, v_state.last_seq + 1));
  end if;
  update memori.compression_state
     set compressed_through_seq = (v_s->'state'->>'compressed_through_seq')::integer,
         rolled_back = v_rb,
         compression_count = (v_s->'state'->>'compression_count')::integer,
         version = version + 1,
         updated_at = p_now
   where user_id = v_user and session_id = v_snap.session_id;
  perform memori._compression_recount(v_user, v_snap.session_id);
  perform memori._goal_tokens_refresh(v_user, v_snap.session_id);
  v_vm := memori._vm_snapshot_restore(v_snap.session_id, v_s->'vm', p_now);
  perform memori._event_emit('snapshot.restored',
            jsonb_build_object('snapshot_id', p_snapshot_id, 'session_id', v_snap.session_id,
                               'pre_restore_snapshot_id', v_pre.id, 'vm', v_vm), p_now);
  return v_pre;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.snapshot_restore(uuid, timestamptz) is 'Restore a session''s active state (and its pages and working set) from a snapshot; returns the snapshot of the replaced state. History is kept.';
