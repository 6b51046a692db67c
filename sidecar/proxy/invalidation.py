"""Removing entries before they expire: after a write, on an upstream notification, on
a purge (from the admin endpoint or a changed purge marker in the config).

Removal is for every caller of the server: the state behind the answers changed, not
one caller's view of it. Every removal also moves the server's epoch on, so that an
answer fetched before it (a miss still in flight) is not stored after it.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterable
from typing import Final, Literal

from ..cache.store import ResponseCache
from ..config import SidecarConfig
from ..metrics import Metrics
from ..rules.arguments import EVERY_ENTRY, MatchedRemoval, Removal, recorded_match
from ..rules.hints import ToolHints
from ..rules.notices import Notice

Cause = Literal["write", "notification", "purge"]

logger = logging.getLogger("mcpcache.sidecar")

TOOL_LISTS: Final = ("tools/list",)
RESOURCE_LISTS: Final = ("resources/list", "resources/templates/list")
PROMPT_LISTS: Final = ("prompts/list",)
"""Cached list answers a list-changed notification makes stale."""


class Invalidator:
    """`on_drop(server)` is told of every removal: the shared tier, keyed by digest and
    not by tool, then drops all of that server's entries for the app (more than needed,
    never less: other replicas fetch again)."""

    def __init__(
        self,
        cache: ResponseCache,
        metrics: Metrics,
        hints: ToolHints,
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.cache = cache
        self.metrics = metrics
        self.hints = hints
        self.on_drop = on_drop
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
            dropped = self._drop(server, keys, cause)
            logger.info(
                "a declared write dropped the server's entries",
                extra={"server": server, "entries": dropped},
            )
            return dropped
        matched = [r for r in removals if not isinstance(r, str)]
        keys = self.cache.keys_for(server, tools=globs)
        if matched:
            keys.extend(_matching_keys(self.cache, server, matched))
        return self._drop(server, keys, cause)

    def notice(self, server: str, notice: Notice) -> int:
        """Act on an upstream notification passing through."""
        if notice.kind == "resource":
            keys = self.cache.keys_for(server, uri=notice.uri)
        elif notice.kind == "resources":
            keys = self.cache.keys_for(server, resources=True, listings=RESOURCE_LISTS)
        elif notice.kind == "prompts":
            keys = self.cache.keys_for(server, listings=PROMPT_LISTS)
        else:
            self.hints.forget(server)
            keys = self.cache.keys_for(server, tools=("*",), listings=TOOL_LISTS)
        return self._drop(server, keys, "notification")

    def purge(self, server: str, tool: str | None = None, uri: str | None = None) -> int:
        """Drop a server's entries: all of them, or a tool glob's and/or a resource's."""
        if tool is None and uri is None:
            keys = self.cache.keys_for(server, everything=True)
        else:
            keys = self.cache.keys_for(server, tools=(tool,) if tool else (), uri=uri)
        return self._drop(server, keys, "purge")

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
                listed = self.cache.keys_for(server.name, listings=("tools/list",))
                self._drop(server.name, listed, "purge")
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

    def _drop(self, server: str, keys: list[str], cause: Cause) -> int:
        self._epochs[server] = self._epochs.get(server, 0) + 1
        self.metrics.invalidations.labels(server, cause).inc()
        if self.on_drop is not None:
            self.on_drop(server)
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
            if fnmatch.fnmatchcase(scope.tool, removal.tool) and recorded_match(
                scope.arguments, removal.values
            ):
                found.extend(keys)
                break
    return found
