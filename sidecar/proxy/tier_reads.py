"""The shared tier read for a lookup `rules.lookup.choose` sent there (`ReadTier`):
what Redis holds under the request's key and, where the decision asks, under its key
for every caller, each copied into memory as an answer fetched here would be filed."""

from __future__ import annotations

from ..cache.store import Entry, ResponseCache
from ..config import Server
from ..rules.lookup import ReadTier, Tiered, TierState
from ..rules.policy.plan import Lookup, public_side
from ..tiers.redis_tier import RedisTier, TierRead
from .invalidator import Invalidator


class TierReads:
    def __init__(self, tier: RedisTier, cache: ResponseCache, invalidator: Invalidator) -> None:
        self.tier = tier
        self.cache = cache
        self.invalidator = invalidator

    @property
    def state(self) -> TierState:
        """The tier as the decision needs it, now."""
        return TierState(self.tier.listening, self.tier.out_of_reach)

    async def read(
        self, app_id: str, server: Server, lookup: Lookup, read: ReadTier
    ) -> tuple[Tiered, bytes | None]:
        """What the shared tier holds for `lookup` (as `choose` asked), and the server's
        generation there as it was read."""
        epoch = self.invalidator.epoch(server.name)
        own, found = await self._lookup(app_id, server, lookup)
        unreached = found.out_of_reach and self.invalidator.epoch(server.name) == epoch
        public = None
        if read.public_side and own is None:
            public = (await self._lookup(app_id, server, public_side(lookup)))[0]
        return Tiered(own, public, unreached, read.doubted), found.generation

    async def _lookup(
        self, app_id: str, server: Server, plan: Lookup
    ) -> tuple[Entry | None, TierRead]:
        """The Redis tier's entry for this lookup (verified there), copied into memory
        for the rest of its life, as long as its own policy allows (a tool rule's TTL
        included) and never longer than Redis says is left; None on a miss or when Redis
        was not read. With it, what the lookup found: the server's generation in the tier
        as it was read (None: unknown), under which an answer fetched now is written
        there, and whether Redis was out of reach.

        The copy is filed under the lookup's scope, as an answer fetched here would be,
        so that every removal (a purge, a write's invalidation, a notification) finds
        it; an entry read while entries of the server were being removed is not used."""
        tier, epoch = self.tier, self.invalidator.epoch(server.name)
        found = await tier.get(
            app_id, server.name, plan.key, server.cache.effective_max_size, plan.ttl
        )
        if self.invalidator.epoch(server.name) != epoch:
            return None, TierRead(None, 0.0, None)
        value, remaining = found.entry, found.remaining
        if value is None:
            return None, found
        age = max(0.0, tier.clock() - value.stored_at)
        copy = (value.result, value.event_stream, remaining)
        keep, ttl_at, scope = server.cache.keep_stale, value.ttl_at, plan.scope
        took, notes = value.fetch_seconds, value.notes
        entry = self.cache.store(
            plan.key, *copy, keep_stale=keep, ttl_at=ttl_at, age=age, scope=scope,
            fetch_seconds=took, notes=notes,
        ) or self.cache.make_entry(  # larger than the whole memory budget: served, not kept
            *copy, keep_stale=keep, ttl_at=ttl_at, age=age, scope=scope, fetch_seconds=took,
            notes=notes,
        )  # fmt: skip
        return entry, found
