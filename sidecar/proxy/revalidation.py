"""Sampled revalidation: is the cache right, not just hit?

A hit rate says how often the cache answered, not whether the answer was still true.
With `revalidateSample` on a server, that fraction of its hits is fetched again in the
background, after the hit was answered, and the upstream's result compared with the
entry the caller received (their hints left out: `ttlMs`, `cacheScope`, `_meta`). A
tool with many `changed` has a TTL that is too long.

The fetch is the hit's own request, its own headers and body: the credentials are that
caller's, exactly as on a miss of the same key, and the answer is filed under the same
key. It is the stale-while-revalidate refresh (a flight with no client) with a
comparison on top: a storable answer replaces the entry as any refresh does; a changed
one that may not be stored removes it, since it is known to be out of date. A changed
answer also removes the entry's copy in the shared tier, best effort (a recheck does not
write there): one that Redis loses, or that a late write of the old answer overtakes,
stays until its TTL, as it would without the check. Never the server's other entries:
any caller can make its own rechecks find changes.
"""

from __future__ import annotations

import orjson

from ..cache.entry import Entry
from ..cache.observations import Revalidated, answer_digest, scope_label
from ..rules.admission.judgement import Judgement
from ..upstream.exchange import Exchanges
from ..upstream.flights import Flight
from .fetching import CacheableRequest, Fetch, Storage


class Recheck(Fetch):
    """A `Fetch` of a request that was just answered from `entry`, compared with it."""

    def __init__(
        self,
        exchanges: Exchanges,
        storage: Storage,
        request: CacheableRequest,
        via: str,
        entry: Entry,
    ) -> None:
        super().__init__(exchanges, storage, request, via)
        self._entry = entry
        lookup = request.lookup
        mine = storage.cache.get(lookup.key) is entry or not lookup.public_key
        self._found_under = lookup.key if mine else lookup.public_key
        """The key the entry answered from: the caller's own, or the one for everyone."""
        self._counted = False

    async def run(self, flight: Flight) -> None:
        try:
            await super().run(flight)
        finally:
            if not self._counted:  # the upstream did not answer, or not in full
                self._count("failed")

    def _judged(self) -> Judgement:
        judgement = super()._judged()
        final = judgement.final
        result = final.get("result") if final is not None else None
        if self._status != 200 or not isinstance(result, dict) or result.get("isError"):
            self._count("failed")
            return judgement
        same = answer_digest(result) == _digest_of(self._entry.result)
        self._count("same" if same else "changed")
        if not same:
            storage, request, key = self._storage, self._request, self._found_under
            # Known out of date: gone unless the new answer took its place (it may be
            # filed under the other key, or not at all).
            if storage.cache.get(key) is self._entry:
                storage.cache.purge([key])
            if storage.tier is not None and not request.lookup.session:
                storage.tier.forget(request.app_id, request.server.name, key)
        return judgement

    def _count(self, result: Revalidated) -> None:
        self._counted = True
        storage, request = self._storage, self._request
        server = request.server.name
        storage.metrics.revalidations.labels(server, result).inc()
        storage.observations.revalidated(server, scope_label(request.lookup.scope), result)


def _digest_of(stored: bytes) -> bytes:
    try:
        parsed = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return b""
    return answer_digest(parsed) if isinstance(parsed, dict) else b""
