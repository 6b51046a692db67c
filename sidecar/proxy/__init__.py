"""The request path: routing, lookups in memory and the Redis tier, misses, forwarding,
the cacheable fetch, and removing entries."""
