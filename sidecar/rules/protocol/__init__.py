"""What MCP and JSON-RPC say: a client's message (`messages`), a final result and its
framing (`results`), event streams (`events`), and the ids in flight in a legacy
session (`session_ids`)."""
