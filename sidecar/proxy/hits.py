"""A hit: a request answered from a fresh entry in memory (or, copied from there, in
the shared tier).

Counted (and what it saved the upstream), learned from when it is a listing the policy
learns from, and, for the server's `revalidateSample` of hits, fetched again in the
background and compared (`revalidation`). The answer itself is the entry framed under
the caller's own id (`edge.hit_response`).
"""

from __future__ import annotations

import random

import orjson

from ..cache.entry import Entry
from ..cache.store import ResponseCache
from ..config import Server
from ..edge.hit_response import HitResponse
from ..edge.incoming import Incoming
from ..metrics import Metrics
from ..rules.policy.plan import Lookup
from ..rules.protocol.messages import Message
from ..upstream.exchange import Exchanges
from ..upstream.flights import Coalescer
from .fetching import CacheableRequest, Storage
from .revalidation import Recheck


class Hits:
    """What answering from memory touches besides the entry."""

    def __init__(
        self,
        metrics: Metrics,
        coalescer: Coalescer,
        exchanges: Exchanges,
        storage: Storage,
        via: str,
    ) -> None:
        self.metrics = metrics
        self.coalescer = coalescer
        self.exchanges = exchanges
        self.storage = storage
        self.via = via

    @property
    def cache(self) -> ResponseCache:
        return self.storage.cache

    def answer(
        self,
        incoming: Incoming,
        server: Server,
        message: Message,
        plan: Lookup,
        method: str,
        app_id: str,
        entry: Entry,
    ) -> HitResponse:
        """A fresh entry from memory answers the request: counted, learned from if it is
        a listing the policy learns from, and, for the server's `revalidateSample` of
        hits, checked in the background unless its key is already being fetched."""
        self.metrics.count(server.name, method, "hit")
        self.metrics.saved(server.name, entry.fetch_seconds)
        # A listing of the caller's own teaches a caller the policy has no record of
        # (pushed out of it, or answered from the tier) as their miss did; never one for
        # everyone (fetched for another caller, whose defaults it may hold). The server's
        # listings go when its tools are forgotten, so none teaches another server's tools.
        learner, public = plan.learner, entry.scope is not None and entry.scope.public
        tools = self.storage.lessons.learned.tools
        if learner is not None and not public and not tools.knows(server.name, learner):
            left = entry.expires_at - self.cache.timer()
            listing = orjson.loads(entry.result)
            self.storage.lessons.take(
                server, plan, message, incoming.headers, listing=listing, within=left
            )
        rate = server.cache.revalidate_sample
        checkable = rate and random.random() < rate and not self.coalescer.running(plan.key)
        if checkable:  # with the caller's own bytes, as a miss would go
            request = CacheableRequest(incoming, server, message, message.raw, plan, method, app_id)
            recheck = Recheck(self.exchanges, self.storage, request, self.via, entry)
            self.coalescer.start(
                plan.key, recheck.run, leader=False, joinable=True, keep_going=True
            )
        token = message.progress_token if entry.notes else None  # read only when it is used
        return HitResponse.of(entry, message.id, self.cache.timer(), token=token)

    def from_tier(self, server: Server, message: Message, method: str, entry: Entry) -> HitResponse:
        """A fresh entry the shared tier held (now copied into memory) answers: counted,
        with what it saved the upstream."""
        self.metrics.count(server.name, method, "hit")
        self.metrics.saved(server.name, entry.fetch_seconds)
        token = message.progress_token
        return HitResponse.of(entry, message.id, self.cache.timer(), True, token)
