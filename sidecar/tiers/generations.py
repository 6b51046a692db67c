"""Removing a server's entries from the shared tier, on every shard, without losing a
removal to a late write or to an incident.

Writes run in the background and a removal is a SCAN, so a write can land after the
SCAN that should have removed it (or after Redis, paused, comes back). Each server of an
app therefore has a generation in Redis, a random token that every removal replaces
before it scans; a lookup reads the entry and the generation in one round trip, an
answer fetched after it is stored with the generation it saw, and an entry stored under
another generation is never served. A write that lands late is dead on arrival. A
removal is owed until its new generation is in Redis: until then (Redis slow, paused or
gone, the breaker open) the server's entries are neither read from the tier nor written
to it, and the new generation is tried again every `retry_after`, so that a purge during
an incident is never lost.

Once the new generation is in Redis, and not before (a replica told earlier could copy
the old entry back from the tier), the removal is announced to the other replicas
(`broadcast`); removals that came while one was owed are announced together. A removal
made while the SET is on its way is not fenced by it (the SET may have landed before
the removal, and a replica may have read that generation and fetched the old answer):
another generation follows, and the announcement waits for it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from .announcement import Announcement
from .breaker import Failed
from .codec import GENERATION_LENGTH, KeyLayout

if TYPE_CHECKING:
    from .connect import RedisClient

T = TypeVar("T")


class Runner(Protocol):
    """The tier's way of running one Redis operation (bounded, guarded, counted)."""

    def __call__(
        self, op: str, call: Callable[[], Awaitable[T]], guarded: bool = True
    ) -> Awaitable[T | Failed]: ...


class Generations:
    """The removals of one tier, and those still owed."""

    def __init__(
        self,
        run: Runner,
        client: RedisClient,
        keys: KeyLayout,
        retry_after: float,
        announce: Callable[[str, Announcement], Awaitable[None]],
    ) -> None:
        self._run = run
        self._client = client
        self._keys = keys
        self._retry_after = retry_after
        self._announce = announce
        self._owed: dict[tuple[str, str], asyncio.Future[None]] = {}
        """Removals whose new generation is not in Redis yet, by app and server."""
        self._untold: dict[tuple[str, str], tuple[Announcement, asyncio.Future[None]]] = {}
        """What the owed removals will announce, and when that is done."""
        self._unfenced: set[tuple[str, str]] = set()
        """Places with a removal made since their last SET was sent."""

    def owed(self, app_id: str, server: str) -> bool:
        return (app_id, server) in self._owed

    async def delete_server(self, app_id: str, server: str) -> int:
        """Remove every entry of one server for one app, for every caller (a purge): a
        new generation first, which kills every value stored before it (written late
        or not), then a SCAN that frees their memory."""
        generation = secrets.token_hex(GENERATION_LENGTH // 2)
        name = self._keys.generation(app_id, server)
        await self._run("set", partial(self._client.set, name, generation))
        return await self.delete_matching(self._keys.server_pattern(app_id, server))

    def forget_server(
        self, app_id: str, server: str, announcement: Announcement
    ) -> asyncio.Future[None]:
        """Remove one server's entries for one app in the background, and announce
        `announcement`; done when it has been announced, or as soon as Redis failed to
        take the new generation (it is announced once Redis does: waiting longer would
        only delay the caller), or given up. Owed at once: the server's entries are not
        read from the tier again until a generation set after it is in Redis, however
        long that takes."""
        place = (app_id, server)
        self._unfenced.add(place)
        untold = self._untold.get(place)
        if untold is not None:  # announced with the one owed, after a generation of its own
            self._untold[place] = (untold[0].merged(announcement), untold[1])
            return untold[1]
        told: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._untold[place] = (announcement, told)
        self._owed[place] = asyncio.ensure_future(self._settle(app_id, server))
        return told

    async def _settle(self, app_id: str, server: str) -> None:
        """Set the server's new generation, trying every `retry_after` until Redis takes
        it (whatever the breaker says), and again while removals came during a SET;
        announce the removals, then free the old entries' memory."""
        place = (app_id, server)
        name = self._keys.generation(app_id, server)
        try:
            while place in self._unfenced:
                self._unfenced.discard(place)  # sent: what comes from now on needs another
                generation = secrets.token_hex(GENERATION_LENGTH // 2)
                done = await self._run(
                    "set", partial(self._client.set, name, generation), guarded=False
                )
                if isinstance(done, Failed):
                    self._unfenced.add(place)
                    _settle_waiters(self._untold[place][1])  # owed: no use waiting for it
                    await asyncio.sleep(self._retry_after)
        finally:
            self._owed.pop(place, None)
            self._unfenced.discard(place)
            announcement, told = self._untold.pop(place)
        try:
            await self._announce(app_id, announcement)
        finally:
            _settle_waiters(told)
        await self.delete_matching(self._keys.server_pattern(app_id, server))

    async def delete_matching(self, pattern: str) -> int:
        """SCAN and UNLINK in batches on every primary of a cluster (a key lives on its
        shard only), each round trip bounded by the timeout. A node that fails ends the
        pass: the generation already fences off what it missed, and their TTL frees them."""
        targets = await self._run("scan", self._client.scan_targets)
        if isinstance(targets, Failed):
            return 0
        removed = 0
        for target in targets:
            cursor = 0
            while True:
                page = await self._run("scan", partial(self._client.scan, target, cursor, pattern))
                if isinstance(page, Failed):
                    return removed
                cursor, names = page
                if names:
                    count = await self._run("delete", partial(self._client.unlink, names))
                    if isinstance(count, Failed):
                        return removed
                    removed += count
                if cursor == 0:
                    break
        return removed

    async def aclose(self) -> None:
        """Give up the removals still owed (nothing reads this replica's tier any more)."""
        owed = list(self._owed.values())
        for _, told in self._untold.values():
            _settle_waiters(told)  # given up: nobody waits on it any more
        for removal in owed:
            removal.cancel()
        await asyncio.gather(*owed, return_exceptions=True)


def _settle_waiters(told: asyncio.Future[None]) -> None:
    if not told.done():
        told.set_result(None)
