"""What one sidecar learns from the traffic it proxies, in one place: the tools its
servers' listings described, the legacy sessions it saw opened and their openers, the
authorization contexts the upstreams answered, and what answers and writes showed for
`suggest`. Made once at assembly and handed to those that read or add to it, so that
each piece has one owner and a reader finds them all here.

An answer adds to it in one step, `Lessons.take`, whichever path the answer took: a
miss's upstream answer, a forwarded request's (a write, a listing) and a hit's alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..cache.accepted import AcceptedContexts
from ..cache.observations import Observations
from ..cache.store import ResponseCache
from ..config import Server
from ..rules.learned_tools import LearnedTools, listing_ttl
from ..rules.policy.plan import Bypass, Lookup
from ..rules.protocol.messages import Message
from ..upstream.sessions import LegacySessions
from . import observing
from .invalidator import Invalidator


@dataclass(frozen=True, slots=True)
class Learned:
    tools: LearnedTools
    sessions: LegacySessions
    accepted: AcceptedContexts
    observations: Observations

    @classmethod
    def new(cls, cache: ResponseCache) -> Learned:
        """Nothing learned yet, for a sidecar whose cache is `cache` (sessions drop
        their entries from it when they end; acceptances run on its clock)."""
        return cls(
            LearnedTools(), LegacySessions(cache), AcceptedContexts(cache.timer), Observations()
        )


class Lessons:
    """The one step after an answer: what it teaches goes into `learned`, and what a
    write's answer leaves stale goes from the cache (`invalidator`)."""

    def __init__(self, learned: Learned, invalidator: Invalidator) -> None:
        self.learned = learned
        self.invalidator = invalidator
        self._timer = invalidator.cache.timer

    def take(
        self,
        server: Server,
        plan: Lookup | Bypass,
        message: Message,
        headers: Mapping[str, str],
        *,
        status: int = 200,
        listing: Any = None,
        within: float | None = None,
        answer: Mapping[str, Any] | None = None,
        wrote: bool = False,
        epoch: int = 0,
    ) -> None:
        """Take in one answer to `message` (sent with `headers`, planned as `plan`).

        `listing`: a `tools/list` result judged to teach the policy (`plan.learner`, who
        was shown it), held as long as the listing may be cached, and at most `within`
        seconds (a hit: its entry's time left). `status`: the upstream's HTTP status: a
        401 or 403 withdraws the request's authorization context, and a 2xx with the
        call's own result (`answer`, as served) accepts it for as long as an entry of
        it may answer. That `answer` is recorded for `suggest` once it has gone out;
        `epoch`: the server's removal epoch when the request went upstream. `wrote`:
        the answer leaves open that the write was done: what it invalidates goes, then
        `suggest` records the write (its epoch is the removal's)."""
        if listing is not None and plan.learner is not None:
            cache = server.cache
            held = listing_ttl(listing, cache.metadata_ttl, cache.ttl)
            held = held if within is None else min(held, within)
            self.learned.tools.learn(server.name, listing, plan.learner, held)
        if isinstance(plan, Lookup) and plan.context:
            if status in (401, 403):
                self.learned.accepted.refused(plan.scope, plan.context)
            elif answer is not None and 200 <= status < 300:
                held = plan.ttl + server.cache.keep_stale  # as long as an entry may answer
                self.learned.accepted.accept(plan.scope, plan.context, held)
        if answer is not None and isinstance(plan, Lookup):
            # Bookkeeping no caller waits for: after the answer has gone out.
            asyncio.get_running_loop().call_soon(
                observing.answered,
                self.learned.observations,
                self._timer(),
                server,
                plan,
                message,
                headers,
                answer,
                epoch,
            )
        if wrote and isinstance(plan, Bypass):
            self.invalidator.tools(server.name, plan.invalidates, "write")
            if (call := observing.call_digests(message)) is not None:
                self.learned.observations.wrote(server.name, *call)
