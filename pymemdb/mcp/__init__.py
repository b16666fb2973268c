"""pymemdb as an MCP memory server (issue 18): ``pymemdb mcp serve stdio|http``.

``pymemdb.mcp.tokens`` (the bearer tokens' SQL wrappers, ``db.mcp_tokens``)
needs nothing beyond pymemdb; ``pymemdb.mcp.server`` and ``pymemdb.mcp.auth``
need the official MCP SDK: ``pip install 'pymemdb[mcp]'``.
"""
