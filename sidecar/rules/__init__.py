"""The caching rules, in six groups and two modules, each importing only those below it
(a CI contract), highest first:

- `admission`: what an upstream's answer allows (`judgement.judge`), from what the
  capture saw of it, its headers, and who else it is for (`sharing`);
- `policy`: what a request is: forwarded untouched or looked up (`plan.plan`), under
  which keys, kept how long and where (`keys`), what its arguments make of it;
- `invalidation`: what a write removes, and the notices that say entries are out of
  date; `learned_tools`: what the sidecar learned of each server's tools;
- `key`: who is asking (`callers`) and the digests a key is made of (`cache_key`);
- `protocol`: MCP and JSON-RPC: a client's message, a final result, event streams,
  ids in flight in a session;
- `reading`: reading what crosses the proxy with certainty: bodies, numbers, headers,
  arguments;
- `cache_status`: the reasons for not caching, and the `Cache-Status` words for them.

Pure: no I/O library is imported here (a CI contract).
"""
