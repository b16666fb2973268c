-- pymemdb SQL API: session goals (seed 04), never compressed.
--
-- A session's goal, its checkpoints, decisions and artifacts are rendered
-- into the system prompt (goal_block) and updated from model output markers
-- (goal_markers_apply, also applied by message_add to assistant messages).

-------------------------------------------------------------------------------
-- _goal_active: the session's active goal (NULL when none)
create or replace function memori._goal_active(p_user_id text, p_session_id text) returns memori.goals
as $func$
  select g from memori.goals g where g.user_id = p_user_id and g.session_id = p_session_id and g.status = 'active'
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_active(text, text) is 'The active goal of a user''s session, or NULL.';

-------------------------------------------------------------------------------
-- _goal_block: the never-compressed goal section of the system prompt
-- (Each table is filtered by the user argument, not only by the correlation to
-- the goal: Citus routes a query to one shard when every table names the user.)
create or replace function memori._goal_block(p_user_id text, p_session_id text) returns text
as $func$
  select concat_ws(E'\n',
           'ACTIVE GOAL: ' || g.description,
           'Priority: ' || g.priority,
           'Status: ' || g.status,
           (select 'Checkpoints:' || string_agg(E'\n' ||
                     case c.status when 'completed' then '✅ ' || c.description
                                   when 'in-progress' then '🔄 ' || c.description || ' (IN PROGRESS)'
                                   else '⏳ ' || c.description end, '' order by c.position)
              from memori.goal_checkpoints c where c.user_id = p_user_id and c.goal_id = g.id),
           (select 'Decisions:' || string_agg(E'\n' ||
                     case when d.locked then '🔒 ' || d.description || ' (locked)' else '- ' || d.description end,
                     '' order by d.position)
              from memori.goal_decisions d where d.user_id = p_user_id and d.goal_id = g.id),
           (select 'Artifacts:' || string_agg(E'\n- ' || initcap(a.action) || ': ' || a.path, '' order by a.position)
              from memori.goal_artifacts a where a.user_id = p_user_id and a.goal_id = g.id),
           case when cardinality(g.next_steps) > 0
                then 'Next steps:' || (select string_agg(E'\n- ' || s, '' order by o) from unnest(g.next_steps) with ordinality x(s, o))
           end)
    from memori.goals g
   where g.user_id = p_user_id and g.session_id = p_session_id and g.status = 'active'
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_block(text, text) is 'A user''s active goal of a session rendered for the system prompt; NULL without an active goal.';

-------------------------------------------------------------------------------
-- goal_block: the never-compressed goal section of the system prompt
create or replace function memori.goal_block(p_session_id text) returns text
as $func$
declare
  v_user text := memori._acting_user(null);
begin
  return memori._goal_block(v_user, p_session_id);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_block(text) is 'The active goal rendered for the system prompt (checkpoints, decisions, artifacts, next steps); NULL without an active goal.';

-------------------------------------------------------------------------------
-- _goal_tokens_refresh: remember the goal block's size for the budget
create or replace function memori._goal_tokens_refresh(p_user_id text, p_session_id text) returns void
as $func$
declare
  -- estimated first: on Citus the UPDATE runs on the user's shard
  v_tokens integer := memori.token_estimate(memori._goal_block(p_user_id, p_session_id), 'compression');
begin
  update memori.compression_state set goal_tokens = v_tokens where user_id = p_user_id and session_id = p_session_id;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_tokens_refresh(text, text) is 'Store the estimated tokens of the session''s goal block (part of the system prompt budget).';

-------------------------------------------------------------------------------
-- _goal_start: a new active goal (the current active one is paused)
create or replace function memori._goal_start(
  p_state       memori.compression_state,
  p_description text,
  p_priority    text,
  p_now         timestamptz
) returns memori.goals
as $func$
declare
  v_goal memori.goals;
begin
  update memori.goals set status = 'paused'
   where user_id = p_state.user_id and session_id = p_state.session_id and status = 'active';
  insert into memori.goals (session_id, user_id, description, priority, status, created_at)
  values (p_state.session_id, p_state.user_id, p_description, p_priority, 'active', p_now)
  returning * into v_goal;
  return v_goal;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._goal_start(memori.compression_state, text, text, timestamptz) is 'Insert an active goal, pausing the session''s current active goal.';

-------------------------------------------------------------------------------
-- goal_create: set the session's active goal
-- p_session_id: the acting user's conversation (created on first use, as by message_add)
-- p_description: what the goal is: non-empty, at most 2000 characters, no control characters (else PM001)
-- p_priority: 'high', 'medium' (the default) or 'low'; any other value or NULL: PM004
create or replace function memori.goal_create(
  p_session_id  text,
  p_description text,
  p_priority    text default 'medium',
  p_user_id     text default null,
  p_now         timestamptz default now()
) returns memori.goals
as $func$
declare
  v_state memori.compression_state := memori._compression_session(p_session_id, p_user_id, p_now);
  v_goal  memori.goals;
begin
  perform memori._check_identifier('goal description', p_description, 2000);
  if p_priority is null or p_priority not in ('high', 'medium', 'low') then
    raise exception 'unknown goal priority %', coalesce(quote_literal(p_priority), 'NULL')
      using errcode = 'PM004', hint = 'Use one of: high, medium, low.';
  end if;
  v_goal := memori._goal_start(v_state, p_description, p_priority, p_now);
  perform memori._goal_tokens_refresh(v_state.user_id, p_session_id);
  perform memori._event_emit('goal.created', jsonb_build_object('goal_id', v_goal.id, 'session_id', p_session_id), p_now);
  return v_goal;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_create(text, text, text, text, timestamptz) is 'Start a goal (high/medium/low priority) as the session''s active goal; the previous active goal is paused.';

-------------------------------------------------------------------------------
-- goal_list: a session's goals, oldest first
create or replace function memori.goal_list(p_session_id text) returns setof memori.goals
as $func$
declare
  v_user text := memori._acting_user(null);
begin
  return query select * from memori.goals g where g.user_id = v_user and g.session_id = p_session_id
                order by g.created_at, g.id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_list(text) is 'Every goal of a session (active, paused, completed), oldest first.';

-------------------------------------------------------------------------------
-- goal_markers_apply: update the goal structure from model output markers
-- [GOAL] text [- HIGH|MEDIUM|LOW] [- COMPLETED|PAUSED]
-- [CHECKPOINT] text - COMPLETED|IN PROGRESS|PENDING
-- [DECISION] text [- LOCKED]        (a locked decision stays locked)
-- [ARTIFACT] Created|Modified path
-- [NEXT] text                       (the [NEXT] lines of one call replace the next steps)
-- Anything else in brackets at the start of a line, or a known marker that
-- does not parse, is returned in `unknown`: reported, not guessed.
-- p_session_id: the acting user's conversation (created on first use, as by message_add)
-- p_text: model output: its [GOAL], [CHECKPOINT], [DECISION], [ARTIFACT] and [NEXT] lines update the goal, other
--   lines starting with [...] are returned in unknown, the rest is ignored; NULL: no markers
create or replace function memori.goal_markers_apply(
  p_session_id text,
  p_text       text,
  p_user_id    text default null,
  p_now        timestamptz default now()
) returns memori.goal_marker_result
as $func$
declare
  v_state   memori.compression_state := memori._compression_session(p_session_id, p_user_id, p_now);
  v_user    text := v_state.user_id;
  v_goal    memori.goals := memori._goal_active(v_user, p_session_id);
  v_line    record;
  v_m       text[];
  v_status  text;
  v_next    text[] := '{}';
  v_unknown text[] := '{}';
  v_created integer := 0;
  v_cps     integer := 0;
  v_decs    integer := 0;
  v_arts    integer := 0;
  v_pos     integer;
begin
  for v_line in select * from memori._marker_lines(p_text) loop
    if v_line.marker in ('CHECKPOINT', 'DECISION', 'ARTIFACT') then
      -- a part of the active goal: its pattern must match and a goal must be active
      v_m := regexp_match(v_line.body,
                          case v_line.marker
                            when 'CHECKPOINT' then '^(.+?)\s+-\s+(COMPLETED|IN[ -]PROGRESS|PENDING)$'
                            when 'DECISION' then '^(.+?)(\s+-\s+LOCKED)?$'
                            else '^(Created|Modified)\s+(\S.*)$'
                          end, 'i');
      if v_m is null or v_goal.id is null then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
    end if;
    case v_line.marker
    when 'GOAL' then
      v_m := regexp_match(v_line.body, '^(.+?)(?:\s+-\s+(HIGH|MEDIUM|LOW)(?:\s+PRIORITY)?)?(?:\s+-\s+(COMPLETED|PAUSED|ACTIVE))?$', 'i');
      if v_m is null or btrim(v_m[1]) = '' then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      if v_goal.id is null or v_goal.description <> v_m[1] then
        select * into v_goal from memori.goals g
         where g.user_id = v_user and g.session_id = p_session_id and g.description = v_m[1]
         order by g.created_at desc limit 1;
        if found then  -- an earlier goal comes back
          update memori.goals set status = 'paused'
           where user_id = v_user and session_id = p_session_id and status = 'active' and id <> v_goal.id;
          update memori.goals set status = 'active', completed_at = null
           where user_id = v_user and id = v_goal.id returning * into v_goal;
        else
          v_goal := memori._goal_start(v_state, v_m[1], coalesce(lower(v_m[2]), 'medium'), p_now);
          v_created := v_created + 1;
        end if;
      end if;
      if v_m[2] is not null then
        update memori.goals set priority = lower(v_m[2]) where user_id = v_user and id = v_goal.id returning * into v_goal;
      end if;
      if upper(v_m[3]) in ('COMPLETED', 'PAUSED') then
        update memori.goals set status = lower(v_m[3]),
                                completed_at = case when upper(v_m[3]) = 'COMPLETED' then p_now end
         where user_id = v_user and id = v_goal.id;
        v_goal := null;  -- later markers of this text need a new [GOAL]
      end if;
    when 'CHECKPOINT' then
      v_status := case upper(v_m[2]) when 'COMPLETED' then 'completed' when 'PENDING' then 'pending' else 'in-progress' end;
      -- the next position (a variable: Citus refuses subqueries in INSERT ... VALUES)
      select coalesce(max(position), 0) + 1 into v_pos from memori.goal_checkpoints
       where user_id = v_user and goal_id = v_goal.id;
      insert into memori.goal_checkpoints (goal_id, user_id, description, status, position, created_at, updated_at)
      values (v_goal.id, v_user, v_m[1], v_status, v_pos, p_now, p_now)
      on conflict (user_id, goal_id, description) do update set status = excluded.status, updated_at = excluded.updated_at;
      v_cps := v_cps + 1;
    when 'DECISION' then
      select coalesce(max(position), 0) + 1 into v_pos from memori.goal_decisions
       where user_id = v_user and goal_id = v_goal.id;
      insert into memori.goal_decisions (goal_id, user_id, description, locked, position, created_at)
      values (v_goal.id, v_user, v_m[1], v_m[2] is not null, v_pos, p_now)
      on conflict (user_id, goal_id, description) do update set locked = goal_decisions.locked or excluded.locked;
      v_decs := v_decs + 1;
    when 'ARTIFACT' then
      select coalesce(max(position), 0) + 1 into v_pos from memori.goal_artifacts
       where user_id = v_user and goal_id = v_goal.id;
      insert into memori.goal_artifacts (goal_id, user_id, path, action, position, created_at)
      values (v_goal.id, v_user, v_m[2], lower(v_m[1]), v_pos, p_now)
      on conflict (user_id, goal_id, path, action) do nothing;
      v_arts := v_arts + 1;
    when 'NEXT' then
      if btrim(v_line.body) = '' or v_goal.id is null then
        v_unknown := v_unknown || v_line.line;
        continue;
      end if;
      v_next := v_next || v_line.body;
      update memori.goals set next_steps = v_next where user_id = v_user and id = v_goal.id;
    else
      v_unknown := v_unknown || v_line.line;
    end case;
  end loop;
  perform memori._goal_tokens_refresh(v_user, p_session_id);
  return row(v_goal.id, v_created, v_cps, v_decs, v_arts, v_next, v_unknown)::memori.goal_marker_result;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.goal_markers_apply(text, text, text, timestamptz) is 'Parse [GOAL]/[CHECKPOINT]/[DECISION]/[ARTIFACT]/[NEXT] markers from model output and update the goal; unparsed lines are returned in unknown.';
