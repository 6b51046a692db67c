"""The way upstream: one exchange per call, its relay, the flights that share a call
between identical misses, and the HTTP client."""
