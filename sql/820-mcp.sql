-- pymemdb SQL API, part 18: the MCP server's bearer tokens (issue 18).
--
-- `pymemdb mcp serve http` refuses every request without a valid bearer
-- token; a token maps to exactly one user, and every tool call then runs with
-- memori.user_id set to that user (row-level security applies). Tokens are
-- issued, listed and revoked by an operator (`pymemdb mcp token ...`, or these
-- functions as memori_admin or the owner). Only the sha256 of a secret is
-- stored; the secret itself is returned once, by mcp_token_create.
--
-- mcp_token_verify is the one function here that looks across users (a
-- request's user is not known until its token is). It runs with the caller's
-- rights (memori_app; not security definer: on a Citus cluster the workers are
-- reached as the calling role, and memori_owner need not log in there), and
-- sees a token row only through the hash of the secret presented: it sets
-- memori.mcp_token_hash (and no acting user) for the lookup, and memori_app's policies on
-- mcp_tokens (sql/900-security.sql) show that row alone, and let it stamp its
-- last use; it never reads the hash column. It returns the token's
-- user, or no row, in which case the refusal is stored as an
-- `mcp.auth_refused` system event (no user; retained like other events). On a
-- cluster the lookup by hash reads every shard (multi-shard by design).

-- The MCP tools themselves add no SQL of their own: they call the documented
-- functions of the other concerns (store_*, context_resolve,
-- session_checkpoint_load_latest, cleanup_preview).

-------------------------------------------------------------------------------
-- configuration
insert into memori.settings (key, value, description) values
  ('mcp.token_default_ttl', '"90 days"', 'Lifetime of an MCP bearer token when mcp_token_create is given none.'),
  ('mcp.token_max_ttl', '"366 days"', 'Longest lifetime mcp_token_create accepts (PM133 beyond it).'),
  ('mcp.token_touch_interval', '"60 seconds"', 'mcp_token_verify updates a token''s last_used_at at most this often.')
on conflict (key) do nothing;

comment on table memori.mcp_tokens is 'MCP bearer tokens: the sha256 of each secret, its user, name, expiry, revocation and last use.';

-------------------------------------------------------------------------------
-- retention: an expired (or revoked, which expires it) token is reclaimed by cleanup
create or replace view memori._retention_mcp_tokens with (security_invoker = true) as
select t.id, t.user_id as owner, 'mcp_token'::text as category,
       case when t.revoked_at is null then 'expired' else 'revoked' end as kind,
       t.expires_at, false as important
  from memori.mcp_tokens t;
comment on view memori._retention_mcp_tokens is 'memori.mcp_tokens as retention candidates: revoked or expired as kind.';

select memori.retention_register('mcp_tokens', 'memori.mcp_tokens', 'memori._retention_mcp_tokens', 'id',
                                 'MCP bearer tokens (issue 18): reclaimed once expired or revoked', 2, null);

-------------------------------------------------------------------------------
-- _mcp_token_hash: what is stored of a secret
create or replace function memori._mcp_token_hash(p_token text) returns bytea
as $func$
  select pg_catalog.sha256(pg_catalog.convert_to(p_token, 'UTF8'))
$func$ language sql immutable strict security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._mcp_token_hash(text) is 'The sha256 of a bearer token''s secret: the only form in which it is stored.';

-------------------------------------------------------------------------------
-- _mcp_token_status: active | expired | revoked
-- (of the columns, not of a memori.mcp_tokens row: on a Citus worker the row is of its shard's type)
create or replace function memori._mcp_token_status(p_revoked_at timestamptz, p_expires_at timestamptz, p_now timestamptz)
returns text
as $func$
  select case when p_revoked_at is not null then 'revoked'
              when p_expires_at <= p_now then 'expired'
              else 'active' end
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._mcp_token_status(timestamptz, timestamptz, timestamptz) is 'A token''s status at p_now: revoked, expired (expires_at <= p_now) or active.';

-------------------------------------------------------------------------------
-- _mcp_interval_setting: an interval from memori.settings
create or replace function memori._mcp_interval_setting(p_key text, p_default interval) returns interval
as $func$
  select coalesce((memori._setting(p_key) #>> '{}')::interval, p_default)
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._mcp_interval_setting(text, interval) is 'An interval-valued mcp.* setting, else the default.';

-------------------------------------------------------------------------------
-- mcp_token_create: issue a token for a user (the secret is returned once)
-- p_name: the token's name: non-empty, at most 100 characters, no control characters (else PM001); the user
--   already has an active token of that name: PM131
-- p_ttl: the token's lifetime, > 0 and at most mcp.token_max_ttl (366 days), else PM133; NULL:
--   mcp.token_default_ttl (90 days)
create or replace function memori.mcp_token_create(
  p_user_id text default null,
  p_name    text default 'default',
  p_ttl     interval default null,
  p_now     timestamptz default now()
) returns memori.mcp_token_secret
as $func$
declare
  v_user   text := memori._acting_user(p_user_id);
  v_ttl    interval := coalesce(p_ttl, memori._mcp_interval_setting('mcp.token_default_ttl', interval '90 days'));
  v_max    interval := memori._mcp_interval_setting('mcp.token_max_ttl', interval '366 days');
  -- two random UUIDs: 244 random bits from the server's strong random source
  v_token  text := 'pmdb_' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '');
  v_row    memori.mcp_tokens;
begin
  perform memori._check_identifier('token name', p_name, 100);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  if v_ttl <= interval '0' or p_now + v_ttl > p_now + v_max then
    raise exception 'token lifetime % is not between 0 and % (mcp.token_max_ttl)', v_ttl, v_max
      using errcode = 'PM133',
            hint = 'Pass a positive lifetime such as ''30 days'', or raise mcp.token_max_ttl in memori.settings.';
  end if;
  if exists (select 1 from memori.mcp_tokens t
              where t.user_id = v_user and t.name = p_name and t.revoked_at is null) then
    raise exception 'user % already has a token named %', quote_literal(v_user), quote_literal(p_name)
      using errcode = 'PM131',
            hint = 'Pick another name, or revoke the old token first (pymemdb mcp token revoke).';
  end if;
  insert into memori.mcp_tokens (user_id, name, token_hash, token_prefix, created_at, expires_at)
  values (v_user, p_name, memori._mcp_token_hash(v_token), left(v_token, 12), p_now, p_now + v_ttl)
  returning * into v_row;
  return (v_row.id, v_row.user_id, v_row.name, v_token, v_row.token_prefix, v_row.created_at,
          v_row.expires_at)::memori.mcp_token_secret;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.mcp_token_create(text, text, interval, timestamptz) is 'Issue an MCP bearer token for a user with a lifetime; returns the secret, which is stored only as a sha256 hash.';

-------------------------------------------------------------------------------
-- mcp_token_list: tokens the caller may see, without their hashes
-- p_user_id: a filter, not the acting user: only this user's tokens; NULL: of every user the caller may see
-- p_include_inactive: true: revoked and expired tokens too; false: active ones only
create or replace function memori.mcp_token_list(
  p_user_id          text default null,
  p_include_inactive boolean default false,
  p_now              timestamptz default now()
) returns setof memori.mcp_token_info
as $func$
  select t.id, t.user_id, t.name, t.token_prefix, memori._mcp_token_status(t.revoked_at, t.expires_at, p_now),
         t.created_at, t.expires_at, t.revoked_at, t.last_used_at, t.created_by
    from memori.mcp_tokens t
   where (p_user_id is null or t.user_id = p_user_id)
     and (p_include_inactive or (t.revoked_at is null and t.expires_at > p_now))
   order by t.user_id, t.created_at desc, t.id desc
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.mcp_token_list(text, boolean, timestamptz) is 'MCP tokens (all users the caller may see, or one), active only unless p_include_inactive; never the secret or its hash.';

-------------------------------------------------------------------------------
-- mcp_token_revoke: revoke active tokens by name or id (returns how many)
-- p_user_id: a filter, not the acting user: only this user's tokens; NULL: of any user the caller may see
-- p_name: the active tokens of this name are revoked; NULL: any name (p_name and p_token_id both NULL: PM001)
-- p_token_id: the token of this id (mcp_token_list); NULL: any id. No active token matches: PM132
create or replace function memori.mcp_token_revoke(
  p_user_id  text default null,
  p_name     text default null,
  p_token_id bigint default null,
  p_now      timestamptz default now()
) returns integer
as $func$
declare
  v_count integer;
begin
  if p_name is null and p_token_id is null then
    perform memori._invalid('name a token to revoke', 'Pass p_name (with p_user_id) or p_token_id.');
  end if;
  -- a revoked token expires now, so cleanup reclaims it like an expired one; the new expiry is
  -- computed before the UPDATE (Citus refuses timestamptz + interval over a column in SET)
  with x as materialized (
    select t.user_id, t.id, least(t.expires_at, greatest(p_now, t.created_at + interval '1 microsecond')) as expiry
      from memori.mcp_tokens t
     where (p_user_id is null or t.user_id = p_user_id)
       and (p_name is null or t.name = p_name)
       and (p_token_id is null or t.id = p_token_id)
       and t.revoked_at is null)
  update memori.mcp_tokens t
     set revoked_at = p_now, expires_at = x.expiry
    from x
   where t.user_id = x.user_id and t.id = x.id
     and (p_user_id is null or t.user_id = p_user_id);
  get diagnostics v_count = row_count;
  if v_count = 0 then
    raise exception 'no active token matches (user %, name %, id %)',
                    coalesce(quote_literal(p_user_id), 'any'), coalesce(quote_literal(p_name), 'any'),
                    coalesce(p_token_id::text, 'any')
      using errcode = 'PM132', hint = 'List the tokens with `pymemdb mcp token list --all` (or memori.mcp_token_list).';
  end if;
  return v_count;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.mcp_token_revoke(text, text, bigint, timestamptz) is 'Revoke the active MCP tokens of a name (of a user) or an id at once; returns how many; PM132 when none matched.';

-------------------------------------------------------------------------------
-- _mcp_presented: the hash of the token being verified and the acting user, for the lookup
-- SET LOCAL memori.mcp_token_hash (the token row of that hash is the only other
-- user's row mcp_token_verify sees, sql/900-security.sql) and memori.user_id
-- (none during the lookup, so that the caller's own tokens are not seen too;
-- restored after it). SET LOCAL, not set_config(): Citus passes it to the
-- shards, where row-level security runs, with the BEGIN of each remote
-- transaction; in a function of its own, as a nested call, because Citus passed
-- a SET LOCAL run by the top-level function's own statements to no remote
-- transaction of an autocommit call (Citus 14.0.1). Citus sends a read-only
-- query outside a transaction block without BEGIN, so on a cluster
-- mcp_token_verify must be called in one (the Python client and the MCP server do).
drop function if exists memori._mcp_presented(bytea);
create or replace function memori._mcp_presented(p_hash bytea, p_acting text) returns void
as $func$
begin
  execute format('set local memori.mcp_token_hash = %L', coalesce(encode(p_hash, 'hex'), ''));
  execute format('set local memori.user_id = %L', coalesce(p_acting, ''));
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._mcp_presented(bytea, text) is 'SET LOCAL memori.mcp_token_hash (the token row mcp_token_verify may see; NULL: none) and memori.user_id (the acting user; NULL: none) for the transaction.';

-------------------------------------------------------------------------------
-- mcp_token_verify: the user of a presented token, or no row (refusal recorded)
-- p_token: the bearer token presented ('pmdb_' and 64 hex digits); missing, malformed, unknown, revoked or
--   expired: no row, and an mcp.auth_refused event
-- p_client: who presented it (e.g. the client's address), kept in a refusal's event (first 200 characters)
create or replace function memori.mcp_token_verify(
  p_token  text,
  p_client text default null,
  p_now    timestamptz default now()
) returns setof memori.mcp_principal
as $func$
declare
  v_hash   bytea;
  v_user   text := current_setting('memori.user_id', true);  -- the caller's, restored after the lookup
  v_row    record;
  v_token  bigint;
  v_reason text;
  v_touch  interval;
  v_id     bigint;
  v_body   jsonb;
begin
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  if p_token is null or p_token = '' then
    v_reason := 'missing';
  elsif p_token !~ '^pmdb_[0-9a-f]{64}$' then
    v_reason := 'malformed';
  else
    v_hash := memori._mcp_token_hash(p_token);
    perform memori._mcp_presented(v_hash, null);
    if row_security_active('memori.mcp_tokens') then
      -- the app role: its policies show the row of the presented hash alone
      select t.id, t.user_id, t.name, t.expires_at, t.revoked_at, t.last_used_at into v_row
        from memori.mcp_tokens t
       order by t.id limit 1;
    else
      -- the owner or a superuser (no row-level security): the hash named
      select t.id, t.user_id, t.name, t.expires_at, t.revoked_at, t.last_used_at into v_row
        from memori.mcp_tokens t
       where t.token_hash = v_hash
       order by t.id limit 1;
    end if;
    if not found then
      v_reason := 'unknown';
    else
      v_token := v_row.id;
      if v_row.revoked_at is not null then
        v_reason := 'revoked';
      elsif v_row.expires_at <= p_now then
        v_reason := 'expired';
      else
        v_touch := memori._mcp_interval_setting('mcp.token_touch_interval', interval '60 seconds');
        if v_row.last_used_at is null or v_row.last_used_at <= p_now - v_touch then
          update memori.mcp_tokens t set last_used_at = p_now
           where t.user_id = v_row.user_id and t.id = v_row.id;
        end if;
      end if;
    end if;
  end if;

  if v_reason is not null then
    -- a system event (the system user ''): an unauthenticated request acts for nobody; it is
    -- read back (RETURNING) while memori.mcp_token_hash is set (the app role's policy)
    v_body := jsonb_strip_nulls(jsonb_build_object(
      'reason', v_reason, 'token_id', v_token,
      'token_prefix', case when p_token ~ '^pmdb_' then left(p_token, 12) end,
      'client', left(p_client, 200)));
    perform memori._mcp_presented(coalesce(v_hash, '\x00'::bytea), null);
    insert into memori.events (event_type, occurred_at, payload, expires_at, user_id)
    values ('mcp.auth_refused', p_now, v_body, p_now + memori._event_retention('mcp.auth_refused'), '')
    returning id into v_id;
    perform memori._mcp_presented(null, v_user);
    perform memori._event_notify(v_id, 'mcp.auth_refused', p_now, v_body, '');
    return;
  end if;
  perform memori._mcp_presented(null, v_user);
  return query select v_row.id::bigint, v_row.user_id::text, v_row.name::text, v_row.expires_at::timestamptz;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.mcp_token_verify(text, text, timestamptz) is 'The user an MCP bearer token acts for (one row), or no row when it is missing, malformed, unknown, revoked or expired; refusals are stored as mcp.auth_refused events. Runs as the caller (memori_app), which sees a token only through the hash of its secret.';
