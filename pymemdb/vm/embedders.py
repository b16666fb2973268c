"""Embedders turn text into vectors for hybrid page search (issue 7).

The database stores one embedding per page (memori.pages.embedding, dimension
``vm.embedding_dim``, 384 by default) and ranks by cosine distance; the model
that makes the vectors lives in Python. ``HashingEmbedder`` is the local,
deterministic default: hashed character n-grams (the "hashing trick"), so
texts sharing words and word pieces land near each other without any download.
It is a lexical embedder, not a semantic one. ``SentenceTransformerEmbedder``
(extra ``pymemdb[embeddings]``) runs a local sentence-transformers model for
paraphrase recall; anything else plugs in through the ``Embedder`` protocol.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

_TOKEN = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    """Anything with a dimension and a batch ``embed``: one L2-normalised vector per text."""

    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashingEmbedder:
    """Deterministic local embedder: character n-grams of each word hashed into ``dim`` buckets, L2-normalised.

    Each n-gram adds +1 or -1 (a second hash bit) to its bucket, so collisions
    cancel out on average instead of piling up. An empty text is the zero vector.
    """

    def __init__(self, dim: int = 384, ngram_sizes: tuple[int, ...] = (3, 4, 5)) -> None:
        if dim < 1:
            raise ValueError("dim must be positive")
        self.dim = dim
        self._sizes = ngram_sizes

    def _features(self, text: str) -> list[str]:
        features: list[str] = []
        for word in _TOKEN.findall(text.lower()):
            padded = f"<{word}>"
            features.append(padded)  # the whole word weighs in too
            for n in self._sizes:
                features.extend(padded[i:i + n] for i in range(max(0, len(padded) - n + 1)))
        return features

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for feature in self._features(text):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vector[value % self.dim] += 1.0 if (value >> 63) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm else vector

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


class SentenceTransformerEmbedder:
    """A local sentence-transformers model (``pip install 'pymemdb[embeddings]'``), L2-normalised.

    The default ``all-MiniLM-L6-v2`` gives 384 dimensions, the installed
    default; for another model install with ``pymemdb init --embedding-dim N``
    where N is ``embedder.dim``. The model is downloaded once by
    sentence-transformers (Hugging Face cache) and runs on the CPU unless
    ``device`` says otherwise. ``model`` takes an already loaded model (or
    anything with ``encode`` and ``get_sentence_embedding_dimension``).
    """

    def __init__(self, model_name: str = "all-MiniLM-L6-v2", *, device: str | None = None,
                 batch_size: int = 64, model: Any = None) -> None:
        if model is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:  # the optional extra is not installed
                raise ImportError(
                    "SentenceTransformerEmbedder needs sentence-transformers: pip install 'pymemdb[embeddings]'"
                ) from exc
            model = SentenceTransformer(model_name, device=device)
        self._model = model
        self._batch_size = batch_size
        self.dim = int(model.get_sentence_embedding_dimension())

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._model.encode(list(texts), batch_size=self._batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return [[float(x) for x in row] for row in vectors]


def to_pgvector(vector: Sequence[float]) -> str:
    """pgvector's text form ``[x1,x2,...]`` (the client sends it and casts to public.vector)."""
    return "[" + ",".join(repr(float(v)) for v in vector) + "]"
