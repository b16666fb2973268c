"""db.pages: the client, its page-table cache (TLB) and the Compressor, through the client."""

from __future__ import annotations

import json

import psycopg
import pytest

import pymemdb
from pymemdb.errors import InvalidArgument, PageExists, WorkingSetFull
from pymemdb.types import PageCompressItem, PageTableEntry
from pymemdb.vm.compressors import CompressorRegistry, Representation, TextCompressor, estimate_tokens
from pymemdb.vm.page_cache import PageTLB
from tests.helpers import T0

S = "sess_c"
LONG = ("The page table maps page ids to tiers. Pages move between tiers as they age. "
        "Eviction frees tokens of the working set. The working set is the context window. "
        "Compression keeps a cheaper form of each page. Faults bring pages back into the working set.")


def test_round_trip(db: pymemdb.Database) -> None:
    assert db.pages.turn_begin(S, user_id="alice", now=T0) == 1
    p = db.pages.create(S, "msg_1", "What about the paging model?", role="user", now=T0)
    assert (p.tier, p.page_type, p.modality, p.version) == ("L0", "transcript", "text", 1)
    db.pages.create(S, "doc_1", LONG, page_type="artifact", add_to_working_set=False, hint="paging notes", now=T0)
    assert db.pages.compress(S) == 2  # levels 1 and 2 of doc_1 (msg_1 is too short to compress)
    env = db.pages.fault(S, "doc_1", 2, "user_requested_recall", now=T0)
    assert env["page"]["level"] == 2 and env["effects"]["promoted_to_working_set"] is True
    assert env["effects"]["tokens_est"] < estimate_tokens(LONG) / 3
    assert [w.page_id for w in db.pages.working_set(S)] == ["msg_1", "doc_1"]
    assert [s.page_id for s in db.pages.context_at_turn(S, 1)] == ["doc_1", "msg_1"]
    assert [m.mutation_type for m in db.pages.history(S, "doc_1")] == ["create", "fault_in"]
    assert db.pages.manifest(S)["working_set"][1]["level"] == 2
    assert db.pages.context(S).startswith("<VM:CONTEXT>\nU (msg_1)")
    assert db.pages.tools()[0]["function"]["name"] == "page_fault"
    assert "<VM:RULES>" in db.pages.developer_message(S, "strict", system_prompt="Be brief.")
    assert [f.reason for f in db.pages.fault_list(S)] == ["user_requested_recall"]
    assert db.pages.update(S, "msg_1", "What about the paging model, again?", now=T0).version == 2
    assert db.pages.flush(S) == 2
    cfg = db.pages.session_configure(S, {"max_l0_tokens": 1000})
    assert cfg.max_l0_tokens == 1000 and db.pages.session_get(S) is not None
    assert db.pages.session_get("nope") is None
    assert db.pages.pin(S, "doc_1") is True
    with pytest.raises(WorkingSetFull):
        db.pages.evict(S, 10_000)
    with pytest.raises(PageExists):
        db.pages.create(S, "msg_1", "again")
    with pytest.raises(InvalidArgument):
        db.pages.add_page(S, "msg_1", 9)
    assert db.pages.metrics(S).faults_by_reason == {"user_requested_recall": 1}
    assert set(db.pages.tlb.stats()) == {"entries", "max_entries", "hits", "misses", "hit_rate"}


def test_tlb_counts_hits_and_is_invalidated_by_notify(db: pymemdb.Database, dsn: str) -> None:
    db.pages.create(S, "msg_1", "hello there", user_id="alice", now=T0)
    db.pages.listen()
    first = db.pages.lookup(S, "msg_1")
    assert first is not None and first.version == 1
    assert db.pages.lookup(S, "msg_1") == first
    assert db.pages.tlb.stats()["hits"] == 1 and db.pages.tlb.stats()["misses"] == 1
    # another worker changes the page: the NOTIFY drops our entry
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("select memori.page_update(%s, 'msg_1', 'changed elsewhere')", (S,))
    assert db.pages.tlb.poll(timeout=5) >= 1  # the notice crosses the socket: wait for it, not for the clock
    assert (S, "msg_1") not in db.pages.tlb.entries
    again = db.pages.lookup(S, "msg_1")
    assert again is not None and again.version == 2
    assert db.pages.lookup(S, "missing") is None
    assert db.pages.tlb.stats()["hit_rate"] == 0.25


def test_tlb_never_serves_an_expired_page(db: pymemdb.Database) -> None:
    # issue 15.5: expiry sends no notification, so the entry carries expires_at and a lookup at or after it misses
    from datetime import timedelta
    expires = T0 + timedelta(seconds=60)
    db.pages.create(S, "tmp_1", "short-lived", user_id="alice", expires_at=expires, now=T0)
    first = db.pages.lookup(S, "tmp_1", now=T0)
    assert first is not None and first.expires_at == expires
    assert db.pages.lookup(S, "tmp_1", now=expires - timedelta(seconds=1)) == first  # a hit, one second before
    assert db.pages.tlb.stats()["hits"] == 1
    assert db.pages.lookup(S, "tmp_1", now=expires) is None  # at expiry: a miss, and the database agrees
    assert (S, "tmp_1") not in db.pages.tlb.entries
    assert db.pages.tlb.stats()["misses"] == 2
    assert db.pages.lookup(S, "tmp_1", now=expires + timedelta(seconds=1)) is None
    # the injected clock of the cache itself (no now passed)
    tlb = PageTLB(clock=lambda: expires)
    tlb.insert(S, first)
    assert tlb.lookup(S, "tmp_1") is None and tlb.lookup(S, "tmp_1", expires - timedelta(seconds=1)) is None
    tlb.insert(S, first)
    assert tlb.lookup(S, "tmp_1", expires - timedelta(seconds=1)) == first
    never = entry("forever")
    tlb.insert(S, never)
    assert tlb.lookup(S, "forever") == never  # no expiry: served


def entry(page_id: str) -> PageTableEntry:
    return PageTableEntry(page_id, "L0", 0, 1, False, None, T0, 0, True, 0, False)


def test_tlb_is_lru_with_a_bound() -> None:
    tlb = PageTLB(max_entries=2)
    tlb.insert(S, entry("a"))
    tlb.insert(S, entry("b"))
    assert tlb.lookup(S, "a") is not None  # a is now the most recent
    tlb.insert(S, entry("c"))
    assert list(tlb.entries) == [(S, "a"), (S, "c")]
    tlb.invalidate(S, "a")
    tlb.insert("other", entry("d"))
    tlb.invalidate_session(S)
    assert list(tlb.entries) == [("other", "d")]
    tlb.flush()
    assert tlb.stats() == {"entries": 0, "max_entries": 2, "hits": 1, "misses": 0, "hit_rate": 1.0}


def item(text: str, level: int, modality: str = "text") -> PageCompressItem:
    return PageCompressItem("p", modality, "transcript", level, text, None, estimate_tokens(text), 1)


def test_text_compressor_is_extractive_and_cheaper() -> None:
    c = TextCompressor()
    reduced = c.compress(item(LONG, 1), 1)
    abstract = c.compress(item(LONG, 2), 2)
    assert reduced is not None and abstract is not None
    assert reduced.content is not None and reduced.content.startswith("The page table maps page ids to tiers.")
    assert abstract.content is not None
    assert estimate_tokens(abstract.content) < estimate_tokens(reduced.content) < estimate_tokens(LONG)
    assert all(s.strip() in LONG for s in abstract.content.split(". "))  # sentences taken, not invented
    long_sentence = "word " * 100
    cut = c.compress(item(long_sentence, 2), 2)
    assert cut is not None and cut.content is not None and cut.content.endswith("...")
    assert c.compress(item("tiny", 1), 1) is None


def test_media_default_is_reference_only_and_pluggable() -> None:
    registry = CompressorRegistry()
    assert registry.compress(item("a caption", 1, "image"), 1) is None

    class Captioner:
        modality = "image"

        def compress(self, page: PageCompressItem, level: int) -> Representation | None:
            return Representation(f"caption of {page.page_id}", tokens=3)

    assert CompressorRegistry(Captioner()).compress(item("x", 2, "image"), 2) == Representation("caption of p", None, 3)


def test_chat_completions_round_trip(db: pymemdb.Database) -> None:
    """The seed's protocol end to end with a scripted model: request, tool call, envelope, continuation."""
    db.pages.turn_begin("sess_456", user_id="alice")
    db.pages.create("sess_456", "msg_302", "it should be compatible with openai format", role="user")
    db.pages.create("sess_456", "img_045", "Architecture diagram showing L0-L4 storage tiers", modality="image",
                    artifact_ref="https://artifacts.example.com/img_045.png", dimensions=(1200, 800),
                    mime_type="image/png", size_bytes=245000, tokens=95, hint="architecture diagram",
                    add_to_working_set=False)
    request = {"model": "gpt-4o", "tools": db.pages.tools(), "messages": [
        {"role": "developer", "content": db.pages.developer_message("sess_456", "strict")},
        {"role": "user", "content": "Show me that architecture diagram you mentioned"}]}
    manifest = json.loads(request["messages"][0]["content"].split("<VM:MANIFEST_JSON>\n")[1]  # type: ignore[index]
                          .split("\n</VM:MANIFEST_JSON>")[0])
    assert manifest["available_pages"][0]["page_id"] == "img_045"
    # the model answers with a tool call ...
    call = {"id": "call_abc123", "type": "function",
            "function": {"name": "page_fault", "arguments": json.dumps({"page_id": "img_045", "target_level": 2})}}
    args = json.loads(call["function"]["arguments"])  # type: ignore[index]
    envelope = db.pages.fault("sess_456", args["page_id"], args.get("target_level"), args.get("reason"))
    tool_message = {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(envelope)}
    assert json.loads(tool_message["content"])["page"]["content"]["caption"].startswith("Architecture diagram")
    # ... and the continuation request maps the page in VM:CONTEXT
    continuation = db.pages.developer_message("sess_456", "strict")
    assert "I (img_045): [IMAGE: Architecture diagram showing L0-L4 storage tiers, 1200x800]" in continuation
