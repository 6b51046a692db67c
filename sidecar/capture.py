"""Watching an upstream response as it streams past, to decide whether it can be stored.

The response is never held back: the proxy hands every chunk to the client as it comes
and shows it to a `ResponseCapture` on the way. The capture counts the bytes of the
whole response (progress and log frames included), notices server-to-client requests
inside an event stream, and picks out the final JSON-RPC response to the caller's id.
Pure, no I/O: SSE framing is decoded with httpx-sse's decoder.
"""

from __future__ import annotations

import codecs
from typing import Any

import orjson
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from .messages import NotStoredReason, Verdict, is_server_request, judge_response


class ResponseCapture:
    """Follows one upstream response to a cacheable request.

    `feed` every chunk in order, then `finish` at the end of the body. `verdict` becomes
    set as soon as the outcome is known — for an event stream, when the final response
    event arrives, which is before that event's bytes are passed on to the client, so a
    caller that has seen the answer can already be served from the cache.
    """

    def __init__(self, request_id: Any, event_stream: bool, max_size: int) -> None:
        self.request_id = request_id
        self.event_stream = event_stream
        self.max_size = max_size
        self.size = 0
        self.final_seen = False
        self.resumable = False
        """The stream carried SSE event ids, so a client may resume it after a close."""
        self.verdict: Verdict | None = None
        self._server_request = False
        self._body: list[bytes] = []
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()

    @property
    def too_large(self) -> bool:
        return self.size > self.max_size

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.event_stream:
            if not self.final_seen:
                self._feed_events(self._text.decode(chunk))
        elif self.too_large:
            self._body.clear()
        else:
            self._body.append(chunk)

    def finish(self) -> Verdict:
        """The body has ended; decide if not yet decided."""
        if self.verdict is None:
            if self.event_stream:
                if not self.final_seen:
                    self._feed_events(self._text.decode(b"", final=True))
                    for line in self._lines.flush():
                        self._feed_line(line)
                    self._feed_line("")
            elif not self.too_large:
                self._judge_body(b"".join(self._body))
        if self.verdict is None:
            self._decide("too_large" if self.too_large else "incomplete")
        assert self.verdict is not None
        return self.verdict

    def _decide(self, reason: NotStoredReason) -> None:
        self.verdict = Verdict(reason)
        self._body.clear()

    def _feed_events(self, text: str) -> None:
        if not text:
            return
        for line in self._lines.decode(text):
            self._feed_line(line)
            if self.final_seen:
                return

    def _feed_line(self, line: str) -> None:
        event = self._events.decode(line)
        if event is None:
            return
        if event.id:
            self.resumable = True
        if not event.data:
            return
        try:
            message = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(message, dict):
            return
        if is_server_request(message):
            self._server_request = True
            return
        if message.get("id") == self.request_id and ("result" in message or "error" in message):
            self._judge_final(message)

    def _judge_body(self, body: bytes) -> None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._decide("incomplete")
            return
        if isinstance(message, dict) and message.get("id") == self.request_id:
            self._judge_final(message)

    def _judge_final(self, message: dict[str, Any]) -> None:
        self.final_seen = True
        if self._server_request:
            self._decide("server_request")
        elif self.too_large:
            self._decide("too_large")
        else:
            self.verdict = judge_response(message)
