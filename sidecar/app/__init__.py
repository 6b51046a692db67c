"""The process: the two listeners and what they serve, the admin endpoints, following
the config file, allocator settings."""
