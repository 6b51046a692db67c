"""Upstream notifications that say cached answers may be out of date.

`notifications/resources/updated` names one resource; `notifications/resources/list_changed`,
`notifications/tools/list_changed` and `notifications/prompts/list_changed` speak of all
of a server's resources, tools or prompts. They
arrive inside event streams passing through the sidecar: a request's own response stream,
the session's GET stream, or a `subscriptions/listen` stream. Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from ..protocol.events import EventDecoder

RESOURCE_UPDATED: Final = "notifications/resources/updated"
RESOURCES_CHANGED: Final = "notifications/resources/list_changed"
TOOLS_CHANGED: Final = "notifications/tools/list_changed"
PROMPTS_CHANGED: Final = "notifications/prompts/list_changed"

NoticeKind = Literal["resource", "resources", "tools", "prompts"]
_KINDS: Final[dict[str, NoticeKind]] = {
    RESOURCE_UPDATED: "resource",
    RESOURCES_CHANGED: "resources",
    TOOLS_CHANGED: "tools",
    PROMPTS_CHANGED: "prompts",
}
_MARKERS: Final = (b"resources/updated", b"list_changed")
"""Bytes one of the notifications above must contain; other events are not parsed."""

MAX_NOTICE_EVENT: Final = 64 << 10


@dataclass(frozen=True, slots=True)
class Notice:
    kind: NoticeKind
    uri: str | None = None


def notice_of(message: dict[str, Any]) -> Notice | None:
    """The notice a decoded JSON-RPC message carries, if it is one of these notifications."""
    kind = _KINDS.get(message.get("method"))  # type: ignore[arg-type]
    if kind is None or "id" in message:
        return None
    if kind == "resource":
        params = message.get("params")
        uri = params.get("uri") if isinstance(params, dict) else None
        return Notice(kind, uri) if isinstance(uri, str) else None
    return Notice(kind)


def might_be_notice(data: bytes) -> bool:
    return any(marker in data for marker in _MARKERS)


class NoticeWatch:
    """Follows an event stream no request waits on (the session's GET stream)."""

    def __init__(self) -> None:
        self._events = EventDecoder(MAX_NOTICE_EVENT)

    def feed(self, chunk: bytes) -> list[Notice]:
        notices = []
        for event in self._events.feed(chunk):
            if not event.data or not might_be_notice(event.data):
                continue
            try:
                message = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(message, dict) and (notice := notice_of(message)) is not None:
                notices.append(notice)
        return notices
