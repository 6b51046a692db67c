"""What the sidecar has learned about each server's tools from the `tools/list` answers
passing through it: which ones the server declares read-only (`readOnlyHint`), and the
defaults of their arguments (for `fillSchemaDefaults`).

Pure, no I/O. Under `onlyReadOnlyTools` a tool is cached only once some listing has
called it read-only and none has said otherwise: callers may be shown different lists,
and a tool one of them sees as a write must not be cached for anyone. What a server
said is forgotten when it announces that its tools changed.

Defaults the same way: a tool's defaults are used only while every listing seen gives
the same certain defaults (`schema_defaults`); two listings that differ (callers shown
different schemas, or a server that changed without saying so) leave the tool with no
defaults until the server announces a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from .schema_defaults import certain_defaults

MAX_TOOLS_PER_SERVER: Final = 10_000
"""Beyond this many names a server's further tools are not remembered (so not cached)."""


_NO_TOOLS: Final[dict[str, Mapping[str, Any]]] = {}
_UNCERTAIN: Final[Mapping[str, Any]] = {}
"""A tool whose listings disagree: no defaults (compared by identity, not by value)."""


class ToolHints:
    def __init__(self) -> None:
        self._read_only: dict[str, dict[str, bool]] = {}
        self._defaults: dict[str, dict[str, Mapping[str, Any]]] = {}

    def defaults(self, server: str, tool: str) -> Mapping[str, Any]:
        """The certain argument defaults of `tool` ({} when unknown or in doubt)."""
        return self._defaults.get(server, _NO_TOOLS).get(tool, _UNCERTAIN)

    def read_only(self, server: str, tool: str) -> bool:
        return self._read_only.get(server, {}).get(tool, False)

    def learn(self, server: str, result: Any) -> int:
        """Take in one `tools/list` result; returns how many tools it described."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return 0
        self._learn_defaults(server, tools)
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

    def _learn_defaults(self, server: str, tools: list[Any]) -> None:
        known = self._defaults.setdefault(server, {})
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
