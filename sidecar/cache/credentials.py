"""Credentials an upstream has accepted lately, per server: who may be answered from an
entry for every caller.

An entry for every caller (`scope: public`, or a result the server marks public under
`trustPublicHints`) was fetched with somebody's credential. Answering it to any other
credential would let a junk or revoked token read what the upstream serves only to
callers it accepts. So such an entry is answered only to a credential the upstream
itself accepted for that server within the server's TTL (a 2xx answer that is not a
JSON-RPC error); any other credential goes upstream first, with its own request, and
is remembered once the upstream accepts it. A caller with no credential at all is
anonymous and meets only entries fetched anonymously (the key says so).

Only digests are kept, never a credential. Pure, on cachetools: a bounded TLRU whose
items each live for their server's TTL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import cachetools

MAX_ACCEPTED: Final = 4096
"""Digests remembered across all servers; the least recently used go first (such a
caller goes upstream once more)."""


def _expiry(_key: tuple[str, str], ttl: float, now: float) -> float:
    return now + ttl


class AcceptedCredentials:
    def __init__(self, timer: Callable[[], float]) -> None:
        self._accepted: cachetools.TLRUCache[tuple[str, str], float] = cachetools.TLRUCache(
            MAX_ACCEPTED, ttu=_expiry, timer=timer
        )

    def accept(self, server: str, credential: str, ttl: float) -> None:
        """The upstream accepted `credential` (a digest) for `server` just now."""
        if credential and ttl > 0:
            self._accepted[(server, credential)] = ttl

    def accepted(self, server: str, credential: str) -> bool:
        """Whether an entry for every caller may be answered to `credential` ("" is no
        credential: anonymous callers meet anonymous entries only, by their key)."""
        return not credential or (server, credential) in self._accepted

    def __len__(self) -> int:
        return len(self._accepted)
