"""An independent Python reference of seed 02's context optimisation (for the property tests).

Written from the seed's workflow, not from the SQL: allocations with tokens
(given, else ceil(length / 3.8)) and priority (base + recency + RAG + business
boosts, in double precision and in that order), a stable sort (priority desc,
timestamp desc with missing timestamps last, original index asc), the greedy
walk over available - reserve tokens, conflicts, spans and metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

BASE = {
    "system_prompt": 200, "current_user_prompt": 190, "critical_rag_document": 180, "tool_output": 170,
    "tool_input": 160, "chat_history_user": 150, "chat_history_assistant": 140, "rag_memory_commit": 130,
    "rag_document_chunk": 120, "rag_ebook_chunk": 110, "rag_generic_chunk": 100,
}
CATEGORY = {
    "system_prompt": "system", "current_user_prompt": "prompt", "critical_rag_document": "rag",
    "tool_output": "tool", "tool_input": "tool", "chat_history_user": "history", "chat_history_assistant": "history",
    "rag_memory_commit": "rag", "rag_document_chunk": "rag", "rag_ebook_chunk": "rag", "rag_generic_chunk": "rag",
}
CAPS = {"history": ("maxHistory", 8000), "rag": ("maxRagResults", 4000), "system": ("maxSystemPrompt", 2000),
        "business": ("maxBusinessData", 8000), "client": ("maxClientData", 6000)}
RESERVE = 2000
DENSITY = {"general": Fraction("3.8"), "business": Fraction("4.2"), "code": Fraction("3.5")}
BOOSTS = {
    "urgency": {"critical": 25.0, "high": 15.0, "medium": 5.0, "low": 0.0},
    "client_tier": {"enterprise": 12.0, "midMarket": 8.0, "smallBusiness": 4.0, "startup": 2.0},
    "deal_status": {"negotiation": 18.0, "proposal": 12.0, "qualified": 8.0, "prospecting": 4.0, "closed": 1.0},
    "relationship": {"mature": 15.0, "established": 10.0, "developing": 6.0, "initial": 3.0},
}
BUSINESS_KEYS = ("revenueImpact", "revenue_impact", "urgency", "clientTier", "client_tier", "dealStatus",
                 "deal_status", "relationship", "relationship_stage")
DAY_MS = 86400000.0


def estimate(text: str, kind: str = "general") -> int:
    return math.ceil(Fraction(len(text)) / DENSITY[kind])


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def revenue_boost(meta: dict[str, Any] | None) -> float:
    meta = meta or {}
    value = meta.get("revenueImpact")
    if value is None:
        value = meta.get("revenue_impact")
    number = _num(value)
    return 0.0 if number is None else min(number / 10000.0, 20.0)


def _lookup(factor: str, value: Any) -> float:
    if not isinstance(value, str):
        return 0.0
    norm = {k.lower().replace("_", ""): v for k, v in BOOSTS[factor].items()}
    return norm.get(value.lower().replace("_", ""), 0.0)


def _first(meta: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if meta.get(key) is not None:
            return meta[key]
    return None


def business_boost(meta: dict[str, Any] | None) -> float:
    meta = meta or {}
    total = revenue_boost(meta)
    total = total + _lookup("urgency", meta.get("urgency"))
    total = total + _lookup("client_tier", _first(meta, "clientTier", "client_tier"))
    total = total + _lookup("deal_status", _first(meta, "dealStatus", "deal_status"))
    total = total + _lookup("relationship", _first(meta, "relationship", "relationship_stage"))
    return min(total, 20.0)


def recency_boost(ts: datetime | None, now: datetime, meta: dict[str, Any] | None, mode: str = "linear",
                  prefer_recent: bool = True) -> float:
    if ts is None or not prefer_recent:
        return 0.0
    age_ms = ((now - ts) // timedelta(microseconds=1)) / 1000
    if mode == "exponential":
        business = any(k in (meta or {}) for k in BUSINESS_KEYS)
        rate = 0.02 if business else 0.05
        return 15.0 * math.exp(-rate * max(age_ms / DAY_MS, 0.0))
    return max(0.0, min(20.0, 20.0 - age_ms / DAY_MS))


def rag_boost(meta: dict[str, Any] | None) -> float:
    rag = (meta or {}).get("rag_match_metadata")
    relevance = _num(rag.get("relevance")) if isinstance(rag, dict) else None
    return 0.0 if relevance is None else relevance * 20.0


def parse_ts(raw: str | None) -> datetime | None:
    return None if raw is None else datetime.fromisoformat(raw)


def priority(chunk: dict[str, Any], now: datetime, mode: str = "linear", prefer_recent: bool = True) -> float:
    meta = chunk.get("metadata")
    ts = parse_ts(chunk.get("timestamp"))
    return ((float(BASE[chunk["type"]]) + recency_boost(ts, now, meta, mode, prefer_recent)) + rag_boost(meta)) \
        + business_boost(meta)


@dataclass
class Allocation:
    id: Any
    type: str
    tokens: int
    priority: float
    ts: datetime | None
    original_index: int
    recency: float
    revenue: float


def _mean(values: list[float]) -> float:
    if not values:
        return 0.0
    total = 0.0
    for v in values:  # in selection order, as the SQL aggregates
        total += v
    return total / len(values)


def optimize(chunks: list[dict[str, Any]], available: int, options: dict[str, Any] | None,
             now: datetime) -> dict[str, Any]:
    opts = options or {}
    mode = opts.get("recency_mode", "linear")
    prefer_recent = opts.get("prefer_recent", True)
    allocations = []
    for index, c in enumerate(chunks):
        tokens = c.get("tokens")
        if tokens is None:
            tokens = estimate(c["content"], c.get("content_type", "general"))
        ts = parse_ts(c.get("timestamp"))
        allocations.append(Allocation(c["id"], c["type"], tokens, priority(c, now, mode, prefer_recent), ts, index,
                                      recency_boost(ts, now, c.get("metadata"), mode, prefer_recent),
                                      revenue_boost(c.get("metadata"))))
    # priority desc, then timestamp desc (none last), then original index asc: stable sorts, last key first
    ordered = sorted(allocations, key=lambda a: a.original_index)
    with_ts = sorted((a for a in ordered if a.ts is not None), key=lambda a: a.ts, reverse=True)  # type: ignore
    ordered = with_ts + [a for a in ordered if a.ts is None]
    ordered = sorted(ordered, key=lambda a: -a.priority)

    reserve = opts.get("reserve_tokens", RESERVE)
    budget = available - reserve
    caps = CAPS if opts.get("category_budgets") else {}
    used = 0
    cat_used: dict[str, int] = {}
    allocated: list[Allocation] = []
    dropped: list[Allocation] = []
    conflicts = []
    for a in ordered:
        category = CATEGORY[a.type]
        fits_overall = used + a.tokens <= budget
        cap = caps.get(category)
        fits_cap = cap is None or cat_used.get(category, 0) + a.tokens <= cap[1]
        if fits_overall and fits_cap:
            allocated.append(a)
            used += a.tokens
            cat_used[category] = cat_used.get(category, 0) + a.tokens
        else:
            dropped.append(a)
            if allocated:
                conflicts.append({"chunk1": allocated[-1].id, "chunk2": a.id, "conflict_type": "budget_exceeded",
                                  "resolution": "keep_chunk1",
                                  "budget": "available" if not fits_overall else cap[0] if cap else None})
    out = sorted(allocated, key=lambda a: a.original_index) if opts.get("order") == "original" else allocated
    spans = []
    start = 0
    for a in out:
        spans.append({"id": a.id, "type": a.type, "tokens": a.tokens, "priority": a.priority,
                      "token_span": [start, start + a.tokens], "original_index": a.original_index})
        start += a.tokens
    return {
        "optimized_chunks": spans,
        # the first max_dropped_ids ("all": every one; default budget.max_dropped_ids, 1000)
        "dropped_chunk_ids": [a.id for a in dropped][:None if opts.get("max_dropped_ids", 1000) == "all"
                                                     else opts.get("max_dropped_ids", 1000)],
        "total_tokens_used": used,
        "tokens_remaining": budget - used,
        "tokens_available": available,
        "reserved_tokens": reserve,
        "chunks_dropped": len(dropped),
        "conflicts": conflicts[:opts.get("max_conflicts", 100)],
        "conflicts_count": len(conflicts),
        "requires_summarization": [a.id for a in allocated if a.tokens > 500],
        "optimization_metrics": {
            "prioritization_score": _mean([a.priority for a in allocated]),
            "business_relevance_boost": _mean([a.revenue for a in allocated]),
            "recency_boost": _mean([a.recency for a in allocated]),
        },
    }
