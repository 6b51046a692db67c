"""A stored result and how a hit writes into it without parsing it.

A hit's cost is a product goal (tens of microseconds), so a result is stored as the bytes
of its JSON value, laid out once, when it is stored, so that everything a hit adds or
restates goes at offsets known in advance: the answer's age in `_meta` (first member),
an optional note as the first `content` item (second member), and the freshness left in
`ttlMs` (last member). A hit joins slices of the stored bytes around a few formatted
numbers; it never decodes or encodes the result.

Pure, no I/O.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import orjson

AGE: Final = "io.mcpcache/age"
STORED_AT: Final = "io.mcpcache/storedAt"
"""The `_meta` members of an answer from the cache: its age in seconds and when it was
stored (RFC 3339, UTC). An upstream's own values of them are not kept: they would be
another cache's."""
_OURS: Final = frozenset({AGE, STORED_AT})


class Scope(NamedTuple):
    """What an entry answers, for removing entries: a server and the tool called (with
    digests of arguments writes `match` on), the resource read or the list asked."""

    server: str
    tool: str | None = None
    uri: str | None = None
    listing: str | None = None
    arguments: tuple[tuple[str, str], ...] = ()
    public: bool = False


Note = tuple[bytes, bytes]
"""A notification the upstream sent in a call's stream before its result, stored to be
replayed on a hit as the SSE event it came in: `(event, b"")` as it is, or, for progress,
`(head, tail)` with the caller's own progress token to go between them (a caller that
sent none gets no progress)."""


def replayed(notes: tuple[Note, ...], token: bytes | None) -> bytes:
    """The stored notifications as the events that go before a hit's result, in the
    order they came; `token`: the caller's progress token as JSON (None: it sent none)."""
    parts: list[bytes] = []
    for head, tail in notes:
        if not tail:
            parts.append(head)
        elif token is not None:
            parts += (head, token, tail)
    return b"".join(parts)


class Layout(NamedTuple):
    """Offsets into a stored result where a hit writes (0: nowhere)."""

    ttl_at: int = 0
    """Where the value of `ttlMs` starts (it is the last member)."""
    meta_at: int = 0
    """Where the age members go: just inside `_meta`'s brace, or after the result's
    opening brace when it has no `_meta` (`meta_open`)."""
    meta_open: bool = False
    meta_more: bool = False
    """Something follows the age members there: they end with a comma."""
    content_at: int = 0
    """Just inside the `content` list's bracket, where a note goes first."""
    content_more: bool = False


_META_NAME: Final = len(b'"_meta":')
_CONTENT_NAME: Final = len(b'"content":')


def encode(
    result: Mapping[str, Any], ttl_ms: int | None = None, scope: str | None = None
) -> tuple[bytes, Layout]:
    """A result's stored bytes, `_meta` first, `content` second and `ttlMs` last, and
    where a hit writes into them. `ttl_ms`: write this `ttlMs` instead of the result's
    own (the operator's freshness, see `rules.admission.freshness`); `scope`: this
    `cacheScope`. Written whole, in one go: a result orjson cannot write whole (nested
    too deep) raises `orjson.JSONEncodeError`, as writing it for anyone else would."""
    # The members are put in order by placing `_meta` and `content` first and copying
    # the rest after them (a copied member keeps the place it already has), then moving
    # `ttlMs` (and the `cacheScope` written here) to the end.
    whole: dict[str, Any] = {}
    at = 1  # where the next member starts: after the opening brace, or a comma
    meta_at = content_at = ttl_at = 0
    meta_open = meta_more = content_more = False
    meta: Any = None
    if "_meta" not in result:
        meta_at, meta_open = 1, True
    else:
        meta = result["_meta"]
        if isinstance(meta, dict):  # else left as it is, with no age
            if not _OURS.isdisjoint(meta):
                meta = {k: v for k, v in meta.items() if k not in _OURS}
            meta_at, meta_more = at + _META_NAME + 1, bool(meta)  # inside its brace
        whole["_meta"] = meta
        at += _META_NAME + len(orjson.dumps(meta)) + 1
    content = result.get("content")
    if isinstance(content, list):
        whole["content"] = content
        content_at, content_more = at + _CONTENT_NAME + 1, bool(content)  # inside its bracket
    whole.update(result)
    if not meta_open:
        whole["_meta"] = meta
    ttl = whole.pop("ttlMs", None)
    if ttl_ms is not None:
        ttl = ttl_ms
    if scope is not None:
        whole.pop("cacheScope", None)
        whole["cacheScope"] = scope
    if "ttlMs" in result or ttl_ms is not None:
        whole["ttlMs"] = ttl
    encoded = orjson.dumps(whole)
    if "ttlMs" in whole and isinstance(ttl, int | float) and not isinstance(ttl, bool):
        ttl_at = len(encoded) - 1 - len(orjson.dumps(ttl))  # else none a client could read
    if meta_open:
        meta_more = bool(whole)
    return encoded, Layout(ttl_at, meta_at, meta_open, meta_more, content_at, content_more)


def lay_out(result: bytes) -> tuple[bytes, Layout | None]:
    """The layout of stored bytes that came without one (a copy from the shared tier),
    re-encoded the way `encode` does; None for bytes that are not a JSON object."""
    try:
        parsed = orjson.loads(result)
    except orjson.JSONDecodeError:
        return result, None
    if not isinstance(parsed, dict):
        return result, None
    return encode(parsed)


def notes_size(notes: tuple[Note, ...]) -> int:
    """The bytes stored notifications take (an entry's size counts them)."""
    return sum(len(head) + len(tail) for head, tail in notes) if notes else 0


def rfc3339(wall: float) -> bytes:
    return _rfc3339(math.floor(wall))


@functools.lru_cache(maxsize=4)
def _rfc3339(second: int) -> bytes:
    """Memoised: entries stored within the same second share their stamp."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)).encode()


def span(seconds: int) -> bytes:
    """A short reading of an age for the model: `42s`, `3m12s`, `2h5m`, `3d4h`."""
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return b"%dd%dh" % (days, hours)
    if hours:
        return b"%dh%dm" % (hours, minutes)
    if minutes:
        return b"%dm%ds" % (minutes, secs)
    return b"%ds" % secs


@dataclass(slots=True)
class Entry:
    """A stored result, kept as the bytes of the JSON-RPC `result` value.

    The response a hit sends is these bytes framed around the caller's own `id`, so a hit
    does no JSON encoding of the result.

    Never changed once made, but for the parts a hit cuts at its first hit. Not declared
    frozen: a frozen class's constructor makes a call per field, and every miss that is
    stored makes one.
    """

    result: bytes
    event_stream: bool
    """Whether the upstream answered as `text/event-stream` (a hit answers the same way)."""
    stored_at: float
    expires_at: float
    session: str = ""
    """Digest of the legacy session the answer was given in ("" for none)."""
    keep_stale: float = 0.0
    """Seconds past `expires_at` the entry is kept, never as a fresh answer."""
    ttl_at: int = 0
    """Where the value of the result's `ttlMs` starts in `result` (0: it has none)."""
    seq: int = field(default=0, compare=False)
    scope: Scope | None = None
    layout: Layout | None = None
    """Where a hit writes the age (None: it does not, the bytes were not laid out)."""
    stamp: bytes = b""
    """When it was stored, as RFC 3339 (wall clock)."""
    note: bool = False
    """A hit's first text item says how old it is (the server's `ageNote`)."""
    fetch_seconds: float = 0.0
    """How long the upstream took for the call that fetched it: what each hit saves."""
    notes: tuple[Note, ...] = ()
    """The notifications its stream carried before the result, replayed on a hit."""

    _hit: _HitParts | None = field(init=False, default=None, repr=False, compare=False)
    _cut: bool = field(init=False, default=False, repr=False, compare=False)
    """Whether `_hit` was worked out: at the first hit, not when stored (most entries
    are never hit, and a miss should not pay for them)."""

    @property
    def size(self) -> int:
        return len(self.result) + notes_size(self.notes)

    @property
    def drop_at(self) -> float:
        return self.expires_at + self.keep_stale

    def result_parts(self, now: float) -> tuple[bytes | memoryview, ...]:
        """The stored result as parts to join: its age and storage time in `_meta` (and,
        with `note`, a first text item saying so), its `ttlMs` restated as the
        freshness left at `now` in milliseconds (0 once expired). Everything but the
        numbers was cut and framed when the entry was made."""
        tail = b"%d}" % max(0, int((self.expires_at - now) * 1000)) if self.ttl_at else b""
        hit = self._hit if self._cut else self._cut_for_hits()
        if hit is None:
            return (memoryview(self.result)[: self.ttl_at], tail) if tail else (self.result,)
        age = max(0, int(now - self.stored_at))
        if hit.note is None or hit.before_note is None:
            return hit.head, b"%d" % age, hit.meta_tail, hit.body, tail
        return (
            hit.head, b"%d" % age, hit.meta_tail, hit.before_note, hit.note,
            span(age), hit.note_tail, hit.body, tail,
        )  # fmt: skip

    def _cut_for_hits(self) -> _HitParts | None:
        hit = self._hit = _HitParts.of(self)
        self._cut = True
        return hit


class _HitParts(NamedTuple):
    """An entry's bytes cut where a hit writes, with the fixed text around each number."""

    head: bytes
    """The result up to the age, and the age's own name."""
    meta_tail: bytes
    """After the age: the storage time, and what closes the members there."""
    body: memoryview
    """The rest, up to `ttlMs`'s value (or to the end)."""
    before_note: memoryview | None = None
    note: bytes | None = None
    note_tail: bytes = b""

    @classmethod
    def of(cls, entry: Entry) -> _HitParts | None:
        layout = entry.layout
        if layout is None or not layout.meta_at:
            return None
        view, meta_at = memoryview(entry.result), layout.meta_at
        head = entry.result[:meta_at] + (
            b'"_meta":{"io.mcpcache/age":' if layout.meta_open else b'"io.mcpcache/age":'
        )
        meta_tail = b"".join(
            (
                b',"io.mcpcache/storedAt":"',
                entry.stamp,
                b'"}' if layout.meta_open else b'"',
                b"," if layout.meta_more else b"",
            )
        )
        end = layout.ttl_at or len(entry.result)
        if not (entry.note and layout.content_at):
            return cls(head, meta_tail, view[meta_at:end])
        note_tail = (
            b" old, stored " + entry.stamp + b'.]"}' + (b"," if layout.content_more else b"")
        )
        return cls(
            head,
            meta_tail,
            view[layout.content_at : end],
            view[meta_at : layout.content_at],
            b'{"type":"text","text":"[From a cache: this answer is ',
            note_tail,
        )
