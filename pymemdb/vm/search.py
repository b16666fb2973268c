"""AI virtual memory search and page index (issue 7): the declarations of sql/540-vm-search.sql and their rows.

``db.pages.search``, ``by_type``, ``provenance_chain``, ``top_importance`` and the
embedding calls use them (pymemdb/vm/pages.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pymemdb._sql import rows, scalar


@dataclass(frozen=True)
class PageSearchResult:
    """A row of memori.search_pages: a matching page's metadata (never its content)."""

    page_id: str
    session_id: str
    modality: str
    tier: str
    levels: list[int]
    hint: str
    relevance: float
    total_available: int
    mode: str  # 'hybrid' (full text + vectors) or 'full_text' (no query embedding)
    # True: total_available is the exact number of matches; False: a lower bound (user scope above
    # vm.search_exact_max pages without exact_total); None from a schema before issue 21
    total_exact: bool | None = None


@dataclass(frozen=True)
class PageIndexEntry:
    """A row of memori.pages_by_type, page_provenance_chain, pages_top_importance."""

    session_id: str
    page_id: str
    page_type: str
    modality: str
    tier: str
    importance: float
    tokens: int
    access_count: int
    last_accessed: datetime
    hint: str
    provenance: list[str]
    depth: int | None  # steps from the start page in a provenance chain, else None


# -- AI virtual memory fork, GC and shared regions (issue 7) ---------------------------


PAGE_EMBEDDING_SET = scalar("page_embedding_set", ("p_session_id", "text"), ("p_page_id", "text"),
                            ("p_embedding", "public.vector"), ("p_now", "timestamptz"), result=bool)
SEARCH_PAGES = rows(
    "search_pages", ("p_session_id", "text"), ("p_query", "text"), ("p_query_embedding", "public.vector"),
    ("p_modality", "text"), ("p_page_types", "text[]"), ("p_limit", "integer"), ("p_scope", "text"),
    ("p_user_id", "text"), ("p_now", "timestamptz"), ("p_exact_total", "boolean"), result=PageSearchResult,
)
VM_EMBEDDING_DIM = scalar("vm_embedding_dim", result=int)
VM_EMBEDDING_DIM_SET = scalar("vm_embedding_dim_set", ("p_dim", "integer"), result=int)
PAGES_BY_TYPE = rows("pages_by_type", ("p_session_id", "text"), ("p_page_type", "text"), ("p_limit", "integer"),
                     ("p_now", "timestamptz"), result=PageIndexEntry)
PAGE_PROVENANCE_CHAIN = rows(
    "page_provenance_chain", ("p_session_id", "text"), ("p_page_id", "text"), ("p_direction", "text"),
    ("p_max_depth", "integer"), ("p_now", "timestamptz"), result=PageIndexEntry,
)
PAGES_TOP_IMPORTANCE = rows("pages_top_importance", ("p_session_id", "text"), ("p_n", "integer"),
                            ("p_type", "text"), ("p_now", "timestamptz"), result=PageIndexEntry)
