"""Credentials an upstream has accepted lately, per server: who may be answered from an
entry for every caller.

An entry for every caller (`scope: public`, or a result the server marks public under
`trustPublicHints`) was fetched with somebody's credential. Answering it to any other
credential would let a junk or revoked token read what the upstream serves only to
callers it accepts. So such an entry is answered only to a credential the upstream
itself accepted, within the entry's life, for the same tool, or the same method for
what the server marked public (`accepted_for`): a 2xx answer to a cacheable request of it with a
result that is neither a JSON-RPC error nor `isError` — many servers answer any caller
at the protocol level (`ping`, `initialize`) and report a backend's refusal as an
`isError` result, so neither of those counts. Any other credential goes upstream first, with its own
request, and is remembered once the upstream accepts it. A caller with no credential at
all is anonymous and meets only entries fetched anonymously (the key says so).

Only digests are kept, never a credential. Pure, on cachetools: a bounded TLRU whose
items each live for their server's TTL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import cachetools

from .entry import Scope

MAX_ACCEPTED: Final = 4096
"""Digests remembered across all servers; the least recently used go first (such a
caller goes upstream once more)."""


Accepted = tuple[str, str, str]
"""(server, tool or method, credential digest)."""


def _expiry(_key: Accepted, ttl: float, now: float) -> float:
    return now + ttl


def accepted_for(scope: Scope) -> str:
    """What an acceptance is for: the tool of a call (the operator's `scope: public`
    says its arguments alone decide the answer), else the method: `resources/read` or
    the listing's. An entry of those is for every caller because the server marked its
    result `public` under `trustPublicHints`: the server's word that whoever it serves
    that method may read it."""
    if scope.tool is not None:
        return f"tool:{scope.tool}"
    if scope.uri is not None:
        return "method:resources/read"
    return f"method:{scope.listing}"


class AcceptedCredentials:
    def __init__(self, timer: Callable[[], float]) -> None:
        self._accepted: cachetools.TLRUCache[Accepted, float] = cachetools.TLRUCache(
            MAX_ACCEPTED, ttu=_expiry, timer=timer
        )

    def accept(self, scope: Scope, credential: str, ttl: float) -> None:
        """The upstream answered `credential` (a digest) with a result just now, for
        what `scope` names."""
        if credential and ttl > 0:
            self._accepted[(scope.server, accepted_for(scope), credential)] = ttl

    def accepted(self, scope: Scope, credential: str) -> bool:
        """Whether an entry for every caller of what `scope` names may be answered to
        `credential` ("" is no credential: anonymous callers meet anonymous entries
        only, by their key)."""
        return not credential or (scope.server, accepted_for(scope), credential) in self._accepted

    def __len__(self) -> int:
        return len(self._accepted)
