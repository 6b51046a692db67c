"""What makes entries go: a write tool's call (`writes`, `removals`) and the server's
notices that cached answers may be out of date (`notices`)."""
