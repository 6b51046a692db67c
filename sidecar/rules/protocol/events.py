"""An incremental decoder for `text/event-stream` bodies, fed bytes as they arrive.

Follows the WHATWG event-stream rules the proxy relies on (CR, LF and CRLF line ends,
comments, `event`, `data` lines joined with newlines, `id`, and an event cut off by the
end of the body being dropped, as clients drop it), over bytes, so that nothing is
decoded twice. Memory is bounded: an event whose lines add up to more than `max_event`
bytes is not kept; it is reported as `truncated`, with no data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    data: bytes
    has_id: bool
    """The event set an id, so a client could resume the stream after it."""
    truncated: bool = False
    """The event exceeded the decoder's bound; `data` is empty."""
    name: bytes = b""
    """The `event` field; "" for none (which clients dispatch as `message`)."""


class EventDecoder:
    def __init__(self, max_event: int) -> None:
        self.max_event = max_event
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._skipping = False
        self._after_cr = False
        self._data: list[bytes] = []
        self._size = 0
        self._name = b""
        self._has_id = False
        self._truncated = False

    def feed(self, chunk: bytes) -> list[Event]:
        """The events completed by `chunk`."""
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = False
        if not chunk:
            return []
        if b"\n" not in chunk and b"\r" not in chunk:
            self._keep_partial(chunk)
            return []
        lines = (b"".join(self._pending) + chunk).splitlines(keepends=True)
        self._pending, self._pending_size = [], 0
        last = lines[-1]
        if not last.endswith((b"\n", b"\r")):
            lines.pop()
        elif last.endswith(b"\r"):
            self._after_cr = True
        events: list[Event] = []
        for line in lines:
            if self._skipping:
                self._skipping = False  # the rest of an overlong line ends here
                continue
            event = self._line(line.rstrip(b"\r\n"))
            if event is not None:
                events.append(event)
        if not last.endswith((b"\n", b"\r")):
            self._keep_partial(last)
        return events

    def _keep_partial(self, part: bytes) -> None:
        """Hold the start of a line until its end arrives, within the event's bound."""
        if self._skipping:
            return
        self._pending.append(part)
        self._pending_size += len(part)
        if self._size + self._pending_size > self.max_event:
            self._pending, self._pending_size = [], 0
            self._skipping = self._truncated = True

    def _line(self, line: bytes) -> Event | None:
        if not line:
            return self._dispatch()
        if self._truncated or line.startswith(b":"):
            return None
        self._size += len(line)
        if self._size > self.max_event:
            self._data, self._truncated = [], True
            return None
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._name = value
        elif name == b"id" and b"\0" not in value:
            self._has_id = True
        return None

    def _dispatch(self) -> Event | None:
        data, has_id, truncated, name = self._data, self._has_id, self._truncated, self._name
        self._data, self._size, self._has_id, self._truncated, self._name = [], 0, False, False, b""
        if truncated:
            return Event(b"", has_id, truncated=True, name=name)
        if not data:
            return Event(b"", True) if has_id else None
        return Event(b"\n".join(data), has_id, name=name)
