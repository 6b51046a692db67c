"""A leader whose request task is cancelled while identical requests wait on its flight.

A leader opens its upstream call, and reads a JSON answer, in its own request task.
Under uvicorn nothing cancels that task but shutdown; whatever else might (an ASGI
server that cancels on disconnect, a wrapper's timeout), the followers still get what
they would get without the sidecar: the upstream's answer, each going upstream on its
own, never a broken answer taken as theirs.

The sidecar's real ASGI app is driven in this process (so the leader's task can be
cancelled), against real upstream peers over loopback sockets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from peers.echo import EchoUpstream
from peers.faulty import FaultyUpstream
from peers.in_process import SECONDS, in_process_sidecar
from peers.serving import ServedApp, async_wait_until, served


@pytest.fixture
def echo() -> Iterator[tuple[EchoUpstream, ServedApp]]:
    peer = EchoUpstream()
    with served(peer, lifespan="off") as app:
        yield peer, app


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, SECONDS)


async def test_a_follower_gets_the_answer_when_the_leader_is_cancelled_mid_json_body(
    faulty: FaultyUpstream,
) -> None:
    """The upstream has sent the JSON answer's headers and half its body when the
    leader's task is cancelled: the follower goes upstream itself and gets the answer
    (not a 502 for the read that was cut short)."""
    gate = "mid-json"
    async with in_process_sidecar(faulty.url(f"gated-json?bytes=4000&gate={gate}")) as sidecar:
        leader = asyncio.create_task(sidecar.call(1, {"q": "same"}))
        await async_wait_until(lambda: sidecar.flight_progress() > 0, what="half the body")
        follower = asyncio.create_task(sidecar.call(2, {"q": "same"}))
        await async_wait_until(lambda: sidecar.coalescer.waiting() == 1, what="the follower")
        await _cancel(leader)
        faulty.gate(gate).set()
        status, body = await asyncio.wait_for(follower, SECONDS)
        assert status == 200, body
        answer = json.loads(body)
        assert answer["id"] == 1  # this peer's own id, forwarded as it came: its own call
        assert answer["result"]["content"][0]["text"].startswith("zzz")
        assert faulty.requests == 2, "the follower went upstream on its own"


async def test_followers_go_upstream_on_their_own_when_the_leader_is_cancelled_before_the_head(
    echo: tuple[EchoUpstream, ServedApp],
) -> None:
    """The upstream has the request and has not answered yet when the leader's task is
    cancelled: each follower goes upstream on its own and gets its answer."""
    peer, app = echo
    arguments = {"hold": "before-head"}
    async with in_process_sidecar(app.base_url + "/mcp") as sidecar:
        leader = asyncio.create_task(sidecar.call(1, arguments))
        await async_wait_until(lambda: peer.calls == 1, what="the upstream to hold the call")
        followers = [asyncio.create_task(sidecar.call(n, arguments)) for n in (2, 3)]
        await async_wait_until(lambda: sidecar.coalescer.waiting() == 2, what="two followers")
        await _cancel(leader)
        peer.gate("before-head").set()
        for task in followers:
            status, body = await asyncio.wait_for(task, SECONDS)
            assert status == 200, body
            assert json.loads(body)["id"] in (2, 3)
        assert peer.calls == 3, "each follower went upstream on its own"
