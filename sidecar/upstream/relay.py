"""Carrying one upstream response to the client, chunk by chunk, as it arrives.

Each chunk is shown to the response's `ResponseCapture` (when it has one) on its way,
and then handed to whoever reads the relay: that reader (the cacheable fetch, or the
forwarding of an uncached request) judges the answer when the capture has seen it,
before passing the chunk on, and closes the relay when it is done, saying what the
answer became (stored, or why not) for the log. Once closed, `on_done` learns whether
the upstream answered. Notifications that say cached answers are out of date go to
`on_notice` as they pass, before the client sees them. The relay never decides anything
about the cache, and calls nothing that does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, NamedTuple

from ..edge.errors import UPSTREAM_UNAVAILABLE, error_body
from ..edge.forwarded import BrokenBody
from ..metrics import Metrics
from ..rules.admission.capture import ResponseCapture
from ..rules.invalidation.notices import Notice, NoticeWatch
from ..rules.protocol.results import Verdict, frame_event
from .client import UpstreamFailure, UpstreamResponse

logger = logging.getLogger("mcpcache.sidecar")


class Call(NamedTuple):
    """What the relay reports an upstream call under (never a caller or an argument).
    (A tuple: made on every call, so cheap.)"""

    server: str
    method: str
    request_id: Any
    started: float


class Relay:
    complete = False
    """The whole body has been read (`read_prefix` reached its end)."""
    done = False

    def __init__(
        self,
        response: UpstreamResponse,
        call: Call,
        metrics: Metrics,
        capture: ResponseCapture | None = None,
        on_notice: Callable[[Notice], None] | None = None,
        on_done: Callable[[bool], None] | None = None,
    ) -> None:
        self.response = response
        self.call = call
        self.metrics = metrics
        self.capture = capture
        self.on_notice = on_notice
        self._watch = (
            NoticeWatch()
            if capture is None and on_notice is not None and response.event_stream
            else None
        )
        self.on_done = on_done
        self._chunks = response.chunks()

    async def read_prefix(self) -> bytes:
        """Read a JSON body until it ends (`complete`) or outgrows the cap (then the rest
        comes from `chunks`). A body that breaks off raises `UpstreamFailure`."""
        assert self.capture is not None
        parts: list[bytes] = []
        async for chunk in self._chunks:
            self._see(chunk)
            parts.append(chunk)
            if self.capture.too_large:
                return b"".join(parts)
        self.complete = True
        return b"".join(parts)

    async def chunks(self, prefix: bytes = b"") -> AsyncGenerator[bytes, None]:
        """The body from `prefix` on. An event stream that ends, or breaks off, before
        its answer ends with an error event the client sees; one that breaks off raises
        `BrokenBody` (from the `UpstreamFailure`) after it. The reader closes the relay."""
        if prefix:
            yield prefix
        try:
            async for chunk in self._chunks:
                self._see(chunk)
                yield chunk
        except UpstreamFailure as exc:
            if self._unanswered():
                yield self._error_event(f"failed mid-stream: {exc.cause_name}")
            # Whatever was sent, it is not the whole answer: the client must see a broken
            # transfer, not an ended one.
            raise BrokenBody(exc.cause_name) from exc
        if self._unanswered():
            yield self._error_event("ended the stream before answering")

    def close(self, error: BaseException | None, verdict: Verdict | None = None) -> None:
        """Release the upstream's response (once): `error` is how the reading ended, if
        it did not end whole; `verdict` what the answer became, for the log line. It
        does not wait: a reader being cancelled still releases."""
        if self.done:
            return
        self.done = True
        self.response.close()
        if self.on_done is not None:
            self.on_done(self._answered(error))
        self._report(error, verdict)

    def _answered(self, error: BaseException | None) -> bool:
        """Whether the upstream is done with the request: its event stream carried the
        answer (however the relay ended after it), or its body ended whole (a stream may
        end before its answer and be resumed)."""
        capture = self.capture
        if capture is not None and capture.event_stream and capture.answered:
            return True
        if error is not None:
            return False
        return capture is None or not capture.event_stream

    def _unanswered(self) -> bool:
        """An event stream for a request ended without its response, and the client
        cannot resume it: end the call with an error now rather than let it wait."""
        capture = self.capture
        return (
            capture is not None
            and capture.event_stream
            and not capture.answered
            and not capture.resumable
        )

    def _error_event(self, what: str) -> bytes:
        """A JSON-RPC error event, led by a blank line that ends whatever partial event
        the upstream left behind, so that the error always arrives as an event of its own."""
        message = f"MCP server {self.call.server!r} {what}"
        return b"\n\n" + frame_event(
            error_body(UPSTREAM_UNAVAILABLE, message, self.call.request_id)
        )

    def _see(self, chunk: bytes) -> None:
        capture = self.capture
        if capture is None:
            if self._watch is not None and self.on_notice is not None:
                for notice in self._watch.feed(chunk):
                    self.on_notice(notice)
            return
        capture.feed(chunk)
        if capture.notices and self.on_notice is not None:
            notices, capture.notices = capture.notices, []
            for notice in notices:
                self.on_notice(notice)

    def _report(self, error: BaseException | None, verdict: Verdict | None) -> None:
        call = self.call
        elapsed = time.perf_counter() - call.started
        self.metrics.observe_upstream(call.server, call.method, elapsed)
        if isinstance(error, UpstreamFailure):
            end = "broken"
            self.metrics.upstream_errors.labels(call.server, "broken").inc()
        elif error is not None:
            end = "client_gone"
        else:
            end = "ok"
        if not logger.isEnabledFor(logging.INFO):
            return
        logger.info(
            "upstream call",
            extra={
                "server": call.server,
                "method": call.method,
                "status": self.response.status,
                "duration_ms": round(elapsed * 1000, 3),
                "bytes": self.capture.size if self.capture is not None else None,
                "stored": None if verdict is None else verdict.reason is None,
                "not_stored": None if verdict is None else verdict.reason,
                "end": end,
            },
        )
