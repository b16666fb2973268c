"""MemoriStore / AsyncMemoriStore as LangGraph BaseStores (issue 17).

The behaviours of LangGraph's own store suites (libs/checkpoint-postgres/tests/test_store.py and
libs/checkpoint/tests/test_store.py), ported to MemoriStore, plus what PostgresStore gets wrong:
numeric filters, expired reads, short filtered vector pages, namespace delete, isolation.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from pymemdb.errors import InvalidFilter
from pymemdb.integrations.langgraph import AsyncMemoriStore, MemoriStore
from tests.helpers import value


class CharEmbeddings(Embeddings):
    """Deterministic test embeddings: character frequencies through a seeded random projection."""

    def __init__(self, dims: int = 64, seed: int = 3) -> None:
        self.dims = dims
        self._rng = random.Random(seed)
        self._proj: dict[str, list[float]] = {}
        self.calls = 0

    def _one(self, text: str) -> list[float]:
        counts = Counter(text)
        out = [0.0] * self.dims
        for ch, n in sorted(counts.items()):
            if ch not in self._proj:
                self._proj[ch] = [self._rng.gauss(0, 1) for _ in range(self.dims)]
            for i, p in enumerate(self._proj[ch]):
                out[i] += n / len(text) * p
        norm = math.sqrt(sum(x * x for x in out)) or 1.0
        return [x / norm for x in out]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


TTL = {"default_ttl": 2.0, "refresh_on_read": True}


@pytest.fixture
def store(dsn: str) -> Iterator[MemoriStore]:
    with MemoriStore.from_dsn(dsn, user_id="alice", ttl=TTL) as s:  # type: ignore[arg-type]
        s.setup()
        yield s


def vector_store(dsn: str, *, distance: str = "cosine", vector_type: str = "vector", fields: Any = None,
                 kind: str = "hnsw", emb: Embeddings | None = None) -> MemoriStore:
    emb = emb or CharEmbeddings()
    index = {"dims": 64, "embed": emb, "distance_type": distance,
             "ann_index_config": {"kind": kind, "vector_type": vector_type}, "fields": fields}
    s = MemoriStore(dsn, user_id="alice", index=index)  # type: ignore[arg-type]
    s.setup()
    s.setup()  # idempotent
    return s


# -- LangGraph's checks, ported ---------------------------------------------------------------

def test_batch_order_and_results(store: MemoriStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch([
        GetOp(("test", "foo"), "key1"),
        PutOp(("test", "bar"), "key2", {"data": "value2"}),
        SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(("test",), "key3"),
    ])
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"]  # type: ignore[union-attr]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None
    again = store.batch([
        SearchOp(("test",), filter=None, limit=5, offset=0),
        GetOp(("test", "bar"), "key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(("test",), "key3", {"data": "value3"}),
        GetOp(("test", "foo"), "key1"),
    ])
    assert len(again[0]) == 2 and again[1].value == {"data": "value2"}  # type: ignore[union-attr, arg-type]
    assert again[3] is None and again[4].key == "key1"  # type: ignore[union-attr]
    assert store.get(("test",), "key3").value == {"data": "value3"}  # type: ignore[union-attr]


def test_batch_puts_gets_and_deletes(store: MemoriStore) -> None:
    assert store.batch([PutOp(("test",), "key1", {"data": "value1"}), PutOp(("test",), "key2", {"data": "value2"}),
                        PutOp(("test",), "key3", None)]) == [None, None, None]
    got = store.batch([GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")])
    assert [g.key if g else None for g in got] == ["key1", "key2", None]  # type: ignore[union-attr]
    # the last put of a key in a batch wins; a None value deletes
    store.batch([PutOp(("test",), "key1", {"v": 1}), PutOp(("test",), "key1", {"v": 2})])
    assert store.get(("test",), "key1").value == {"v": 2}  # type: ignore[union-attr]
    store.batch([PutOp(("test",), "key1", {"v": 3}), PutOp(("test",), "key1", None)])
    assert store.get(("test",), "key1") is None


def test_basic_ops_update_and_delete(store: MemoriStore) -> None:
    store.put(("test", "documents"), "doc1", {"title": "Test Document"})
    item = store.get(("test", "documents"), "doc1")
    assert item and item.namespace == ("test", "documents") and item.value == {"title": "Test Document"}
    store.put(("test", "documents"), "doc1", {"title": "Updated"})
    updated = store.get(("test", "documents"), "doc1")
    assert updated and updated.value == {"title": "Updated"} and updated.updated_at > item.updated_at
    assert updated.created_at == item.created_at
    assert store.get(("test", "other"), "doc1") is None
    store.delete(("test", "documents"), "doc1")
    assert store.get(("test", "documents"), "doc1") is None


def test_search_namespaces_filters_and_paging(store: MemoriStore) -> None:
    store.put(("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]})
    store.put(("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]})
    store.put(("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]})
    store.put(("testing",), "x", {"author": "Alice"})  # not under ("test",)
    assert len(store.search(("test",))) == 3
    assert {i.namespace for i in store.search(("test", "docs"))} == {("test", "docs")}
    assert sorted(i.key for i in store.search(("test",), filter={"author": "Alice"})) == ["doc1", "img1"]
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    # newest first, scores None without a query
    found = store.search(("test",))
    assert [i.key for i in found] == ["img1", "doc2", "doc1"] and all(i.score is None for i in found)
    assert len(store.search(())) == 4


def test_numeric_comparison_filters(store: MemoriStore) -> None:
    """langgraph #7684: PostgresStore compares JSON as text, so 9 >= 10. MemoriStore compares numbers."""
    for key, score in [("a", 2), ("b", 9), ("c", 10), ("d", 11)]:
        store.put(("test", "scores"), key, {"score": score})

    def scores(f: dict[str, Any]) -> list[Any]:
        return sorted(i.value["score"] for i in store.search(("test", "scores"), filter=f))

    assert scores({"score": {"$gte": 10}}) == [10, 11]
    assert scores({"score": {"$gt": 9}}) == [10, 11]
    assert scores({"score": {"$lt": 10}}) == [2, 9]
    assert scores({"score": {"$lte": 9}}) == [2, 9]
    assert scores({"score": {"$ne": 9}}) == [2, 10, 11]
    assert scores({"score": {"$eq": 9}}) == [9]
    store.put(("test", "scores"), "e", {"score": 9.5})
    assert scores({"score": {"$gt": 9}}) == [9.5, 10, 11]
    store.put(("test", "names"), "a", {"name": "apple"})
    store.put(("test", "names"), "b", {"name": "banana"})
    assert [i.value["name"] for i in store.search(("test", "names"), filter={"name": {"$gt": "apple"}})] == ["banana"]
    with pytest.raises(InvalidFilter) as err:
        store.search(("test",), filter={"score": {"$regex": "x"}})
    assert isinstance(err.value, ValueError) and err.value.hint


def test_list_namespaces(store: MemoriStore) -> None:
    for i, ns in enumerate([("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
                            ("a", "c", "f"), ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"),
                            ("admin", "users", "789")]):
        store.put(ns, f"id_{i}", {"data": i})
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"),
                                                        ("a", "b", "f")]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("users", "*")) == [("users", "123"), ("users", "456", "settings")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "c"), ("admin", "users"), ("b", "a"),
                                                  ("users", "123"), ("users", "456")]
    assert len(store.list_namespaces()) == 9
    assert store.batch([ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("settings",)),))]) == [
        [("users", "456", "settings")]]


def test_list_namespaces_pagination_and_empty(store: MemoriStore) -> None:
    assert store.list_namespaces() == []
    for i in range(20):
        store.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"i": i})
    assert store.list_namespaces(prefix=("namespace",), limit=5, offset=15) == [
        ("namespace", f"sub_{i:02d}") for i in range(15, 20)]


def test_invalid_namespaces(store: MemoriStore) -> None:
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", {"foo": "bar"})
    # past the public put API (as LangGraph's own suite does), a "langgraph" root is stored
    store.batch([PutOp(("langgraph", "foo"), "bar", {"foo": "bar"})])
    assert store.get(("langgraph", "foo"), "bar").value == {"foo": "bar"}  # type: ignore[union-attr]
    assert store.search(("langgraph", "foo"))[0].value == {"foo": "bar"}


@pytest.mark.parametrize("namespace", [("foo.bar",), ("foo", ""), ("foo", 1)])
@pytest.mark.parametrize("kind", ["get", "put", "delete", "search", "prefix", "suffix"])
def test_invalid_namespace_fails_the_whole_batch(store: MemoriStore, namespace: Any, kind: str) -> None:
    op = {"get": GetOp(namespace, "key"), "put": PutOp(namespace, "key", {"changed": True}),
          "delete": PutOp(namespace, "key", None), "search": SearchOp(namespace),
          "prefix": ListNamespacesOp((MatchCondition("prefix", namespace),)),
          "suffix": ListNamespacesOp((MatchCondition("suffix", namespace),))}[kind]
    store.put(("foo", "bar"), "key", {"original": True})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("valid",), "key", {}), op])
    assert store.get(("foo", "bar"), "key").value == {"original": True}  # type: ignore[union-attr]
    assert store.get(("valid",), "key") is None


def test_like_metacharacters_are_plain_labels(store: MemoriStore) -> None:
    namespaces = [("user_%",), ("user_%", "child"), ("userX%",), ("USER_%",)]
    for ns in namespaces:
        store.put(ns, "key", {})
    assert {i.namespace for i in store.search(())} == set(namespaces)
    assert {i.namespace for i in store.search(("user_%",))} == set(namespaces[:2])
    assert store.list_namespaces(prefix=("user_%", "*")) == [("user_%", "child")]


def test_drop_in_constructor(dsn: str) -> None:
    with MemoriStore.from_conn_string(dsn, ttl={"default_ttl": 1}) as s:
        s.setup()
        s.put(("a",), "k", {"v": 1})
        assert s.user_id == "default" and s.get(("a",), "k").value == {"v": 1}  # type: ignore[union-attr]
        # what LangGraph's fixtures reach into: MIGRATIONS (none here) and _cursor()
        s.MIGRATIONS = [m.replace("INT;", "FLOAT;") for m in s.MIGRATIONS]
        with s._cursor() as cur:
            cur.execute("drop table if exists store_migrations")
        s.setup()

    async def run() -> None:
        async with AsyncMemoriStore.from_conn_string(dsn) as a:
            assert (await a.aget(("a",), "k")).value == {"v": 1}  # type: ignore[union-attr]
        # AsyncPostgresStore's pipeline and pool_config arguments (LangGraph's async fixtures pass them)
        async with AsyncMemoriStore.from_conn_string(dsn, pipeline=True, pool_config={"max_size": 2}) as a:
            assert (await a.aget(("a",), "k")).value == {"v": 1}  # type: ignore[union-attr]

    asyncio.run(run())


# -- TTL ---------------------------------------------------------------------------------------

def _expires(conn: psycopg.Connection, key: str) -> Any:
    return value(conn, "select expires_at - now() from memori.store_items where key = %s", (key,))


def test_ttl_default_refresh_and_expired_reads(store: MemoriStore, conn: psycopg.Connection) -> None:
    store.put(("foo",), "item1", {"foo": "bar"})                  # default_ttl: 2 minutes
    store.put(("foo",), "item2", {"foo": "bar"}, ttl=0.05)         # fractional minutes: 3 s
    store.put(("foo",), "forever", {"foo": "bar"}, ttl=None)
    assert 110 < _expires(conn, "item1").total_seconds() <= 120
    assert 0 < _expires(conn, "item2").total_seconds() <= 3
    assert _expires(conn, "forever") is None
    # reads refresh (refresh_on_read), unless asked not to
    conn.execute("update memori.store_items set expires_at = now() + interval '10 seconds' where key = 'item1'")
    store.get(("foo",), "item1", refresh_ttl=False)
    assert _expires(conn, "item1").total_seconds() <= 10
    store.get(("foo",), "item1")
    assert _expires(conn, "item1").total_seconds() > 110
    conn.execute("update memori.store_items set expires_at = now() + interval '10 seconds' where key = 'item1'")
    store.search(("foo",), refresh_ttl=True)
    assert _expires(conn, "item1").total_seconds() > 110
    # an expired item is never read, whether or not a sweeper ran (the row is still there)
    conn.execute("update memori.store_items set expires_at = now() - interval '1 second' where key = 'item1'")
    assert store.get(("foo",), "item1") is None
    assert [i.key for i in store.search(("foo",))] == ["forever", "item2"]
    assert store.list_namespaces() == [("foo",)]
    assert value(conn, "select count(*) from memori.store_items") == 3
    # the retention engine reclaims it: sweep_ttl runs memori.cleanup_execute
    assert store.sweep_ttl() == 1
    assert value(conn, "select count(*) from memori.store_items") == 2
    fut = store.start_ttl_sweeper(sweep_interval_minutes=60)
    assert store.stop_ttl_sweeper(timeout=5) and fut.done()


def test_ttl_refresh_off(dsn: str, conn: psycopg.Connection) -> None:
    with MemoriStore.from_dsn(dsn, user_id="alice", ttl={"default_ttl": 1, "refresh_on_read": False}) as s:
        s.put(("n",), "k", {"x": 1})
        conn.execute("update memori.store_items set expires_at = now() + interval '5 seconds'")
        assert s.get(("n",), "k") is not None
        assert _expires(conn, "k").total_seconds() <= 5
        s.get(("n",), "k", refresh_ttl=True)
        assert _expires(conn, "k").total_seconds() > 50


# -- vector and full-text search -------------------------------------------------------------------

@pytest.mark.parametrize(("distance", "vector_type", "kind"),
                         [("cosine", "vector", "hnsw"), ("l2", "vector", "ivfflat"),
                          ("inner_product", "halfvec", "hnsw"), ("cosine", "halfvec", "flat")])
def test_vector_search(dsn: str, distance: str, vector_type: str, kind: str) -> None:
    emb = CharEmbeddings()
    s = vector_store(dsn, distance=distance, vector_type=vector_type, kind=kind, emb=emb)
    try:
        assert s.index_config and s.index_config["dims"] == 64
        for key, val in [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
                         ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
                         ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                         ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]:
            s.put(("test",), key, val)
        found = s.search(("test",), query="apple", filter={"color": "red"})
        assert found[0].key == "doc1" and len(found) == 2
        assert s.search(("test",), query="car", filter={"color": "red"})[0].key == "doc2"
        assert len(s.search(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})) == 3
        found = s.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
        assert [i.key for i in found] == ["doc3"]
        # every embedded item has a score; the closest text ranks first
        hit = s.search(("test",), query="blue car", limit=4)
        assert all(i.score is not None for i in hit) and hit[0].key == "doc4"
        # pagination
        page1 = s.search(("test",), query="apple", limit=2)
        page2 = s.search(("test",), query="apple", limit=2, offset=2)
        assert len(page1) == len(page2) == 2 and not {i.key for i in page1} & {i.key for i in page2}
        # edge cases: empty, None, long and odd queries
        for query in ("", None, "test " * 100, "test!@#$%^&*()"):
            assert len(s.search(("test",), query=query)) == 4
    finally:
        s.close()


def test_scores_match_reference_conventions(dsn: str) -> None:
    emb = CharEmbeddings()
    for distance in ("cosine", "inner_product", "l2"):
        s = vector_store(dsn, distance=distance, fields=["key0"], emb=emb)
        try:
            s.put(("test", distance), "doc", {"key0": "aaa"}, index=["key0", "key1"])
            for query in ("aaa", "abcd", "poisson"):
                a, b = emb.embed_query("aaa"), emb.embed_query(query)
                dot = sum(x * y for x, y in zip(a, b, strict=True))
                l2 = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
                want = {"cosine": dot, "inner_product": dot, "l2": -l2}[distance]  # unit vectors: cosine == dot
                got = s.search(("test", distance), query=query)
                assert len(got) == 1 and got[0].score == pytest.approx(want, abs=1e-3)
        finally:
            s.close()


def test_embed_fields_and_update(dsn: str) -> None:
    s = vector_store(dsn, fields=["key0", "key1", "key3"])
    try:
        s.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
        s.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
        both = s.search(("test",), query="xxx")
        assert len(both) == 2 and both[0].score == pytest.approx(both[1].score, abs=1e-3)
        top = both[0].score
        for query, key in (("uuu", "doc2"), ("zzz", "doc1")):
            found = s.search(("test",), query=query)
            assert found[0].key == key and found[0].score > found[1].score  # type: ignore[operator]
            assert found[0].score == pytest.approx(top, abs=1e-3)
        assert all(i.score < top for i in s.search(("test",), query="www"))  # type: ignore[operator]
        # per-put fields, and index=False: no embedding, score None, still returned
        s.put(("test",), "doc3", {"key0": "aaa", "key1": "bbb"}, index=["key0"])
        s.put(("test",), "doc5", {"key0": "hhh"}, index=False)
        found = s.search(("test",), query="aaa")
        assert found[0].key == "doc3"
        assert [i.key for i in found if i.score is None] == ["doc5"]
        assert all(i.score is None for i in s.search(("test",)))
        # an update replaces the embedding
        before = next(i.score for i in s.search(("test",), query="uuu") if i.key == "doc2")
        s.put(("test",), "doc2", {"key0": "new text about dogs"})
        after = next(i.score for i in s.search(("test",), query="uuu") if i.key == "doc2")
        assert after < before  # type: ignore[operator]
    finally:
        s.close()


def test_vector_only_store_keeps_no_full_text(dsn: str, conn: psycopg.Connection) -> None:
    index = {"dims": 64, "embed": CharEmbeddings(), "fields": ["text"]}
    with MemoriStore.from_dsn(dsn, user_id="alice", index=index, full_text=False) as s:  # type: ignore[arg-type]
        s.put(("d",), "a", {"text": "red apple"})
        s.batch([PutOp(("d",), "b", {"text": "blue car"}), PutOp(("d",), "c", {"text": "green apple"})])
        assert value(conn, "select count(*) from memori.store_items where text_fields is not null") == 0
        assert value(conn, "select count(*) from memori.store_vectors") == 3
        found = s.search(("d",), query="blue car")
        assert found[0].key == "b" and all(i.score is not None for i in found)


def test_full_text_search_without_an_embedder(store: MemoriStore) -> None:
    store.put(("docs",), "fox", {"text": "The quick brown fox"})
    store.put(("docs",), "dog", {"text": "A lazy dog"})
    store.put(("docs",), "cat", {"text": "A cat", "note": "not about foxes"}, index=["text"])
    found = store.search(("docs",), query="fox")
    assert found[0].key == "fox" and found[0].score is not None
    assert [i.key for i in found[1:]] == ["cat", "dog"] and all(i.score is None for i in found[1:])


def test_selective_filter_returns_the_full_limit(dsn: str) -> None:
    """pgvector #259/#671: 1 % of the items match the filter; the page is still full, through the HNSW index."""
    s = vector_store(dsn, fields=["text"])
    try:
        words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]
        rng = random.Random(1)
        s.batch([PutOp(("bulk",), f"k{i}", {"text": " ".join(rng.choices(words, k=4)), "grp": i % 100})
                 for i in range(2000)])
        found = s.search(("bulk",), query="alpha beta", filter={"grp": 42}, limit=10)
        assert len(found) == 10 and all(i.value["grp"] == 42 for i in found)
        assert len(s.search(("bulk",), query="alpha beta", filter={"grp": 42}, limit=50)) == 20
    finally:
        s.close()


def test_huge_batch_in_bounded_round_trips(store: MemoriStore, conn: psycopg.Connection) -> None:
    n = 12_000
    store.batch([PutOp(("big", str(i % 7)), f"k{i}", {"i": i}) for i in range(n)])
    assert value(conn, "select count(*) from memori.store_items") == n
    got = store.batch([GetOp(("big", str(i % 7)), f"k{i}") for i in range(n)] + [GetOp(("big", "0"), "nope")])
    assert [g.value["i"] for g in got[:n]] == list(range(n)) and got[n] is None  # type: ignore[union-attr]


# -- namespaces, isolation ------------------------------------------------------------------------

def test_namespace_delete_and_isolation(dsn: str) -> None:
    with MemoriStore.from_dsn(dsn, user_id="alice") as alice, MemoriStore.from_dsn(dsn, user_id="bob") as bob:
        alice.put(("mem", "a"), "k", {"who": "alice"})
        alice.put(("mem", "b"), "k", {"who": "alice"})
        bob.put(("mem", "a"), "k", {"who": "bob"})
        assert alice.get(("mem", "a"), "k").value == {"who": "alice"}  # type: ignore[union-attr]
        assert bob.get(("mem", "a"), "k").value == {"who": "bob"}  # type: ignore[union-attr]
        assert [i.value["who"] for i in bob.search(())] == ["bob"]
        assert bob.list_namespaces() == [("mem", "a")]
        from pymemdb import connect

        with connect(dsn, user_id="alice") as db:
            assert db.store.namespace_delete(("mem",)) == 2
        assert alice.search(()) == [] and bob.get(("mem", "a"), "k") is not None


def test_isolation_under_row_level_security(dsn: str, conn: psycopg.Connection) -> None:
    """As memori_app, RLS alone separates users: a store for bob cannot read alice's rows even by SQL."""
    conn.execute("create role store_app_login login in role memori_app")
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        app_dsn = psycopg.conninfo.make_conninfo(dsn, user="store_app_login")
        assert info
        with MemoriStore.from_dsn(dsn, user_id="alice") as alice:
            alice.put(("p",), "secret", {"x": 1})
        with MemoriStore.from_dsn(app_dsn, user_id="bob") as bob:
            assert bob.get(("p",), "secret") is None and bob.search(()) == [] and bob.list_namespaces() == []
            bob.put(("p",), "mine", {"x": 2})
            with bob.pool.connection() as c:
                assert c.execute("select key from memori.store_items").fetchall() == [("mine",)]
    finally:
        conn.execute("drop owned by store_app_login")
        conn.execute("drop role store_app_login")


# -- async ---------------------------------------------------------------------------------------

def test_async_store(dsn: str) -> None:
    async def run() -> None:
        emb = CharEmbeddings()
        index = {"dims": 64, "embed": emb, "fields": ["text"]}
        async with AsyncMemoriStore.from_dsn(dsn, user_id="alice", index=index) as s:  # type: ignore[arg-type]
            await s.setup()
            await asyncio.gather(*(s.aput(("a",), f"k{i}", {"text": f"text number {i}"}) for i in range(5)))
            assert (await s.aget(("a",), "k1")).value == {"text": "text number 1"}  # type: ignore[union-attr]
            found = await s.asearch(("a",), query="text number 3", limit=3)
            assert len(found) == 3 and found[0].key == "k3"
            assert await s.alist_namespaces() == [("a",)]
            await s.adelete(("a",), "k1")
            assert await s.aget(("a",), "k1") is None
            # sync calls from the store's own loop are refused, from another thread they work
            with pytest.raises(asyncio.InvalidStateError):
                s.get(("a",), "k2")
            out: list[Any] = []
            t = threading.Thread(target=lambda: out.append(s.get(("a",), "k2")))
            t.start()
            while t.is_alive():
                await asyncio.sleep(0.01)
            assert out[0].value == {"text": "text number 2"}
            assert await s.stop_ttl_sweeper()

    asyncio.run(run())


def test_sync_store_async_methods(store: MemoriStore) -> None:
    async def run() -> None:
        await store.aput(("x",), "k", {"v": 1})
        assert (await store.aget(("x",), "k")).value == {"v": 1}  # type: ignore[union-attr]
        assert [i.key for i in await store.asearch(("x",))] == ["k"]

    asyncio.run(run())


def test_graph_node_reads_and_writes_memories(dsn: str) -> None:
    """The docs' example: a node reads and writes long-term memories through ``store``."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.store.base import BaseStore

    def remember(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
        ns = ("memories", "alice")
        last = state["messages"][-1].content
        store.put(ns, f"m{len(store.search(ns))}", {"text": last})
        known = [i.value["text"] for i in store.search(ns, limit=100)]
        return {"messages": [("ai", f"I remember {len(known)} things")]}

    with MemoriStore.from_dsn(dsn, user_id="alice") as s:
        graph = StateGraph(MessagesState).add_node("remember", remember).add_edge(START, "remember").compile(store=s)
        graph.invoke({"messages": [("user", "I like tea")]})
        out = graph.invoke({"messages": [("user", "I live in Lyon")]})
        assert out["messages"][-1].content == "I remember 2 things"
        assert sorted(i.value["text"] for i in s.search(("memories", "alice"))) == ["I like tea", "I live in Lyon"]
