"""The key: who is asking, as the request's headers say (`callers`), and the digests an
entry is keyed and filed by (`cache_key`)."""
