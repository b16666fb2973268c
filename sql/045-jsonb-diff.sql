-- pymemdb SQL API, part 4.5: jsonb diff and patch (checkpoint versions are kept as patches).
--
-- Patch format. A patch is always a JSON object:
--
--   {}                 no change: the document is returned as it is
--   {"r": value}       replace: the result is value (used when either side is
--                      not an object: arrays, scalars, JSON null, type changes)
--   {"s": {key: value, ...},     set keys that are new or changed, where "p" does not apply
--    "d": [key, ...],            delete keys (each must be in the document)
--    "p": {key: patch, ...}}     patch keys whose old and new values are both objects
--                      applies to an object document only; empty members are
--                      omitted, and a key appears in at most one member.
--
-- memori._jsonb_patch(a, memori._jsonb_diff(a, b)) = b for any jsonb values a
-- and b (jsonb equality, so 1.0 and 1 count as the same number). A change deep
-- in a large object costs a patch proportional to its path, not the object.
-- SQL NULL: diff(NULL, b) = {"r": b}, diff(NULL, NULL) = {}, patch(NULL, {"r": b}) = b,
-- patch(a, NULL) = a; diff(a, NULL) raises PM001 (no patch turns a value into SQL NULL).

-------------------------------------------------------------------------------
-- _jsonb_diff: the patch that turns p_from into p_to
create or replace function memori._jsonb_diff(p_from jsonb, p_to jsonb) returns jsonb
as $func$
declare
  v_s     jsonb;
  v_d     jsonb;
  v_p     jsonb;
  v_patch jsonb := '{}'::jsonb;
begin
  if p_from is not distinct from p_to then
    return v_patch;
  end if;
  if p_to is null then
    perform memori._invalid('cannot diff to SQL NULL',
                            'Pass JSON null (''null''::jsonb) as the new value, or do not store a version.');
  end if;
  if p_from is null or jsonb_typeof(p_from) <> 'object' or jsonb_typeof(p_to) <> 'object' then
    return jsonb_build_object('r', p_to);
  end if;

  -- one pass over both objects' keys; t.value is NULL when the key was removed
  select jsonb_object_agg(x.key, x.to_value)
           filter (where x.to_value is not null and not x.both_objects),
         jsonb_agg(to_jsonb(x.key) order by x.key)
           filter (where x.to_value is null),
         jsonb_object_agg(x.key, memori._jsonb_diff(x.from_value, x.to_value))
           filter (where x.both_objects)
    into v_s, v_d, v_p
    from (select coalesce(f.key, t.key) as key, f.value as from_value, t.value as to_value,
                 coalesce(jsonb_typeof(f.value) = 'object' and jsonb_typeof(t.value) = 'object', false)
                   as both_objects
            from jsonb_each(p_from) f
            full join jsonb_each(p_to) t on t.key = f.key
           where f.value is distinct from t.value) x;

  if v_s is not null then
    v_patch := v_patch || jsonb_build_object('s', v_s);
  end if;
  if v_d is not null then
    v_patch := v_patch || jsonb_build_object('d', v_d);
  end if;
  if v_p is not null then
    v_patch := v_patch || jsonb_build_object('p', v_p);
  end if;
  return v_patch;
end
$func$ language plpgsql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._jsonb_diff(jsonb, jsonb) is 'The patch ({} | {"r": new} | {"s","d","p"}) that memori._jsonb_patch applies to p_from to get p_to; raises PM001 for p_to SQL NULL.';

-------------------------------------------------------------------------------
-- _jsonb_patch: apply a patch made by _jsonb_diff
create or replace function memori._jsonb_patch(p_doc jsonb, p_patch jsonb) returns jsonb
as $func$
declare
  c_hint constant text := 'A patch is {}, {"r": value} or an object with members "s" (object of new values), '
                          '"d" (array of key strings) and "p" (object of patches), each key in one member; '
                          '"s", "d" and "p" apply to an object. Build patches with memori._jsonb_diff(from, to).';
  v_s     jsonb;
  v_d     jsonb;
  v_p     jsonb;
  v_del   text[];
  v_bad   text;
  v_miss  text;
  v_sub   jsonb;
begin
  if p_patch is null or p_patch = '{}'::jsonb then
    return p_doc;
  end if;
  if jsonb_typeof(p_patch) <> 'object' then
    perform memori._invalid(format('patch must be a JSON object, got %s', jsonb_typeof(p_patch)), c_hint);
  end if;
  if p_patch ? 'r' then
    if p_patch <> jsonb_build_object('r', p_patch->'r') then
      perform memori._invalid('patch member "r" cannot be combined with other members', c_hint);
    end if;
    return p_patch->'r';
  end if;
  v_bad := (select string_agg(to_jsonb(k)::text, ', ' order by k)
              from jsonb_object_keys(p_patch - array['s', 'd', 'p']) k);
  if v_bad is not null then
    perform memori._invalid(format('patch has unknown members: %s', v_bad), c_hint);
  end if;
  if p_doc is null or jsonb_typeof(p_doc) <> 'object' then
    perform memori._invalid(format('patch members "s", "d" and "p" apply to an object, the document is %s',
                                   coalesce(jsonb_typeof(p_doc), 'SQL NULL')), c_hint);
  end if;

  v_s := p_patch->'s';
  v_d := p_patch->'d';
  v_p := p_patch->'p';
  if v_s is not null and jsonb_typeof(v_s) <> 'object' then
    perform memori._invalid(format('patch member "s" must be an object, got %s', jsonb_typeof(v_s)), c_hint);
  end if;
  if v_d is not null then
    if jsonb_typeof(v_d) <> 'array' then
      perform memori._invalid(format('patch member "d" must be an array, got %s', jsonb_typeof(v_d)), c_hint);
    end if;
    if exists (select from jsonb_array_elements(v_d) e where jsonb_typeof(e) <> 'string') then
      perform memori._invalid('patch member "d" must hold only key strings', c_hint);
    end if;
    v_del := array(select jsonb_array_elements_text(v_d));
    if not p_doc ?& v_del then
      perform memori._invalid('patch deletes a key the document does not have', c_hint
                              || ' The patch was made for another document.');
    end if;
  end if;
  if v_p is not null then
    if jsonb_typeof(v_p) <> 'object' then
      perform memori._invalid(format('patch member "p" must be an object, got %s', jsonb_typeof(v_p)), c_hint);
    end if;
    select string_agg(to_jsonb(e.key)::text, ', ' order by e.key) filter (where jsonb_typeof(e.value) <> 'object'),
           string_agg(to_jsonb(e.key)::text, ', ' order by e.key) filter (where not p_doc ? e.key)
      into v_bad, v_miss
      from jsonb_each(v_p) e;
    if v_bad is not null then
      perform memori._invalid(format('patch member "p" holds non-object patches for: %s', v_bad), c_hint);
    end if;
    if v_miss is not null then
      perform memori._invalid(format('patch member "p" patches keys the document does not have: %s', v_miss),
                              c_hint || ' The patch was made for another document.');
    end if;
  end if;
  if (v_s is not null and v_d is not null and v_s ?| v_del)
     or (v_p is not null and v_d is not null and v_p ?| v_del)
     or (v_s is not null and v_p is not null
         and exists (select from jsonb_object_keys(v_p) k where v_s ? k)) then
    perform memori._invalid('patch names a key in more than one of "s", "d" and "p"', c_hint);
  end if;

  if v_p is not null then
    v_sub := (select jsonb_object_agg(e.key, memori._jsonb_patch(p_doc->e.key, e.value)) from jsonb_each(v_p) e);
  end if;
  return (case when v_del is null then p_doc else p_doc - v_del end)
         || coalesce(v_s, '{}'::jsonb) || coalesce(v_sub, '{}'::jsonb);
end
$func$ language plpgsql immutable parallel safe security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._jsonb_patch(jsonb, jsonb) is 'Apply a memori._jsonb_diff patch to p_doc ({} and SQL NULL leave it unchanged); raises PM001 for a malformed patch.';
