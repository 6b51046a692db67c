"""Real peers for the tests: MCP SDK servers and clients, and a sidecar, on loopback."""
