"""The mcpcache sidecar: a caching proxy for MCP Streamable HTTP."""
