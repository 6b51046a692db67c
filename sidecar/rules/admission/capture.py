"""Watching an upstream response as it streams past: what it held, for the judgement.

The response is never held back: the proxy hands every chunk to the client as it comes
and shows it to a `ResponseCapture` on the way. The capture counts the bytes of the
whole response (progress and log frames included), notices server-to-client requests
inside an event stream, and picks out the final JSON-RPC response to the caller's id.
It records facts only; whether the answer may be stored is `admission`'s to say.
Pure, no I/O. Memory is bounded by the largest answer that could be stored: past that,
bodies are counted, not kept, and overlong events are skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from ..invalidation.notices import Notice, notice_of
from ..protocol.events import Event, EventDecoder
from ..protocol.results import is_server_request

if TYPE_CHECKING:  # the capture stays pure: no HTTP client at run time
    from ...upstream.client import UpstreamFailure

MIN_EVENT_BOUND: Final = 64 << 10
"""Events up to this size are decoded even when nothing may be stored, so that a stream
which ends without its answer can still be noticed."""


_DISPATCHED = (b"", b"message")


class ResponseCapture:
    """Follows one upstream response to a request.

    `feed` every chunk in order, then `finish` at the end of the body (or `fail` when it
    broke off). For an event stream, the final response is picked out as soon as its
    event arrives, which is before that event's bytes are passed on to the client: the
    answer can be judged and stored before the caller has seen it.
    """

    # What has been seen so far: nothing, until a chunk shows otherwise. (Read from the
    # class until then: a capture is made on every miss, and most stay at these.)
    size = 0
    final_seen = False
    ended = False
    """The body ended whole (`finish`)."""
    failure: UpstreamFailure | None = None
    """How the body broke off, when it did (`fail`)."""
    broken = False
    resumable = False
    """The stream carried SSE event ids, so a client may resume it after a close."""
    skipped_event = False
    """An event too large to decode passed: it may have been the answer."""
    final: dict[str, Any] | None = None
    """The final response, when it was no larger than `max_size`."""
    final_raw = b""
    """Its bytes as the upstream sent them (an event's data), when it is kept."""
    final_over_size = False
    """The response was larger than `max_size` by the time its final answer passed."""
    asked_before_final = False
    """The server sent the client a request before its final answer."""
    unreplayable = False
    """Something came before the final response that a hit could not replay."""
    _server_request = False

    def __init__(
        self, request_id: Any, event_stream: bool, max_size: int, progress_token: Any = None
    ) -> None:
        self.request_id = request_id
        self.progress_token = progress_token
        """The request's own progress token (None: it sent none)."""
        self.event_stream = event_stream
        self.max_size = max_size
        self.notes: list[tuple[dict[str, Any], bytes]] = []
        """Notifications seen before the final response (parsed, and as sent), for a
        hit to replay; not kept once the response is larger than could be stored."""
        self.notices: list[Notice] = []
        """Notifications seen before the final response that say entries are out of
        date; whoever follows the capture takes them out."""
        self._body: list[bytes] = []
        self._events = EventDecoder(max(max_size, MIN_EVENT_BOUND)) if event_stream else None

    @property
    def too_large(self) -> bool:
        return self.size > self.max_size

    @property
    def asked_client(self) -> bool:
        """The server sent the client a request: the answer depends on the reply."""
        return self._server_request

    @property
    def answered(self) -> bool:
        """The final response passed, or may have (inside an event too large to read)."""
        return self.final_seen or self.skipped_event

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._events is not None:
            if not self.final_seen:
                self._see_events(self._events.feed(chunk))
        elif self.too_large:
            self._body.clear()
        else:
            self._body.append(chunk)

    def finish(self) -> None:
        """The body has ended whole: a JSON answer is read now."""
        if self.ended or self.broken:
            return
        self.ended = True
        if not self.event_stream and not self.too_large and not self.final_seen:
            self._see_body(b"".join(self._body))
        self._body.clear()

    def fail(self, failure: UpstreamFailure | None = None) -> None:
        """The body broke off before its end (`failure`: how)."""
        if self.ended or self.broken:
            return
        self.broken = True
        self.failure = failure
        self._body.clear()

    def _see_events(self, events: list[Event]) -> None:
        for event in events:
            self._see_event(event)
            if self.final_seen:
                return

    def _see_event(self, event: Event) -> None:
        if event.has_id:
            self.resumable = True
        if event.truncated:
            self.skipped_event = True
            return
        if not event.data or event.name not in _DISPATCHED:
            return  # clients dispatch only `message` events
        try:
            message = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            self.unreplayable = True
            return
        if not isinstance(message, dict):
            self.unreplayable = True
            return
        if is_server_request(message):
            self._server_request = True
            return
        if "id" not in message and (notice := notice_of(message)) is not None:
            self.notices.append(notice)
            return
        if message.get("id") == self.request_id and ("result" in message or "error" in message):
            self._see_final(message, event.data)
        elif self.too_large:
            self.notes.clear()  # nothing of it is stored
        else:
            self.notes.append((message, event.data))

    def _see_body(self, body: bytes) -> None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(message, dict) and message.get("id") == self.request_id:
            self._see_final(message, body)

    def _see_final(self, message: dict[str, Any], raw: bytes) -> None:
        self.final_seen = True
        self.final_over_size = self.too_large
        self.asked_before_final = self._server_request
        if len(raw) <= self.max_size:
            self.final = message
            self.final_raw = raw
