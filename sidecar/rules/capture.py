"""Watching an upstream response as it streams past, to decide whether it can be stored.

The response is never held back: the proxy hands every chunk to the client as it comes
and shows it to a `ResponseCapture` on the way. The capture counts the bytes of the
whole response (progress and log frames included), notices server-to-client requests
inside an event stream, and picks out the final JSON-RPC response to the caller's id.
Pure, no I/O. Memory is bounded by the largest answer that could be stored: past that,
bodies are counted, not kept, and overlong events are skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from .messages import (
    NotStoredReason,
    Verdict,
    is_server_request,
    judge_response,
)
from .notices import Notice, notice_of
from .numbers import has_inexact_number
from .sse import Event, EventDecoder

if TYPE_CHECKING:  # the capture stays pure: no HTTP client at run time
    from ..upstream.client import UpstreamFailure

MIN_EVENT_BOUND: Final = 64 << 10
"""Events up to this size are decoded even when nothing may be stored, so that a stream
which ends without its answer can still be noticed."""


_DISPATCHED = (b"", b"message")
WRITE_DEPTH: Final = 254
"""The deepest nesting orjson writes (it reads four times deeper). An answer whose
`result` or `error` is nested deeper reaches its client as it came, but it can be neither
stored, nor framed for another request, nor digested, nor learned from: each writes it."""


def too_deep_to_write(message: dict[str, Any], raw: bytes) -> bool:
    """Whether orjson cannot write the `result` or `error` of `message` (parsed from
    `raw`) again. Both sit a level inside the message, so an answer with no more brackets
    than `WRITE_DEPTH + 1` never is; only one with more is written to find out."""
    if raw.count(b"[") + raw.count(b"{") <= WRITE_DEPTH + 1:
        return False
    try:
        orjson.dumps(message.get("result"))
        orjson.dumps(message.get("error"))
    except orjson.JSONEncodeError:
        return True
    return False


class ResponseCapture:
    """Follows one upstream response to a request.

    `feed` every chunk in order, then `finish` at the end of the body. `verdict` becomes
    set as soon as the outcome is known — for an event stream, when the final response
    event arrives, which is before that event's bytes are passed on to the client, so a
    caller that has seen the answer can already be served from the cache.

    `refused` is a reason known before the body (the upstream's status or headers): the
    answer is then followed but never kept.
    """

    def __init__(
        self,
        request_id: Any,
        event_stream: bool,
        max_size: int,
        refused: NotStoredReason | None = None,
    ) -> None:
        self.request_id = request_id
        self.event_stream = event_stream
        self.max_size = max_size
        self.size = 0
        self.final_seen = False
        self.failure: UpstreamFailure | None = None
        """How the body broke off, when it did."""
        self.resumable = False
        """The stream carried SSE event ids, so a client may resume it after a close."""
        self.skipped_event = False
        """An event too large to decode passed: it may have been the answer."""
        self.verdict: Verdict | None = Verdict(refused) if refused is not None else None
        self.final: dict[str, Any] | None = None
        """The final response, when it was no larger than `max_size` (for followers)."""
        self.final_raw = b""
        """Its bytes as the upstream sent them (an event's data), when it is kept."""
        self.notices: list[Notice] = []
        """Notifications seen before the final response that say entries are out of
        date; whoever follows the capture takes them out."""
        self._server_request = False
        self._body: list[bytes] = []
        self._events = EventDecoder(max(max_size, MIN_EVENT_BOUND))

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
        if self.event_stream:
            if not self.final_seen:
                self._see_events(self._events.feed(chunk))
        elif self.too_large:
            self._body.clear()
        else:
            self._body.append(chunk)

    def finish(self) -> Verdict:
        """The body has ended; decide if not yet decided."""
        if self.verdict is None and not self.event_stream and not self.too_large:
            self._judge_body(b"".join(self._body))
        if self.verdict is None:
            self._decide("too_large" if self.too_large else "incomplete")
        assert self.verdict is not None
        return self.verdict

    def fail(self, failure: UpstreamFailure | None = None) -> Verdict:
        """The body broke off before its end (`failure`: how): nothing from it may be
        stored."""
        self.failure = failure
        if self.verdict is None:
            self._decide("incomplete")
        assert self.verdict is not None
        return self.verdict

    def _decide(self, reason: NotStoredReason) -> None:
        self.verdict = Verdict(reason)
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
            return
        if not isinstance(message, dict):
            return
        if is_server_request(message):
            self._server_request = True
            return
        if "id" not in message and (notice := notice_of(message)) is not None:
            self.notices.append(notice)
            return
        if message.get("id") == self.request_id and ("result" in message or "error" in message):
            self._judge_final(message, event.data)

    def _judge_body(self, body: bytes) -> None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._decide("incomplete")
            return
        if isinstance(message, dict) and message.get("id") == self.request_id:
            self._judge_final(message, body)

    def _judge_final(self, message: dict[str, Any], raw: bytes) -> None:
        self.final_seen = True
        if len(raw) <= self.max_size:
            self.final = message
            self.final_raw = raw
        if self.verdict is None:  # else refused before the body: followed, never kept
            if self._server_request:
                self._decide("server_request")
            elif self.too_large:
                self._decide("too_large")
            elif has_inexact_number(raw, message):
                self._decide("inexact_number")  # a hit would not repeat its numbers exactly
            else:
                try:
                    self.verdict = judge_response(message)  # writes what it stores
                except orjson.JSONEncodeError:
                    self._decide("too_deep")
        assert self.verdict is not None
        kept = self.final is not None
        if kept and self.verdict.reason is not None and too_deep_to_write(message, raw):
            # Not stored, it may still be shared, digested or learned from, and each of
            # those writes it: nobody but the client it streams to may have it.
            self.final, self.final_raw = None, b""
