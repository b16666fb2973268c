"""memori._jsonb_diff / memori._jsonb_patch: exact round trips, small patches, strict patch checking."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from tests.helpers import assert_sqlstate, value

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# -- strategies ----------------------------------------------------------------
# No NUL (jsonb rejects \u0000) and no lone surrogates (not encodable as UTF-8).
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
# A few shared keys so that two random objects often overlap (and diff recurses).
KEYS = st.sampled_from(["a", "b", "c", "", "ключ", 'q"uo\\te', "emoji 🎉"]) | TEXT
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=8)
SMALL = st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53) | TEXT


def _edit(draw: st.DrawFn, doc: Any) -> Any:
    """doc with one small random change somewhere inside it (a new copy; doc is not modified)."""
    if isinstance(doc, dict) and doc and draw(st.integers(0, 3)) > 0:
        key = draw(st.sampled_from(sorted(doc)))
        op = draw(st.sampled_from(["recurse", "recurse", "delete", "set", "null"]))
        new = dict(doc)
        if op == "recurse":
            new[key] = _edit(draw, doc[key])
        elif op == "delete":
            del new[key]
        elif op == "set":
            new[key] = draw(JSON)
        else:
            new[key] = None
        return new
    if isinstance(doc, dict):
        return {**doc, draw(KEYS): draw(JSON)}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        index = draw(st.integers(0, len(doc) - 1))
        return [_edit(draw, item) if i == index else item for i, item in enumerate(doc)]
    return draw(JSON)


@st.composite
def edited_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    before = draw(OBJECTS | JSON)
    after = before
    for _ in range(draw(st.integers(1, 4))):
        after = _edit(draw, after)
    return before, after


# -- helpers -------------------------------------------------------------------
def diff(conn: psycopg.Connection, a: Any, b: Any) -> Any:
    return value(conn, "select memori._jsonb_diff(%s, %s)", (a, b))


def patch(conn: psycopg.Connection, doc: Any, p: Any) -> Any:
    return value(conn, "select memori._jsonb_patch(%s, %s)", (doc, p))


def assert_round_trip(conn: psycopg.Connection, a: Any, b: Any) -> Any:
    """patch(a, diff(a, b)) = b, compared as jsonb inside PostgreSQL; returns the patch."""
    row = conn.execute("""
        select d, memori._jsonb_patch(a, d) = b, (a = b) = (d = '{}'::jsonb)
          from (select %s::jsonb as a, %s::jsonb as b) v, memori._jsonb_diff(v.a, v.b) d""",
                       (Jsonb(a), Jsonb(b))).fetchone()
    assert row is not None
    the_patch, round_trips, empty_iff_equal = row
    assert round_trips, f"round trip failed: a={a!r} b={b!r} patch={the_patch!r}"
    assert empty_iff_equal, f"the patch is {{}} exactly when a = b: a={a!r} b={b!r} patch={the_patch!r}"
    assert_well_formed(the_patch)
    return the_patch


def assert_well_formed(p: Any) -> None:
    """The documented format: {} | {"r": v} | non-empty "s"/"d"/"p" members, each key in one member."""
    assert isinstance(p, dict)
    if "r" in p:
        assert list(p) == ["r"]
        return
    assert set(p) <= {"s", "d", "p"}
    assert all(p[member] for member in p), f"empty member in {p!r}"
    s, d, sub = p.get("s", {}), p.get("d", []), p.get("p", {})
    assert isinstance(s, dict) and isinstance(d, list) and isinstance(sub, dict)
    assert all(isinstance(k, str) for k in d)
    assert not (set(s) & set(d)) and not (set(s) & set(sub)) and not (set(d) & set(sub))
    for child in sub.values():
        assert child and "r" not in child, "p recurses only into changed objects"
        assert_well_formed(child)


# -- properties ----------------------------------------------------------------
@PROPERTY
@given(a=JSON | OBJECTS, b=JSON | OBJECTS)
def test_round_trip_random_pairs(conn: psycopg.Connection, a: Any, b: Any) -> None:
    assert_round_trip(conn, a, b)
    assert_round_trip(conn, b, a)


@PROPERTY
@given(pair=edited_pairs())
def test_round_trip_small_edits(conn: psycopg.Connection, pair: tuple[Any, Any]) -> None:
    before, after = pair
    assert_round_trip(conn, before, after)
    assert_round_trip(conn, after, before)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(LEAVES, min_size=200, max_size=200), index=st.integers(0, 199), new=SMALL,
       depth=st.integers(0, 3))
def test_one_key_change_gives_a_small_patch(conn: psycopg.Connection, values: list[Any], index: int,
                                            new: Any, depth: int) -> None:
    """Changing one key of a 200-key object, itself up to 3 levels deep: the patch is the path plus the value."""
    big = {f"key{i}": v for i, v in enumerate(values)}
    changed = {**big, f"key{index}": new if new != big[f"key{index}"] else [new]}
    a, b = big, changed
    for key in ["inner", "middle", "outer"][3 - depth:]:
        a, b = {key: a, "sibling": big}, {key: b, "sibling": big}
    size = len(json.dumps(assert_round_trip(conn, a, b)))
    assert size <= 30 + len(json.dumps(changed[f"key{index}"])) + 20 * depth
    assert size * 10 < len(json.dumps(b))


# -- explicit cases --------------------------------------------------------------
@pytest.mark.parametrize("doc", [{}, [], None, 0, 1.5, "", "text", [1, [2]], {"a": {"b": [None, {"c": 1}]}}])
def test_identical_values_give_the_empty_patch(conn: psycopg.Connection, doc: Any) -> None:
    assert diff(conn, Jsonb(doc), Jsonb(doc)) == {}
    assert patch(conn, Jsonb(doc), Jsonb({})) == doc
    assert value(conn, "select memori._jsonb_patch(%s, '{}') is not null", (Jsonb(doc),))


def test_equal_numbers_count_as_identical(conn: psycopg.Connection) -> None:
    assert value(conn, "select memori._jsonb_diff('{\"a\": 1.0}', '{\"a\": 1}')") == {}


@pytest.mark.parametrize(("a", "b"), [
    ({"a": 1}, [1]), ([1], {"a": 1}), ({"a": 1}, "a"), ([1, 2], [1, 2, 3]), (1, 2), (None, {}), ({}, None),
    ("x", None), (True, False),
])
def test_anything_but_two_objects_is_replaced(conn: psycopg.Connection, a: Any, b: Any) -> None:
    assert diff(conn, Jsonb(a), Jsonb(b)) == {"r": b}
    assert patch(conn, Jsonb(a), Jsonb({"r": b})) == b


def test_object_patch_format(conn: psycopg.Connection) -> None:
    a = {"keep": {"x": 1}, "gone": 1, "same": [1], "change": 1, "nest": {"deep": {"k": 1, "drop": 2}, "n": 0},
         "to_arr": {"a": 1}}
    b = {"keep": {"x": 1}, "new": None, "same": [1], "change": "1", "nest": {"deep": {"k": 1}, "n": 0},
         "to_arr": [1]}
    assert diff(conn, Jsonb(a), Jsonb(b)) == {
        "s": {"new": None, "change": "1", "to_arr": [1]},
        "d": ["gone"],
        "p": {"nest": {"p": {"deep": {"d": ["drop"]}}}},
    }
    assert_round_trip(conn, a, b)


def test_nested_delete(conn: psycopg.Connection) -> None:
    a = {"a": {"b": {"c": 1, "d": 2}}}
    assert diff(conn, Jsonb(a), Jsonb({"a": {"b": {"c": 1}}})) == {"p": {"a": {"p": {"b": {"d": ["d"]}}}}}
    assert diff(conn, Jsonb(a), Jsonb({"a": {}})) == {"p": {"a": {"d": ["b"]}}}
    assert patch(conn, Jsonb(a), Jsonb({"p": {"a": {"p": {"b": {"d": ["d"]}}}}})) == {"a": {"b": {"c": 1}}}


def test_json_null_is_a_value_not_a_deletion(conn: psycopg.Connection) -> None:
    assert diff(conn, Jsonb({"a": 1}), Jsonb({"a": None})) == {"s": {"a": None}}
    assert patch(conn, Jsonb({"a": 1}), Jsonb({"s": {"a": None}})) == {"a": None}
    assert diff(conn, Jsonb({"a": None}), Jsonb({})) == {"d": ["a"]}
    assert diff(conn, Jsonb({}), Jsonb({"a": None})) == {"s": {"a": None}}
    # a document that becomes JSON null is JSON null after the patch, not SQL NULL
    to_null = "select memori._jsonb_patch('{\"a\": 1}', memori._jsonb_diff('{\"a\": 1}', 'null'))"
    assert value(conn, f"select jsonb_typeof(({to_null}))") == "null"


def test_sql_null(conn: psycopg.Connection) -> None:
    assert diff(conn, None, Jsonb({"a": 1})) == {"r": {"a": 1}}
    assert diff(conn, None, Jsonb(None)) == {"r": None}
    assert diff(conn, None, None) == {}
    assert patch(conn, None, Jsonb({"r": [1]})) == [1]
    assert patch(conn, Jsonb({"a": 1}), None) == {"a": 1}
    assert value(conn, "select memori._jsonb_patch(null, null) is null")
    assert value(conn, "select memori._jsonb_patch(null, '{}') is null")
    assert_sqlstate(conn, "PM001", "select memori._jsonb_diff('{}', null)")


@pytest.mark.parametrize(("doc", "bad"), [
    ({}, []),
    ({}, 1),
    ({}, "s"),
    ({}, None),
    ({}, {"r": 1, "s": {}}),
    ({}, {"x": 1}),
    ({}, {"s": {}, "set": {}}),
    ({}, {"s": []}),
    ({}, {"s": 1}),
    ({"a": 1}, {"d": "a"}),
    ({"a": 1}, {"d": [1]}),
    ({"a": 1}, {"d": ["b"]}),
    ({"a": {}}, {"p": []}),
    ({"a": {}}, {"p": {"a": 1}}),
    ({"a": {}}, {"p": {"b": {}}}),
    ({"a": {}}, {"p": {"a": {"zz": 1}}}),
    ({"a": {}}, {"p": {"a": {"d": ["missing"]}}}),
    ({"a": 1}, {"s": {"a": 2}, "d": ["a"]}),
    ({"a": {}}, {"s": {"a": 2}, "p": {"a": {}}}),
    ({"a": {}}, {"d": ["a"], "p": {"a": {}}}),
    ([1], {"s": {"a": 1}}),
    ("x", {"d": ["a"]}),
    ({"a": 1}, {"p": {"a": {"s": {"b": 1}}}}),
])
def test_malformed_patch_raises_pm001(conn: psycopg.Connection, doc: Any, bad: Any) -> None:
    assert_sqlstate(conn, "PM001", "select memori._jsonb_patch(%s, %s)", (Jsonb(doc), Jsonb(bad)))


def test_object_patch_on_sql_null_raises_pm001(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM001", "select memori._jsonb_patch(null, %s)", (Jsonb({"s": {"a": 1}}),))


def test_functions_are_immutable_and_parallel_safe(conn: psycopg.Connection) -> None:
    assert value(conn, """
        select array_agg(concat(p.proname, ':', p.provolatile, p.proparallel, p.prosecdef) order by p.proname)
          from pg_proc p
         where p.pronamespace = 'memori'::regnamespace and p.proname in ('_jsonb_diff', '_jsonb_patch')""") \
        == ["_jsonb_diff:isf", "_jsonb_patch:isf"]


def test_large_objects_are_linear(conn: psycopg.Connection) -> None:
    """20,000 keys with 200 nested changes: well under a second (quadratic work would take minutes)."""
    a = {f"k{i}": {"n": i, "tags": ["x", i]} for i in range(20000)}
    b = {**a, **{f"k{i}": {"n": -i, "tags": ["x", i]} for i in range(0, 20000, 100)}, "extra": 1}
    conn.execute("create temporary table docs as select %s::jsonb as a, %s::jsonb as b", (Jsonb(a), Jsonb(b)))
    started = time.perf_counter()
    ok, size = conn.execute("""
        select memori._jsonb_patch(a, d) = b and memori._jsonb_patch(b, memori._jsonb_diff(b, a)) = a,
               length(d::text)
          from docs, memori._jsonb_diff(a, b) d""").fetchone()  # type: ignore[misc]
    elapsed = time.perf_counter() - started
    assert ok
    assert size < 200 * 40
    assert elapsed < 3, f"diff + patch of 20,000 keys took {elapsed:.2f} s"
