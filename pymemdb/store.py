"""Long-term memory store (issue 17): ``db.store``, one wrapper per ``memori.store_*`` function.

Items are keyed by (user, namespace path, key) and hold a JSON object. The SQL
(sql/810-store.sql) decides everything: expiry, TTL refresh, filters, ranking.
LangGraph's ``BaseStore`` over the same functions is
``pymemdb.integrations.langgraph.MemoriStore``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from psycopg.types.json import Jsonb

from pymemdb._sql import given, maybe, one, rows, scalar

if TYPE_CHECKING:
    from pymemdb.db import Database


@dataclass(frozen=True)
class StoreItem:
    """memori.store_item: one stored item."""

    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    ttl: timedelta | None


@dataclass(frozen=True)
class StoreGetResult:
    """memori.store_get_result: an item found by store_get_many, with its request's 1-based position."""

    ord: int
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    ttl: timedelta | None


@dataclass(frozen=True)
class StoreSearchResult(StoreItem):
    """memori.store_search_result: an item (a ``StoreItem``'s columns first) with its scores and ranks."""

    score: float | None        # vector similarity (cosine: 1 - distance, l2: -distance, inner product)
    rank: int                  # position in the result before the offset, from 1
    vector_rank: int | None
    text_rank: int | None
    text_score: float | None   # ts_rank_cd of the full-text match


@dataclass(frozen=True)
class StoreNamespace:
    """A row of memori.store_list_namespaces."""

    namespace: list[str]


STORE_PUT = one(
    "store_put",
    ("p_user_id", "text"), ("p_namespace", "text[]"), ("p_key", "text"), ("p_value", "jsonb"),
    ("p_ttl", "interval"), ("p_index", "text[]"), ("p_now", "timestamptz"), ("p_text", "text"),
    ("p_fields", "text[]"), ("p_embeddings", "public.vector[]"),
    result=StoreItem,
)
STORE_PUT_MANY = scalar(
    "store_put_many", ("p_user_id", "text"), ("p_items", "jsonb"), ("p_now", "timestamptz"), result=int,
)
STORE_GET = maybe(
    "store_get",
    ("p_user_id", "text"), ("p_namespace", "text[]"), ("p_key", "text"), ("p_refresh_ttl", "boolean"),
    ("p_now", "timestamptz"),
    result=StoreItem,
)
STORE_GET_MANY = rows(
    "store_get_many",
    ("p_user_id", "text"), ("p_namespaces", "jsonb"), ("p_keys", "text[]"), ("p_refresh_ttl", "boolean"),
    ("p_now", "timestamptz"),
    result=StoreGetResult,
)
STORE_DELETE = scalar(
    "store_delete", ("p_user_id", "text"), ("p_namespace", "text[]"), ("p_key", "text"), result=bool,
)
STORE_SEARCH = rows(
    "store_search",
    ("p_user_id", "text"), ("p_namespace_prefix", "text[]"), ("p_filter", "jsonb"), ("p_query", "text"),
    ("p_query_embedding", "public.vector"), ("p_limit", "integer"), ("p_offset", "integer"),
    ("p_refresh_ttl", "boolean"), ("p_now", "timestamptz"), ("p_distance", "text"), ("p_vector_type", "text"),
    result=StoreSearchResult,
)
STORE_LIST_NAMESPACES = rows(
    "store_list_namespaces",
    ("p_user_id", "text"), ("p_prefix", "text[]"), ("p_suffix", "text[]"), ("p_max_depth", "integer"),
    ("p_limit", "integer"), ("p_offset", "integer"), ("p_now", "timestamptz"),
    result=StoreNamespace,
)
STORE_NAMESPACE_DELETE = scalar(
    "store_namespace_delete", ("p_user_id", "text"), ("p_prefix", "text[]"), ("p_now", "timestamptz"),
    result=int,
)
STORE_INDEX_ENSURE = scalar(
    "store_index_ensure",
    ("p_dims", "integer"), ("p_distance", "text"), ("p_vector_type", "text"), ("p_method", "text"),
    ("p_options", "jsonb"),
    result=str,  # NULL for 'flat' (no index)
)

Distance = Literal["cosine", "l2", "inner_product"]


def vector_text(embedding: Sequence[float]) -> str:
    """pgvector's text form of an embedding: ``[0.1,0.2]`` (repr keeps every float exactly)."""
    return "[" + ",".join(repr(float(x)) for x in embedding) + "]"


class Store:
    """``db.store``: long-term memory items of the acting user (``db.user_id`` or ``user_id=``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: timedelta | None = None,
        index: Sequence[str] | Literal[False] | None = None,
        text: str | None = None,
        embeddings: Mapping[str, Sequence[float]] | None = None,
        user_id: str | None = None,
        now: datetime | None = None,
    ) -> StoreItem:
        """memori.store_put: upsert an item; ``index`` names the fields for full text (False: none)."""
        fields = list(embeddings or {})
        return self._db.call(
            STORE_PUT,
            **given(p_user_id=user_id or self._db.user_id, p_namespace=list(namespace), p_key=key,
                    p_value=Jsonb(dict(value)), p_ttl=ttl,
                    p_index=[] if index is False else (None if index is None else list(index)),
                    p_now=now, p_text=text, p_fields=fields or None,
                    p_embeddings=[vector_text(embeddings[f]) for f in fields] if embeddings else None),
        )

    def put_many(self, items: Sequence[Mapping[str, Any]], *, user_id: str | None = None,
                 now: datetime | None = None) -> int:
        """memori.store_put_many: puts and deletes (``value`` None) in one call; see the SQL for the item shape."""
        return int(self._db.call(STORE_PUT_MANY, **given(p_user_id=user_id or self._db.user_id,
                                                         p_items=Jsonb(list(items)), p_now=now)))

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = True, user_id: str | None = None,
            now: datetime | None = None) -> StoreItem | None:
        """memori.store_get: the unexpired item, its TTL refreshed unless ``refresh_ttl=False``."""
        return self._db.call(
            STORE_GET, **given(p_user_id=user_id or self._db.user_id, p_namespace=list(namespace), p_key=key,
                               p_refresh_ttl=refresh_ttl, p_now=now),
        )

    def get_many(self, requests: Sequence[tuple[Sequence[str], str]], *, refresh_ttl: bool = True,
                 user_id: str | None = None, now: datetime | None = None) -> builtins.list[StoreGetResult]:
        """memori.store_get_many: many (namespace, key) pairs in one call; ``ord`` is the 1-based request."""
        return self._db.call(
            STORE_GET_MANY,
            **given(p_user_id=user_id or self._db.user_id, p_namespaces=Jsonb([list(ns) for ns, _ in requests]),
                    p_keys=[k for _, k in requests], p_refresh_ttl=refresh_ttl, p_now=now),
        )

    def delete(self, namespace: Sequence[str], key: str, *, user_id: str | None = None) -> bool:
        """memori.store_delete: delete an item; True when there was one."""
        return bool(self._db.call(STORE_DELETE, **given(p_user_id=user_id or self._db.user_id,
                                                        p_namespace=list(namespace), p_key=key)))

    def search(
        self,
        namespace_prefix: Sequence[str] = (),
        *,
        filter: Mapping[str, Any] | None = None,
        query: str | None = None,
        query_embedding: Sequence[float] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = False,
        distance: Distance = "cosine",
        vector_type: Literal["vector", "halfvec"] = "vector",
        user_id: str | None = None,
        now: datetime | None = None,
    ) -> builtins.list[StoreSearchResult]:
        """memori.store_search: newest first, or ranked by full text and/or vector similarity (fused)."""
        return self._db.call(
            STORE_SEARCH,
            **given(p_user_id=user_id or self._db.user_id, p_namespace_prefix=list(namespace_prefix),
                    p_filter=None if filter is None else Jsonb(dict(filter)), p_query=query,
                    p_query_embedding=None if query_embedding is None else vector_text(query_embedding),
                    p_limit=limit, p_offset=offset, p_refresh_ttl=refresh_ttl, p_now=now, p_distance=distance,
                    p_vector_type=vector_type),
        )

    def list_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
        user_id: str | None = None,
        now: datetime | None = None,
    ) -> builtins.list[tuple[str, ...]]:
        """memori.store_list_namespaces: distinct namespaces (``*`` matches any label), sorted."""
        found: list[StoreNamespace] = self._db.call(
            STORE_LIST_NAMESPACES,
            **given(p_user_id=user_id or self._db.user_id, p_prefix=None if prefix is None else list(prefix),
                    p_suffix=None if suffix is None else list(suffix), p_max_depth=max_depth, p_limit=limit,
                    p_offset=offset, p_now=now),
        )
        return [tuple(r.namespace) for r in found]

    def namespace_delete(self, prefix: Sequence[str], *, user_id: str | None = None,
                         now: datetime | None = None) -> int:
        """memori.store_namespace_delete: delete a namespace and everything below it; returns the count."""
        return int(self._db.call(STORE_NAMESPACE_DELETE, **given(p_user_id=user_id or self._db.user_id,
                                                                 p_prefix=list(prefix), p_now=now)))

    def index_ensure(self, dims: int, *, distance: Distance = "cosine",
                     vector_type: Literal["vector", "halfvec"] = "vector",
                     method: Literal["hnsw", "ivfflat", "flat"] = "hnsw",
                     options: Mapping[str, Any] | None = None) -> str | None:
        """memori.store_index_ensure: create the ANN index of a configuration (owner only); its name."""
        return self._db.call(
            STORE_INDEX_ENSURE,
            **given(p_dims=dims, p_distance=distance, p_vector_type=vector_type, p_method=method,
                    p_options=None if options is None else Jsonb(dict(options))),
        )
