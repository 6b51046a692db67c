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
cacheable request of it with the call's own result (`results.not_an_answer`), within the
tool's TTL for a fresh entry (its TTL and stale window for a stale one), and not refused
(401, 403) since — many
servers answer any caller at the protocol level (`ping`, `initialize`) and report a
backend's refusal as an `isError` result, so neither of those counts. Anonymous is a
context like any other. Any other context goes upstream first, with its own request,
and is remembered once the upstream answers it.

Only digests are kept (`rules.policy.plan.context_of`). Pure, on cachetools: a bounded
TLRU whose items each live for their entry's TTL and stale window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

import cachetools

from .entry import Scope

MAX_ACCEPTED: Final = 4096
"""Contexts remembered across all servers; the least recently used go first (such a
caller goes upstream once more)."""


Accepted = tuple[str, str, str]
"""(server, tool or method, context digest)."""


class Answered(NamedTuple):
    """When the upstream last answered a context, and how long that is remembered."""

    at: float
    held: float


def _expiry(_key: Accepted, answered: Answered, now: float) -> float:
    return now + answered.held


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
        self._timer = timer
        self._accepted: cachetools.TLRUCache[Accepted, Answered] = cachetools.TLRUCache(
            MAX_ACCEPTED, ttu=_expiry, timer=timer
        )

    def accept(self, scope: Scope, context: str, held: float) -> None:
        """The upstream answered `context` (a digest) with a result just now, for what
        `scope` names; remembered `held` seconds (the longest `accepted` asks about)."""
        if context and held > 0:
            key = (scope.server, accepted_for(scope), context)
            self._accepted[key] = Answered(self._timer(), held)

    def refused(self, scope: Scope, context: str) -> None:
        """The upstream refused `context` (401, 403) for what `scope` names: whatever it
        answered before, it does not now."""
        self._accepted.pop((scope.server, accepted_for(scope), context), None)

    def accepted(self, scope: Scope, context: str, within: float) -> bool:
        """Whether the upstream answered `context` for what `scope` names within the last
        `within` seconds: the TTL of the tool for a fresh entry for every caller, the TTL
        and the stale window for a stale one ("": none was worked out, on a server
        without such entries)."""
        if not context:
            return False
        answered = self._accepted.get((scope.server, accepted_for(scope), context))
        return answered is not None and self._timer() - answered.at <= within

    def __len__(self) -> int:
        return len(self._accepted)
