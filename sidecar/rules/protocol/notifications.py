"""The notifications of a call's stream as the cache keeps them for a hit to replay. Pure.

A hit replays what the upstream sent for the call: the notifications its stream carried
before the result, in order, then the result. Which of them are replayed faithfully:

- `notifications/message` (a log line) is the call's own (the server sent it in the
  call's stream): replayed as the upstream wrote it, byte for byte.
- `notifications/progress` for the call's own progress token: replayed with the caller's
  token in its place, and not at all to a caller that sent none (as the upstream sends
  none then).
- Announcements of the server's state (`notifications/.../list_changed`,
  `notifications/resources/updated`) are not about the call: the sidecar acts on them
  (the entries they reach go) and does not repeat them, which would announce a change
  that did not happen again.

Anything else before the result (a cancellation, progress for another token, a
notification the sidecar does not know, which may refer to something of its moment,
data that is not one JSON-RPC notification, a response to another request) cannot be
replayed with certainty: the call is not stored (`stream_not_replayable`). So is one
whose progress holds a number a replay could not write exactly.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from ...cache.entry import Note
from ..reading.numbers import has_inexact_number
from .results import frame_event

LOG: Final = "notifications/message"
PROGRESS: Final = "notifications/progress"
RESOURCE_UPDATED: Final = "notifications/resources/updated"

_PROGRESS_HEAD: Final = (
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":'
)


def about_the_server(method: str) -> bool:
    """A notification that announces the server's state, not the call's progress."""
    return method.endswith("/list_changed") or method == RESOURCE_UPDATED


def replayable(seen: list[tuple[dict[str, Any], bytes]], token: Any) -> tuple[Note, ...] | None:
    """The notifications `seen` before a call's result (each parsed, and as its event's
    data), as a hit replays them; None when one of them cannot be replayed faithfully.
    `token`: the call's own progress token (None: it sent none)."""
    notes: list[Note] = []
    for message, data in seen:
        method = message.get("method")
        if not isinstance(method, str) or "id" in message:
            return None
        if about_the_server(method):
            continue
        if method == LOG:
            notes.append((_event(data), b""))
        elif method == PROGRESS:
            note = _progress(message, data, token)
            if note is None:
                return None
            notes.append(note)
        else:
            return None
    return tuple(notes)


def _event(data: bytes) -> bytes:
    """The SSE event carrying `data` as the upstream wrote it (a line each, as it came)."""
    if b"\n" not in data:
        return frame_event(data)
    lines = b"".join(b"data: " + line + b"\n" for line in data.split(b"\n"))
    return b"event: message\n" + lines + b"\n"


def _progress(message: dict[str, Any], data: bytes, token: Any) -> Note | None:
    """A progress notification for the call's own `token`, cut where a caller's goes."""
    params = message.get("params")
    if token is None or not isinstance(params, dict) or set(message) != _PROGRESS_MEMBERS:
        return None
    if message["jsonrpc"] != "2.0":
        return None
    theirs = params.get("progressToken")
    if type(theirs) is not type(token) or theirs != token or has_inexact_number(data, message):
        return None
    rest = {k: v for k, v in params.items() if k != "progressToken"}
    try:
        written = orjson.dumps(rest)
    except orjson.JSONEncodeError:  # nested deeper than a replay writes
        return None
    tail = (b"," + written[1:] if rest else b"}") + b"}\n\n"
    return _PROGRESS_HEAD, tail


_PROGRESS_MEMBERS: Final = frozenset({"jsonrpc", "method", "params"})
