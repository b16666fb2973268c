-- pymemdb SQL API, part 13: the mutation log and replay (seed 03, 2.7).
--
-- memori.page_mutations is append-only: rows are inserted by the VM functions,
-- read for replay, and deleted only by the retention engine. Privileges say so
-- (sql/900-security.sql: the app role may select and insert, the cleaner
-- delete; an UPDATE is refused with 42501), not a trigger: Citus refuses
-- triggers on a distributed table. The state of a page at turn T is its last
-- mutation with turn <= T: it was in L0 exactly when that mutation left it in
-- L0, at that mutation's level.

-------------------------------------------------------------------------------
-- vm_context_at_turn: the pages in L0 at the end of a turn, replayed from the log
-- p_turn: the turn whose end state is replayed (mutations of turns <= p_turn); NULL: no rows
create or replace function memori.vm_context_at_turn(p_session_id text, p_turn integer)
returns setof memori.vm_page_state
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
begin
  return query
    select m.page_id, m.level_after, m.tokens_after
      from (select distinct on (page_id) page_id, tier_after, level_after, tokens_after
              from memori.page_mutations
             where user_id = v_user and session_id = p_session_id and turn <= p_turn
             order by page_id, turn desc, id desc) m
     where m.tier_after = 'L0'
     order by m.page_id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.vm_context_at_turn(text, integer) is 'Exactly which pages (and at which level and tokens) were in L0 at the end of a turn, replayed from memori.page_mutations.';

-------------------------------------------------------------------------------
-- page_history: every mutation of a page, oldest first
-- p_page_id: the page whose logged mutations are listed (of the session's own log; none for an unknown id)
create or replace function memori.page_history(p_session_id text, p_page_id text)
returns setof memori.page_mutations
as $func$
declare
  v_user text := memori._vm_user(p_session_id);
begin
  return query
    select * from memori.page_mutations
     where user_id = v_user and session_id = p_session_id and page_id = p_page_id
     order by id;
end
$func$ language plpgsql stable security invoker
set search_path = pg_catalog, memori, pg_temp;
comment on function memori.page_history(text, text) is 'Every logged mutation of a page (create, fault_in, evict, compress, pin, unpin, update), oldest first.';
