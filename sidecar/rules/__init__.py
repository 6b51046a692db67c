"""The caching rules: MCP and JSON-RPC messages, the key, what is looked up and stored for
how long, what an answer allows. Pure: no I/O library is imported here (a CI contract)."""
