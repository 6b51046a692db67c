"""What the sidecar has learned about each server's tools from the `tools/list` answers
passing through it: which ones the server declares read-only (`readOnlyHint`).

Pure, no I/O. Under `onlyReadOnlyTools` a tool is cached only once some listing has
called it read-only and none has said otherwise: callers may be shown different lists,
and a tool one of them sees as a write must not be cached for anyone. What a server
said is forgotten when it announces that its tools changed.
"""

from __future__ import annotations

from typing import Any, Final

MAX_TOOLS_PER_SERVER: Final = 10_000
"""Beyond this many names a server's further tools are not remembered (so not cached)."""


class ToolHints:
    def __init__(self) -> None:
        self._read_only: dict[str, dict[str, bool]] = {}

    def read_only(self, server: str, tool: str) -> bool:
        return self._read_only.get(server, {}).get(tool, False)

    def learn(self, server: str, result: Any) -> int:
        """Take in one `tools/list` result; returns how many tools it described."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return 0
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

    def forget(self, server: str) -> None:
        self._read_only.pop(server, None)
