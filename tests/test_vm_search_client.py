"""db.pages search and page index through the client, and the HashingEmbedder (issue 7)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pymemdb
from pymemdb.errors import InvalidArgument
from pymemdb.types import PageIndexEntry, PageSearchResult
from pymemdb.vm.embedders import Embedder, HashingEmbedder, to_pgvector
from tests.helpers import T0

S = "sess_s"


def test_hashing_embedder_is_deterministic_normalised_and_lexical() -> None:
    e = HashingEmbedder()
    assert isinstance(e, Embedder) and e.dim == 384
    a, b, c = e.embed(["PostgreSQL database choice", "postgresql database", "React frontend stack"])
    assert a == HashingEmbedder().embed_one("PostgreSQL database choice")
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-9)
    cos = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert cos(a, b) > cos(a, c)
    assert e.embed_one("") == [0.0] * 384
    assert to_pgvector([1.0, 0.5]) == "[1.0,0.5]"


@given(st.text(min_size=1, max_size=60))
@settings(max_examples=50)
def test_hashing_embedder_norm_property(text: str) -> None:
    v = HashingEmbedder(dim=64).embed_one(text)
    norm = math.sqrt(sum(x * x for x in v))
    assert len(v) == 64 and (norm == 0.0 or math.isclose(norm, 1.0, rel_tol=1e-9))


def test_search_full_text_and_with_an_embedder(db: pymemdb.Database) -> None:
    e = HashingEmbedder()
    texts = {"msg_1": "We decided PostgreSQL is our database.", "msg_2": "The frontend stack is React.",
             "msg_3": "Deployment goes to Kubernetes."}
    for pid, text in texts.items():
        db.pages.create(S, pid, text, user_id="alice", add_to_working_set=False, now=T0)
        assert db.pages.embed(S, pid, text, e, now=T0)
    found = db.pages.search(S, "database", now=T0)
    assert [r.page_id for r in found] == ["msg_1"] and found[0].mode == "full_text"
    assert isinstance(found[0], PageSearchResult) and found[0].levels == [0]
    hybrid = db.pages.search(S, "postgresql databases", embedder=e, limit=3, now=T0)
    assert hybrid[0].page_id == "msg_1" and {r.mode for r in hybrid} == {"hybrid"}
    assert len(hybrid) == 3 and hybrid[0].total_available == 3 and hybrid[0].total_exact is True
    counted = db.pages.search(S, "postgresql databases", embedder=e, limit=3, scope="user", exact_total=True, now=T0)
    assert (counted[0].total_available, counted[0].total_exact) == (3, True)
    assert db.pages.embedding_set(S, "msg_3", None, now=T0)
    assert len(db.pages.search(S, "postgresql databases", embedder=e, limit=3, now=T0)) == 2
    with pytest.raises(InvalidArgument):
        db.pages.search(S, "x", scope="planet")
    with pytest.raises(InvalidArgument):
        db.pages.search(S, "x", query_embedding=[1.0, 2.0])


def test_page_index_methods(db: pymemdb.Database) -> None:
    db.pages.create(S, "msg_1", "a", user_id="alice", now=T0)
    db.pages.create(S, "sum_1", "s", page_type="summary", provenance=["msg_1"], importance=0.7, now=T0)
    db.pages.create(S, "claim_1", "c", page_type="claim", provenance=["sum_1"], importance=0.9, now=T0)
    claims = db.pages.by_type(S, "claim")
    assert [c.page_id for c in claims] == ["claim_1"] and isinstance(claims[0], PageIndexEntry)
    assert [(p.page_id, p.depth) for p in db.pages.provenance_chain(S, "claim_1")] == [("sum_1", 1), ("msg_1", 2)]
    assert [p.page_id for p in db.pages.provenance_chain(S, "msg_1", "down")] == ["sum_1", "claim_1"]
    assert [p.page_id for p in db.pages.top_importance(S, 2)] == ["claim_1", "sum_1"]
    assert [p.page_id for p in db.pages.top_importance(S, 5, "summary")] == ["sum_1"]


def test_a_configured_embedder_embeds_new_pages_and_queries(db: pymemdb.Database) -> None:
    db.pages.embedder = HashingEmbedder()
    page = db.pages.create(S, "msg_1", "Kubernetes deployment with Helm charts", user_id="alice",
                           add_to_working_set=False, now=T0)
    assert page.embedding is not None and page.embedding.startswith("[")
    db.pages.create(S, "msg_2", "?!", now=T0)  # nothing to embed: stored without an embedding
    found = db.pages.search(S, "kubernetes", now=T0)
    assert found[0].mode == "hybrid" and found[0].page_id == "msg_1"
    assert db.pages.search(S, "?!", now=T0) == []  # a zero query vector falls back to full text


class _StubModel:
    """Stands in for a sentence-transformers model: the wrapper's contract, not the model's quality."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def get_sentence_embedding_dimension(self) -> int:
        return 384

    def encode(self, texts: list[str], **kwargs: object) -> list[list[float]]:
        self.calls.append(kwargs)
        return [HashingEmbedder().embed_one(t) for t in texts]


def test_sentence_transformer_embedder_wraps_a_model(db: pymemdb.Database) -> None:
    from pymemdb.vm.embedders import SentenceTransformerEmbedder

    model = _StubModel()
    e = SentenceTransformerEmbedder(model=model, batch_size=8)
    assert isinstance(e, Embedder) and e.dim == 384 == db.pages.embedding_dim()
    assert e.embed([]) == []
    [v] = e.embed(["PostgreSQL"])
    assert isinstance(v[0], float) and model.calls[0]["normalize_embeddings"] is True
    assert model.calls[0]["batch_size"] == 8
    alice = db.as_user("alice")
    alice.pages.create("s_st", "msg_1", "We chose PostgreSQL.", now=T0)
    assert alice.pages.embed("s_st", "msg_1", "We chose PostgreSQL.", e, now=T0)
    assert alice.pages.search("s_st", "postgres", embedder=e, now=T0)[0].mode == "hybrid"


def test_sentence_transformer_embedder_without_the_extra_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from pymemdb.vm.embedders import SentenceTransformerEmbedder

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"pymemdb\[embeddings\]"):
        SentenceTransformerEmbedder()
