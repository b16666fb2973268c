"""Long-term memory store through SQL (issue 17): put/get/delete, TTL at the boundary, filters,
search (full text, vectors, fusion, selective filters), namespaces, retention, isolation."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, rows, value

SEC = timedelta(seconds=1)
MIN = timedelta(minutes=1)


def put(conn: psycopg.Connection, ns: list[str], key: str, val: Any, *, user: str = "alice",
        ttl: timedelta | None = None, at=T0, **kw: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    extra = "".join(f", {k} => %({k})s" for k in kw)
    row = one(conn, "select * from memori.store_put(p_user_id => %(u)s, p_namespace => %(ns)s, p_key => %(k)s, "
                    f"p_value => %(v)s::jsonb, p_ttl => %(ttl)s, p_now => %(at)s{extra})",
              {"u": user, "ns": ns, "k": key, "v": json.dumps(val), "ttl": ttl, "at": at, **kw})
    assert row is not None
    return row


def get(conn: psycopg.Connection, ns: list[str], key: str, *, user: str = "alice", at=T0,  # type: ignore[no-untyped-def]
        refresh: bool = True) -> dict[str, Any] | None:
    return one(conn, "select * from memori.store_get(%s, %s, %s, %s, %s)", (user, ns, key, refresh, at))


def search(conn: psycopg.Connection, prefix: list[str], *, user: str = "alice", at=T0,  # type: ignore[no-untyped-def]
           filter: Any = None, **kw: Any) -> list[dict[str, Any]]:
    extra = "".join(f", {k} => %({k})s" for k in kw)
    return rows(conn, "select * from memori.store_search(p_user_id => %(u)s, p_namespace_prefix => %(p)s, "
                      f"p_filter => %(f)s::jsonb, p_now => %(at)s{extra})",
                {"u": user, "p": prefix, "f": None if filter is None else json.dumps(filter), "at": at, **kw})


def keys(found: list[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in found]


def test_put_get_update_delete(conn: psycopg.Connection) -> None:
    first = put(conn, ["docs"], "d1", {"title": "a"})
    assert first["created_at"] == first["updated_at"] == T0 and first["expires_at"] is None
    again = put(conn, ["docs"], "d1", {"title": "b"}, at=T0 + SEC)
    assert again["created_at"] == T0 and again["updated_at"] == T0 + SEC
    assert get(conn, ["docs"], "d1")["value"] == {"title": "b"}  # type: ignore[index]
    assert get(conn, ["other"], "d1") is None
    assert value(conn, "select memori.store_delete('alice', '{docs}', 'd1')") is True
    assert value(conn, "select memori.store_delete('alice', '{docs}', 'd1')") is False
    assert get(conn, ["docs"], "d1") is None


@pytest.mark.parametrize(("offset", "visible"), [(-SEC, True), (timedelta(0), False), (SEC, False)])
def test_expiry_boundary(conn: psycopg.Connection, offset: timedelta, visible: bool) -> None:
    """An item with a 1-minute TTL is readable until expires_at, not at it, whatever the cleaner did."""
    put(conn, ["n"], "k", {"x": 1}, ttl=MIN)
    at = T0 + MIN + offset
    assert (get(conn, ["n"], "k", at=at, refresh=False) is not None) is visible
    assert (len(search(conn, ["n"], at=at)) == 1) is visible
    assert (rows(conn, "select * from memori.store_list_namespaces('alice', p_now => %s)", (at,)) != []) is visible
    assert (len(rows(conn, "select * from memori.store_get_many('alice', '[[\"n\"]]', '{k}', false, %s)",
                     (at,))) == 1) is visible


def test_refresh_on_read_moves_expiry(conn: psycopg.Connection) -> None:
    put(conn, ["n"], "k", {"x": 1}, ttl=MIN)
    # a read without refresh leaves it
    assert get(conn, ["n"], "k", at=T0 + 50 * SEC, refresh=False)["expires_at"] == T0 + MIN  # type: ignore[index]
    # a read with refresh moves it to read time + ttl
    assert get(conn, ["n"], "k", at=T0 + 50 * SEC)["expires_at"] == T0 + 50 * SEC + MIN  # type: ignore[index]
    assert get(conn, ["n"], "k", at=T0 + 50 * SEC + MIN - SEC, refresh=False) is not None
    assert get(conn, ["n"], "k", at=T0 + 50 * SEC + MIN, refresh=False) is None
    # an expired item is not revived by a refreshing read
    assert get(conn, ["n"], "k", at=T0 + 50 * SEC + MIN) is None
    # search refreshes only when asked
    put(conn, ["s"], "k", {"x": 1}, ttl=MIN)
    search(conn, ["s"], at=T0 + 30 * SEC)
    assert get(conn, ["s"], "k", refresh=False)["expires_at"] == T0 + MIN  # type: ignore[index]
    search(conn, ["s"], at=T0 + 30 * SEC, p_refresh_ttl=True)
    assert get(conn, ["s"], "k", refresh=False)["expires_at"] == T0 + 30 * SEC + MIN  # type: ignore[index]
    # get_many refreshes too
    rows(conn, "select * from memori.store_get_many('alice', '[[\"s\"]]', '{k}', true, %s)", (T0 + 40 * SEC,))
    assert get(conn, ["s"], "k", refresh=False)["expires_at"] == T0 + 40 * SEC + MIN  # type: ignore[index]


def test_fractional_ttl(conn: psycopg.Connection) -> None:
    put(conn, ["n"], "k", {"x": 1}, ttl=timedelta(seconds=1.5))
    assert get(conn, ["n"], "k", at=T0 + timedelta(seconds=1.4), refresh=False) is not None
    assert get(conn, ["n"], "k", at=T0 + timedelta(seconds=1.5), refresh=False) is None


def test_put_over_an_expired_item_starts_a_new_one(conn: psycopg.Connection) -> None:
    put(conn, ["n"], "k", {"x": 1}, ttl=MIN)
    row = put(conn, ["n"], "k", {"x": 2}, at=T0 + 2 * MIN)
    assert row["created_at"] == T0 + 2 * MIN and row["expires_at"] is None


def test_numeric_filters_compare_numbers(conn: psycopg.Connection) -> None:
    """#7684: 9 < 10 as numbers; strings stay strings; a number never matches a string."""
    for key, score in [("a", 2), ("b", 9), ("c", 10), ("d", 11), ("e", 9.5)]:
        put(conn, ["scores"], key, {"score": score})
    put(conn, ["scores"], "s", {"score": "10"})

    def got(f: Any) -> list[Any]:
        return sorted(r["value"]["score"] for r in search(conn, ["scores"], filter=f) if r["key"] != "s")

    assert got({"score": {"$gte": 10}}) == [10, 11]
    assert got({"score": {"$gt": 9}}) == [9.5, 10, 11]
    assert got({"score": {"$lt": 10}}) == [2, 9, 9.5]
    assert got({"score": {"$lte": 9}}) == [2, 9]
    assert got({"score": {"$gt": 2, "$lt": 10}}) == [9, 9.5]
    assert keys(search(conn, ["scores"], filter={"score": {"$gte": "1"}})) == ["s"]  # string compare only
    assert sorted(keys(search(conn, ["scores"], filter={"score": 10}))) == ["c"]  # number equality, not "10"
    assert sorted(keys(search(conn, ["scores"], filter={"score": {"$eq": 10.0}}))) == ["c"]


def test_filters_strings_booleans_nested_ne(conn: psycopg.Connection) -> None:
    put(conn, ["f"], "1", {"name": "apple", "ok": True, "meta": {"lang": "en", "n": 3}, "tags": ["a", "b"]})
    put(conn, ["f"], "2", {"name": "banana", "ok": False, "meta": {"lang": "fr", "n": 12}})
    put(conn, ["f"], "3", {"name": "Cherry"})

    def got(f: Any) -> list[str]:
        return sorted(keys(search(conn, ["f"], filter=f)))

    assert got({"name": {"$gt": "apple"}}) == ["2"]  # byte order: "Cherry" < "apple"
    assert got({"name": {"$lt": "b"}}) == ["1", "3"]
    assert got({"ok": True}) == ["1"]
    assert got({"ok": {"$gt": False}}) == ["1"]
    assert got({"meta": {"lang": "fr"}}) == ["2"]          # nested object: a subset match
    assert got({"meta.n": {"$gte": 10}}) == ["2"]          # dotted key: a path
    assert got({"meta": {"n": {"$lt": 10}}}) == ["1"]
    assert got({"tags": ["a", "b"]}) == ["1"]
    assert got({"ok": {"$ne": True}}) == ["2", "3"]        # a missing field is not equal
    assert got({"missing": None}) == ["1", "2", "3"]
    assert got({"name": "apple", "ok": True}) == ["1"]


@pytest.mark.parametrize("bad", [{"score": {"$foo": 1}}, {"$or": []}, {"score": {"$gt": [1]}}, [1]])
def test_bad_filter_is_pm120(conn: psycopg.Connection, bad: Any) -> None:
    err = assert_sqlstate(conn, "PM120", "select * from memori.store_search('alice', '{}', %s::jsonb)",
                          (json.dumps(bad),))
    assert err.diag.message_hint


@pytest.mark.parametrize("ns", [[], [""], ["a", None]])
def test_bad_namespace_is_pm121(conn: psycopg.Connection, ns: list[Any]) -> None:
    assert_sqlstate(conn, "PM121", "select * from memori.store_put('alice', %s::text[], 'k', '{}')", (ns,))


@pytest.mark.parametrize("paths", [["a]["], ["title", "b[x"], ["c[1]]"]])
def test_bad_index_path_is_refused_at_put_and_stores_nothing(conn: psycopg.Connection, paths: list[str]) -> None:
    """A malformed field path is PM001 when the item is written, not later in every search that reads it."""
    err = assert_sqlstate(conn, "PM001", "select * from memori.store_put('alice', '{p}', 'k', '{\"a\": \"x\"}',"
                                         " p_index => %s)", (paths,))
    assert "invalid field path" in err.diag.message_primary and err.diag.message_hint
    many = json.dumps([{"namespace": ["p"], "key": "m", "value": {"a": "x"}, "index": paths}])
    assert_sqlstate(conn, "PM001", "select memori.store_put_many('alice', %s::jsonb)", (many,))
    assert get(conn, ["p"], "k") is None and get(conn, ["p"], "m") is None
    # valid paths of every form still go in, and search reads them
    put(conn, ["p"], "ok", {"a": {"b": ["x"]}, "t": ["fox"]}, p_index=["a.b[*]", "t[0]", "t[-1]", "$"])
    assert keys(search(conn, ["p"], p_query="fox")) == ["ok"]


def test_search_without_query_is_newest_first_with_paging(conn: psycopg.Connection) -> None:
    for i in range(5):
        put(conn, ["p", str(i % 2)], f"k{i}", {"i": i}, at=T0 + i * SEC)
    put(conn, ["pp"], "other", {"i": 9})  # ("pp",) is not under ("p",)
    assert keys(search(conn, ["p"])) == ["k4", "k3", "k2", "k1", "k0"]
    assert keys(search(conn, ["p"], p_limit=2, p_offset=2)) == ["k2", "k1"]
    assert keys(search(conn, ["p", "1"])) == ["k3", "k1"]
    assert len(search(conn, [])) == 6


@pytest.mark.parametrize("exact_max", [1000, 0])  # few matches read by key; many: scans (and the GIN index)
def test_full_text_search_without_embeddings(conn: psycopg.Connection, exact_max: int) -> None:
    conn.execute("update memori.settings set value = %s::jsonb where key = 'store.search_exact_max'",
                 (str(exact_max),))
    if not exact_max:
        assert value(conn, "select memori.store_index_ensure(1, p_method => 'text')") == "idx_store_items_search_tsv"
    put(conn, ["d"], "fox", {"text": "The quick brown fox jumps"}, at=T0)
    put(conn, ["d"], "dog", {"text": "A lazy dog sleeps"}, at=T0 + SEC)
    put(conn, ["d"], "foxes", {"text": "foxes and more foxes", "n": 1}, at=T0 + 2 * SEC)
    found = search(conn, ["d"], p_query="fox")
    assert keys(found)[:2] == ["foxes", "fox"]  # stemming; rank by ts_rank_cd
    assert found[0]["text_rank"] == 1 and found[0]["text_score"] > 0
    # the rest follow (never short while items match), without a text score
    assert keys(found)[2] == "dog" and found[2]["text_rank"] is None
    # indexed fields only: index => '{title}' leaves the body out of full text
    put(conn, ["t"], "x", {"title": "alpha", "body": "omega"}, p_index=["title"])
    assert search(conn, ["t"], p_query="omega")[0]["text_rank"] is None
    assert search(conn, ["t"], p_query="alpha")[0]["text_rank"] == 1
    put(conn, ["t"], "y", {"title": "alpha"}, p_index=[])  # index=False
    assert [r["text_rank"] for r in search(conn, ["t"], p_query="alpha")] == [1, None]


def test_vector_scores_follow_langgraph_conventions(conn: psycopg.Connection) -> None:
    put(conn, ["v"], "a", {"t": "a"}, p_fields=["t"], p_embeddings=["[1,0,0]"])
    put(conn, ["v"], "b", {"t": "b"}, p_fields=["t"], p_embeddings=["[0,2,0]"])
    put(conn, ["v"], "none", {"t": "c"}, p_index=[])
    q = "[1,1,0]"
    cos = search(conn, ["v"], p_query_embedding=q)
    assert keys(cos) == ["a", "b", "none"] or keys(cos) == ["b", "a", "none"]
    assert [round(r["score"], 4) for r in cos[:2]] == [0.7071, 0.7071] and cos[2]["score"] is None
    l2 = {r["key"]: r["score"] for r in search(conn, ["v"], p_query_embedding=q, p_distance="l2")}
    assert l2["a"] == pytest.approx(-1.0) and l2["b"] == pytest.approx(-(2**0.5)) and l2["none"] is None
    ip = search(conn, ["v"], p_query_embedding=q, p_distance="inner_product", p_vector_type="halfvec")
    assert keys(ip)[:2] == ["b", "a"] and [r["score"] for r in ip[:2]] == pytest.approx([2.0, 1.0])
    assert_sqlstate(conn, "PM122", "select * from memori.store_search('alice', p_query_embedding => '[1,0,0]', "
                                   "p_distance => 'hamming')")


def test_best_field_scores_an_item(conn: psycopg.Connection) -> None:
    put(conn, ["v"], "two", {"a": "x", "b": "y"}, p_fields=["a", "b"], p_embeddings=["[1,0]", "[0,1]"])
    put(conn, ["v"], "one", {"a": "z"}, p_fields=["a"], p_embeddings=["[1,1]"])
    found = search(conn, ["v"], p_query_embedding="[0,1]")
    assert keys(found) == ["two", "one"] and found[0]["score"] == pytest.approx(1.0)
    # a new put replaces the old embeddings
    put(conn, ["v"], "two", {"a": "x"}, p_fields=["a"], p_embeddings=["[1,0]"])
    assert keys(search(conn, ["v"], p_query_embedding="[0,1]")) == ["one", "two"]


def test_hybrid_fuses_text_and_vectors(conn: psycopg.Connection) -> None:
    # "apple" by text, but far by vector; "car" close by vector only
    put(conn, ["h"], "apple", {"t": "red apple"}, p_fields=["t"], p_embeddings=["[0,1]"])
    put(conn, ["h"], "car", {"t": "red car"}, p_fields=["t"], p_embeddings=["[1,0.05]"])
    put(conn, ["h"], "boat", {"t": "blue boat"}, p_fields=["t"], p_embeddings=["[1,0.5]"])
    found = search(conn, ["h"], p_query="apple", p_query_embedding="[1,0]")
    by = {r["key"]: r for r in found}
    assert by["apple"]["text_rank"] == 1 and by["apple"]["vector_rank"] == 3
    assert by["car"]["vector_rank"] == 1 and by["car"]["text_rank"] is None
    # RRF: apple 1/61 + 1/63 beats car 1/61
    assert keys(found) == ["apple", "car", "boat"]
    assert [r["rank"] for r in found] == [1, 2, 3]


def test_selective_filter_returns_the_full_limit_through_the_index(conn: psycopg.Connection) -> None:
    """pgvector #259: 1 % of 3,000 items match; an HNSW index plus the filter still yields limit rows."""
    rng = random.Random(7)
    items = [{"namespace": ["bench"], "key": f"k{i}", "value": {"grp": i % 100, "i": i},
              "vectors": {"t": [rng.gauss(0, 1) for _ in range(16)]}} for i in range(3000)]
    conn.execute("select memori.store_put_many('alice', %s::jsonb, %s)", (json.dumps(items), T0))
    assert value(conn, "select memori.store_index_ensure(16, 'cosine', 'vector', 'hnsw')") is not None
    conn.execute("analyze memori.store_vectors")
    conn.execute("analyze memori.store_items")
    q = "[" + ",".join(str(rng.gauss(0, 1)) for _ in range(16)) + "]"
    exact = sorted((r for r in items if r["value"]["grp"] == 7),  # type: ignore[index]
                   key=lambda r: -_cos(r["vectors"]["t"], json.loads(q)))  # type: ignore[index]
    # three paths: exact over the few matches (the default), the HNSW index with an iterative
    # scan (forced: every search counts as large), and the exact fallback when the scan stops short
    for exact_max, max_scan in ((1000, None), (0, None), (0, 40)):
        conn.execute("update memori.settings set value = %s::jsonb where key = 'store.search_exact_max'",
                     (str(exact_max),))
        conn.execute("reset hnsw.max_scan_tuples" if max_scan is None else f"set hnsw.max_scan_tuples = {max_scan}")
        for limit in (10, 30, 40):
            found = search(conn, ["bench"], filter={"grp": 7}, p_query_embedding=q, p_limit=limit)
            assert len(found) == min(limit, 30), (exact_max, max_scan, limit)
            assert all(r["value"]["grp"] == 7 for r in found) and all(r["score"] is not None for r in found)
        got = keys(search(conn, ["bench"], filter={"grp": 7}, p_query_embedding=q, p_limit=10))
        if max_scan is None and exact_max:
            assert got == [r["key"] for r in exact[:10]]
        else:  # through the index: relaxed order, near the exact top 10
            assert len(set(got) & {r["key"] for r in exact[:10]}) >= 8


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))


def test_list_namespaces(conn: psycopg.Connection) -> None:
    for ns in (["test", "documents", "public"], ["test", "documents", "private"], ["test", "images", "public"],
               ["test", "images", "private"], ["prod", "documents", "public"], ["prod", "documents", "private"]):
        put(conn, ns, "dummy", {"x": 1})
        put(conn, ns, "dummy2", {"x": 1})
    put(conn, ["gone"], "k", {"x": 1}, ttl=MIN)

    def ls(**kw: Any) -> list[list[str]]:
        kw.setdefault("p_now", T0 + MIN)
        args = ", ".join(f"{k} => %({k})s" for k in kw)
        return [r["namespace"] for r in
                rows(conn, f"select * from memori.store_list_namespaces('alice', {args})", kw)]

    assert len(ls()) == 6  # distinct, the expired one left out
    assert ls(p_prefix=["test"]) == [["test", "documents", "private"], ["test", "documents", "public"],
                                     ["test", "images", "private"], ["test", "images", "public"]]
    assert ls(p_suffix=["public"]) == [["prod", "documents", "public"], ["test", "documents", "public"],
                                      ["test", "images", "public"]]
    assert ls(p_prefix=["*", "documents"], p_suffix=["private"]) == [["prod", "documents", "private"],
                                                                     ["test", "documents", "private"]]
    assert ls(p_max_depth=2) == [["prod", "documents"], ["test", "documents"], ["test", "images"]]
    assert ls(p_max_depth=1, p_prefix=["test"]) == [["test"]]
    assert ls(p_limit=2, p_offset=1) == [["prod", "documents", "public"], ["test", "documents", "private"]]
    assert ls(p_prefix=["nope"]) == []
    assert len(ls(p_now=T0)) == 7


def test_namespace_delete(conn: psycopg.Connection) -> None:
    put(conn, ["a"], "1", {"x": 1})
    put(conn, ["a", "b"], "2", {"x": 1}, p_fields=["x"], p_embeddings=["[1,0]"])
    put(conn, ["a", "b", "c"], "3", {"x": 1}, ttl=MIN)
    put(conn, ["ab"], "4", {"x": 1})
    put(conn, ["a", "b"], "5", {"x": 1}, user="bob")
    assert value(conn, "select memori.store_namespace_delete('alice', '{a,b}')") == 2
    assert keys(search(conn, [])) == ["4", "1"]
    assert value(conn, "select count(*) from memori.store_vectors") == 0
    assert len(search(conn, [], user="bob")) == 1
    # the subtree's dictionary entries go with it; the others (and bob's) stay
    assert [r["namespace"] for r in rows(conn, "select namespace from memori.store_namespaces "
                                               "order by user_id, namespace")] == [["a"], ["ab"], ["a", "b"]]
    assert_sqlstate(conn, "PM121", "select memori.store_namespace_delete('alice', '{}')")
    put(conn, ["a", "b"], "2", {"x": 2})  # entered again, with a new number
    assert get(conn, ["a", "b"], "2")["value"] == {"x": 2}  # type: ignore[index]
    assert value(conn, "select max(id) from memori.store_namespaces where user_id = 'alice'") == 5


def test_put_many_and_get_many(conn: psycopg.Connection) -> None:
    items = [{"namespace": ["b"], "key": "k1", "value": {"v": 1}},
             {"namespace": ["b"], "key": "k2", "value": {"v": 2}, "ttl_seconds": 90},
             {"namespace": ["b"], "key": "k1", "value": {"v": 3}},   # the later entry wins
             {"namespace": ["b"], "key": "k9", "value": None}]       # a delete of nothing
    assert value(conn, "select memori.store_put_many('alice', %s::jsonb, %s)", (json.dumps(items), T0)) == 3
    got = rows(conn, "select * from memori.store_get_many('alice', %s::jsonb, %s, false, %s)",
               (json.dumps([["b"], ["b"], ["b"], ["c"]]), ["k2", "k1", "k9", "k1"], T0))
    assert [(r["ord"], r["key"], r["value"]) for r in got] == [(1, "k2", {"v": 2}), (2, "k1", {"v": 3})]
    assert got[0]["ttl"] == timedelta(seconds=90)
    conn.execute("select memori.store_put_many('alice', %s::jsonb, %s)",
                 (json.dumps([{"namespace": ["b"], "key": "k1", "value": None}]), T0))
    assert get(conn, ["b"], "k1") is None


def test_retention_engine_reclaims_expired_items(conn: psycopg.Connection) -> None:
    put(conn, ["n"], "old", {"x": 1}, ttl=MIN, p_fields=["x"], p_embeddings=["[1,0]"])
    put(conn, ["n"], "new", {"x": 1}, ttl=2 * MIN)
    put(conn, ["n"], "kept", {"x": 1})
    put(conn, ["m"], "kept", {"x": 1})
    preview = rows(conn, "select * from memori.cleanup_preview(%s)", (T0 + MIN,))
    assert [(r["table_name"], r["category"]) for r in preview] == [("store_items", "n")]
    conn.execute("set role memori_cleaner")  # the cleaner role alone: its embeddings go by the cascade
    # it reads expired items only (their category is the first label); namespace paths it reads for every user
    # (a row-local policy: Citus refuses subqueries in the policies of distributed tables), never other items
    assert {r["category"] for r in rows(conn, "select category from memori._retention_store_items")} == {"n"}
    assert value(conn, "select count(*) from memori.store_items where expires_at is null") == 0
    assert sorted(r["namespace"] for r in rows(conn, "select namespace from memori.store_namespaces")) == [["m"], ["n"]]
    assert rows(conn, "select * from memori.cleanup_execute(%s)", (T0 + MIN,))[0]["deleted"] == 1
    conn.execute("reset role")
    assert sorted(keys(search(conn, [], at=T0))) == ["kept", "kept", "new"]
    assert value(conn, "select count(*) from memori.store_vectors") == 0


def test_two_users_never_see_each_other(conn: psycopg.Connection) -> None:
    put(conn, ["shared"], "k", {"owner": "alice"})
    put(conn, ["shared"], "k", {"owner": "bob"}, user="bob")
    assert get(conn, ["shared"], "k")["value"] == {"owner": "alice"}  # type: ignore[index]
    assert get(conn, ["shared"], "k", user="bob")["value"] == {"owner": "bob"}  # type: ignore[index]
    # as the application role, row-level security holds even for direct SQL
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', 'bob', false)")
    assert [r["value"] for r in rows(conn, "select value from memori.store_items")] == [{"owner": "bob"}]
    assert [r["value"] for r in search(conn, [], user="bob")] == [{"owner": "bob"}]
    assert_sqlstate(conn, "PM040", "select * from memori.store_get('alice', '{shared}', 'k')")
    assert value(conn, "select count(*) from memori.store_put(p_namespace => '{x}', p_key => 'k', "
                       "p_value => '{}')") == 1
    assert value(conn, "select count(*) from memori.store_items where user_id = 'alice'") == 0
    # nor each other's namespace names
    assert [r["namespace"] for r in rows(conn, "select namespace from memori.store_namespaces order by id")] == [
        ["shared"], ["x"]]
    conn.execute("reset role")
    assert value(conn, "select count(*) from memori.store_items where user_id = 'bob'") == 2


def test_upgrade_from_0021_moves_items_embeddings_and_indexes(server_dsn: str) -> None:
    """Migration 0022 copies 0021's items (namespace arrays) into the dictionary layout, with their
    embeddings, ids, times and TTLs, and the indexes store_index_ensure had made."""
    from pymemdb.install import install
    from tests.conftest import database

    with database(server_dsn) as url:
        install(url, target="0021", apply_sql=False)
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("""
              insert into memori.store_items (user_id, namespace, key, value, created_at, updated_at, expires_at, ttl,
                                              text_fields)
              values ('alice', '{a,b}', 'k1', '{"text": "tea in lyon"}', %(t)s, %(t)s, null, null, '$'),
                     ('alice', '{a}', 'k2', '{"text": "coffee"}', %(t)s, %(t)s, %(t)s + interval '1 hour',
                      interval '1 hour', 'text'),
                     ('bob', '{a,b}', 'k1', '{"text": "bob"}', %(t)s, %(t)s, null, null, null)""", {"t": T0})
            c.execute("""insert into memori.store_vectors (user_id, item_id, field, embedding)
                         select user_id, id, 'text', '[1,0]' from memori.store_items""")
            c.execute("create index idx_store_vectors_hnsw_vector_cosine_2 on memori.store_vectors using hnsw "
                      "((embedding::public.vector(2)) public.vector_cosine_ops) "
                      "where public.vector_dims(embedding) = 2")
            before = rows(c, "select user_id, id, key from memori.store_items order by id")
        install(url)
        with psycopg.connect(url, autocommit=True) as c:
            assert rows(c, "select user_id, id, key from memori.store_items order by id") == before
            assert rows(c, "select user_id, id, namespace from memori.store_namespaces order by 1, 2") == [
                {"user_id": "alice", "id": 1, "namespace": ["a"]},
                {"user_id": "alice", "id": 2, "namespace": ["a", "b"]},
                {"user_id": "bob", "id": 1, "namespace": ["a", "b"]}]
            got = get(c, ["a"], "k2", at=T0, refresh=False)
            assert got is not None and got["ttl"] == timedelta(hours=1) and got["created_at"] == T0
            hits = search(c, ["a"], p_query="tea", p_query_embedding="[1,0]")
            assert [(r["namespace"], r["key"], r["score"]) for r in hits] == [(["a", "b"], "k1", 1.0),
                                                                               (["a"], "k2", 1.0)]
            assert value(c, "select count(*) from memori.store_vectors") == 3
            assert value(c, "select to_regclass('memori.idx_store_vectors_hnsw_vector_cosine_2')::text") == (
                "memori.idx_store_vectors_hnsw_vector_cosine_2")
            # new items continue the ids
            put(c, ["a"], "k3", {"x": 1})
            assert value(c, "select id from memori.store_items where key = 'k3'") > before[-1]["id"]
