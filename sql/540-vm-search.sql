-- pymemdb SQL API, part 14: AI virtual memory search and page index (seed 03, phases 6 and 13; issue 7).
--
-- search_pages is hybrid: full-text rank over hint and content (the generated
-- memori.pages.search_tsv) and, when the caller passes a query embedding,
-- cosine distance over memori.pages.embedding, fused by reciprocal rank
-- (k = 60). It returns metadata (page id, tier, levels, hint), never content:
-- the model pages content in with page_fault.
--
-- pgvector lives in schema public (migration 0001 creates it there); the
-- pinned search_path does not include public, so its type and operator are
-- qualified: public.vector, operator(public.<=>).

-------------------------------------------------------------------------------
-- configuration
insert into memori.settings (key, value, description) values
  ('vm.search_exact_max', '5000', 'User-scoped search ranks vectors exactly up to this many matching pages, above it through the HNSW index with iterative scans.'),
  ('vm.search_candidates', '50', 'Each ranking (full text, vectors) contributes at least this many candidates to the fusion (at most 200, at least p_limit).'),
  ('vm.search_ef_search', '200', 'hnsw.ef_search (1..1000) of the HNSW ranking of a user-scoped search: the larger, the better its recall and the slower it is; set for that statement only.')
on conflict (key) do nothing;

-------------------------------------------------------------------------------
-- _page_levels: the levels page_fault can map a page at (0 and the written compressed ones)
create or replace function memori._page_levels(p_user_id text, p_session_id text, p_page_id text) returns integer[]
as $func$
  select array[0] || coalesce((select array_agg(r.level order by r.level)
                                 from memori.page_representations r
                                where r.user_id = p_user_id and r.session_id = p_session_id and r.page_id = p_page_id
                                  and r.level < 3),
                              '{}')
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._page_levels(text, text, text) is 'Levels a page can be faulted in at: 0 plus the levels 1 and 2 written by a Compressor, ascending.';

-------------------------------------------------------------------------------
-- _vm_search_scope: the acting user and the checked session of a page-index read
create or replace function memori._vm_search_scope(p_session_id text, p_scope text, p_user_id text)
returns text
as $func$
declare
  v_s    memori.vm_sessions;
  v_user text;
begin
  if p_scope is null or p_scope not in ('session', 'user') then
    perform memori._invalid(format('unknown scope %s', coalesce(quote_literal(p_scope), 'NULL')),
                            'Use p_scope => ''session'' (this session''s pages) or ''user'' (all the user''s sessions).');
  end if;
  if p_scope = 'session' or p_session_id is not null then
    v_s := memori._vm_session_read(p_session_id);
  end if;
  -- the one acting-user rule for a given user (PM040); else memori.user_id, else the session's owner
  v_user := coalesce(case when p_user_id is not null then memori._acting_user(p_user_id) end,
                     nullif(current_setting('memori.user_id', true), ''), v_s.user_id);
  if v_user is null then
    perform memori._invalid('no user id: pass p_user_id, p_session_id or set memori.user_id',
                            'Call with p_user_id => ''alice'', or SET memori.user_id = ''alice''.');
  end if;
  if v_s.session_id is not null and v_s.user_id <> v_user then
    raise exception 'session % belongs to another user', quote_literal(p_session_id)
      using errcode = 'PM041', hint = 'Use a session id of your own; session ids are unique across users.';
  end if;
  return v_user;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_search_scope(text, text, text) is 'Check scope and session of a search and return the acting user (argument, memori.user_id, else the session''s owner); PM001, PM005, PM041.';

-------------------------------------------------------------------------------
-- page_search_vector: the full-text vector search_pages matches for a page
-- Stored in memori.pages.search_tsv by the functions that write a page's hint
-- or content (page_create, page_update; a fork's copy carries it). It was a
-- generated column until migration 0030: PostgreSQL recomputes a stored
-- generated column on every UPDATE of the row, so every tier move, access
-- count and level change of a page parsed its content again (~90 µs a row,
-- a third of a faulting agent's server time; issue 21).
-- p_hint: the page's hint (weight A); NULL counts as empty
-- p_content: the page's content (weight B): its first 100,000 characters (a tsvector holds at most 1 MB);
--   NULL counts as empty
create or replace function memori.page_search_vector(p_hint text, p_content text) returns tsvector
as $func$
  select setweight(to_tsvector('english'::regconfig, coalesce(p_hint, '')), 'A') ||
         setweight(to_tsvector('english'::regconfig, left(coalesce(p_content, ''), 100000)), 'B')
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_search_vector(text, text) is 'The full-text vector of a page (hint weight A, the first 100,000 characters of content weight B, english), as memori.pages.search_tsv stores it; a row inserted into memori.pages directly must set search_tsv to it to be found by text.';

-------------------------------------------------------------------------------
-- _vm_check_filters: modality, page types and limit of the page-index reads
create or replace function memori._vm_check_filters(p_modality text, p_page_types text[], p_limit integer)
returns void
as $func$
begin
  perform memori._vm_check_choice('modality', p_modality, 'or NULL for all');
  if p_page_types is not null and exists (
       select 1 from unnest(p_page_types) t where t is null or t <> all (memori._vm_choices('page type'))) then
    raise exception 'unknown page type in %', p_page_types::text
      using errcode = 'PM004', hint = format('Use one of: %s.', array_to_string(memori._vm_choices('page type'), ', '));
  end if;
  if p_limit is null or p_limit < 1 or p_limit > 100 then
    perform memori._invalid(format('limit %s is outside 1..100', coalesce(p_limit::text, 'NULL')),
                            'Ask for 1 to 100 pages; page through more with a narrower query.');
  end if;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_check_filters(text, text[], integer) is 'Validate modality and page types (PM004) and limit 1..100 (PM001) of a page search.';

-------------------------------------------------------------------------------
-- _vm_check_embedding: a query or page embedding has the installed dimension
create or replace function memori._vm_check_embedding(p_embedding public.vector) returns void
as $func$
declare
  v_dim integer := memori.vm_embedding_dim();
begin
  if p_embedding is not null and public.vector_dims(p_embedding) <> v_dim then
    perform memori._invalid(format('embedding has %s dimensions, pages have %s', public.vector_dims(p_embedding), v_dim),
                            format('Embed with a %s-dimensional model (memori.vm_embedding_dim(); chosen with pymemdb init --embedding-dim).', v_dim));
  end if;
  if p_embedding is not null and public.vector_norm(p_embedding) = 0 then
    -- the cosine distance to a zero vector is NaN: it would rank arbitrarily
    perform memori._invalid('embedding is the zero vector', 'Pass NULL instead (full-text search only).');
  end if;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_check_embedding(public.vector) is 'Raise PM001 when an embedding''s dimension is not vm.embedding_dim or it is the zero vector.';

-------------------------------------------------------------------------------
-- vm_embedding_dim: the dimension of page embeddings (the column's declared type is the truth)
create or replace function memori.vm_embedding_dim() returns integer
as $func$
  select nullif(a.atttypmod, -1)
    from pg_catalog.pg_attribute a
   where a.attrelid = 'memori.pages'::regclass and a.attname = 'embedding' and not a.attisdropped
$func$ language sql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_embedding_dim() is 'Dimension of memori.pages.embedding as declared (pgvector''s typmod); vm.embedding_dim in memori.settings mirrors it.';

-------------------------------------------------------------------------------
-- _views_drop_saved / _views_restore: retype a column that views read
-- PostgreSQL refuses ALTER COLUMN TYPE while a view reads the column
-- (memori.vm_visible_pages selects p.*), so the views that depend on it, and
-- the views on those, are dropped with their definition, options, comment and
-- grants saved, and re-created afterwards, in the same transaction.
create or replace function memori._views_drop_saved(p_table regclass, p_column name) returns jsonb
as $func$
declare
  v_saved jsonb;
  v_view  jsonb;
begin
  with recursive dep(oid, lvl) as (
    select r.ev_class, 1
      from pg_catalog.pg_depend d
      join pg_catalog.pg_rewrite r on r.oid = d.objid
      join pg_catalog.pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
     where d.classid = 'pg_catalog.pg_rewrite'::regclass and d.refobjid = p_table and a.attname = p_column
       and r.ev_class <> p_table
    union
    select r.ev_class, dep.lvl + 1
      from dep
      join pg_catalog.pg_depend d on d.refobjid = dep.oid and d.classid = 'pg_catalog.pg_rewrite'::regclass
      join pg_catalog.pg_rewrite r on r.oid = d.objid
     where r.ev_class <> dep.oid and dep.lvl < 20),
  views as (select oid, max(lvl) as lvl from dep group by oid)
  select coalesce(jsonb_agg(jsonb_build_object(
           'name', format('%I.%I', n.nspname, c.relname), 'kind', c.relkind, 'lvl', v.lvl,
           'definition', pg_catalog.pg_get_viewdef(c.oid),
           'options', coalesce(array_to_string(c.reloptions, ', '), ''),
           'comment', pg_catalog.obj_description(c.oid, 'pg_class'),
           'grants', coalesce((select jsonb_agg(jsonb_build_object(
                                  'privilege', g.privilege_type,
                                  'grantee', case when g.grantee = 0 then 'public'
                                                  else quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) end))
                                 from pg_catalog.aclexplode(c.relacl) g
                                where g.grantee <> c.relowner), '[]'::jsonb))
         order by v.lvl desc), '[]'::jsonb)
    into v_saved
    from views v
    join pg_catalog.pg_class c on c.oid = v.oid
    join pg_catalog.pg_namespace n on n.oid = c.relnamespace;
  -- definitions are rendered and re-created under the same pinned search_path
  for v_view in select * from jsonb_array_elements(v_saved) loop
    if v_view ->> 'kind' <> 'v' then
      raise exception '% reads %.% and is not a plain view', v_view ->> 'name', p_table, p_column
        using errcode = 'PM001', hint = 'Drop it, retype the column, then create it again.';
    end if;
    execute format('drop view %s', v_view ->> 'name');  -- deepest first
  end loop;
  return v_saved;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._views_drop_saved(regclass, name) is 'Drop the views that read a column (and the views on them), returning what _views_restore needs to re-create them: definition, options, comment, grants.';

create or replace function memori._views_restore(p_saved jsonb) returns void
as $func$
declare
  v_view  jsonb;
  v_grant jsonb;
begin
  for v_view in select e from jsonb_array_elements(p_saved) e order by (e ->> 'lvl')::integer loop
    execute format('create view %s%s as %s', v_view ->> 'name',
                   case when v_view ->> 'options' <> '' then format(' with (%s)', v_view ->> 'options') else '' end,
                   v_view ->> 'definition');
    if v_view ->> 'comment' is not null then
      execute format('comment on view %s is %L', v_view ->> 'name', v_view ->> 'comment');
    end if;
    for v_grant in select * from jsonb_array_elements(v_view -> 'grants') loop
      execute format('grant %s on %s to %s', v_grant ->> 'privilege', v_view ->> 'name', v_grant ->> 'grantee');
    end loop;
  end loop;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._views_restore(jsonb) is 'Re-create the views _views_drop_saved dropped, shallowest first, with their options, comments and grants.';

-------------------------------------------------------------------------------
-- vm_embedding_dim_set: choose the dimension (pymemdb init --embedding-dim N)
-- Changing it retypes the column and rebuilds the HNSW index, so it is refused
-- while any page has an embedding: vectors of two models cannot be compared.
-- p_dim: the new dimension, 1 to 2000 (else PM001); a change while any page has an embedding is PM099
create or replace function memori.vm_embedding_dim_set(p_dim integer) returns integer
as $func$
declare
  v_before integer := memori.vm_embedding_dim();
  v_views  jsonb;
begin
  if p_dim is null or p_dim < 1 or p_dim > 2000 then
    perform memori._invalid(format('embedding dimension %s is out of range', coalesce(p_dim::text, 'NULL')),
                            'Choose 1 to 2000 dimensions (the most an HNSW index on pgvector''s vector type takes); 384 is the default.');
  end if;
  if p_dim is distinct from v_before then
    -- the lock first, so no page gets an embedding between the check and the retype
    lock table memori.pages in share row exclusive mode;
    if exists (select 1 from memori.pages where embedding is not null) then
      raise exception 'pages already have % -dimensional embeddings', v_before
        using errcode = 'PM099',
              detail = format('%s pages have an embedding.', (select count(*) from memori.pages where embedding is not null)),
              hint = format('Keep %s, or clear them first (UPDATE memori.pages SET embedding = NULL) and re-embed every page with the new model after the change.', v_before);
    end if;
    v_views := memori._views_drop_saved('memori.pages'::regclass, 'embedding');
    drop index if exists memori.idx_pages_embedding_hnsw;
    execute format('alter table memori.pages alter column embedding type public.vector(%s)', p_dim);
    create index idx_pages_embedding_hnsw on memori.pages using hnsw (embedding public.vector_cosine_ops);
    perform memori._views_restore(v_views);
  end if;
  insert into memori.settings (key, value, description)
  values ('vm.embedding_dim', to_jsonb(p_dim), 'Dimension of memori.pages.embedding, chosen at install (pymemdb init --embedding-dim N, memori.vm_embedding_dim_set).')
  on conflict (key) do update set value = excluded.value, description = excluded.description;
  return v_before;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_embedding_dim_set(integer) is 'Set the page embedding dimension (1..2000): retypes memori.pages.embedding and rebuilds its HNSW index; PM099 while pages have embeddings. Returns the previous dimension. Owner only.';

-------------------------------------------------------------------------------
-- page_embedding_set: store the embedding of a page (written by the client's Embedder)
-- p_page_id: the page (PM005 when missing or expired); a fork's shared page is copied into the session first
-- p_embedding: a vector of the installed dimension (memori.vm_embedding_dim(); else PM001, as is the zero
--   vector); NULL clears the page's embedding
create or replace function memori.page_embedding_set(
  p_session_id text, p_page_id text, p_embedding public.vector, p_now timestamptz default now()
) returns boolean
as $func$
declare
  v_p memori.pages;
begin
  perform memori._vm_check_embedding(p_embedding);
  v_p := memori._page_get(p_session_id, p_page_id, p_now, true);
  perform memori._page_write(v_p.user_id, v_p.session_id, array[v_p.page_id]);
  -- not a content change: version, dirty and updated_at stay
  update memori.pages set embedding = p_embedding where user_id = v_p.user_id and id = v_p.id;
  return true;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_embedding_set(text, text, public.vector, timestamptz) is 'Store (or clear with NULL) the embedding of a page for hybrid search; PM001 on a wrong dimension, PM005 when the page is missing.';

-------------------------------------------------------------------------------
-- _vm_hnsw_set: pgvector's hnsw.ef_search and hnsw.iterative_scan from here to the end of the transaction
-- SET LOCAL statements, not set_config() or a SET clause: Citus sends those (and only those, with
-- citus.propagate_set_commands = local, docs/scale-out.md) to the workers of the transaction, where
-- the shard query of a coordinator-run search runs. SET is refused in a stable function
-- (search_pages), hence this volatile one. Returns the values it replaced, to be set back with it.
create or replace function memori._vm_hnsw_set(p_ef_search text, p_iterative_scan text) returns text[]
as $func$
declare
  v_was text[] := array[coalesce(current_setting('hnsw.ef_search', true), '40'),
                        coalesce(current_setting('hnsw.iterative_scan', true), 'off')];
begin
  if p_ef_search is distinct from v_was[1] then
    execute format('set local hnsw.ef_search = %L', p_ef_search);
  end if;
  if p_iterative_scan is distinct from v_was[2] then
    execute format('set local hnsw.iterative_scan = %L', p_iterative_scan);
  end if;
  return v_was;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_hnsw_set(text, text) is 'SET LOCAL hnsw.ef_search and hnsw.iterative_scan (on Citus also on the transaction''s workers) unless already so; returns the previous values, to set them back.';

-------------------------------------------------------------------------------
-- search_pages: hybrid full-text + vector search, fused by reciprocal rank
-- (issue 21 added p_exact_total: the old signature goes)
-- p_session_id: the VM session searched (PM005 when missing, PM041 when another user's); in scope 'user'
--   it may be NULL (all the user's sessions; a given one must still exist)
-- p_query: the query text (web-search syntax, English stemming), at most 10000 characters (PM001); NULL or
--   blank searches by p_query_embedding only (PM001 when that is NULL too)
-- p_query_embedding: the query's vector, of the installed dimension (else PM001, as is the zero vector); NULL:
--   full-text search only; given: hybrid (both rankings fused)
-- p_modality: only pages of this modality: 'text', 'image', 'audio', 'video' or 'structured' (else PM004);
--   NULL: all
-- p_page_types: only pages of these types, each 'transcript', 'summary', 'artifact', 'claim', 'procedure' or
--   'index' (else PM004); NULL: all
-- p_limit: most rows returned, 1 to 100 (else PM001)
-- p_scope: 'session' (the session's pages, a fork's shared pages included) or 'user' (all the user's
--   sessions); else PM001
-- p_user_id: the user searched: when given it must be memori.user_id (PM040); NULL: memori.user_id, else the
--   session's owner (PM001 when there is neither)
-- p_exact_total: true counts every match in total_available; false or NULL: in scope 'user' the count stops at
--   vm.search_exact_max + 1 (total_exact is then false); scope 'session' always counts exactly
drop function if exists memori.search_pages(text, text, public.vector, text, text[], integer, text, text, timestamptz);
create or replace function memori.search_pages(
  p_session_id      text,
  p_query           text,
  p_query_embedding public.vector default null,
  p_modality        text default null,
  p_page_types      text[] default null,
  p_limit           integer default 5,
  p_scope           text default 'session',
  p_user_id         text default null,
  p_now             timestamptz default now(),
  p_exact_total     boolean default false
) returns setof memori.page_search_result
as $func$
declare
  v_user   text;
  v_tsq    tsquery;
  v_k      integer;
  v_mode   text := case when p_query_embedding is null then 'full_text' else 'hybrid' end;
  v_lists  integer;
  v_ft     bigint[] := '{}';
  v_vec    bigint[] := '{}';
  v_total  bigint;
  v_exact  integer;
  v_total_exact boolean := true;
  v_top    integer[];  -- positions in the candidate arrays (v_c_*), best first
  v_score  numeric[];
  v_c_id   bigint[];
  v_c_page text[];
  v_c_session text[];
  v_c_modality text[];
  v_c_tier text[];
  v_c_hint text[];
  v_c_superseded boolean[];
  v_r_session text[];
  v_r_page text[];
  v_r_level integer[];
  v_r_reference text[];
  v_t_session text[];  -- the keys of the pages returned
  v_t_page text[];
  v_citus  boolean := current_setting('citus.version', true) is not null;
  v_hnsw_was text[];  -- the caller's hnsw.ef_search and hnsw.iterative_scan
  v_plans_was text;  -- the caller's plan_cache_mode, while a filtered search plans per call
begin
  perform memori._vm_check_filters(p_modality, p_page_types, p_limit);
  perform memori._vm_check_embedding(p_query_embedding);
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  if nullif(btrim(coalesce(p_query, '')), '') is null and p_query_embedding is null then
    perform memori._invalid('empty query', 'Pass query text, a query embedding, or both.');
  end if;
  if length(p_query) > 10000 then
    perform memori._invalid('query longer than 10,000 characters', 'Search with the key words of the question.');
  end if;
  v_k := least(200, greatest(p_limit, coalesce((select (value #>> '{}')::integer from memori.settings
                                                 where key = 'vm.search_candidates'), 50)));
  v_exact := coalesce((select (value #>> '{}')::integer from memori.settings where key = 'vm.search_exact_max'), 5000);
  v_tsq := websearch_to_tsquery('english'::regconfig, coalesce(p_query, ''));
  if v_citus then
    -- On Citus the statements on the user's tables are planned at every call (until the function
    -- returns: its SET clauses restore the setting). On a worker (a delegated call) a kept plan of a
    -- statement on one table re-planned its shard query at every call anyway and added that plan to
    -- the kept one, 66 kB of the connection's memory a call before the statements below, 431 kB with
    -- them, never freed (Citus 14.0.1's local plan cache, fixed by citusdata/citus#8824). Statements
    -- that read no distributed table keep their plans (the fusion: 0.7 ms to plan). One server keeps plans.
    perform set_config('plan_cache_mode', 'force_custom_plan', true);
  end if;
  v_user := memori._vm_search_scope(p_session_id, p_scope, p_user_id);

  if p_scope = 'session' then
    -- A session is small (thousands of pages): one pass over its rows yields
    -- the count and both rankings, exactly. Its rows are spread over the heap
    -- (sessions interleave as they write), so a second pass would read every
    -- block again.
    -- A session that is no fork sees its own rows only (vm_visible_pages' first
    -- branch), read by a statement on one table: Citus plans it in its fast
    -- path, where a statement on the view (three branches, anti joins) costs
    -- a full plan at every call, twice on a worker (docs/scale-out.md, "Virtual memory").
    perform from memori.vm_forks f where f.user_id = v_user and f.session_id = p_session_id limit 1;
    if not found then
      select count(*) filter (where (numnode(v_tsq) > 0 and p.search_tsv @@ v_tsq)
                                 or (p_query_embedding is not null and p.embedding is not null)),
             coalesce((array_agg(p.id order by ts_rank_cd(p.search_tsv, v_tsq) desc, p.id desc)
                         filter (where numnode(v_tsq) > 0 and p.search_tsv @@ v_tsq))[1:v_k], '{}'),
             coalesce((array_agg(p.id order by p.embedding operator(public.<=>) p_query_embedding, p.id)
                         filter (where p_query_embedding is not null and p.embedding is not null))[1:v_k], '{}')
        into v_total, v_ft, v_vec
        from memori.pages p
       where p.user_id = v_user and p.session_id = p_session_id
         and (p.expires_at is null or p.expires_at > p_now)
         and (p_modality is null or p.modality = p_modality)
         and (p_page_types is null or p.page_type = any (p_page_types));
    else
      with c as materialized (
        select p.id,
               case when numnode(v_tsq) > 0 and p.search_tsv @@ v_tsq then ts_rank_cd(p.search_tsv, v_tsq) end as r,
               case when p_query_embedding is not null
                    then p.embedding operator(public.<=>) p_query_embedding end as d
          from memori.vm_visible_pages p   -- a fork sees its source's pages (sql/160)
         where p.user_id = v_user and p.viewer_session_id = p_session_id
           and (p.expires_at is null or p.expires_at > p_now)
           and (p_modality is null or p.modality = p_modality)
           and (p_page_types is null or p.page_type = any (p_page_types)))
      select (select count(*) from c where c.r is not null or c.d is not null),
             coalesce((select array_agg(id order by r desc, id desc)
                         from (select id, r from c where r is not null order by r desc, id desc limit v_k) ft), '{}'),
             coalesce((select array_agg(id order by d, id)
                         from (select id, d from c where d is not null order by d, id limit v_k) vr), '{}')
        into v_total, v_ft, v_vec;
    end if;
  else
    -- A filter (p_modality, p_page_types) is served by idx_pages_user_filters only in a plan
    -- made for its values: PL/pgSQL keeps a generic plan after five calls when it looks no
    -- dearer, and the count's generic plan reads every page of the user (68 ms among 100k
    -- pages for 1,000 images, against 0.5 ms through the index). A filtered search plans its
    -- statements per call (~0.2 ms each) and sets the caller's plan_cache_mode back after them.
    if p_modality is not null or p_page_types is not null then
      v_plans_was := current_setting('plan_cache_mode');
      perform set_config('plan_cache_mode', 'force_custom_plan', true);
    end if;
    -- ranking 1: full text (weights: hint A, content B), best v_k, through the GIN index
    if numnode(v_tsq) > 0 then
      select coalesce(array_agg(id order by r desc, id desc), '{}') into v_ft
        from (select p.id, ts_rank_cd(p.search_tsv, v_tsq) as r
                from memori.pages p
               where p.search_tsv @@ v_tsq
                 and p.user_id = v_user
                 and (p.expires_at is null or p.expires_at > p_now)
                 and (p_modality is null or p.modality = p_modality)
                 and (p_page_types is null or p.page_type = any (p_page_types))
               order by r desc, p.id desc
               limit v_k) ft;
    end if;

    -- how many pages match in all (full-text matches and, in hybrid mode, every
    -- embedded page); also the size the choice of vector ranking below goes by.
    -- Counting all of a user's pages is linear in them (87 % of a search at
    -- 100k pages): unless p_exact_total, the count stops after
    -- vm.search_exact_max + 1, which is all the choice needs, and
    -- total_exact says the total is a lower bound.
    select count(*) into v_total
      from (select
              from memori.pages p
             where p.user_id = v_user
               and (p.expires_at is null or p.expires_at > p_now)
               and (p_modality is null or p.modality = p_modality)
               and (p_page_types is null or p.page_type = any (p_page_types))
               and ((numnode(v_tsq) > 0 and p.search_tsv @@ v_tsq)
                    or (p_query_embedding is not null and p.embedding is not null))
             limit case when not coalesce(p_exact_total, false) then v_exact + 1 end) b;  -- NULL: no limit
    v_total_exact := coalesce(p_exact_total, false) or v_total <= v_exact;

    -- ranking 2: cosine distance, best v_k. Up to vm.search_exact_max matches
    -- exactly; above, through the HNSW index with iterative scans (relaxed
    -- order, re-sorted here), which keep scanning until the filters have let
    -- v_k rows through.
    -- The scan's candidate list is vm.search_ef_search long: pgvector's default (40) found
    -- 0.63-0.78 of the exact top 10 among overlapping topics, 200 finds 0.95-0.97 (bench
    -- search, docs/benchmarks.md). _vm_hnsw_set sets both for the
    -- ranking, here and on a Citus worker that runs it, and the caller's values right after.
    if p_query_embedding is not null then
      if v_total > v_exact then
        v_hnsw_was := memori._vm_hnsw_set(
          least(1000, greatest(1, coalesce((select (value #>> '{}')::integer from memori.settings
                                             where key = 'vm.search_ef_search'), 40)))::text,
          'relaxed_order');
        select coalesce(array_agg(id order by d, id), '{}') into v_vec
          from (select p.id, p.embedding operator(public.<=>) p_query_embedding as d
                  from memori.pages p
                 where p.user_id = v_user and p.embedding is not null
                   and (p.expires_at is null or p.expires_at > p_now)
                   and (p_modality is null or p.modality = p_modality)
                   and (p_page_types is null or p.page_type = any (p_page_types))
                 order by p.embedding operator(public.<=>) p_query_embedding
                 limit v_k) a;
        perform memori._vm_hnsw_set(v_hnsw_was[1], v_hnsw_was[2]);
      end if;
      -- exact ranking: small scopes, and the fallback when the index scan came back
      -- short (hnsw.max_scan_tuples reached, or fewer embedded pages than v_k)
      if cardinality(v_vec) < v_k then
        with c as materialized (
          select p.id, p.embedding operator(public.<=>) p_query_embedding as d
            from memori.pages p
           where p.embedding is not null
             and p.user_id = v_user
             and (p.expires_at is null or p.expires_at > p_now)
             and (p_modality is null or p.modality = p_modality)
             and (p_page_types is null or p.page_type = any (p_page_types)))
        select coalesce(array_agg(id order by d, id), '{}') into v_vec
          from (select id, d from c order by d, id limit v_k) e;
      end if;
    end if;
    if v_plans_was is not null then
      perform set_config('plan_cache_mode', v_plans_was, true);
    end if;
  end if;

  v_lists := (case when numnode(v_tsq) > 0 then 1 else 0 end) + (case when p_query_embedding is null then 0 else 1 end);
  if cardinality(v_ft) + cardinality(v_vec) = 0 then
    return;
  end if;
  -- The candidates' rows, then their representations: a statement on one table
  -- each, which Citus plans in its fast path (a join of the two, or of a table
  -- and the lists, is a full plan at every call, twice on a worker:
  -- docs/scale-out.md, "Virtual memory"). Fusion and result come from the arrays.
  select array_agg(p.id), array_agg(p.page_id), array_agg(p.session_id), array_agg(p.modality), array_agg(p.tier),
         array_agg(p.hint), array_agg(p.superseded_by is not null)
    into v_c_id, v_c_page, v_c_session, v_c_modality, v_c_tier, v_c_hint, v_c_superseded
    from memori.pages p
   where p.user_id = v_user and p.id = any (v_ft || v_vec);
  -- fused by reciprocal rank (k = 60): each list adds 1 / (60 + the page's rank in it).
  -- A superseded claim is history: current pages first (issue 15); among equal
  -- scores the newer page first (last write wins, seed 03 8.3). The best p_limit,
  -- as positions in the candidate arrays, with their scores and keys.
  if v_citus then
    perform set_config('plan_cache_mode', 'auto', true);
  end if;
  select coalesce(array_agg(f.i order by f.rn), '{}'), array_agg(f.score order by f.rn),
         array_agg(v_c_session[f.i] order by f.rn), array_agg(v_c_page[f.i] order by f.rn)
    into v_top, v_score, v_t_session, v_t_page
    from (select c.i, sum(1.0 / (60 + r.rnk)) as score,
                 row_number() over (order by c.superseded, sum(1.0 / (60 + r.rnk)) desc, min(r.rnk), c.id desc) as rn
            from unnest(v_c_id, v_c_superseded) with ordinality as c(id, superseded, i)
            join (select x.id, x.rnk from unnest(v_ft) with ordinality as x(id, rnk)
                  union all
                  select y.id, y.rnk from unnest(v_vec) with ordinality as y(id, rnk)) r on r.id = c.id
           group by c.i, c.id, c.superseded) f
   where f.rn <= p_limit;
  -- levels as _page_levels gives them, and the hint (else the level-3 reference), written out: a
  -- function with SET cannot be inlined, and two calls per row were half of a
  -- user-scope search once the count was bounded (issue 21)
  if v_citus then
    perform set_config('plan_cache_mode', 'force_custom_plan', true);
  end if;
  select array_agg(x.session_id), array_agg(x.page_id), array_agg(x.level),
         array_agg(case when x.level = 3 then x.content end)
    into v_r_session, v_r_page, v_r_level, v_r_reference
    from memori.page_representations x
   where x.user_id = v_user and x.session_id = any (v_t_session) and x.page_id = any (v_t_page) and x.level <= 3;
  return query
    -- a fork's shared page is reported in the fork (page_fault takes it there)
    select v_c_page[t.i], case when p_scope = 'session' then p_session_id else v_c_session[t.i] end,
           v_c_modality[t.i], v_c_tier[t.i],
           array[0] || coalesce(r.levels, '{}'),
           coalesce(v_c_hint[t.i], r.reference, ''),
           round((v_score[t.o] / (greatest(v_lists, 1) / 61.0))::numeric, 4)::double precision,
           v_total, v_mode, v_total_exact
      from unnest(v_top) with ordinality as t(i, o)
     cross join lateral (
       select array_agg(y.level order by y.level) filter (where y.level < 3) as levels,
              min(y.reference) filter (where y.level = 3) as reference
         from unnest(v_r_session, v_r_page, v_r_level, v_r_reference) as y(session_id, page_id, level, reference)
        where y.session_id = v_c_session[t.i] and y.page_id = v_c_page[t.i]) r
     order by t.o;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp
-- the SET clause restores the caller's plan_cache_mode when the call ends, whatever the body set
-- with set_config() (on Citus, per statement): without it a call run on the coordinator left
-- force_custom_plan in the caller's transaction. (A delegated call's clause is force_custom_plan:
-- memori._delegated_plans_per_call.)
set plan_cache_mode = auto;
comment on function memori.search_pages(text, text, public.vector, text, text[], integer, text, text, timestamptz, boolean) is 'Hybrid page search (full-text rank + cosine distance, reciprocal-rank fusion k=60) in a session or all the user''s sessions: metadata, never content; superseded claims after current pages, the newer page first on a tie; never fewer than p_limit rows when that many match. total_available is exact in session scope and with p_exact_total; otherwise, in user scope, it stops at vm.search_exact_max + 1 (total_exact false: a lower bound).';

-------------------------------------------------------------------------------
-- pages_by_type: a session's pages of one type (seed 03 phase 13 query_by_type)
-- p_session_id: the VM session (PM005 when missing)
-- p_page_type: 'transcript', 'summary', 'artifact', 'claim', 'procedure' or 'index' (else PM004)
-- p_limit: most rows returned, 1 to 10000 (else PM001)
create or replace function memori.pages_by_type(
  p_session_id text, p_page_type text, p_limit integer default 100, p_now timestamptz default now()
) returns setof memori.page_index_entry
as $func$
declare
  v_user text := (memori._vm_session_read(p_session_id)).user_id;
begin
  perform memori._vm_check_filters(null, array[p_page_type], 1);
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    perform memori._invalid(format('limit %s is outside 1..10000', coalesce(p_limit::text, 'NULL')),
                            'Ask for 1 to 10,000 pages.');
  end if;
  return query
    select p.viewer_session_id, p.page_id, p.page_type, p.modality, p.tier, p.importance, p.tokens, p.access_count,
           p.last_accessed, coalesce(p.hint, ref.content, ''), p.provenance, null::integer
      from memori.vm_visible_pages p
      left join memori.page_representations ref  -- the hint, else the level-3 reference
        on ref.user_id = v_user and ref.session_id = p.session_id and ref.page_id = p.page_id and ref.level = 3
     where p.user_id = v_user and p.viewer_session_id = p_session_id and p.page_type = p_page_type
       and (p.expires_at is null or p.expires_at > p_now)
     order by p.id
     limit p_limit;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.pages_by_type(text, text, integer, timestamptz) is 'A session''s unexpired pages of one type in creation order (metadata only); PM004 on an unknown type.';

-------------------------------------------------------------------------------
-- page_provenance_chain: the pages a page derives from ('up') or that derive from it ('down')
-- p_session_id: the VM session (PM005 when missing)
-- p_page_id: the page the walk starts from, not itself listed (PM005 when missing or expired)
-- p_direction: 'up' (the pages it derives from) or 'down' (the pages derived from it); else PM001
-- p_max_depth: most steps walked, 1 to 1000 (else PM001)
create or replace function memori.page_provenance_chain(
  p_session_id text, p_page_id text, p_direction text default 'up', p_max_depth integer default 100,
  p_now timestamptz default now()
) returns setof memori.page_index_entry
as $func$
declare
  v_user text;
begin
  if p_direction is null or p_direction not in ('up', 'down') then
    perform memori._invalid(format('unknown direction %s', coalesce(quote_literal(p_direction), 'NULL')),
                            'Use ''up'' (the pages it derives from) or ''down'' (the pages derived from it).');
  end if;
  if p_max_depth is null or p_max_depth < 1 or p_max_depth > 1000 then
    perform memori._invalid('p_max_depth is outside 1..1000', 'Walk 1 to 1000 steps.');
  end if;
  v_user := (memori._vm_session_read(p_session_id)).user_id;
  perform memori._page_get(p_session_id, p_page_id, p_now, false);
  -- breadth first; a page is reported once, at its smallest depth (cycles end there)
  return query
    with recursive walk(page_id, depth, seen) as (
      select p_page_id, 0, array[p_page_id]
      union all
      select nxt.page_id, w.depth + 1, w.seen || nxt.page_id
        from walk w
        cross join lateral (
          select unnest(src.provenance) as page_id
            from memori.vm_visible_pages src
           where p_direction = 'up' and src.user_id = v_user and src.viewer_session_id = p_session_id
             and src.page_id = w.page_id
          union
          select d.page_id
            from memori.vm_visible_pages d
           where p_direction = 'down' and d.user_id = v_user and d.viewer_session_id = p_session_id
             and d.provenance @> array[w.page_id]) nxt
       where w.depth < p_max_depth and not nxt.page_id = any (w.seen)),
    firsts as (select w.page_id, min(w.depth) as depth from walk w where w.depth > 0 group by w.page_id)
    select p.viewer_session_id, p.page_id, p.page_type, p.modality, p.tier, p.importance, p.tokens, p.access_count,
           p.last_accessed, coalesce(p.hint, ref.content, ''), p.provenance, f.depth
      from firsts f
      join memori.vm_visible_pages p on p.user_id = v_user and p.viewer_session_id = p_session_id
                                     and p.page_id = f.page_id
      left join memori.page_representations ref
        on ref.user_id = v_user and ref.session_id = p.session_id and ref.page_id = p.page_id and ref.level = 3
     where p.expires_at is null or p.expires_at > p_now
     order by f.depth, p.page_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_provenance_chain(text, text, text, integer, timestamptz) is 'Walk a page''s provenance: ''up'' its sources, ''down'' the pages derived from it; each page once at its smallest depth, cycle-safe; expired pages left out.';

-------------------------------------------------------------------------------
-- pages_top_importance: a session's most important pages, optionally of one type
-- p_session_id: the VM session (PM005 when missing)
-- p_n: how many pages, 1 to 100 (else PM001)
-- p_type: only pages of this type ('transcript', 'summary', 'artifact', 'claim', 'procedure' or 'index', else
--   PM004); NULL: all
create or replace function memori.pages_top_importance(
  p_session_id text, p_n integer default 5, p_type text default null, p_now timestamptz default now()
) returns setof memori.page_index_entry
as $func$
declare
  v_user text := (memori._vm_session_read(p_session_id)).user_id;
begin
  perform memori._vm_check_filters(null, case when p_type is null then null else array[p_type] end, p_n);
  return query
    select p.viewer_session_id, p.page_id, p.page_type, p.modality, p.tier, p.importance, p.tokens, p.access_count,
           p.last_accessed, coalesce(p.hint, ref.content, ''), p.provenance, null::integer
      from memori.vm_visible_pages p
      left join memori.page_representations ref
        on ref.user_id = v_user and ref.session_id = p.session_id and ref.page_id = p.page_id and ref.level = 3
     where p.user_id = v_user and p.viewer_session_id = p_session_id
       and (p_type is null or p.page_type = p_type)
       and (p.expires_at is null or p.expires_at > p_now)
     order by p.superseded_by is not null, p.importance desc, p.access_count desc, p.last_accessed desc, p.page_id
     limit p_n;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.pages_top_importance(text, integer, text, timestamptz) is 'A session''s top p_n (1..100) unexpired pages by importance, then access count and recency (superseded claims last); optionally of one type.';
