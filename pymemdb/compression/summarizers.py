"""Summarizers for compression (seed 04): who writes the text of a checkpoint.

The database decides what to compress and how short each summary must be
(``memori.compression_prompt``); a ``Summarizer`` turns one
``CompressionRequest`` into text. Two are provided:

- ``ExtractiveSummarizer``: local, deterministic, no LLM. It keeps the
  highest-scoring sentences of the source, in their original order, within the
  target's token estimate.
- ``OpenAISummarizer``: any OpenAI-compatible ``/v1/chat/completions``
  endpoint (OpenAI, Ollama, vLLM, llama.cpp server), with the standard library
  only. It sends the goal-aware prompt; an answer over the target is trimmed
  by the extractive summarizer, so the budget holds whatever the model writes.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pymemdb.errors import PymemdbError

if TYPE_CHECKING:
    from pymemdb.compression.messages import CompressionRequest

CHARS_PER_TOKEN = 4  # memori.settings compression.chars_per_token (default)


def estimate_tokens(text: str, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """memori.token_estimate(text, 'compression'): ceil(characters / chars_per_token); a test compares them."""
    return math.ceil(len(text) / chars_per_token)


class SummarizerError(PymemdbError):
    """A summarizer could not produce a summary (the plan is aborted; nothing else changes)."""


@runtime_checkable
class Summarizer(Protocol):
    """Writes one summary: at most ``request.target_tokens`` tokens of ``request.source``."""

    def summarize(self, request: CompressionRequest) -> str: ...


_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|\n|$)")
_WORD = re.compile(r"[A-Za-z0-9_./-]{3,}")
_ROLE = re.compile(r"^(assistant|tool): ", re.MULTILINE)


class ExtractiveSummarizer:
    """Deterministic extractive summaries: no model, no network.

    Sentences are scored by the frequency of their words in the source (a
    sentence about what the source keeps returning to scores high), plus a
    small bonus for the first sentence of each message. The best ones are
    kept in source order until the target is reached; a first sentence longer
    than the target is cut at a word boundary.
    """

    def __init__(self, chars_per_token: float = CHARS_PER_TOKEN) -> None:
        self.chars_per_token = chars_per_token

    def summarize(self, request: CompressionRequest) -> str:
        return self.extract(request.source, request.target_tokens)

    def extract(self, text: str, target_tokens: int) -> str:
        source = _ROLE.sub("", text).strip()
        if estimate_tokens(source, self.chars_per_token) <= target_tokens:
            return source
        limit = int(target_tokens * self.chars_per_token)
        sentences = [s.strip() for s in _SENTENCE.findall(source) if s.strip()]
        freq = Counter(w.lower() for w in _WORD.findall(source))
        firsts = {0} | {i for i, s in enumerate(sentences) if i and sentences[i - 1].endswith("\n")}

        def score(i: int) -> float:
            words = [w.lower() for w in _WORD.findall(sentences[i])]
            base = sum(freq[w] for w in words) / (len(words) + 1)
            return base + (1.0 if i in firsts else 0.0)

        ranked = sorted(range(len(sentences)), key=lambda i: (-score(i), i))
        chosen: list[int] = []
        used = 0
        for i in ranked:
            cost = len(sentences[i]) + 1
            if used + cost <= limit:
                chosen.append(i)
                used += cost
        if not chosen:
            return _cut(source, limit)
        return " ".join(sentences[i] for i in sorted(chosen))


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters of text, at a word boundary when there is one."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() or text[: max(limit, 1)]


class OpenAISummarizer:
    """Summaries from an OpenAI-compatible chat completions endpoint.

    ``base_url`` is the API root, e.g. ``http://localhost:11434/v1`` for
    Ollama or ``https://api.openai.com/v1``. ``api_key`` is sent as a bearer
    token when given (pass it from your environment; it is never stored).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        temperature: float = 0.0,
        chars_per_token: float = CHARS_PER_TOKEN,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.temperature = temperature
        self._trim = ExtractiveSummarizer(chars_per_token)

    def summarize(self, request: CompressionRequest) -> str:
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": "You compress conversation history for a context window."},
                {"role": "user", "content": request.prompt},
            ],
            "max_tokens": max(request.target_tokens, 1),
            "temperature": self.temperature,
            "stream": False,
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        http = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(http, timeout=self.timeout) as response:
                answer = json.loads(response.read().decode("utf-8"))
            text = str(answer["choices"][0]["message"]["content"]).strip()
        except urllib.error.HTTPError as exc:
            raise SummarizerError(f"summarizer endpoint answered HTTP {exc.code}",
                                  hint=f"Check the model name and the endpoint {self.url}.") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise SummarizerError(f"summarizer endpoint unreachable: {exc}",
                                  hint=f"Start the model server or fix the URL ({self.url}).") from exc
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise SummarizerError("summarizer endpoint gave no chat completion",
                                  hint="The endpoint must be OpenAI-compatible (/v1/chat/completions).") from exc
        if not text:
            raise SummarizerError("summarizer returned an empty summary", hint="Try another model or a larger target.")
        # the budget holds whatever the model writes
        return self._trim.extract(text, request.target_tokens)
