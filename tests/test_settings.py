"""memori.settings values are checked when written: memori.setting_rules(), the CHECK settings_value_valid."""

from __future__ import annotations

import psycopg
import pytest

import pymemdb
from pymemdb.errors import InvalidArgument, wrap_exceptions
from tests.helpers import assert_sqlstate, rows, value

UPDATE = "update memori.settings set value = %s::jsonb where key = %s"


def test_every_setting_pymemdb_reads_has_a_rule_and_every_default_keeps_it(conn: psycopg.Connection) -> None:
    missing = rows(conn, "select s.key from memori.settings s where not exists "
                         "(select from memori.setting_rules() r where r.key = s.key)")
    assert missing == []
    # every seeded value passes its rule (the defaults are written through the constraint on every install)
    assert value(conn, "select count(*) from memori.settings s "
                       "where memori._setting_valid(s.key, s.value, memori._setting_rule_book())") == \
        value(conn, "select count(*) from memori.settings")
    assert value(conn, "select count(*) from memori.setting_rules() where rule is null") == 0


@pytest.mark.parametrize(
    ("key", "good", "bad"),
    [
        ("cleanup.enabled", ["true", "false"], ['"true"', "1", "null"]),
        ("vm.search_ef_search", ["1", "1000", "200"], ["0", "1001", "2.5", '"200"', "null"]),
        ("budget.max_conflicts", ["0", "100000"], ["-1", "0.5"]),
        ("budget.recency_decay_rate", ["0", "0.05", "3"], ["-0.01", '"fast"']),
        ("budget.density_code", ["0.001", "3.5"], ["0", "-1"]),
        ("cleanup.work_share", ["1", "0.03", "0.0001"], ["0", "1.0001", "-0.5"]),
        ("compression.preserve_recent_max_share", ["0", "1", "0.4"], ["-0.01", "1.01"]),
        ("vm.prepass_useful_level", ["0", "3"], ["-1", "4"]),
        ("budget.max_dropped_ids", ['"all"', "0", "1000"], ['"some"', "-1", "1.5"]),
        ("vm.eviction_policy", ['"lru"', '"modality_aware_lru"'], ['"lfu"', '"LRU"', "1"]),
        ("vm.gc_grace", ['"7 days"', '"0 seconds"', '"PT1H"'], ['"-1 day"', '"7 dayz"', "7"]),
        ("mcp.token_max_ttl", ['"1 second"', '"366 days"'], ['"0 seconds"', '"-1 day"']),
        ("vm.autopin_pattern", ['"^(system|goal)_"', '""'], ['"x("', "1"]),
        ("checkpoint.auto_triggers", ['[]', '["task_complete"]'], ['["a", 1]', '"task_complete"']),
        ("compression.aging_ratios", ["[1]", "[0.6, 0.5, 0.4]"], ["[]", "[0.6, 0]", "[1.1]", '["0.5"]']),
        ("reliability.model_factors", ["[[70, 0.95], [0, 0.3]]", "[]"],
         ["[[1, 2]]", "[[1]]", "[1, 0.5]", "[[-1, 0.5]]", '[[1, "x"]]']),
        ("context.default_ttl_ms", ['{"temporary_state": 3600000}', "{}"],
         ['{"a": 1.5}', '{"a": 0}', '{"a": "60"}', "[]"]),
    ],
)
def test_a_value_is_checked_against_its_rule_when_written(
    conn: psycopg.Connection, key: str, good: list[str], bad: list[str]
) -> None:
    for v in good:
        conn.execute(UPDATE, (v, key))
        assert value(conn, "select value from memori.settings where key = %s", (key,)) == \
            value(conn, "select %s::jsonb", (v,))
    kept = value(conn, "select value::text from memori.settings where key = %s", (key,))
    rule = value(conn, "select rule from memori.setting_rules() where key = %s", (key,))
    for v in bad:
        err = assert_sqlstate(conn, "PM001", UPDATE, (v, key))
        assert key in str(err) and rule in str(err)  # the key and what it must be
        assert "setting_rules()" in (err.diag.message_hint or "")
        assert value(conn, "select value::text from memori.settings where key = %s", (key,)) == kept  # unchanged


def test_a_key_without_a_rule_is_not_checked_and_rows_before_the_rules_stay(conn: psycopg.Connection) -> None:
    conn.execute("insert into memori.settings (key, value, description) values ('my_app.flag', '\"anything\"', 'mine')")
    assert value(conn, "select convalidated from pg_catalog.pg_constraint where conname = 'settings_value_valid'") \
        is False  # NOT VALID: an upgrade never fails on a value written before the rules
    # a re-install keeps the values (defaults are inserted on conflict do nothing) and the constraint
    from pymemdb.install import install

    install(conn.info.dsn)
    assert value(conn, "select value from memori.settings where key = 'my_app.flag'") == "anything"
    assert value(conn, "select count(*) from pg_catalog.pg_constraint where conname = 'settings_value_valid'") == 1


def test_the_client_lists_the_rules(db: pymemdb.Database) -> None:
    rules = {r.key: r for r in db.setting_rules()}
    assert rules["vm.search_ef_search"].rule == "a whole number from 1 to 1000"
    assert (rules["vm.search_ef_search"].min_value, rules["vm.search_ef_search"].max_value) == (1, 1000)
    assert rules["vm.eviction_policy"].choices == "lru|importance_weighted_lru|modality_aware_lru"
    with pytest.raises(InvalidArgument, match=r"vm\.search_ef_search"), wrap_exceptions(), db.transaction() as cur:
        cur.execute("update memori.settings set value = '0' where key = 'vm.search_ef_search'")  # the one error tree
