"""Request bodies an upstream may read otherwise than the sidecar does, and the bytes
that go upstream instead.

JSON leaves an object that names a member twice to the reader (RFC 8259: names SHOULD be
unique): orjson keeps the last value, other parsers the first. Go's `encoding/json` also
matches names without regard to case (folding U+017F to `s` and the Kelvin sign to `k`
too), so `Name` beside `name` is a second `name` to it and a stranger to the sidecar.
Either way the key, a tool's rule or a write's invalidation would read one call while
the upstream ran another: an answer filed where callers of the named one read it (an
entry for every caller included), a write that invalidates nothing, a listing that
teaches hints it does not hold.

So a body goes upstream as the sidecar read it, re-encoded from the parsed message: a
name given twice reaches the upstream once, with the value the sidecar used. A body in
which one object has two names equal after case folding is refused. The one exception
is a body holding a number the parsed message does not keep exactly (`numbers`), or one
nested deeper than orjson writes: it goes as the client wrote it, after a second, exact
reading refuses any name given twice (past the standard library's depth, the body).
Members JSON-RPC does not define are refused when the message is parsed
(`messages.parse_message`).

Pure, no I/O.
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

from .numbers import has_inexact_number

LARGE_BODY: Final = 64 * 1024
"""Bodies past this size are read off the event loop, and never rechecked."""


class Ambiguous(ValueError):
    """The body may be read two ways; the message says how."""


def upstream_body(body: dict[str, Any], raw: bytes) -> bytes:
    """The bytes that go upstream for a message parsed as `body` from `raw`; raises
    `Ambiguous`."""
    if not has_inexact_number(raw):
        name = folded_collision(body)
        if name is not None:
            raise Ambiguous(_twice(name))
        try:
            return orjson.dumps(body)
        except orjson.JSONEncodeError:
            pass  # nested deeper than orjson writes: as written, once read exactly
    try:
        json.loads(raw, object_pairs_hook=_unique_members)
    except RecursionError:
        raise Ambiguous("the request is nested too deeply to read exactly") from None
    return raw


def folded_collision(value: Any) -> str | None:
    """A member name that another name of the same object equals after case folding,
    anywhere in `value` (a parsed JSON value); None when there is none."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if len(item) > 1 and len({name.casefold() for name in item}) != len(item):
                return _repeated(list(item))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({name.casefold() for name, _ in pairs}) != len(pairs):
        raise Ambiguous(_twice(_repeated([name for name, _ in pairs])))
    return dict(pairs)


def _repeated(names: list[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name.casefold() in seen:
            return name
        seen.add(name.casefold())
    raise AssertionError("no name is repeated")  # pragma: no cover - called on one


def _twice(name: str) -> str:
    return f"the member name {name[:64]!r} appears twice in one object (case aside)"
