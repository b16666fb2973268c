-- pymemdb SQL API, part 18: long-term memory store (issue 17).
--
-- One table of items keyed by (user, namespace path, key) with a jsonb value,
-- behind LangGraph's BaseStore (pymemdb.integrations.langgraph.MemoriStore),
-- the MCP server's tools, the Python client (db.store) and psql alike:
--
--   store_put / store_put_many       upsert (value NULL in a batch: delete), per-item TTL
--   store_get / store_get_many       read, refreshing the TTL when asked
--   store_delete                     delete one item
--   store_search                     namespace prefix + filter + query (full text and/or vector), limit, offset
--   store_list_namespaces            prefix / suffix (with * wildcards), max depth, limit, offset
--   store_namespace_delete           delete a whole namespace subtree
--   store_index_ensure               the ANN index of one (dims, distance, vector type, method)
--
-- Time: an item is expired when expires_at <= p_now; every read filters it
-- out, whatever the retention engine (memori-cleanup) has or has not deleted.
-- Filters compare JSON numbers as numbers, strings as strings (byte order,
-- like Python), booleans as booleans. Query search fuses vector similarity
-- and full-text rank by reciprocal rank (k = 60, as memori.search_pages) and
-- returns min(limit, matching items): the ANN scan is iterative and falls
-- back to an exact ranking when it comes back short.
--
-- pgvector lives in schema public; its types and operators are qualified.

comment on table memori.store_items is 'Long-term memory items per user: (namespace, key) -> jsonb value, TTL with refresh on read, text_fields naming what full text covers (the vector is derived at query time, migration 0021); the namespace is its number in memori.store_namespaces (migration 0022) (issue 17).';
comment on table memori.store_namespaces is 'Each user''s store namespaces, numbered per user (1, 2, ...): items store the number. Deleting an entry deletes its items; an entry whose items all expired or were deleted one by one stays (reads list only namespaces with live items) until store_namespace_delete.';
comment on table memori.store_vectors is 'Embeddings of store items, one per indexed field, keyed by the item''s (user, namespace number, key); dimension per store (partial ANN indexes per dimension, memori.store_index_ensure).';

insert into memori.settings (key, value, description) values
  ('store.search_candidates', '50', 'Each ranking of a store query search (full text, vectors) contributes at least this many candidates (and at least limit + offset) to the fusion.'),
  ('store.search_exact_max', '1000', 'A store query search ranks vectors exactly when at most this many items match its namespace prefix and filter, else through the ANN index with an iterative scan (exact again when that comes back short).')
on conflict (key) do nothing;

-------------------------------------------------------------------------------
-- _retention_store_items: store items in the retention engine's shape
create or replace view memori._retention_store_items with (security_invoker = true) as
select i.id, i.user_id as owner,
       (select d.namespace[1] from memori.store_namespaces d where d.user_id = i.user_id and d.id = i.ns_id) as category,
       '*'::text as kind, i.expires_at, false as important
  from memori.store_items i;
comment on view memori._retention_store_items is 'memori.store_items as retention candidates: user as owner, first namespace label as category.';

select memori.retention_register('store_items', 'memori.store_items', 'memori._retention_store_items', 'id',
                                 'LangGraph Store items past their TTL (issue 17)', 4, null, false);

-------------------------------------------------------------------------------
-- _store_check_namespace: a non-empty path of non-empty labels (PM121)
create or replace function memori._store_check_namespace(p_namespace text[], p_allow_empty boolean default false)
returns text[]
as $func$
begin
  if p_namespace is null or (cardinality(p_namespace) = 0 and not p_allow_empty)
     or array_position(p_namespace, null) is not null or array_position(p_namespace, '') is not null
     or array_ndims(p_namespace) > 1 then
    raise exception 'invalid namespace %', coalesce(p_namespace::text, 'NULL')
      using errcode = 'PM121',
            hint = 'A namespace is a non-empty array of non-empty labels, e.g. ARRAY[''users'', ''alice'', ''memories''].';
  end if;
  return p_namespace;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_check_namespace(text[], boolean) is 'Raise PM121 unless the namespace is a one-dimensional array of non-empty labels (empty only when allowed).';

-- (a development version read the text search configuration from a setting; it is english, as search_pages)
drop function if exists memori._store_ts_config();

-------------------------------------------------------------------------------
-- _store_jsonpath: a LangGraph field path (a.b, a[*].b, a[0], a[-1]) as an SQL/JSON path
create or replace function memori._store_jsonpath(p_path text) returns jsonpath
as $func$
declare
  v_out  text := '$';
  v_seg  text;
  v_m    text[];
begin
  if p_path is null or btrim(p_path) in ('', '$') then
    return '$'::jsonpath;
  end if;
  foreach v_seg in array string_to_array(p_path, '.') loop
    v_m := regexp_match(v_seg, '^([^\[\]]*)((\[[^\]]*\])*)$');
    if v_m is null then
      perform memori._invalid(format('invalid field path %s', quote_literal(p_path)),
                              'Use dotted field names with optional [n], [-1] or [*] indexes, e.g. content.text or tags[*].');
    end if;
    if v_m[1] <> '' then
      v_out := v_out || '.' || to_json(v_m[1])::text;
    end if;
    if v_m[2] <> '' then
      v_out := v_out || regexp_replace(regexp_replace(v_m[2], '\[-1\]', '[last]', 'g'), '\[-([0-9]+)\]', '[last-\1+1]', 'g');
    end if;
  end loop;
  return v_out::jsonpath;
exception when syntax_error or invalid_text_representation then
  perform memori._invalid(format('invalid field path %s', quote_literal(p_path)),
                          'Use dotted field names with optional [n], [-1] or [*] indexes.');
  return null;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_jsonpath(text) is 'Translate a LangGraph index field path (a.b, a[*].b, a[0], a[-1], $) to an SQL/JSON path; PM001 when malformed.';

-------------------------------------------------------------------------------
-- _store_common_path: a field path of the common form (a.b, a[*], a[0], a[-1]),
-- which _store_jsonpath always translates. A SQL-standard body without SET, so
-- PostgreSQL inlines it into the put.
create or replace function memori._store_common_path(p_path text) returns boolean
language sql immutable
begin atomic
  select p_path operator(pg_catalog.~) '^[^].[]*(\[(\*|-?[0-9]+)\])*(\.[^].[]*(\[(\*|-?[0-9]+)\])*)*$';
end;
comment on function memori._store_common_path(text) is 'True when a field path has the common form (a.b, a[*], a[0], a[-1]) that _store_jsonpath always translates.';

-------------------------------------------------------------------------------
-- _store_check_index: PM001 for a malformed field path of a put's index, when
-- the item is written: search translates the paths again, and a path refused
-- there would fail every search that reads the item. The puts call it only for
-- a path outside the common form (a.b, a[*], a[0], a[-1]: valid by construction,
-- matched by _store_common_path), so the usual put pays one regular expression.
create or replace function memori._store_check_index(p_index text[]) returns void
as $func$
declare
  v_path text;
begin
  foreach v_path in array p_index loop
    perform memori._store_jsonpath(v_path);
  end loop;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_check_index(text[]) is 'Raise PM001 when a field path of a put''s index is malformed (see _store_jsonpath).';

-------------------------------------------------------------------------------
-- _store_tsv_fields: the string leaves of the named index fields (JSON paths)
create or replace function memori._store_tsv_fields(p_value jsonb, p_index text[])
returns tsvector
as $func$
declare
  v_tsv  tsvector := ''::tsvector;
  v_path text;
begin
  foreach v_path in array p_index loop
    v_tsv := v_tsv || jsonb_to_tsvector('english'::regconfig,
                                        jsonb_path_query_array(p_value, memori._store_jsonpath(v_path)), '["string"]');
  end loop;
  return v_tsv;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_tsv_fields(jsonb, text[]) is 'Full-text vector of the string leaves of a store value''s index fields.';

-------------------------------------------------------------------------------
-- _store_text_spec: what of an item full text covers, the one rule store_put
-- and store_put_many apply (migration 0021: the vector itself is not stored).
-- p_index NULL or containing '$': the whole value ('$'); '{}' (index=False):
-- nothing (NULL); else the field paths, one per line. p_text (texts a caller
-- extracted itself) wins when given: kept literally after U+0002. A
-- SQL-standard body without SET, so PostgreSQL inlines it into the put.
create or replace function memori._store_text_spec(p_value jsonb, p_index text[], p_text text default null)
returns text
language sql immutable
begin atomic
  select case when p_value is null or pg_catalog.cardinality(p_index) = 0 then null::text
              when p_text is not null then pg_catalog.chr(2) || p_text
              when p_index is null or '$' = any (p_index) then '$'
              else pg_catalog.array_to_string(p_index, pg_catalog.chr(10)) end;
end;
comment on function memori._store_text_spec(jsonb, text[], text) is 'What full text covers for a stored value: ''$'' (the whole value: index NULL or ''$''), NULL (index ''{}''), the index field paths one per line, or chr(2) || p_text when given.';

-------------------------------------------------------------------------------
-- _store_item_tsv: an item's full-text vector, derived at query time from its
-- value and text_fields (see _store_text_spec); immutable, so the optional GIN
-- index (store_index_ensure(p_method => 'text')) is an expression index on it.
create or replace function memori._store_item_tsv(p_value jsonb, p_spec text)
returns tsvector
language sql immutable
begin atomic
  select case when p_spec is null then null::pg_catalog.tsvector
              when p_spec = '$'
                then pg_catalog.jsonb_to_tsvector('english'::pg_catalog.regconfig, p_value, '["string"]'::pg_catalog.jsonb)
              when pg_catalog.left(p_spec, 1) = pg_catalog.chr(2)
                then pg_catalog.to_tsvector('english'::pg_catalog.regconfig, pg_catalog.substr(p_spec, 2))
              else memori._store_tsv_fields(p_value, pg_catalog.string_to_array(p_spec, pg_catalog.chr(10))) end;
end;
comment on function memori._store_item_tsv(jsonb, text) is 'Full-text vector of a store item from its value and text_fields: the whole value (''$''), the string leaves of the listed fields, a literal text (chr(2) prefix), or NULL.';

-- (before migration 0021 the vector was stored, computed by _store_tsv)
drop function if exists memori._store_tsv(jsonb, text[], text);

-------------------------------------------------------------------------------
-- _store_filter_sql: a LangGraph filter as an SQL condition on i.value
-- {"k": v} equality (nested objects match as subsets, dotted keys are paths);
-- {"k": {"$op": v}} with $eq $ne $gt $gte $lt $lte. Comparisons hold only
-- between values of the same JSON type: 9 < 10 as numbers, "9" > "10" as
-- strings, a number never against a string. Literals are quoted with %L.
create or replace function memori._store_filter_sql(p_filter jsonb, p_path text[] default '{}')
returns text
as $func$
declare
  v_parts text[] := '{}';
  v_key   text;
  v_val   jsonb;
  v_op    text;
  v_arg   jsonb;
  v_path  text[];
  v_x     text;
  v_type  text;
begin
  if p_filter is null or p_filter = '{}'::jsonb then
    return 'true';
  end if;
  if jsonb_typeof(p_filter) <> 'object' then
    raise exception 'a store filter must be a JSON object, not %', jsonb_typeof(p_filter)
      using errcode = 'PM120', hint = 'Pass {"field": value} or {"field": {"$gt": 3}}.';
  end if;
  for v_key, v_val in select e.key, e.value from jsonb_each(p_filter) e order by e.key loop
    if v_key like '$%' then
      raise exception 'unsupported filter operator % at the top of a filter', quote_literal(v_key)
        using errcode = 'PM120',
              hint = 'Operators ($eq, $ne, $gt, $gte, $lt, $lte) go inside a field: {"score": {"$gte": 10}}.';
    end if;
    v_path := p_path || string_to_array(v_key, '.');
    v_x := '(i.value' || (select string_agg(format(' -> %L', k), '' order by o)
                          from unnest(v_path) with ordinality u(k, o)) || ')';
    if jsonb_typeof(v_val) = 'object' and exists (select 1 from jsonb_object_keys(v_val) k where k like '$%') then
      for v_op, v_arg in select e.key, e.value from jsonb_each(v_val) e order by e.key loop
        v_type := jsonb_typeof(v_arg);
        if v_op = '$eq' then
          v_parts := v_parts || format('coalesce(%s, ''null''::jsonb) = %L::jsonb', v_x, v_arg);
        elsif v_op = '$ne' then
          v_parts := v_parts || format('coalesce(%s, ''null''::jsonb) <> %L::jsonb', v_x, v_arg);
        elsif v_op in ('$gt', '$gte', '$lt', '$lte') then
          if v_type not in ('number', 'string', 'boolean') then
            raise exception 'filter operator % on % needs a number, string or boolean, not %', v_op, v_key, v_type
              using errcode = 'PM120', hint = 'Compare with a JSON number, string or boolean: {"score": {"$gte": 10}}.';
          end if;
          v_parts := v_parts || format(
            case v_type
              when 'string' then '(jsonb_typeof(%1$s) = ''string'' and (%1$s #>> ''{}'') collate "C" %2$s %3$L)'
              else '(jsonb_typeof(%1$s) = %4$L and %1$s %2$s %3$L::jsonb)' end,
            v_x,
            case v_op when '$gt' then '>' when '$gte' then '>=' when '$lt' then '<' else '<=' end,
            case v_type when 'string' then v_arg #>> '{}' else v_arg::text end,
            v_type);
        else
          raise exception 'unsupported filter operator % on %', quote_literal(v_op), v_key
            using errcode = 'PM120', hint = 'Use one of $eq, $ne, $gt, $gte, $lt, $lte, or a plain value for equality.';
        end if;
      end loop;
    elsif jsonb_typeof(v_val) = 'object' then
      -- a nested object matches as a subset, field by field
      v_parts := v_parts || format('(jsonb_typeof(%s) = ''object'' and %s)', v_x, memori._store_filter_sql(v_val, v_path));
    elsif jsonb_typeof(v_val) = 'null' then
      v_parts := v_parts || format('coalesce(%s, ''null''::jsonb) = ''null''::jsonb', v_x);
    else
      v_parts := v_parts || format('%s = %L::jsonb', v_x, v_val);
    end if;
  end loop;
  return coalesce(nullif(array_to_string(v_parts, ' and '), ''), 'true');
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_filter_sql(jsonb, text[]) is 'Translate a LangGraph store filter ($eq $ne $gt $gte $lt $lte, equality, nested keys) into an SQL condition on i.value, comparing same-typed JSON values; PM120 on a bad operator.';

-------------------------------------------------------------------------------
-- _store_where: the condition every store read shares ($1 user, $2 now, $3 prefix)
create or replace function memori._store_where(p_prefix text[], p_filter jsonb) returns text
as $func$
  -- the prefix as one comparison per label (subscripts, no array built per row), and a
  -- lower bound on the primary key's range
  select format('i.user_id = $1 and (i.expires_at is null or i.expires_at > $2)%s and %s',
                case when cardinality(coalesce(p_prefix, '{}')) > 0
                     then ' and i.ns_id in (select d.id from memori.store_namespaces d where d.user_id = $1 and d.namespace >= $3'
                          || (select string_agg(format(' and d.namespace[%s] = %L', o, l), '')
                                from unnest(p_prefix) with ordinality u(l, o)) || ')'
                     else '' end,
                memori._store_filter_sql(p_filter))
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_where(text[], jsonb) is 'The WHERE condition of a store read over alias i: the user ($1), unexpired at $2, in a namespace under the prefix $3 (through memori.store_namespaces), passing the filter.';

-------------------------------------------------------------------------------
-- _store_ns_match: a namespace against a prefix and a suffix, * matching any label
create or replace function memori._store_ns_match(p_ns text[], p_prefix text[], p_suffix text[]) returns boolean
as $func$
  select (p_prefix is null
          or (cardinality(p_ns) >= cardinality(p_prefix)
              and not exists (select 1 from unnest(p_prefix) with ordinality u(l, o)
                               where u.l <> '*' and u.l is distinct from p_ns[u.o]::text)))
     and (p_suffix is null
          or (cardinality(p_ns) >= cardinality(p_suffix)
              and not exists (select 1 from unnest(p_suffix) with ordinality u(l, o)
                               where u.l <> '*'
                                 and u.l is distinct from p_ns[cardinality(p_ns) - cardinality(p_suffix) + u.o::integer])))
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_ns_match(text[], text[], text[]) is 'Whether a namespace starts with p_prefix and ends with p_suffix (NULL: any; a * label matches any label).';

-------------------------------------------------------------------------------
-- _store_check_vector_config: distance and vector type names (PM122)
create or replace function memori._store_check_vector_config(p_distance text, p_vector_type text) returns void
as $func$
begin
  if p_distance is null or p_distance not in ('cosine', 'l2', 'inner_product') then
    raise exception 'unknown distance type %', coalesce(quote_literal(p_distance), 'NULL')
      using errcode = 'PM122', hint = 'Use cosine, l2 or inner_product.';
  end if;
  if p_vector_type is null or p_vector_type not in ('vector', 'halfvec') then
    raise exception 'unknown vector type %', coalesce(quote_literal(p_vector_type), 'NULL')
      using errcode = 'PM122', hint = 'Use vector or halfvec.';
  end if;
end
$func$ language plpgsql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_check_vector_config(text, text) is 'Raise PM122 unless the distance is cosine, l2 or inner_product and the vector type vector or halfvec.';

-------------------------------------------------------------------------------
-- _store_ns_create: the number of a user's namespace, entered in the
-- dictionary when new (the next number of that user). Called by the puts only
-- when their own lookup found nothing. Two writers entering namespaces of one
-- user at once: the second waits on the key, then takes the next number (or
-- the namespace the first entered).
create or replace function memori._store_ns_create(p_user_id text, p_namespace text[]) returns integer
as $func$
declare
  v_id integer;
begin
  loop
    select d.id into v_id from memori.store_namespaces d where d.user_id = p_user_id and d.namespace = p_namespace;
    if found then
      return v_id;
    end if;
    insert into memori.store_namespaces as n (user_id, id, namespace)
    select p_user_id, coalesce(max(d.id), 0) + 1, p_namespace from memori.store_namespaces d where d.user_id = p_user_id
    on conflict do nothing
    returning n.id into v_id;
    if v_id is not null then
      return v_id;
    end if;
  end loop;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_ns_create(text, text[]) is 'The per-user number of a store namespace, entered in memori.store_namespaces (next number of the user) when new.';

-------------------------------------------------------------------------------
-- _store_ref_join: a store read names an item by a text reference
-- ns_id || ':' || key; this is the join condition of reference expression
-- p_ref to the item (or embedding) alias p_alias, by its primary key.
create or replace function memori._store_ref_join(p_alias text, p_ref text) returns text
as $func$
  select format('%1$s.ns_id = pg_catalog.split_part(%2$s, '':'', 1)::integer '
                'and %1$s.key = pg_catalog.substr(%2$s, pg_catalog.strpos(%2$s, '':'') + 1)', p_alias, p_ref)
$func$ language sql immutable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._store_ref_join(text, text) is 'The condition joining an item reference (ns_id:key text) to the alias of a store item or embedding, by its key.';

-------------------------------------------------------------------------------
-- The hot paths (store_put, store_put_many, store_get) inline the acting-user
-- and namespace checks and the item write: a nested call of a function with a
-- pinned search_path costs as much as the write itself. The helpers run only
-- to raise their error (or for field paths).
drop function if exists memori._store_upsert(text, text[], text, jsonb, interval, tsvector, text[], text[], timestamptz);

-------------------------------------------------------------------------------
-- store_put: upsert one item
-- p_namespace: the item's namespace path, non-empty labels, e.g. ARRAY['users', 'alice']; NULL, empty, an empty or
--   NULL label: PM121
-- p_key: the item's key in the namespace; NULL: PM001
-- p_value: the item's value (any JSON), replacing an existing item's; NULL: PM001 (store_delete deletes)
-- p_ttl: the item expires this long after the put (and after each read that refreshes it); > 0 (else PM001);
--   NULL: never
-- p_index: what full text covers: NULL or containing '$': every string of the value; '{}': nothing; else
--   field paths (a.b, a[*].b, a[0], a[-1]) whose string leaves count; a malformed path: PM001 (with p_text NULL)
-- p_text: the text full text covers instead (the caller's own extraction), unless p_index is '{}'; NULL: p_index
-- p_fields: the field each embedding of p_embeddings is of (same length, else PM001); an update replaces the
--   item's embeddings (none when NULL)
-- p_embeddings: one embedding per field of p_fields, any dimension (NULL entries skipped)
create or replace function memori.store_put(
  p_user_id    text default null,
  p_namespace  text[] default null,
  p_key        text default null,
  p_value      jsonb default null,
  p_ttl        interval default null,
  p_index      text[] default null,
  p_now        timestamptz default now(),
  p_text       text default null,
  p_fields     text[] default null,
  p_embeddings public.vector[] default null
) returns memori.store_item
as $func$
declare
  v_set     text := nullif(current_setting('memori.user_id', true), '');
  v_user    text := p_user_id;
  v_spec    text;
  v_item    memori.store_item;
  v_ns      integer;
  v_updated boolean;
begin
  if p_user_id is null or (v_set is not null and v_set <> p_user_id) or btrim(p_user_id) = ''
     or length(p_user_id) > 256 or p_user_id ~ '[[:cntrl:]]' then
    v_user := memori._acting_user(p_user_id);
  end if;
  if p_namespace is null or cardinality(p_namespace) = 0 or array_position(p_namespace, null) is not null
     or array_position(p_namespace, '') is not null or array_ndims(p_namespace) > 1 then
    perform memori._store_check_namespace(p_namespace);
  end if;
  if p_key is null then
    perform memori._invalid('store key must not be NULL', 'Pass p_key => ''my-key''.');
  end if;
  if p_value is null then
    perform memori._invalid('store value must not be NULL', 'Delete an item with memori.store_delete.');
  end if;
  if p_ttl is not null and p_ttl <= interval '0' then
    perform memori._invalid(format('ttl %s is not positive', p_ttl), 'Pass a positive interval, or NULL to keep the item.');
  end if;
  if cardinality(coalesce(p_fields, '{}')) <> cardinality(coalesce(p_embeddings, '{}')) then
    perform memori._invalid('p_fields and p_embeddings differ in length', 'Pass one embedding per indexed field.');
  end if;
  if p_text is null and p_index is not null and exists (
       select from unnest(p_index) f(path)
        where not memori._store_common_path(f.path)) then
    perform memori._store_check_index(p_index);
  end if;
  v_spec := memori._store_text_spec(p_value, p_index, p_text);
  select d.id into v_ns from memori.store_namespaces d where d.user_id = v_user and d.namespace = p_namespace;
  if v_ns is null then
    v_ns := memori._store_ns_create(v_user, p_namespace);
  end if;
  insert into memori.store_items as s (user_id, ns_id, key, value, created_at, updated_at, expires_at, ttl, text_fields)
  values (v_user, v_ns, p_key, p_value, p_now, p_now, p_now + p_ttl, p_ttl, v_spec)
  on conflict (user_id, ns_id, key) do update
     set value = excluded.value,
         -- an expired item the cleaner has not reached yet is replaced, not continued
         created_at = case when s.expires_at <= p_now then excluded.created_at else s.created_at end,
         updated_at = excluded.updated_at, expires_at = excluded.expires_at, ttl = excluded.ttl,
         text_fields = excluded.text_fields
  returning s.key, s.value, s.created_at, s.updated_at, s.expires_at, s.ttl, (s.xmax <> 0)
       into v_item.key, v_item.value, v_item.created_at, v_item.updated_at, v_item.expires_at, v_item.ttl, v_updated;
  v_item.namespace := p_namespace;
  if v_updated then
    delete from memori.store_vectors v where v.user_id = v_user and v.ns_id = v_ns and v.key = p_key;
  end if;
  if cardinality(p_fields) > 0 then
    insert into memori.store_vectors (user_id, ns_id, key, field, embedding)
    select v_user, v_ns, p_key, f.field, f.embedding
      from unnest(p_fields, p_embeddings) f(field, embedding)
     where f.field is not null and f.embedding is not null
    on conflict (user_id, ns_id, key, field) do update set embedding = excluded.embedding;
  end if;
  return v_item;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_put(text, text[], text, jsonb, interval, text[], timestamptz, text, text[], public.vector[]) is 'Upsert a store item (value, optional TTL, indexed fields for full text, optional embeddings per field); PM121 on a bad namespace.';

-------------------------------------------------------------------------------
-- store_put_many: a batch of puts and deletes in one call
-- p_items: [{"namespace": [...], "key": "...", "value": {...} | null (delete),
--            "ttl_seconds": n | null, "index": [...] | false | null,
--            "text": "..." | null, "vectors": {"field": [floats], ...} | null}, ...]
-- Later entries for the same (namespace, key) win, as LangGraph's batch does.
create or replace function memori.store_put_many(
  p_user_id text default null,
  p_items   jsonb default '[]',
  p_now     timestamptz default now()
) returns bigint
as $func$
declare
  v_user    text := memori._acting_user(p_user_id);
  v_it      record;
  v_n       bigint := 0;
  v_spec    text;
  v_ns      integer;
  v_ns_of   text[];           -- the namespace v_ns is the number of (items come sorted by namespace)
  v_updated boolean;
begin
  if p_items is null or jsonb_typeof(p_items) <> 'array' then
    perform memori._invalid('p_items must be a JSON array', 'Pass [{"namespace": ["a"], "key": "k", "value": {...}}, ...].');
  end if;
  for v_it in
    select distinct on (s.ns, s.key) s.*
      from (select array(select jsonb_array_elements_text(e.x -> 'namespace')) as ns,
                   e.x ->> 'key' as key, e.x -> 'value' as value,
                   case when jsonb_typeof(e.x -> 'ttl_seconds') = 'number'
                        then make_interval(secs => (e.x ->> 'ttl_seconds')::double precision) end as ttl,
                   case jsonb_typeof(e.x -> 'index')
                        when 'array' then array(select jsonb_array_elements_text(e.x -> 'index'))
                        when 'boolean' then case when (e.x -> 'index')::boolean then null else '{}'::text[] end
                   end as idx,
                   e.x ->> 'text' as txt,
                   case when jsonb_typeof(e.x -> 'vectors') = 'object' then e.x -> 'vectors' end as vectors,
                   e.ord
              from jsonb_array_elements(p_items) with ordinality e(x, ord)) s
     order by s.ns, s.key, s.ord desc
  loop
    if cardinality(v_it.ns) = 0 or array_position(v_it.ns, '') is not null then
      perform memori._store_check_namespace(v_it.ns);
    end if;
    if v_it.key is null then
      perform memori._invalid('store key must not be NULL', 'Every item needs a "key".');
    end if;
    if v_ns_of is distinct from v_it.ns then
      v_ns_of := v_it.ns;
      select d.id into v_ns from memori.store_namespaces d where d.user_id = v_user and d.namespace = v_it.ns;
      if v_ns is null and v_it.value is not null and jsonb_typeof(v_it.value) <> 'null' then
        v_ns := memori._store_ns_create(v_user, v_it.ns);
      end if;
    end if;
    if v_it.value is null or jsonb_typeof(v_it.value) = 'null' then
      delete from memori.store_items i where i.user_id = v_user and i.ns_id = v_ns and i.key = v_it.key;
    else
      if v_ns is null then
        v_ns := memori._store_ns_create(v_user, v_it.ns);
      end if;
      if v_it.ttl is not null and v_it.ttl <= interval '0' then
        perform memori._invalid(format('ttl %s is not positive', v_it.ttl), 'Pass a positive ttl_seconds, or null.');
      end if;
      if v_it.txt is null and v_it.idx is not null and exists (
           select from unnest(v_it.idx) f(path)
            where not memori._store_common_path(f.path)) then
        perform memori._store_check_index(v_it.idx);
      end if;
      v_spec := memori._store_text_spec(v_it.value, v_it.idx, v_it.txt);
      insert into memori.store_items as s (user_id, ns_id, key, value, created_at, updated_at, expires_at, ttl,
                                           text_fields)
      values (v_user, v_ns, v_it.key, v_it.value, p_now, p_now, p_now + v_it.ttl, v_it.ttl, v_spec)
      on conflict (user_id, ns_id, key) do update
         set value = excluded.value,
             created_at = case when s.expires_at <= p_now then excluded.created_at else s.created_at end,
             updated_at = excluded.updated_at, expires_at = excluded.expires_at, ttl = excluded.ttl,
             text_fields = excluded.text_fields
      returning (s.xmax <> 0) into v_updated;
      if v_updated then
        delete from memori.store_vectors v where v.user_id = v_user and v.ns_id = v_ns and v.key = v_it.key;
      end if;
      if v_it.vectors is not null then
        insert into memori.store_vectors (user_id, ns_id, key, field, embedding)
        select v_user, v_ns, v_it.key, f.key, f.value::text::public.vector
          from jsonb_each(v_it.vectors) f
         where jsonb_typeof(f.value) = 'array'
        on conflict (user_id, ns_id, key, field) do update set embedding = excluded.embedding;
      end if;
    end if;
    v_n := v_n + 1;
  end loop;
  return v_n;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_put_many(text, jsonb, timestamptz) is 'Apply a batch of store puts (value null: delete) in one call, the last entry per (namespace, key) winning; returns the number applied.';

-------------------------------------------------------------------------------
-- store_get: one unexpired item, its TTL refreshed when asked
-- p_namespace: the item's namespace path (exactly); no row when absent
-- p_key: the item's key; no row when absent or expired
-- p_refresh_ttl: true: an item with a TTL expires p_now + its ttl again; false: read only
create or replace function memori.store_get(
  p_user_id     text default null,
  p_namespace   text[] default null,
  p_key         text default null,
  p_refresh_ttl boolean default true,
  p_now         timestamptz default now()
) returns setof memori.store_item
as $func$
declare
  v_set  text := nullif(current_setting('memori.user_id', true), '');
  v_user text := p_user_id;
  v_row  memori.store_item;
  v_ns   integer;
begin
  if p_user_id is null or (v_set is not null and v_set <> p_user_id) then
    v_user := memori._acting_user(p_user_id);
  end if;
  select d.namespace, i.key, i.value, i.created_at, i.updated_at, i.expires_at, i.ttl, i.ns_id
    into v_row.namespace, v_row.key, v_row.value, v_row.created_at, v_row.updated_at, v_row.expires_at, v_row.ttl, v_ns
    from memori.store_namespaces d
    join memori.store_items i on i.user_id = d.user_id and i.ns_id = d.id
   where d.user_id = v_user and d.namespace = p_namespace and i.key = p_key
     and (i.expires_at is null or i.expires_at > p_now);
  if not found then
    return;
  end if;
  if p_refresh_ttl and v_row.ttl is not null then
    -- p_now + ttl, added in UTC: timestamptz + interval is STABLE (the session's time zone),
    -- and Citus refuses STABLE operators on columns in an UPDATE of a distributed table
    update memori.store_items i set expires_at = (p_now at time zone 'UTC' + i.ttl) at time zone 'UTC'
     where i.user_id = v_user and i.ns_id = v_ns and i.key = p_key
    returning i.expires_at into v_row.expires_at;
  end if;
  return next v_row;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_get(text, text[], text, boolean, timestamptz) is 'The unexpired item at (namespace, key), 0 or 1 row; with p_refresh_ttl its expiry moves to p_now + its ttl.';

-------------------------------------------------------------------------------
-- store_get_many: many items in one call, each tagged with its request's position
-- p_namespaces: JSON array of namespaces (each a JSON array of labels), one per key (lengths differ: PM001)
-- p_keys: the keys, p_keys[i] in p_namespaces[i]; each row carries its 1-based position i
-- p_refresh_ttl: true: an item with a TTL expires p_now + its ttl again; false: read only
create or replace function memori.store_get_many(
  p_user_id     text default null,
  p_namespaces  jsonb default '[]',
  p_keys        text[] default '{}',
  p_refresh_ttl boolean default true,
  p_now         timestamptz default now()
) returns setof memori.store_get_result
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  if p_namespaces is null or jsonb_typeof(p_namespaces) <> 'array'
     or jsonb_array_length(p_namespaces) <> cardinality(coalesce(p_keys, '{}')) then
    perform memori._invalid('p_namespaces and p_keys must be arrays of the same length',
                            'Pass [["a","b"], ...] and ARRAY[''k'', ...], one namespace per key.');
  end if;
  return query
    with req as (
      select r.ord::integer as ord, array(select jsonb_array_elements_text(r.ns)) as ns, p_keys[r.ord] as key
        from jsonb_array_elements(p_namespaces) with ordinality r(ns, ord)),
    hit as (
      select req.ord, i.ns_id, d.namespace, i.key, i.value, i.created_at, i.updated_at, i.expires_at, i.ttl
        from req
        join memori.store_namespaces d on d.user_id = v_user and d.namespace = req.ns
        join memori.store_items i on i.user_id = v_user and i.ns_id = d.id and i.key = req.key
       where i.expires_at is null or i.expires_at > p_now),
    refreshed as (
      update memori.store_items i set expires_at = (p_now at time zone 'UTC' + i.ttl) at time zone 'UTC'
        from (select distinct hit.ns_id, hit.key from hit where hit.ttl is not null) h
       where p_refresh_ttl and i.user_id = v_user and i.ns_id = h.ns_id and i.key = h.key
      returning i.ns_id, i.key, i.expires_at)
    select hit.ord, hit.namespace, hit.key, hit.value, hit.created_at, hit.updated_at,
           coalesce(r.expires_at, hit.expires_at), hit.ttl
      from hit left join refreshed r on r.ns_id = hit.ns_id and r.key = hit.key
     order by hit.ord;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_get_many(text, jsonb, text[], boolean, timestamptz) is 'Read many (namespace, key) pairs in one call: the unexpired ones, tagged with their 1-based request position; refreshes TTLs when asked.';

-------------------------------------------------------------------------------
-- store_delete: delete one item
-- p_namespace: the item's namespace path (exactly)
-- p_key: the item's key; false when there is no such item
create or replace function memori.store_delete(
  p_user_id   text default null,
  p_namespace text[] default null,
  p_key       text default null
) returns boolean
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
begin
  delete from memori.store_items i
   using memori.store_namespaces d
   where d.user_id = v_user and d.namespace = p_namespace and i.user_id = v_user and i.ns_id = d.id and i.key = p_key;
  return found;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_delete(text, text[], text) is 'Delete the item at (namespace, key) with its embeddings; true when there was one (expired or not).';

-------------------------------------------------------------------------------
-- store_namespace_delete: delete a namespace and everything below it
-- p_prefix: every namespace starting with these labels goes, with its items (expired or not); NULL, empty, an
--   empty or NULL label: PM121
create or replace function memori.store_namespace_delete(
  p_user_id text default null,
  p_prefix  text[] default null,
  p_now     timestamptz default now()
) returns bigint
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
  v_n    bigint;
begin
  perform memori._store_check_namespace(p_prefix);
  delete from memori.store_items i
   using memori.store_namespaces d
   where d.user_id = v_user and d.namespace >= p_prefix and d.namespace[1:cardinality(p_prefix)] = p_prefix
     and i.user_id = v_user and i.ns_id = d.id;
  get diagnostics v_n = row_count;
  -- the dictionary entries go too (with any item a concurrent put added meanwhile)
  delete from memori.store_namespaces d
   where d.user_id = v_user and d.namespace >= p_prefix and d.namespace[1:cardinality(p_prefix)] = p_prefix;
  perform memori._event_emit('store.namespace_deleted',
            jsonb_build_object('user_id', v_user, 'prefix', to_jsonb(p_prefix), 'deleted', v_n), p_now);
  return v_n;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_namespace_delete(text, text[], timestamptz) is 'Delete every item (expired or not) whose namespace starts with p_prefix, with their embeddings and the namespaces'' dictionary entries; returns how many items. PM121 on an empty prefix.';

-------------------------------------------------------------------------------
-- store_list_namespaces: distinct namespaces of unexpired items
-- The user's namespace dictionary, each entry kept when one of its items is
-- unexpired (one probe of the items' primary key per entry).
-- p_prefix: only namespaces starting with these labels ('*' matches any label); NULL: any
-- p_suffix: only namespaces ending with these labels ('*' matches any label); NULL: any
-- p_max_depth: longer namespaces are cut to their first p_max_depth labels (then listed once); >= 1 (else
--   PM001); NULL: whole
-- p_limit: the most namespaces returned (sorted), >= 0 (NULL or less: PM001)
-- p_offset: how many sorted namespaces to skip first, >= 0 (NULL or less: PM001)
create or replace function memori.store_list_namespaces(
  p_user_id   text default null,
  p_prefix    text[] default null,
  p_suffix    text[] default null,
  p_max_depth integer default null,
  p_limit     integer default 100,
  p_offset    integer default 0,
  p_now       timestamptz default now()
) returns table (namespace text[])
as $func$
declare
  v_user text := memori._acting_user(p_user_id);
  v_lo   text[] := '{}';   -- the prefix's labels before its first wildcard: a contiguous key range
  v_n    integer;
begin
  if p_max_depth is not null and p_max_depth < 1 then
    perform memori._invalid(format('max depth %s is below 1', p_max_depth), 'Pass a max depth of 1 or more, or NULL.');
  end if;
  if p_limit is null or p_limit < 0 or p_offset is null or p_offset < 0 then
    perform memori._invalid('limit and offset must be 0 or more', 'Pass p_limit => 100, p_offset => 0.');
  end if;
  if p_prefix is not null then
    v_lo := coalesce(p_prefix[1:coalesce(array_position(p_prefix, '*') - 1, cardinality(p_prefix))], '{}');
  end if;
  v_n := cardinality(v_lo);
  return query
    select t.ns
      from (select distinct case when p_max_depth is not null and cardinality(d.namespace) > p_max_depth
                                 then d.namespace[1:p_max_depth] else d.namespace end as ns
              from memori.store_namespaces d
             where d.user_id = v_user and d.namespace >= v_lo and (v_n = 0 or d.namespace[1:v_n] = v_lo)
               and memori._store_ns_match(d.namespace, p_prefix, p_suffix)
               and exists (select 1 from memori.store_items i
                            where i.user_id = v_user and i.ns_id = d.id
                              and (i.expires_at is null or i.expires_at > p_now))) t
     order by t.ns
     limit p_limit offset p_offset;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_list_namespaces(text, text[], text[], integer, integer, integer, timestamptz) is 'Distinct namespaces holding unexpired items, filtered by prefix and suffix (* matches any label), truncated to p_max_depth, sorted, paged.';

-------------------------------------------------------------------------------
-- store_index_ensure: the ANN index for one store configuration (idempotent)
-- Embeddings of every dimension share memori.store_vectors; an index covers
-- one dimension (a partial expression index), one distance and vector type.
-- 'flat' creates none: search ranks exactly. Creating an index needs the
-- table's owner (pymemdb init, MemoriStore.setup()).
-- p_dims: the embedding dimension indexed: 1 to 2000 as vector, to 4000 as halfvec (else PM122); ignored by 'text'
-- p_distance: 'cosine', 'l2' or 'inner_product' (else PM122)
-- p_vector_type: 'vector' or 'halfvec' (else PM122)
-- p_method: 'hnsw', 'ivfflat', 'flat' (no index: exact search; returns NULL) or 'text' (the full-text GIN index
--   of memori.store_items); else PM122
-- p_options: index parameters: hnsw m (16), ef_construction (64); ivfflat lists or nlist (100); an index that
--   exists already is kept as it is
create or replace function memori.store_index_ensure(
  p_dims        integer,
  p_distance    text default 'cosine',
  p_vector_type text default 'vector',
  p_method      text default 'hnsw',
  p_options     jsonb default '{}'
) returns text
as $func$
declare
  v_name text;
  v_ops  text;
  v_with text := '';
  v_max  integer;
begin
  perform memori._store_check_vector_config(p_distance, p_vector_type);
  if p_method is null or p_method not in ('hnsw', 'ivfflat', 'flat', 'text') then
    raise exception 'unknown ANN index kind %', coalesce(quote_literal(p_method), 'NULL')
      using errcode = 'PM122', hint = 'Use hnsw, ivfflat or flat (exact search, no index); text for the full-text GIN index.';
  end if;
  if p_method = 'text' then
    -- (the name predates migration 0021, when the vector was a stored column)
    create index if not exists idx_store_items_search_tsv on memori.store_items
     using gin (memori._store_item_tsv(value, text_fields)) where text_fields is not null;
    return 'idx_store_items_search_tsv';
  end if;
  v_max := (case p_vector_type when 'halfvec' then 4000 else 2000 end);
  if p_method <> 'text' and (p_dims is null or p_dims < 1 or p_dims > v_max) then
    raise exception 'dimension % cannot be indexed as %', coalesce(p_dims::text, 'NULL'), p_vector_type
      using errcode = 'PM122', hint = 'Index up to 2,000 dimensions as vector or 4,000 as halfvec.';
  end if;
  if p_method = 'flat' then
    return null;
  end if;
  v_name := format('idx_store_vectors_%s_%s_%s_%s', p_method, p_vector_type, p_distance, p_dims);
  v_ops := format('public.%s_%s_ops', p_vector_type,
                  case p_distance when 'cosine' then 'cosine' when 'l2' then 'l2' else 'ip' end);
  if p_method = 'hnsw' then
    v_with := format(' with (m = %s, ef_construction = %s)',
                     coalesce((p_options ->> 'm')::integer, 16), coalesce((p_options ->> 'ef_construction')::integer, 64));
  else
    v_with := format(' with (lists = %s)', coalesce((p_options ->> 'nlist')::integer, (p_options ->> 'lists')::integer, 100));
  end if;
  execute format('create index if not exists %I on memori.store_vectors using %s ((embedding::public.%s(%s)) %s)%s '
                 'where public.vector_dims(embedding) = %s',
                 v_name, p_method, p_vector_type, p_dims, v_ops, v_with, p_dims);
  return v_name;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.store_index_ensure(integer, text, text, text, jsonb) is 'Create (if missing) the ANN index of a store configuration: dimension, distance (cosine, l2, inner_product), vector type (vector, halfvec), kind (hnsw, ivfflat; flat = none; text = the full-text GIN index, dimension ignored); returns its name. Owner only.';

-------------------------------------------------------------------------------
-- store_search: items under a namespace prefix, filtered, optionally ranked by a query
-- No query: newest first (updated_at desc). A query text ranks by full text,
-- a query embedding by vector similarity, both fused by reciprocal rank
-- (k = 60); items matching the filter but neither ranking follow, newest
-- first, so a page is never short while items match. score is the vector
-- similarity in LangGraph's convention (cosine: 1 - distance, l2: -distance,
-- inner_product: the inner product), NULL for an item without an embedding.
-- p_namespace_prefix: only items whose namespace starts with these labels (no wildcards); '{}' or NULL: all; an
--   empty or NULL label: PM121
-- p_filter: a JSON object on the value: {"field": value} (nested objects as subsets, dotted keys as paths) or
--   {"field": {"$op": value}}, $op one of $eq $ne $gt $gte $lt $lte; anything else: PM120; NULL: none
-- p_query: text ranked by full text (web search syntax, English, the first 10000 characters); NULL or blank: none
-- p_query_embedding: a vector ranked against the items' embeddings of its dimension; the zero vector under
--   cosine: PM001; NULL: none. With no query at all: newest first
-- p_limit: the most rows, 0 to 100000 (NULL or outside: PM001)
-- p_offset: how many ranked rows to skip first, >= 0 (NULL or less: PM001)
-- p_refresh_ttl: true: the returned items with a TTL expire p_now + their ttl again; false: read only
-- p_distance: 'cosine' (score 1 - distance), 'l2' (score -distance) or 'inner_product' (score the inner
--   product); else PM122
-- p_vector_type: 'vector' or 'halfvec', as the ANN index was made (store_index_ensure); else PM122
create or replace function memori.store_search(
  p_user_id          text default null,
  p_namespace_prefix text[] default '{}',
  p_filter           jsonb default null,
  p_query            text default null,
  p_query_embedding  public.vector default null,
  p_limit            integer default 10,
  p_offset           integer default 0,
  p_refresh_ttl      boolean default false,
  p_now              timestamptz default now(),
  p_distance         text default 'cosine',
  p_vector_type      text default 'vector'
) returns setof memori.store_search_result
as $func$
declare
  v_user   text := memori._acting_user(p_user_id);
  v_prefix text[] := coalesce(p_namespace_prefix, '{}');
  v_where  text;
  v_need   integer;
  v_k      integer;
  v_tsq    tsquery;
  -- items are named by references ns_id || ':' || key (memori._store_ref_join)
  v_ft     text[] := '{}';
  v_vec    text[] := '{}';
  v_ids    text[] := '{}';
  v_vr     integer[] := '{}';
  v_tr     integer[] := '{}';
  v_more   text[];
  v_dims   integer;
  v_emb    text;
  v_q      text;
  v_op     text;
  v_page   text[];
  v_exact  integer;
  v_match  text[];
  v_few    boolean;
begin
  perform memori._store_check_namespace(v_prefix, true);
  perform memori._store_check_vector_config(p_distance, p_vector_type);
  if p_limit is null or p_limit < 0 or p_limit > 100000 or p_offset is null or p_offset < 0 then
    perform memori._invalid('limit must be 0..100000 and offset 0 or more', 'Page through results with p_limit and p_offset.');
  end if;
  if p_now is null then
    perform memori._invalid('p_now must not be NULL', 'Omit p_now to use the current time.');
  end if;
  if p_query_embedding is not null and public.vector_norm(p_query_embedding) = 0 and p_distance = 'cosine' then
    perform memori._invalid('query embedding is the zero vector', 'Pass NULL instead (full-text search only).');
  end if;
  v_where := memori._store_where(v_prefix, p_filter);
  v_need := p_limit + p_offset;
  if p_limit = 0 then
    return;
  end if;
  v_tsq := case when nullif(btrim(coalesce(p_query, '')), '') is not null
                then websearch_to_tsquery('english'::regconfig, left(p_query, 10000)) end;

  if (v_tsq is null or numnode(v_tsq) = 0) and p_query_embedding is null then
    -- no query: newest first
    execute format('select coalesce(array_agg(ref order by updated_at desc, id desc), ''{}'') from ('
                   'select i.ns_id || '':'' || i.key as ref, i.id, i.updated_at from memori.store_items i where %s '
                   'order by i.updated_at desc, i.id desc limit $4 offset $5) s', v_where)
      into v_page using v_user, p_now, v_prefix, p_limit, p_offset;
  else
    v_k := greatest(v_need, coalesce((memori._setting('store.search_candidates') #>> '{}')::integer, 50));

    -- the matching items, up to one more than the exact threshold: when there are
    -- few, both rankings read them by key instead of scanning again
    v_exact := coalesce((memori._setting('store.search_exact_max') #>> '{}')::integer, 1000);
    execute format('select array(select i.ns_id || '':'' || i.key from memori.store_items i where %s limit $4)', v_where)
      into v_match using v_user, p_now, v_prefix, v_exact + 1;
    v_few := cardinality(v_match) <= v_exact;

    -- ranking 1: full text (over the few matches by key, else through the GIN index if there is one)
    if v_tsq is not null and numnode(v_tsq) > 0 then
      if v_few then
        execute format('select coalesce(array_agg(ref order by r desc, id), ''{}'') from ('
                       'select m.ref, i.id, ts_rank_cd(t.tsv, $2) as r '
                       'from unnest($3::text[]) m(ref) join memori.store_items i on i.user_id = $1 and %s '
                       'cross join lateral (select memori._store_item_tsv(i.value, i.text_fields)) t(tsv) '
                       'where i.text_fields is not null and t.tsv @@ $2 order by r desc, i.id limit $4) s',
                       memori._store_ref_join('i', 'm.ref'))
          into v_ft using v_user, v_tsq, v_match, v_k;
      else
        execute format('select coalesce(array_agg(ref order by r desc, id), ''{}'') from ('
                       'select i.ns_id || '':'' || i.key as ref, i.id, '
                       'ts_rank_cd(memori._store_item_tsv(i.value, i.text_fields), $4) as r '
                       'from memori.store_items i where %s and i.text_fields is not null '
                       'and memori._store_item_tsv(i.value, i.text_fields) @@ $4 order by r desc, i.id limit $5) s', v_where)
          into v_ft using v_user, p_now, v_prefix, v_tsq, v_k;
      end if;
    end if;

    -- ranking 2: vector distance, best field per item. Exactly when at most
    -- store.search_exact_max items match the prefix and filter (one pass finds
    -- them; their embeddings are read by key). Else through the ANN index of
    -- this dimension with an iterative scan (the filter applies during the
    -- scan, which goes on until enough rows pass), and exactly over every
    -- match when that comes back short (hnsw.max_scan_tuples reached).
    if p_query_embedding is not null then
      v_dims := public.vector_dims(p_query_embedding);
      v_op := case p_distance when 'cosine' then '<=>' when 'l2' then '<->' else '<#>' end;
      v_emb := format('(v.embedding::public.%s(%s))', p_vector_type, v_dims);
      if v_few then
        -- (lateral: one probe of the embeddings' key per match, whatever the estimate of vector_dims)
        execute format('select coalesce(array_agg(ref order by d, ref), ''{}'') from ('
                       'select m.ref, x.d from unnest($2::text[]) m(ref) cross join lateral ('
                       'select min(%1$s operator(public.%3$s) %2$s) as d from memori.store_vectors v '
                       'where v.user_id = $1 and %5$s and public.vector_dims(v.embedding) = %4$s) x '
                       'where x.d is not null order by 2, 1 limit $4) b',
                       v_emb, format('($3::public.%s(%s))', p_vector_type, v_dims), v_op, v_dims,
                       memori._store_ref_join('v', 'm.ref'))
          into v_vec using v_user, v_match, p_query_embedding, v_k;
      else
        v_q := format('($4::public.%s(%s))', p_vector_type, v_dims);
        execute format('select coalesce(array_agg(ref order by d, ref), ''{}'') from ('
                       'select a.ref, min(a.d) as d from ('
                       'select v.ns_id || '':'' || v.key as ref, %1$s operator(public.%3$s) %2$s as d '
                       'from memori.store_vectors v '
                       'join memori.store_items i on i.user_id = v.user_id and i.ns_id = v.ns_id and i.key = v.key '
                       'where v.user_id = $1 and public.vector_dims(v.embedding) = %4$s and %5$s '
                       'order by %1$s operator(public.%3$s) %2$s limit $5) a '
                       'group by a.ref order by min(a.d), a.ref limit $6) b',
                       v_emb, v_q, v_op, v_dims, v_where)
          into v_vec using v_user, p_now, v_prefix, p_query_embedding, v_k * 2, v_k;
        if cardinality(v_vec) < v_k then
          execute format('select coalesce(array_agg(ref order by d, ref), ''{}'') from ('
                         'select v.ns_id || '':'' || v.key as ref, min(%1$s operator(public.%3$s) %2$s) as d '
                         'from memori.store_vectors v '
                         'join memori.store_items i on i.user_id = v.user_id and i.ns_id = v.ns_id and i.key = v.key '
                         'where v.user_id = $1 and public.vector_dims(v.embedding) = %4$s and %5$s '
                         'group by 1 order by 2, 1 limit $5) b',
                         v_emb, v_q, v_op, v_dims, v_where)
            into v_vec using v_user, p_now, v_prefix, p_query_embedding, v_k;
        end if;
      end if;
    end if;

    -- reciprocal-rank fusion (k = 60), as memori.search_pages
    select coalesce(array_agg(f.id order by f.score desc, f.best, f.id), '{}'),
           coalesce(array_agg(f.vr order by f.score desc, f.best, f.id), '{}'),
           coalesce(array_agg(f.tr order by f.score desc, f.best, f.id), '{}')
      into v_ids, v_vr, v_tr
      from (select r.id, sum(1.0 / (60 + r.rnk)) as score, min(r.rnk) as best,
                   min(r.rnk) filter (where r.src = 'v') as vr, min(r.rnk) filter (where r.src = 't') as tr
              from (select x.id, x.rnk::integer as rnk, 'v' as src from unnest(v_vec) with ordinality x(id, rnk)
                    union all
                    select y.id, y.rnk::integer, 't' from unnest(v_ft) with ordinality y(id, rnk)) r
             group by r.id) f;

    -- the rest of the matching items, newest first, when the rankings are short
    if cardinality(v_ids) < v_need and v_few then
      execute format('select coalesce(array_agg(ref order by updated_at desc, id desc), ''{}'') from ('
                     'select m.ref, i.id, i.updated_at '
                     'from unnest($2::text[]) m(ref) join memori.store_items i on i.user_id = $1 and %s '
                     'where not (m.ref = any ($3)) order by i.updated_at desc, i.id desc limit $4) s',
                     memori._store_ref_join('i', 'm.ref'))
        into v_more using v_user, v_match, v_ids, v_need - cardinality(v_ids);
      v_ids := v_ids || v_more;
    elsif cardinality(v_ids) < v_need then
      execute format('select coalesce(array_agg(ref order by updated_at desc, id desc), ''{}'') from ('
                     'select i.ns_id || '':'' || i.key as ref, i.id, i.updated_at from memori.store_items i '
                     'where %s and not ((i.ns_id || '':'' || i.key) = any ($4)) '
                     'order by i.updated_at desc, i.id desc limit $5) s', v_where)
        into v_more using v_user, p_now, v_prefix, v_ids, v_need - cardinality(v_ids);
      v_ids := v_ids || v_more;
    end if;
    v_page := v_ids[p_offset + 1 : v_need];
  end if;

  if p_refresh_ttl and cardinality(v_page) > 0 then
    update memori.store_items i set expires_at = (p_now at time zone 'UTC' + i.ttl) at time zone 'UTC'
      from unnest(v_page) p(ref)
     where i.user_id = v_user and i.ns_id = split_part(p.ref, ':', 1)::integer
       and i.key = substr(p.ref, strpos(p.ref, ':') + 1) and i.ttl is not null;
  end if;

  return query
    select d.namespace, i.key, i.value, i.created_at, i.updated_at, i.expires_at, i.ttl,
           case when p_query_embedding is not null then
             (select case p_distance when 'cosine' then 1 - min(v.embedding operator(public.<=>) p_query_embedding)
                                     when 'l2' then -min(v.embedding operator(public.<->) p_query_embedding)
                                     else -min(v.embedding operator(public.<#>) p_query_embedding) end
                from memori.store_vectors v
               where v.user_id = i.user_id and v.ns_id = i.ns_id and v.key = i.key
                 and public.vector_dims(v.embedding) = v_dims)
           end,
           (p.ord + p_offset)::integer,
           case when v_vr[p.ord + p_offset] is not null then v_vr[p.ord + p_offset] end,
           case when v_tr[p.ord + p_offset] is not null then v_tr[p.ord + p_offset] end,
           case when v_tsq is not null and numnode(v_tsq) > 0 and i.text_fields is not null
                     and memori._store_item_tsv(i.value, i.text_fields) @@ v_tsq
                then ts_rank_cd(memori._store_item_tsv(i.value, i.text_fields), v_tsq) end
      from unnest(v_page) with ordinality p(ref, ord)
      join memori.store_items i on i.user_id = v_user and i.ns_id = split_part(p.ref, ':', 1)::integer
                               and i.key = substr(p.ref, strpos(p.ref, ':') + 1)
      join memori.store_namespaces d on d.user_id = v_user and d.id = i.ns_id
     order by p.ord;
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp
set hnsw.iterative_scan = 'relaxed_order'
set ivfflat.iterative_scan = 'relaxed_order';
comment on function memori.store_search(text, text[], jsonb, text, public.vector, integer, integer, boolean, timestamptz, text, text) is 'Search store items under a namespace prefix with a filter: newest first, or ranked by full text and/or vector similarity (reciprocal-rank fusion) without ever returning fewer than min(limit, matches); refreshes TTLs when asked.';
