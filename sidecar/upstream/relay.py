"""Carrying one upstream response to the client, chunk by chunk, as it arrives.

Each chunk is shown to the response's `ResponseCapture` (when it has one) on its way.
When the capture has seen the final answer, or the body ends, the relay reports it once
through `on_final` (the verdict, and whether the answer was an event stream), whose
returned verdict (stored, or why not) it keeps for `Cache-Status`; and once the body is
done, `on_done` learns whether the upstream answered. Notifications that say
cached answers are out of date go to `on_notice` as they pass, before the client sees
them. The relay never decides anything about the cache itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ..edge.errors import UPSTREAM_UNAVAILABLE, error_body
from ..edge.forwarded import BrokenBody
from ..metrics import Metrics
from ..rules import cache_status
from ..rules.capture import ResponseCapture
from ..rules.messages import Verdict, frame_event
from ..rules.notices import Notice, NoticeWatch
from .client import UpstreamFailure, UpstreamResponse

logger = logging.getLogger("mcpcache.sidecar")


@dataclass(frozen=True, slots=True)
class Call:
    """What the relay reports an upstream call under (never a caller or an argument)."""

    server: str
    method: str
    request_id: Any
    started: float


class Relay:
    def __init__(
        self,
        response: UpstreamResponse,
        call: Call,
        metrics: Metrics,
        capture: ResponseCapture | None = None,
        on_final: Callable[[Verdict, bool], Verdict] | None = None,
        on_notice: Callable[[Notice], None] | None = None,
        on_done: Callable[[bool], None] | None = None,
    ) -> None:
        self.response = response
        self.call = call
        self.metrics = metrics
        self.capture = capture
        self.on_final = on_final
        self.on_notice = on_notice
        self._watch = (
            NoticeWatch()
            if capture is None and on_notice is not None and response.event_stream
            else None
        )
        self.on_done = on_done
        self.done = False
        self.verdict: Verdict | None = None
        self._chunks = response.chunks()

    async def read_prefix(self) -> bytes:
        """Read a JSON body until it ends or outgrows the cap (then the rest streams).
        A body that breaks off raises `UpstreamFailure`, the response already closed; a
        read cancelled midway closes it too, and ends the call as unanswered."""
        assert self.capture is not None
        parts: list[bytes] = []
        try:
            async for chunk in self._chunks:
                self._see(chunk)
                parts.append(chunk)
                if self.capture.too_large:
                    return b"".join(parts)
        except BaseException as exc:
            # Shielded: a cancelled read must still release the socket, end the id's
            # ticket and tell the observer that the answer never came.
            with anyio.CancelScope(shield=True):
                await self._close(exc)
            raise
        await self._close(None)
        return b"".join(parts)

    async def deliver(self, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """Fetch the rest of the body with no client attached: in the caller's own task,
        handing each chunk (and the closing error event of a stream that breaks) to
        `sink`, which decides who still reads it. The capture sees every chunk either way."""
        async for chunk in self.stream(b""):
            await sink(chunk)

    def cache_status(self) -> str:
        """`Cache-Status` of a miss whose answer has been followed to its end."""
        reason = self.verdict.reason if self.verdict is not None else "incomplete"
        if reason is None:
            return cache_status.MISS_STORED
        return cache_status.forwarded("miss", cache_status.detail(reason))

    async def stream(self, prefix: bytes) -> AsyncGenerator[bytes, None]:
        """The body from `prefix` on; raises `BrokenBody` (after a closing error event, on
        an unanswered event stream) when the upstream's body breaks off."""
        error: BaseException | None = None
        try:
            if prefix:
                yield prefix
            async for chunk in self._chunks:
                self._see(chunk)
                yield chunk
            if self._unanswered():
                yield self._error_event("ended the stream before answering")
        except UpstreamFailure as exc:
            error = exc
            if self._unanswered():
                yield self._error_event(f"failed mid-stream: {exc.cause_name}")
            # Whatever was sent, it is not the whole answer: the client must see a broken
            # transfer, not an ended one.
            raise BrokenBody(exc.cause_name) from exc
        except BaseException as exc:  # client went away: cancelled or closed
            error = exc
            raise
        finally:
            # Shielded: a client that goes away must still release the upstream socket.
            with anyio.CancelScope(shield=True):
                await self._close(error)

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
        if capture.final_seen and self.verdict is None and self.on_final is not None:
            self.verdict = self.on_final(capture.finish(), capture.event_stream)

    async def _close(self, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        await self.response.aclose()
        capture = self.capture
        if capture is not None and self.on_final is not None and self.verdict is None:
            failure = error if isinstance(error, UpstreamFailure) else None
            verdict = capture.finish() if error is None else capture.fail(failure)
            self.verdict = self.on_final(verdict, capture.event_stream)
        if self.on_done is not None:
            self.on_done(self._answered(error))
        self._report(error)

    def _report(self, error: BaseException | None) -> None:
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
        verdict = self.verdict
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
