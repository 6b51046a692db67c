"""Request bodies whose objects name a member twice (`{"name": "a", "name": "b"}`).

JSON leaves such an object's meaning to the reader (RFC 8259: names SHOULD be unique).
The sidecar's parser keeps the last value; an upstream's may keep the first. The key
would then name one tool or argument while the upstream answers another, and the answer
be filed where callers asking for the named one read it (an entry for every caller
included), and a write would invalidate what it did not write. So a request whose
reading decides what is stored or removed — one that goes upstream to be stored, or a
write that invalidates — is refused when any of its objects repeats a name. A hit is
not checked: it sends nothing upstream, and answers the reading the key was made from.

Pure, no I/O. The standard library's parser is used for its hook on each object's
members (orjson has none); it runs only on those requests, never on a hit.
"""

from __future__ import annotations

import json
from typing import Any


class _Repeated(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _Repeated(name)
            seen.add(name)
    return found


def repeated_name(raw: bytes) -> str | None:
    """Why this body (valid JSON, already parsed) is refused: a member name one of its
    objects repeats, or that it is nested too deep to check; None when it is not."""
    try:
        json.loads(raw, object_pairs_hook=_members)
    except _Repeated as exc:
        return f"the member name {exc.name[:64]!r} appears twice in one object"
    except RecursionError:
        return "the request is nested too deeply to read unambiguously"
    return None
