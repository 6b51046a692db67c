"""What the shared tier stores and where: the framed value and the key layout. Pure.

A value is a version marker, an echo of the key and generation, flags, the result's
wall-clock timestamps and length, the upstream time its fetch took, then the result
bytes (the JSON-RPC `result` value, never headers, tokens or the caller's id), and, when
a flag says so, the notifications its stream carried before it (`cache.entry.Note`:
each as two lengths and its two parts, the same bytes the memory tier keeps). A value
read back is verified before it is served — the marker, the key echo, the length, and
that the result is one JSON object exactly as the memory tier encodes it — because it
crossed a network and a store other programs can write to: a value filed under the wrong
key (by a bug, by hand, or by a client that mixed up replies to cancelled commands, as
redis-py once did) must never be served.

Keys are `mcpcache:<namespace>:{<app id>:<server>}:<key>`, and a server's generation is
`mcpcache:<namespace>:@generation:{<app id>:<server>}`. The braces are a Redis Cluster
hash tag: an app's server has its entries and its generation in one slot, so a lookup
reads both from one node in one round trip (a pipeline that never crosses shards), and a
failover moves them together. Different apps and servers spread over the shards; one
app's one server does not (see the shared-tier guide, "Sizing"). On one Redis the
braces are only characters. The namespace comes first, outside the tag, so that one ACL
pattern per namespace (`~mcpcache:<namespace>:*`) confines it. An app's removals are
announced on `mcpcache:<namespace>:@removals:{<app id>}` (`&mcpcache:<namespace>:*`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

import orjson

from ..cache.entry import Note, notes_size
from ..rules.protocol.results import encode_result

MAGIC: Final = b"mcpcache/3\n"
"""The framing and version marker every stored value starts with (a value of another
version, written by another release of the sidecar, is a miss)."""
_HEAD: Final = struct.Struct("!BddIf")  # flags, stored_at, expires_at, length, fetch seconds
_EVENT_STREAM: Final = 1
_NOTES: Final = 2
_NOTE: Final = struct.Struct("!II")  # a note's two parts' lengths
_EVENT_HEAD: Final = b"event: message\ndata: "
KEY_LENGTH: Final = 64
"""A cache key is a hex sha256."""
GENERATION_LENGTH: Final = 16
"""A generation is 16 hex digits, or empty before the server's first removal."""
_MAX_FETCH_SECONDS: Final = 86400.0
"""A fetch time past this (a day) is not believed: counted as none."""
OVERHEAD: Final = len(MAGIC) + KEY_LENGTH + 2 + GENERATION_LENGTH + _HEAD.size
"""The most a stored value adds to its result."""


@dataclass(frozen=True, slots=True)
class TierEntry:
    """A result read from the shared tier, with wall-clock (Unix) timestamps."""

    result: bytes
    event_stream: bool
    stored_at: float
    expires_at: float
    ttl_at: int = 0
    """Where the result's `ttlMs` value starts (see `protocol.results.encode_result`), 0: none."""
    fetch_seconds: float = 0.0
    """How long the upstream took for the call that fetched it."""
    notes: tuple[Note, ...] = ()
    """The notifications a hit replays before the result."""

    @property
    def size(self) -> int:
        return len(self.result) + notes_size(self.notes)


def _echo(key: str, generation: bytes) -> bytes:
    return b"".join((key.encode("ascii"), b":", generation, b"\n"))


def encode(
    key: str,
    result: bytes,
    event_stream: bool,
    stored_at: float,
    expires_at: float,
    generation: bytes = b"",
    fetch_seconds: float = 0.0,
    notes: tuple[Note, ...] = (),
) -> bytes:
    flags = (_EVENT_STREAM if event_stream else 0) | (_NOTES if notes else 0)
    head = _HEAD.pack(flags, stored_at, expires_at, len(result), fetch_seconds)
    parts = [MAGIC, _echo(key, generation), head, result]
    for note_head, tail in notes:
        parts += (_NOTE.pack(len(note_head), len(tail)), note_head, tail)
    return b"".join(parts)


def _notes(value: bytes) -> tuple[Note, ...] | None:
    """The notes `encode` wrote, or None when `value` is not exactly such notes: each
    one whole SSE `message` event, or a progress event cut where a token goes."""
    notes: list[Note] = []
    at = 0
    while at < len(value):
        if len(value) - at < _NOTE.size:
            return None
        head_length, tail_length = _NOTE.unpack_from(value, at)
        at += _NOTE.size
        head = value[at : at + head_length]
        tail = value[at + head_length : at + head_length + tail_length]
        at += head_length + tail_length
        if len(head) != head_length or len(tail) != tail_length or b"\r" in head + tail:
            return None
        event = head + b"0" + tail if tail else head
        if not event.startswith(_EVENT_HEAD) or b"\n\n" in event[:-2]:
            return None
        if not event.endswith(b"\n\n") or (tail and not tail.endswith(b"}}\n\n")):
            return None
        notes.append((head, tail))
    return tuple(notes) if notes else None


def decode(value: bytes, key: str, generation: bytes = b"") -> TierEntry | None:
    """The entry `value` holds for `key` in this `generation` of its server, or None
    when it is not a value this tier wrote for this key since the server's last removal."""
    start = len(MAGIC)
    echo = _echo(key, generation)
    head_at = start + len(echo)
    body_at = head_at + _HEAD.size
    if len(value) < body_at or not value.startswith(MAGIC):
        return None
    if value[start:head_at] != echo:
        return None
    flags, stored_at, expires_at, length, fetch_seconds = _HEAD.unpack_from(value, head_at)
    result = value[body_at : body_at + length]
    notes: tuple[Note, ...] | None = ()
    if flags & _NOTES:
        notes = _notes(value[body_at + length :])
    elif len(value) != body_at + length:
        return None
    if flags & ~(_EVENT_STREAM | _NOTES) or length != len(result) or not stored_at <= expires_at:
        return None
    if notes is None:
        return None
    if not 0.0 <= fetch_seconds <= _MAX_FETCH_SECONDS:  # NaN too: it is only counted
        fetch_seconds = 0.0
    # Framed into responses as it is, so it must be exactly what this tier writes: one
    # JSON object in the encoding the memory tier stores (no raw line break that could
    # end an event-stream frame early, `ttlMs` last where a hit restates it).
    if b"\n" in result or b"\r" in result:
        return None
    try:
        parsed = orjson.loads(result)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    try:
        canonical, ttl_at = encode_result(parsed)
    except orjson.JSONEncodeError:  # nested deeper than this tier writes
        return None
    if canonical != result:
        return None
    return TierEntry(
        result, bool(flags & _EVENT_STREAM), stored_at, expires_at, ttl_at, fetch_seconds, notes
    )


def glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class KeyLayout:
    """Where one namespace's entries and generations live in Redis."""

    def __init__(self, namespace: str) -> None:
        self._prefix = f"mcpcache:{namespace}:"

    def app_prefix(self, app_id: str) -> str:
        """Every entry key of one app starts with this (the app id quoted: no `:`, brace
        or glob character reaches the key, so one app's prefix is never another's)."""
        return f"{self._prefix}{{{quote(app_id, safe='')}:"

    def server_prefix(self, app_id: str, server: str) -> str:
        """Every entry key of one app's server starts with this; the hash tag ends here."""
        return f"{self.app_prefix(app_id)}{server}}}:"

    def entry(self, app_id: str, server: str, key: str) -> str:
        return f"{self.server_prefix(app_id, server)}{key}"

    def generation(self, app_id: str, server: str) -> str:
        """Where a server's generation lives: in its entries' slot, beside the apps'
        prefixes and never under one (`@` is always quoted in an app id), so that no
        purge pattern removes it."""
        return f"{self._prefix}@generation:{{{quote(app_id, safe='')}:{server}}}"

    def channel(self, app_id: str) -> str:
        """The channel on which one app's replicas announce removals (`broadcast`): in
        the namespace's prefix, so that the namespace's ACL pattern for channels confines
        it too, with the app id as a cluster hash tag (one shard carries an app's
        messages, which sharded pub/sub needs)."""
        return f"{self._prefix}@removals:{{{quote(app_id, safe='')}}}"

    def server_pattern(self, app_id: str, server: str) -> str:
        """A SCAN pattern matching every entry of one app's server, and nothing else."""
        return glob_escape(self.server_prefix(app_id, server)) + "*"

    def app_pattern(self, app_id: str) -> str:
        """A SCAN pattern matching every entry of one app, and nothing else."""
        return glob_escape(self.app_prefix(app_id)) + "*"
