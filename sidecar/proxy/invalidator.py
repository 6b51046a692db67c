"""Removing entries before they expire: after a write, on an upstream notification, on
a purge (from the admin endpoint or a changed purge marker in the config).

Removal is for every caller of the server: the state behind the answers changed, not
one caller's view of it. Every removal also moves the server's epoch on, so that an
answer fetched before it (a miss still in flight) is not stored after it.

With a shared tier, every removal here is announced to the app's other replicas as the
selection it made (`tiers.announcement`), and theirs are applied here (`apply`); memory
as a whole is dropped whenever they may have been missed (`resync`, see
`tiers.broadcast`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Final, Literal

from ..cache import globs
from ..cache.store import ResponseCache
from ..config import SidecarConfig
from ..metrics import Metrics
from ..rules.invalidation.notices import Notice
from ..rules.invalidation.removals import EVERY_ENTRY, MatchedRemoval, Removal, recorded_match
from ..rules.learned_tools import LearnedTools
from ..tiers.announcement import Announcement

Cause = Literal["write", "notification", "purge", "replica", "resync"]

logger = logging.getLogger("mcpcache.sidecar")

TOOL_LISTS: Final = ("tools/list",)
RESOURCE_LISTS: Final = ("resources/list", "resources/templates/list")
PROMPT_LISTS: Final = ("prompts/list",)
"""Cached list answers a list-changed notification makes stale."""


OnDrop = Callable[[str, Announcement], "asyncio.Future[None] | None"]


class Invalidator:
    """`on_drop(server, announcement)` is told of every removal made here: the shared
    tier, keyed by digest and not by tool, then drops all of that server's entries for
    the app (more than needed, never less: other replicas fetch again) and announces
    the removal; the future it returns is done once it has been announced (or Redis
    refused the fence: it is announced when Redis takes it, and nobody waits for that).
    `announce_within`: how long `announced` waits for that."""

    def __init__(
        self,
        cache: ResponseCache,
        metrics: Metrics,
        hints: LearnedTools,
        on_drop: OnDrop | None = None,
        announce_within: float = 0.0,
    ) -> None:
        self.cache = cache
        self.metrics = metrics
        self.hints = hints
        self.on_drop = on_drop
        self.announce_within = announce_within
        self._announcing: dict[str, asyncio.Future[None]] = {}
        self._epochs: dict[str, int] = {}
        self._purge_markers: dict[str, str | None] = {}
        self._urls: dict[str, str] = {}

    def epoch(self, server: str) -> int:
        """Changes whenever entries of `server` are invalidated."""
        return self._epochs.get(server, 0)

    def tools(self, server: str, removals: Iterable[Removal], cause: Cause) -> int:
        """Drop the entries of tools matching the globs among `removals`, and those of
        tools a `MatchedRemoval` names whose recorded argument values match its own."""
        globs = [r for r in removals if isinstance(r, str)]
        if EVERY_ENTRY in globs:
            keys = self.cache.keys_for(server, everything=True)
            dropped = self._drop(server, keys, cause, Announcement(server, everything=True))
            logger.info(
                "a declared write dropped the server's entries",
                extra={"server": server, "entries": dropped},
            )
            return dropped
        matched = [r for r in removals if not isinstance(r, str)]
        keys = self.cache.keys_for(server, tools=globs)
        if matched:
            keys.extend(_matching_keys(self.cache, server, matched))
        told = Announcement(server, tuple(globs) + tuple(r.tool for r in matched))
        return self._drop(server, keys, cause, told)

    def notice(self, server: str, notice: Notice) -> int:
        """Act on an upstream notification passing through."""
        if notice.kind == "resource":
            told = Announcement(server, uri=notice.uri)
        elif notice.kind == "resources":
            told = Announcement(server, resources=True, listings=RESOURCE_LISTS)
        elif notice.kind == "prompts":
            told = Announcement(server, listings=PROMPT_LISTS)
        else:
            self.hints.forget(server)
            told = Announcement(server, tools=("*",), listings=TOOL_LISTS)
        return self._drop(server, self._selected(told), "notification", told)

    def purge(self, server: str, tool: str | None = None, uri: str | None = None) -> int:
        """Drop a server's entries: all of them, or a tool glob's and/or a resource's."""
        if tool is None and uri is None:
            told = Announcement(server, everything=True)
        else:
            told = Announcement(server, tools=(tool,) if tool else (), uri=uri)
        return self._drop(server, self._selected(told), "purge", told)

    def apply(self, told: Announcement) -> int:
        """Drop what another replica of the app announced it removed: the same selection
        among this replica's own entries, and of the exact keys only those filed under
        the server named (nothing is announced back). A server this replica does not
        know is ignored: a message cannot make it keep state for names it never saw."""
        if told.server not in self._urls and not self.cache.scopes(told.server):
            return 0
        keys = self._selected(told)
        for key in told.keys:
            entry = self.cache.get(key)
            if entry is not None and entry.scope is not None and entry.scope.server == told.server:
                keys.append(key)
        return self._drop(told.server, keys, "replica", None)

    def resync(self) -> int:
        """Drop every entry in memory, of every server (removals announced meanwhile may
        have been missed); no answer in flight is stored after it."""
        servers = set(self.cache.servers()) | set(self._epochs) | set(self._urls)
        for server in servers:
            self._epochs[server] = self._epochs.get(server, 0) + 1
            self.metrics.invalidations.labels(server, "resync").inc()
        return self.cache.purge(list(self.cache.keys()))

    async def announced(self, server: str) -> None:
        """Wait, at most `announce_within`, until the last removal of `server` made here
        has been announced to the other replicas (a write's answer and a purge's are
        given after it, so that a read through another replica meets the removal)."""
        pending = self._announcing.get(server)
        if pending is not None and not pending.done():
            await asyncio.wait((pending,), timeout=self.announce_within)

    def _selected(self, told: Announcement) -> list[str]:
        return self.cache.keys_for(
            told.server,
            tools=told.tools,
            uri=told.uri,
            resources=told.resources,
            listings=told.listings,
            everything=told.everything,
        )

    def follow_config(self, config: SidecarConfig) -> list[str]:
        """Purge each server whose purge marker changed since the last config seen; a
        server seen for the first time (as at start-up) is not purged. Returns the
        servers purged."""
        purged = []
        for server in config.servers:
            if self._urls.get(server.name, server.url) != server.url:
                # Another server now: its tools unknown, and the listings of the old one
                # gone (a listing answered from the cache would teach it again).
                self.hints.forget(server.name)
                told = Announcement(server.name, listings=TOOL_LISTS)
                self._drop(server.name, self._selected(told), "purge", told)
            self._urls[server.name] = server.url
            known = server.name in self._purge_markers
            previous = self._purge_markers.get(server.name)
            self._purge_markers[server.name] = server.purge
            if known and server.purge is not None and server.purge != previous:
                removed = self.purge(server.name)
                logger.info(
                    "purge marker changed; entries dropped",
                    extra={"server": server.name, "removed": removed},
                )
                purged.append(server.name)
        return purged

    def _drop(self, server: str, keys: list[str], cause: Cause, told: Announcement | None) -> int:
        """Remove `keys` of `server`; `told`: what to announce (None: nothing, the
        removal came from another replica)."""
        self._epochs[server] = self._epochs.get(server, 0) + 1
        self.metrics.invalidations.labels(server, cause).inc()
        if self.on_drop is not None and told is not None:
            pending = self.on_drop(server, told)
            if pending is not None:
                self._announcing[server] = pending
        return self.cache.purge(keys)


def _matching_keys(cache: ResponseCache, server: str, removals: list[MatchedRemoval]) -> list[str]:
    """Keys of the server's tool entries that one of `removals` matches, for every
    caller (public entries included): a scan of the server's scopes, which hold the
    argument digests (never values) recorded when each entry was stored."""
    found: list[str] = []
    for scope, keys in cache.scopes(server).items():
        if scope.tool is None:
            continue
        for removal in removals:
            if globs.matches(scope.tool, removal.tool) and recorded_match(
                scope.arguments, removal.values
            ):
                found.extend(keys)
                break
    return found
