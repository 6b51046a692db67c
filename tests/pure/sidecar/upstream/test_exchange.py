"""An exchange that is cancelled while it reads an answer still ends cleanly: the
upstream response is closed, the id's ticket in its legacy session is ended (as not
answered), and the observer learns that no answer came. Cancellation is what shutdown
and an abandoned flight do to a fetch; a stalled body cannot be cancelled on a real
socket at a chosen moment, so the response here is a stand-in whose body never comes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from mcpcache.sidecar.cache.store import ResponseCache
from mcpcache.sidecar.config import Server
from mcpcache.sidecar.metrics import Metrics
from mcpcache.sidecar.rules.admission.capture import ResponseCapture
from mcpcache.sidecar.rules.admission.judgement import answer_verdict
from mcpcache.sidecar.rules.protocol.results import Verdict
from mcpcache.sidecar.upstream.exchange import Exchanges, Outbound
from mcpcache.sidecar.upstream.sessions import LegacySessions


class StalledResponse:
    """A JSON answer whose headers came and whose body never does."""

    status = 200
    event_stream = False

    def __init__(self) -> None:
        self.headers = [("content-type", "application/json")]
        self.header_map = {"content-type": "application/json"}
        self.closed = False
        self.started = asyncio.Event()

    async def chunks(self) -> AsyncIterator[bytes]:
        self.started.set()
        await asyncio.Event().wait()
        yield b""

    def close(self) -> None:
        self.closed = True


class StalledClient:
    def __init__(self, response: StalledResponse) -> None:
        self.response = response

    async def open(self, *args: Any) -> StalledResponse:
        return self.response


async def test_a_read_cancelled_midway_closes_the_response_and_ends_the_ticket() -> None:
    response = StalledResponse()
    sessions = LegacySessions(ResponseCache(16, 1 << 20))
    client: Any = StalledClient(response)
    exchanges = Exchanges(client, Metrics(), sessions, lambda server, notice: None)
    server = Server.model_validate({"name": "s", "url": "http://127.0.0.1:9/mcp"})
    outbound = Outbound("POST", [], b"{}", "tools/call", 7, "session-1", 5.0, ticketed=True)
    capture = ResponseCapture(7, False, 1 << 20)
    verdicts: list[Verdict | None] = []

    async def fetch() -> None:
        # As every reader of a relay does: whatever ends the read, the relay is closed.
        exchange = exchanges.start(server, outbound)
        relay = exchange.relay(await exchange.open(), capture)
        try:
            await relay.read_prefix()
        except BaseException as exc:
            capture.fail(None)
            verdicts.append(answer_verdict(capture))
            relay.close(exc, verdicts[-1])
            raise

    task = asyncio.create_task(fetch())
    await asyncio.wait_for(response.started.wait(), 5)
    assert len(sessions.ids) == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert response.closed, "the upstream response was left open"
    assert len(sessions.ids) == 0, "the session ticket was never ended"
    assert [v.reason for v in verdicts if v is not None] == ["incomplete"]
