"""An incremental decoder for `text/event-stream` bodies, fed bytes as they arrive.

Follows the WHATWG event-stream rules the proxy relies on (CR, LF and CRLF line ends,
comments, `data` lines joined with newlines, `id`), over bytes, so that nothing is
decoded twice. Memory is bounded: a line longer than `max_line` is not kept; the event
it belongs to is reported as `truncated`, with no data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    data: bytes
    has_id: bool
    """The event set an id, so a client could resume the stream after it."""
    truncated: bool = False
    """A line of the event exceeded the decoder's bound; `data` is empty."""


class EventDecoder:
    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._skipping = False
        self._after_cr = False
        self._data: list[bytes] = []
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
        """Hold the start of a line until its end arrives, up to `max_line` bytes."""
        if self._skipping:
            return
        self._pending.append(part)
        self._pending_size += len(part)
        if self._pending_size > self.max_line:
            self._pending, self._pending_size = [], 0
            self._skipping = self._truncated = True

    def close(self) -> list[Event]:
        """The body ended: an unterminated last line ends its event (as clients treat it)."""
        events = self.feed(b"\n") if self._pending or self._skipping else []
        if self._data or self._truncated:
            event = self._line(b"")
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: bytes) -> Event | None:
        if not line:
            return self._dispatch()
        if len(line) > self.max_line:
            self._truncated = True
            return None
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"id" and b"\0" not in value:
            self._has_id = True
        return None

    def _dispatch(self) -> Event | None:
        data, has_id, truncated = self._data, self._has_id, self._truncated
        self._data, self._has_id, self._truncated = [], False, False
        if not data and not truncated:
            return Event(b"", True) if has_id else None
        if truncated:
            return Event(b"", has_id, truncated=True)
        return Event(b"\n".join(data), has_id)
