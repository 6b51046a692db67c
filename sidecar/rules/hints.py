"""What the sidecar has learned about each server's tools from the `tools/list` answers
passing through it: which ones the server declares read-only (`readOnlyHint`), and the
defaults of their arguments (for `fillSchemaDefaults`).

Pure, no I/O. Under `onlyReadOnlyTools` a tool is cached only once some listing has
called it read-only and none has said otherwise: callers may be shown different lists,
and a tool one of them sees as a write must not be cached for anyone. What a server
said is forgotten when it announces that its tools changed.

Defaults are learned per caller (the digest of who asked for the listing, as the key
sees them) and fill only that caller's own calls: a schema may name one caller's own
choices (an owner that defaults to the logged-in user), so Alice's listing says nothing
of what Bob's omitted argument means. A tool's defaults are used only while every
listing that caller was shown gives the same certain defaults (`schema_defaults`); two
that differ (a server that changed without saying so) leave the tool with no defaults
until the server announces a change. The callers remembered per server are bounded; one
forgotten has no defaults (no sharing) until it lists the tools again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import cachetools
import orjson

from .schema_defaults import certain_defaults

MAX_TOOLS_PER_SERVER: Final = 10_000
"""Beyond this many names a server's further tools are not remembered (so not cached)."""

MAX_CALLERS_PER_SERVER: Final = 256
"""The callers whose listings' defaults are kept per server, the least recent dropped."""


_NO_TOOLS: Final[dict[str, Mapping[str, Any]]] = {}
_NO_CALLERS: Final[dict[str, dict[str, Mapping[str, Any]]]] = {}
_UNCERTAIN: Final[Mapping[str, Any]] = {}
"""A tool whose listings disagree: no defaults (compared by identity, not by value)."""


class ToolHints:
    def __init__(self) -> None:
        self._read_only: dict[str, dict[str, bool]] = {}
        self._defaults: dict[str, cachetools.LRUCache[str, dict[str, Mapping[str, Any]]]] = {}

    def defaults(self, server: str, caller: str, tool: str) -> Mapping[str, Any]:
        """The certain argument defaults of `tool` in the listings `caller` was shown
        ({} when unknown or in doubt)."""
        callers = self._defaults.get(server, _NO_CALLERS)
        return callers.get(caller, _NO_TOOLS).get(tool, _UNCERTAIN)

    def knows(self, server: str, caller: str) -> bool:
        """Whether some listing `caller` was shown is on record since the server's
        tools were last forgotten."""
        return caller in self._defaults.get(server, _NO_CALLERS)

    def read_only(self, server: str, tool: str) -> bool:
        return self._read_only.get(server, {}).get(tool, False)

    def learn(self, server: str, result: Any, caller: str) -> int:
        """Take in one `tools/list` result that `caller` (a digest) was shown; returns
        how many tools it described."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return 0
        self._learn_defaults(server, caller, tools)
        known = self._read_only.setdefault(server, {})
        seen = 0
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
                continue
            annotations = tool.get("annotations")
            read_only = isinstance(annotations, dict) and annotations.get("readOnlyHint") is True
            if name in known:
                known[name] = known[name] and read_only
            elif len(known) < MAX_TOOLS_PER_SERVER:
                known[name] = read_only
            seen += 1
        return seen

    def _learn_defaults(self, server: str, caller: str, tools: list[Any]) -> None:
        callers = self._defaults.get(server)
        if callers is None:
            callers = self._defaults[server] = cachetools.LRUCache(MAX_CALLERS_PER_SERVER)
        known = callers.get(caller)
        if known is None:
            known = callers[caller] = {}
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
                continue
            found = certain_defaults(tool.get("inputSchema"))
            if name in known:
                if known[name] is not _UNCERTAIN and _json(known[name]) != _json(found):
                    known[name] = _UNCERTAIN
            elif len(known) < MAX_TOOLS_PER_SERVER:
                known[name] = found or _UNCERTAIN

    def forget(self, server: str) -> None:
        self._read_only.pop(server, None)
        self._defaults.pop(server, None)


def _json(value: Mapping[str, Any]) -> bytes:
    """Exact comparison: Python's `==` holds `1`, `1.0` and `True` equal; JSON does not."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
