"""Compressors write levels 1 (reduced) and 2 (abstract) of pages (seed 03, 4.2).

The SQL derives level 3 (a reference) itself and lists what is missing
(memori.page_compress_todo); a Compressor turns a page into a cheaper text.
The default for text is extractive and local (no LLM): level 1 keeps the
leading sentences, level 2 the sentences with the most frequent words. Image,
audio and video compressors are protocols whose defaults write nothing, so
those pages are served in full or as their level-3 reference until a real
captioner or transcriber is plugged in.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W\d_][\w]{3,}", re.UNICODE)


@dataclass(frozen=True)
class PageCompressItem:
    """memori.page_compress_item: a page and the level a Compressor should write for it."""

    page_id: str
    modality: str
    page_type: str
    level: int
    content: str | None
    data: Any
    tokens: int
    version: int


@dataclass(frozen=True)
class Representation:
    """A compressed form of a page: text and/or data, and its tokens (None: estimated by the SQL)."""

    content: str | None
    data: dict[str, Any] | None = None
    tokens: int | None = None


class Compressor(Protocol):
    """Writes one level of one page, or None when it cannot make it cheaper."""

    modality: str

    def compress(self, page: PageCompressItem, level: int) -> Representation | None: ...


def estimate_tokens(text: str) -> int:
    """memori.token_estimate(text, 'page'): one token per 4 bytes (tests/test_token_estimate.py checks it)."""
    return max(1, math.ceil(len(text.encode()) / 4)) if text else 0


class TextCompressor:
    """Extractive text compression: level 1 about half the tokens, level 2 about a fifth."""

    modality = "text"

    def __init__(self, reduced_share: float = 0.5, abstract_share: float = 0.2) -> None:
        self.shares = {1: reduced_share, 2: abstract_share}

    def compress(self, page: PageCompressItem, level: int) -> Representation | None:
        text = page.content if page.content is not None else ("" if page.data is None else str(page.data))
        sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
        if not sentences or level not in self.shares:
            return None
        budget = max(1, int(page.tokens * self.shares[level]))
        if level == 1:
            chosen = self._leading(sentences, budget)
        else:
            chosen = self._salient(sentences, budget)
        out = " ".join(chosen)
        if len(sentences) == 1 or estimate_tokens(out) >= page.tokens:
            # one long sentence: cut it at the budget instead
            out = text[: budget * 4].rsplit(" ", 1)[0] + " ..."
        if estimate_tokens(out) >= page.tokens:
            return None
        return Representation(out)

    @staticmethod
    def _leading(sentences: list[str], budget: int) -> list[str]:
        chosen: list[str] = []
        for s in sentences:
            if chosen and estimate_tokens(" ".join([*chosen, s])) > budget:
                break
            chosen.append(s)
        return chosen

    @staticmethod
    def _salient(sentences: list[str], budget: int) -> list[str]:
        freq = Counter(w.lower() for w in _WORD.findall(" ".join(sentences)))

        def score(s: str) -> float:
            words = [w.lower() for w in _WORD.findall(s)]
            return sum(freq[w] for w in words) / (len(words) or 1) + (0.5 if s is sentences[0] else 0.0)

        ranked = sorted(range(len(sentences)), key=lambda i: (-score(sentences[i]), i))
        keep: list[int] = []
        for i in ranked:
            if keep and estimate_tokens(" ".join(sentences[j] for j in sorted([*keep, i]))) > budget:
                continue
            keep.append(i)
        return [sentences[i] for i in sorted(keep)]


class ReferenceOnlyCompressor:
    """The default for media: writes nothing, so the page has levels 0 and 3 only."""

    def __init__(self, modality: str) -> None:
        self.modality = modality

    def compress(self, page: PageCompressItem, level: int) -> Representation | None:
        return None


class CompressorRegistry:
    """One Compressor per modality."""

    def __init__(self, *compressors: Compressor) -> None:
        self.by_modality: dict[str, Compressor] = {
            "text": TextCompressor(),
            "structured": ReferenceOnlyCompressor("structured"),
            "image": ReferenceOnlyCompressor("image"),
            "audio": ReferenceOnlyCompressor("audio"),
            "video": ReferenceOnlyCompressor("video"),
        }
        for c in compressors:
            self.by_modality[c.modality] = c

    def compress(self, page: PageCompressItem, level: int) -> Representation | None:
        compressor = self.by_modality.get(page.modality)
        return None if compressor is None else compressor.compress(page, level)
