"""What the upstreams' answers showed over time, for suggesting TTLs and for checking hits.

For each server, a bounded record of the keys whose answers came from the upstream
(misses, background refreshes, sampled revalidations): the digest of the answer, when
that answer was first seen and when it was last seen unchanged. Digests only: a key is
already a digest of the request, an answer's is a digest of the result without its
hints; no arguments, results or callers are kept.

From it, per tool: how many answers came, how many repeated a key seen before, whether
repeats came back the same, and the shortest span over which they did. A suggested TTL
sits well under that span; a tool whose repeats come back different gets none. Nothing
here changes any setting: a person reads the suggestion and decides.

Pure, no I/O.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from .entry import Scope

MAX_KEYS_PER_SERVER: Final = 4096
"""Keys remembered per server; the least recently answered are forgotten first."""
MAX_TOOLS_PER_SERVER: Final = 512
"""Tools counted per server (names come from callers); later names are not counted."""
MAX_TOOL_NAME: Final = 128
"""Longer names (MCP's own limit), and names with characters a terminal would act on,
are counted together as `OTHER`: they come from callers, and are printed."""
OTHER: Final = "(other)"
HINT_FIELDS: Final = frozenset({"ttlMs", "cacheScope", "_meta"})
"""Result members that say how to cache or carry metadata, not what the answer is."""
SUGGESTED_STEPS: Final = (
    1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400,
)  # fmt: skip
"""Suggested TTLs, in seconds: a quarter of the span, rounded down to one of these."""

Revalidated = Literal["same", "changed", "failed"]


def answer_digest(result: Mapping[str, Any]) -> bytes:
    """A digest of what a result says, without its hints (`ttlMs`, `cacheScope`,
    `_meta`): two answers with the same digest say the same thing. Made on every stored
    miss: SHA-256 (cut to 16 bytes), which CPUs with SHA extensions run about twice as
    fast as BLAKE2b here (an 8 KiB answer: 7.5 µs against 15)."""
    said = {k: v for k, v in result.items() if k not in HINT_FIELDS}
    return hashlib.sha256(orjson.dumps(said, option=orjson.OPT_SORT_KEYS)).digest()[:16]


def scope_label(scope: Scope | None) -> str:
    """What an entry answers, as suggest and stats name it: the tool, or the method."""
    if scope is None:
        return OTHER
    if scope.tool is not None:
        return scope.tool
    return "resources/read" if scope.uri is not None else scope.listing or OTHER


@dataclass(slots=True)
class _Seen:
    digest: bytes
    first: float
    """When this answer was first seen for the key."""
    last: float
    """When it was last seen unchanged."""


@dataclass(slots=True)
class Tally:
    calls: int = 0
    repeats: int = 0
    changed: int = 0
    shortest_stable: float | None = None
    """Over the answers that changed: the shortest span they had been seen unchanged."""
    longest_stable: float = 0.0
    """The longest span an answer was seen unchanged (the evidence when none changed)."""
    revalidations: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Server:
    keys: OrderedDict[str, _Seen] = field(default_factory=OrderedDict)
    tools: dict[str, Tally] = field(default_factory=dict)


class Observations:
    def __init__(
        self, max_keys: int = MAX_KEYS_PER_SERVER, max_tools: int = MAX_TOOLS_PER_SERVER
    ) -> None:
        self.max_keys = max_keys
        self.max_tools = max_tools
        self._servers: dict[str, _Server] = {}

    def _tally(self, server: str, tool: str) -> Tally | None:
        if len(tool) > MAX_TOOL_NAME or not tool.isprintable():
            tool = OTHER
        record = self._servers.setdefault(server, _Server())
        tally = record.tools.get(tool)
        if tally is None and len(record.tools) < self.max_tools:
            tally = record.tools[tool] = Tally()
        return tally

    def saw(self, server: str, tool: str, key: str, digest: bytes, now: float) -> None:
        """An upstream answer for `key` (a call of `tool`), with its digest, at `now`."""
        tally = self._tally(server, tool)
        if tally is None:
            return
        keys = self._servers[server].keys
        tally.calls += 1
        seen = keys.get(key)
        if seen is None:
            keys[key] = _Seen(digest, now, now)
            if len(keys) > self.max_keys:
                keys.popitem(last=False)
            return
        keys.move_to_end(key)
        tally.repeats += 1
        if seen.digest == digest:
            seen.last = now
            tally.longest_stable = max(tally.longest_stable, now - seen.first)
            return
        tally.changed += 1
        stable = seen.last - seen.first
        if tally.shortest_stable is None or stable < tally.shortest_stable:
            tally.shortest_stable = stable
        keys[key] = _Seen(digest, now, now)

    def revalidated(self, server: str, tool: str, result: Revalidated) -> None:
        tally = self._tally(server, tool)
        if tally is not None:
            tally.revalidations[result] = tally.revalidations.get(result, 0) + 1

    def revalidations(self, server: str) -> dict[str, dict[str, int]]:
        """Sampled revalidations of a server's hits by tool and result."""
        record = self._servers.get(server)
        if record is None:
            return {}
        return {
            tool: {result: tally.revalidations.get(result, 0) for result in _RESULTS}
            for tool, tally in sorted(record.tools.items())
            if tally.revalidations
        }

    def servers(self) -> list[str]:
        return sorted(self._servers)

    def suggest(self, server: str) -> dict[str, dict[str, Any]]:
        """Per tool: calls, repeats, how they came back, and a suggested TTL (or none)."""
        record = self._servers.get(server)
        if record is None:
            return {}
        return {tool: suggestion(tally) for tool, tally in sorted(record.tools.items())}


_RESULTS: Final = ("same", "changed", "failed")


def suggestion(tally: Tally) -> dict[str, Any]:
    """What a tool's answers showed, and the TTL they suggest: a quarter of the shortest
    span over which repeats stayed identical, rounded down to a round duration. None
    when nothing repeated, or when an answer changed before any repeat confirmed it."""
    report: dict[str, Any] = {
        "calls": tally.calls,
        "repeats": tally.repeats,
        "changed": tally.changed,
        "stableSeconds": None,
        "suggestedTTL": None,
    }
    if not tally.repeats:
        report["verdict"] = "no repeats"
        return report
    if tally.shortest_stable is None:
        span, report["verdict"] = tally.longest_stable, "never changed"
    elif tally.shortest_stable <= 0:
        report["verdict"] = "answers differ"
        return report
    else:
        span, report["verdict"] = tally.shortest_stable, "changed"
    report["stableSeconds"] = round(span, 3)
    steps = [step for step in SUGGESTED_STEPS if step <= span / 4]
    if steps:
        report["suggestedTTL"] = duration(steps[-1])
    return report


def duration(seconds: int) -> str:
    """A duration as the config writes one (`30s`, `5m`, `2h`)."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
