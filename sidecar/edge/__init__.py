"""The HTTP edge: one request read, answers sent as plain ASGI callables, the listener's
guards and timeouts."""
