"""Request bodies an upstream may read otherwise than the sidecar does.

JSON leaves an object that names a member twice to the reader (RFC 8259: names SHOULD be
unique): orjson keeps the last value, other parsers the first. Go's `encoding/json` also
matches names without regard to case (folding U+017F to `s` and the Kelvin sign to `k`
too), so `Params` beside `params` is a second `params` to it and a stranger to the
sidecar. Either way the key would name one call while the upstream answered another,
and the answer be filed where callers of the named one read it (an entry for every
caller included); a write would invalidate what it did not write; a listing would teach
hints it does not hold.

So a request whose reading decides what is stored, removed or learned — one that goes
upstream to be stored, a write that invalidates, a `tools/list` the policy learns from —
is refused when any of its objects names a member twice, compared after case folding,
or when the message itself has a member JSON-RPC does not define (which the key never
reads). A hit is not checked: it sends nothing upstream.

Pure, no I/O. The standard library's parser is used for its hook on each object's
members (orjson has none); it runs only on those requests, never on a hit.
"""

from __future__ import annotations

import json
from typing import Any, Final

ENVELOPE: Final = frozenset({"jsonrpc", "id", "method", "params"})
"""The members of a JSON-RPC 2.0 request."""
LARGE_BODY: Final = 64 * 1024
"""Bodies past this size are checked off the event loop (about 0.15 s per MiB)."""


class _Repeated(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    folded = {name.casefold() for name, _ in pairs}
    if len(folded) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name.casefold() in seen:
                raise _Repeated(name)
            seen.add(name.casefold())
    return dict(pairs)


def ambiguity(raw: bytes) -> str | None:
    """Why this body (valid JSON, already parsed once) is refused, or None."""
    try:
        body = json.loads(raw, object_pairs_hook=_members)
    except _Repeated as exc:
        return f"the member name {exc.name[:64]!r} appears twice in one object (case aside)"
    except RecursionError:
        return "the request is nested too deeply to read unambiguously"
    if isinstance(body, dict) and not ENVELOPE.issuperset(body):
        extra = sorted(set(body) - ENVELOPE)[0]
        return f"the request has a member JSON-RPC does not define: {extra[:64]!r}"
    return None
