"""What one replica tells the others when it removes entries, as it crosses Redis. Pure.

A removal is described, not listed: the other replicas hold other callers' entries
under other keys, so each finds its own with the same selection a local removal uses
(`ResponseCache.keys_for`: tool globs, a resource, every resource, list methods, every
entry of the server) plus, for a recheck that found a changed answer, the one key it
concerns. A write's `invalidates` rules that match recorded argument values are sent as
their tool globs: more than the sender removed, never less.

A message is read as untrusted input: it crossed a store other programs can write to.
Only removals can follow from one (nothing is ever stored or learnt from a message),
within bounds on its size, on every field, and on the work its tool globs cost a reader;
anything else is refused. It names its app, which must be the reader's own (its channel
is the app's, as its keys are): a check that it reached the right readers, not a defence,
since whoever may publish on the channel can write the right app. The Redis ACL on the
channel is the only boundary (see the shared-tier guide).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import orjson

from ..cache.globs import pattern_length

VERSION: Final = 1
MAX_MESSAGE: Final = 16 * 1024
"""The largest message read; a removal is a handful of names."""
MAX_NAMES: Final = 64
"""At most this many tool globs, list methods or keys in one message."""
MAX_NAME: Final = 512
"""The longest server name, tool glob or resource URI accepted in a message."""
MAX_PATTERN: Final = 1024
"""The most characters of tool globs to compile (`cache.globs.pattern_length`) in one
message; more is read as every entry of the server (and so written): at most some 15 ms
of a reader's event loop for one message's globs, whatever it holds."""
LISTINGS: Final = frozenset(
    {"tools/list", "resources/list", "resources/templates/list", "prompts/list"}
)
_KEY: Final = re.compile(r"[0-9a-f]{64}")
_FIELDS: Final = frozenset(
    {"v", "app", "from", "server", "tools", "uri", "resources", "listings", "everything", "keys"}
)


@dataclass(frozen=True, slots=True)
class Announcement:
    """The entries of one server a removal reached: those `keys_for` selects with these
    arguments, and the exact `keys`."""

    server: str
    tools: tuple[str, ...] = ()
    uri: str | None = None
    resources: bool = False
    listings: tuple[str, ...] = ()
    everything: bool = False
    keys: tuple[str, ...] = ()

    def merged(self, other: Announcement) -> Announcement:
        """One announcement for both (of one server): the union, or every entry."""
        if self.everything or other.everything or self.uri != other.uri:
            return Announcement(self.server, everything=True)
        return Announcement(
            self.server,
            tuple(dict.fromkeys(self.tools + other.tools)),
            self.uri,
            self.resources or other.resources,
            tuple(dict.fromkeys(self.listings + other.listings)),
            False,
            tuple(dict.fromkeys(self.keys + other.keys)),
        )


def encode(app_id: str, sender: str, announcement: Announcement) -> bytes:
    """The message for `announcement`; one too large for a reader becomes "every entry
    of the server" (more than needed, never less)."""
    a = announcement
    document = {
        "v": VERSION,
        "app": app_id,
        "from": sender,
        "server": a.server,
        "tools": list(a.tools),
        "uri": a.uri,
        "resources": a.resources,
        "listings": list(a.listings),
        "everything": a.everything,
        "keys": list(a.keys),
    }
    raw = orjson.dumps(document)
    if not a.everything and (len(raw) > MAX_MESSAGE or _too_many(a)):
        return encode(app_id, sender, Announcement(a.server, everything=True))
    return raw


def _too_many(a: Announcement) -> bool:
    names = (*a.tools, *a.listings, a.uri or "")
    too_long = any(len(name) > MAX_NAME for name in names)
    too_long = too_long or pattern_length(a.tools) > MAX_PATTERN
    return too_long or max(len(a.tools), len(a.listings), len(a.keys)) > MAX_NAMES


def decode(raw: bytes, app_id: str) -> tuple[str, Announcement] | None:
    """The sender and the announcement of a message for app `app_id`, or None for
    anything that is not exactly a message this version writes for that app."""
    if len(raw) > MAX_MESSAGE:
        return None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or set(document) != _FIELDS:
        return None
    if document["v"] != VERSION or document["app"] != app_id:
        return None
    sender, server, uri = document["from"], document["server"], document["uri"]
    if not isinstance(sender, str) or not _name(server) or not (uri is None or _name(uri)):
        return None
    flags = (document["resources"], document["everything"])
    if not all(isinstance(flag, bool) for flag in flags):
        return None
    tools, listings, keys = document["tools"], document["listings"], document["keys"]
    if not _names(tools) or not _names(listings) or not _names(keys):
        return None
    if not set(listings) <= LISTINGS or not all(_KEY.fullmatch(key) for key in keys):
        return None
    if pattern_length(tools) > MAX_PATTERN:  # more than needed, never less
        return sender, Announcement(server, everything=True)
    announcement = Announcement(
        server, tuple(tools), uri, flags[0], tuple(listings), flags[1], tuple(keys)
    )
    return sender, announcement


def _name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME


def _names(values: object) -> bool:
    return (
        isinstance(values, list)
        and len(values) <= MAX_NAMES
        and all(_name(value) for value in values)
    )
