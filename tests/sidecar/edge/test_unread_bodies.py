"""A streamed answer whose head cannot be sent (the server's `send` fails, or the
request's task is cancelled there) never asks for its body, and a body never asked for
runs none of its own cleanup. The upstream's answer is released all the same, the call
reported, and a leader's flight lets go of it: no upstream connection, ticket or task
is left waiting for a client that is not reading.

Driven in process (no ASGI server over a socket fails a send at a chosen moment),
against an upstream on a loopback socket that sends an event stream's head and one
progress event, then holds the stream open.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from peers.faulty import FaultyUpstream
from peers.in_process import HeadFailed, in_process_sidecar
from peers.serving import async_wait_until
from peers.sidecar import parse_samples, sample


@pytest.mark.parametrize("cache", [False, True], ids=["forwarded", "leader"])
async def test_a_stream_whose_head_cannot_be_sent_releases_the_upstream(
    faulty: FaultyUpstream, cache: bool
) -> None:
    """Forwarded uncached (a server whose cache is off), or as a cacheable miss's
    leader whose stream goes on in its flight's task."""
    async with in_process_sidecar(faulty.url("stall-after-head?gate=held"), cache) as sidecar:
        with pytest.raises(HeadFailed):
            await sidecar.call(1, {"q": "a"}, head_fails=True)
        await async_wait_until(
            lambda: faulty.connections() == 0, what="the upstream's answer to be released"
        )
        await async_wait_until(lambda: len(sidecar.coalescer) == 0, what="no fetch task left")
        scrape = parse_samples(generate_latest(sidecar.sidecar.metrics.registry).decode())
        reported = sample(
            scrape,
            "mcpcache_upstream_request_duration_seconds_count",
            server="s",
            method="tools/call",
        )
        assert reported == 1, "the call was reported"
