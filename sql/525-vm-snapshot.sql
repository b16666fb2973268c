-- pymemdb SQL API: the virtual memory's part of a conversation snapshot (seeds 03 and 04).
--
-- memori.snapshot_create (sql/420-compression-snapshots.sql) stores, next to the
-- messages, checkpoints and goals, each page's version and the working set;
-- memori.snapshot_restore brings them back: a page whose content changed gets
-- its snapshotted content again as a new version (page_versions keeps every
-- version, so nothing is lost), and the working set is mapped as it was.

-------------------------------------------------------------------------------
-- _vm_snapshot_state: a session's page versions and working set, or NULL
create or replace function memori._vm_snapshot_state(p_session_id text) returns jsonb
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
begin
  -- every table names the user itself (a correlated s.user_id reached every shard on a cluster)
  return (
      select jsonb_build_object(
               'pages', coalesce((select jsonb_agg(jsonb_build_object('page_id', p.page_id, 'version', p.version)
                                                   order by p.page_id)
                                    from memori.vm_visible_pages p
                                   where p.user_id = v_user and p.viewer_session_id = p_session_id), '[]'),
               'working_set', coalesce((select jsonb_agg(jsonb_build_object('page_id', w.page_id, 'level', w.level,
                                                                            'pinned', w.pinned) order by w.page_id)
                                          from memori.working_set w
                                         where w.user_id = v_user and w.session_id = p_session_id), '[]'))
        from memori.vm_sessions s
       where s.user_id = v_user and s.session_id = p_session_id);
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_snapshot_state(text) is 'The VM state a snapshot keeps: each page''s version and the working set (NULL when the session has no VM).';

-------------------------------------------------------------------------------
-- _vm_snapshot_restore: bring pages and the working set back to a snapshot
create or replace function memori._vm_snapshot_restore(p_session_id text, p_state jsonb, p_now timestamptz)
returns jsonb
as $func$
declare
  v_s        memori.vm_sessions;
  v_item     record;
  v_id       bigint;
  v_page     memori.pages;
  v_old      memori.page_versions;
  v_restored integer := 0;
  v_missing  text[] := '{}';
  v_unmapped integer := 0;
  v_mapped   integer := 0;
begin
  if p_state is null or jsonb_typeof(p_state) = 'null' then
    return null;  -- the session had no virtual memory when the snapshot was taken
  end if;
  v_s := memori._vm_session(p_session_id, null, false, p_now);  -- locks the VM session

  -- contents: pages changed since the snapshot get the snapshotted version back, as a new version
  for v_item in select x.page_id, x.version
                  from jsonb_to_recordset(p_state->'pages') as x(page_id text, version integer)
                 order by x.page_id loop
    v_id := memori._page_row(v_s.user_id, p_session_id, v_item.page_id);
    select * into v_page from memori.pages where user_id = v_s.user_id and id = v_id;
    if not found then
      v_missing := v_missing || v_item.page_id;
      continue;
    end if;
    continue when v_page.version = v_item.version;
    select * into v_old from memori.page_versions
     where user_id = v_s.user_id and session_id = p_session_id and page_id = v_item.page_id
       and version = v_item.version;
    if not found then
      v_missing := v_missing || v_item.page_id;
      continue;
    end if;
    perform memori.page_update(p_session_id, v_item.page_id, v_old.content, v_old.data, v_old.tokens, 'system', p_now);
    v_restored := v_restored + 1;
  end loop;

  -- the working set: unmap what the snapshot did not have, then map what it had at its level
  for v_item in select w.page_id, w.level from memori.working_set w
                 where w.user_id = v_s.user_id and w.session_id = p_session_id
                   and not exists (select from jsonb_to_recordset(p_state->'working_set') as x(page_id text)
                                    where x.page_id = w.page_id)
                 order by w.page_id loop
    perform memori._page_write(v_s.user_id, p_session_id, array[v_item.page_id]);
    delete from memori.working_set
     where user_id = v_s.user_id and session_id = p_session_id and page_id = v_item.page_id;
    update memori.pages set tier = 'L1', compression_level = 0, last_evict_turn = v_s.turn
     where user_id = v_s.user_id and session_id = p_session_id and page_id = v_item.page_id;
    perform memori._page_mutation(v_s, v_item.page_id, 'evict', 'L0', 'L1', v_item.level, null, null, 'system',
                                  'snapshot_restore', p_now);
    v_unmapped := v_unmapped + 1;
  end loop;
  for v_item in select x.page_id, x.level, x.pinned
                  from jsonb_to_recordset(p_state->'working_set') as x(page_id text, level integer, pinned boolean)
                 order by x.pinned desc, x.page_id loop
    v_id := memori._page_row(v_s.user_id, p_session_id, v_item.page_id);
    select * into v_page from memori.pages where user_id = v_s.user_id and id = v_id;
    continue when not found;
    perform memori._vm_map(v_s, v_page, v_item.level, case when v_item.pinned then true end, 'fault_in', 'system',
                           'snapshot_restore', p_now);
    v_mapped := v_mapped + 1;
  end loop;
  perform memori._vm_l1_overflow(v_s, 'system', p_now);
  return jsonb_build_object('pages_restored', v_restored, 'pages_missing', to_jsonb(v_missing),
                            'unmapped', v_unmapped, 'mapped', v_mapped);
end
$func$ language plpgsql volatile security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori._vm_snapshot_restore(text, jsonb, timestamptz) is 'Restore a snapshot''s VM state: changed pages get their snapshotted content as a new version; the working set is mapped as it was (logged).';
