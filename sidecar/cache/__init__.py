"""The response cache in memory: pure (no I/O), on cachetools."""
