"""The AI virtual memory (seed 03, issue 7), mirroring sql/5xx: one module per SQL concern.

- ``pages``: sessions, pages, the working set, faults, the mutation log, packing (``db.pages``; 500-525, 555)
- ``page_cache``: the client-side page-table cache (``db.pages.tlb``)
- ``search``: hybrid page search and the page index (540)
- ``lifecycle``: claims, segments, pre-pass, prefetch, turns, citations (``db.vm``; 550)
- ``fork``: copy-on-write forks, GC and shared regions (``db.vm_fork``; 560-570)
- ``compressors`` / ``embedders``: the client-side level-1/2 compressors and the embedding protocol
"""

# pymemdb.types re-exports this package's result types (old imports keep working); loading it first means
# importing any module here directly never meets a partially initialised pymemdb.types.
from pymemdb import types as _types  # noqa: F401
