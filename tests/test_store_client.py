"""db.store: the Python client of the long-term memory store, one call per memori.store_* function."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pymemdb
from pymemdb.errors import InvalidFilter, InvalidIndexConfig, InvalidNamespace
from tests.helpers import T0

MIN = timedelta(minutes=1)


def test_client_round_trip(db: pymemdb.Database) -> None:
    alice = db.as_user("alice")
    item = alice.store.put(("notes",), "n1", {"text": "green tea", "n": 9}, ttl=MIN, now=T0)
    assert item.namespace == ["notes"] and item.expires_at == T0 + MIN and item.ttl == MIN
    assert alice.store.get(("notes",), "n1", now=T0 + 30 * timedelta(seconds=1)).expires_at == T0 + 90 * timedelta(
        seconds=1)  # type: ignore[union-attr]
    assert alice.store.get(("notes",), "n1", now=T0 + 3 * MIN) is None
    alice.store.put(("notes",), "n2", {"text": "black coffee", "n": 10}, embeddings={"text": [1.0, 0.0]}, now=T0)
    alice.store.put(("notes", "deep"), "n3", {"text": "tea again", "n": 11}, index=False, now=T0)
    found = alice.store.search(("notes",), filter={"n": {"$gte": 10}}, now=T0)
    assert [r.key for r in found] == ["n3", "n2"] or [r.key for r in found] == ["n2", "n3"]
    hits = alice.store.search(("notes",), query_embedding=[1.0, 0.1], now=T0)
    assert hits[0].key == "n2" and hits[0].score == pytest.approx(0.995, abs=1e-3)
    assert alice.store.search(("notes",), query="tea", now=T0)[0].text_rank == 1
    assert alice.store.list_namespaces(now=T0) == [("notes",), ("notes", "deep")]
    assert [g.key for g in alice.store.get_many([(("notes",), "n2"), (("x",), "y")], now=T0)] == ["n2"]
    assert alice.store.put_many([{"namespace": ["b"], "key": "k", "value": {"v": 1}}], now=T0) == 1
    assert alice.store.delete(("b",), "k") is True
    assert alice.store.namespace_delete(("notes",)) == 3
    assert db.as_user("bob").store.search(()) == []


def test_client_errors(db: pymemdb.Database) -> None:
    alice = db.as_user("alice")
    with pytest.raises(InvalidFilter):
        alice.store.search(filter={"n": {"$in": [1]}})
    with pytest.raises(InvalidNamespace):
        alice.store.put(("",), "k", {})
    with pytest.raises(InvalidIndexConfig):
        alice.store.search(query_embedding=[1.0], distance="hamming")  # type: ignore[arg-type]
    alice.store.put(("a",), "k", {"x": 1})
    assert alice.store.get(("a",), "k", user_id="bob") is None  # a call naming a user acts for that user
    assert db.store.index_ensure(8, method="flat") is None
    assert db.store.index_ensure(8, distance="l2", vector_type="halfvec") == "idx_store_vectors_hnsw_halfvec_l2_8"
