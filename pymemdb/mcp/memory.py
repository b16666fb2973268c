"""The long-term memory calls the MCP tools make (sql/810-store.sql), and how tools name items.

The tools read and write the same ``memori.store_items`` as ``MemoriStore``
(LangGraph) and ``db.store``: a memory is a store item (namespace path, key,
jsonb value). A text memory is the value ``{"text": ...}``. An item's MCP id
is its namespace labels and key, each percent-encoded, joined by ``/``
(``preferences/favorite-color``): readable, and unambiguous whatever the labels hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, unquote

from pymemdb.errors import McpInvalidArgument
from pymemdb.store import (
    STORE_DELETE,
    STORE_LIST_NAMESPACES,
    STORE_NAMESPACE_DELETE,
    STORE_PUT,
    STORE_SEARCH,
    StoreItem,
    StoreSearchResult,
    vector_text,
)

DEFAULT_NAMESPACE = ("memories",)


# The tools call the store's own declarations (pymemdb.store): the same SQL as db.store and MemoriStore.
__all__ = [
    "DEFAULT_NAMESPACE",
    "STORE_DELETE",
    "STORE_LIST_NAMESPACES",
    "STORE_NAMESPACE_DELETE",
    "STORE_PUT",
    "STORE_SEARCH",
    "StoreItem",
    "StoreSearchResult",
    "item_id",
    "namespace_path",
    "parse_item_id",
    "text_of",
    "vector_text",
]


def namespace_path(namespace: str | Sequence[str] | None, *, default: Sequence[str] | None = None) -> list[str]:
    """A tool's namespace argument as labels: a list of labels, or one string with ``/`` between labels."""
    if namespace is None:
        return list(default or ())
    if isinstance(namespace, str):
        text = namespace.strip().strip("/")
        return text.split("/") if text else []
    return [str(label) for label in namespace]


def item_id(namespace: Sequence[str], key: str) -> str:
    return "/".join(quote(part, safe="") for part in (*namespace, key))


def parse_item_id(text: str) -> tuple[list[str], str]:
    parts = [unquote(part) for part in text.split("/")]
    if len(parts) < 2 or any(part == "" for part in parts):
        raise McpInvalidArgument(
            f"{text!r} is not a memory id",
            sqlstate="PM130",
            hint="Pass an id as returned by remember, search_memories or list_memories, e.g. 'memories/3f2a...'; "
                 "or pass namespace and key.",
        )
    return parts[:-1], parts[-1]


def text_of(value: Any) -> str:
    """The string leaves of a JSON value, one per line: what full text and embeddings index."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(t for t in (text_of(v) for v in value.values()) if t)
    if isinstance(value, list):
        return "\n".join(t for t in (text_of(v) for v in value) if t)
    return ""
