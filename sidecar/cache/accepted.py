"""Authorization contexts an upstream has answered lately, per server and tool: who may
be answered from an entry for every caller (the second half of the reading rule in
`docs/operations/security.md`).

An entry for every caller (`scope: public`, or a result the server marks public under
`trustPublicHints`) was fetched in somebody's authorization context. Answering it in
any other context the upstream has not answered would let a junk or revoked token, an
anonymous caller, a user of another tenant or a call in another user's session read
what the upstream serves only to those it accepts. So such an entry answers only a
context the upstream itself answered, within the entry's life, for the same tool, or
the same method for what the server marked public (`accepted_for`): a 2xx answer to a
cacheable request of it with the call's own result (`results.not_an_answer`) — many
servers answer any caller at the protocol level (`ping`, `initialize`) and report a
backend's refusal as an `isError` result, so neither of those counts. Anonymous is a
context like any other. Any other context goes upstream first, with its own request,
and is remembered once the upstream answers it.

Only digests are kept (`rules.policy.plan.context_of`). Pure, on cachetools: a bounded
TLRU whose items each live for their entry's TTL and stale window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import cachetools

from .entry import Scope

MAX_ACCEPTED: Final = 4096
"""Contexts remembered across all servers; the least recently used go first (such a
caller goes upstream once more)."""


Accepted = tuple[str, str, str]
"""(server, tool or method, context digest)."""


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


class AcceptedContexts:
    def __init__(self, timer: Callable[[], float]) -> None:
        self._accepted: cachetools.TLRUCache[Accepted, float] = cachetools.TLRUCache(
            MAX_ACCEPTED, ttu=_expiry, timer=timer
        )

    def accept(self, scope: Scope, context: str, ttl: float) -> None:
        """The upstream answered `context` (a digest) with a result just now, for what
        `scope` names."""
        if context and ttl > 0:
            self._accepted[(scope.server, accepted_for(scope), context)] = ttl

    def accepted(self, scope: Scope, context: str) -> bool:
        """Whether an entry for every caller of what `scope` names may answer `context`
        ("": none was worked out, on a server without such entries)."""
        return bool(context) and (scope.server, accepted_for(scope), context) in self._accepted

    def __len__(self) -> int:
        return len(self._accepted)
