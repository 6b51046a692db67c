"""The peers of the sidecar's tests with real peers (tests/sidecar/ and its folders): the
sidecar itself, started from config documents, the upstreams several folders use, and one
Redis. Peers only one folder uses are in that folder's conftest.py; the SDK servers the
e2e and monitoring tests use too are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from peers.echo import EchoUpstream
from peers.faulty import FaultyUpstream
from peers.redisserver import RedisServer, redis_server_binary
from peers.serving import ServedApp, served
from peers.sidecar import RunningSidecar, SidecarFactory
from peers.upstream import Upstream


@pytest.fixture
def faulty() -> Iterator[FaultyUpstream]:
    """A raw-socket upstream whose path picks a fault (`peers.faulty`), for one test (a
    module that only counts on its answers may take one for all its tests)."""
    upstream = FaultyUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def make_sidecar(tmp_path: Path) -> Iterator[SidecarFactory]:
    """Start sidecars from config documents; stopped at the end of the test."""
    running: list[RunningSidecar] = []

    def start(document: dict[str, Any], projected: bool = False) -> RunningSidecar:
        """`projected`: in a folder of its own, updated as the kubelet updates a mount."""
        path = tmp_path / f"sidecar-{len(running)}.yaml"
        if projected:
            path = tmp_path / f"mounted-{len(running)}" / "config.yaml"
        sidecar = RunningSidecar(path, document, projected).start()
        running.append(sidecar)
        return sidecar

    yield start
    for sidecar in running:
        sidecar.stop_soon()


def server_entry(name: str, url: str, **cache: Any) -> dict[str, Any]:
    return {"name": name, "url": url, "cache": {"enabled": True, **cache}}


@pytest.fixture
def sidecar(
    make_sidecar: SidecarFactory,
    upstream: tuple[Upstream, ServedApp],
    json_upstream: tuple[Upstream, ServedApp],
) -> RunningSidecar:
    """A sidecar with `sse` and `json` upstreams cached, and `plain` uncached."""
    return make_sidecar(
        {
            "appId": "agent-a",
            "servers": [
                server_entry("sse", upstream[1].base_url + "/mcp"),
                server_entry("json", json_upstream[1].base_url + "/mcp"),
                {"name": "plain", "url": upstream[1].base_url + "/mcp"},
            ],
        }
    )


@pytest.fixture
def own_upstream() -> Iterator[tuple[Upstream, ServedApp]]:
    """A JSON-answering SDK server of the test's own: its counts are the test's, and
    the test may stop it."""
    peer = Upstream()
    app = ServedApp(peer.app(json_response=True)).start()
    yield peer, app
    if app.server.started and not app.server.should_exit:
        app.stop_soon()


@pytest.fixture(scope="session")
def echo_upstream() -> Iterator[tuple[EchoUpstream, ServedApp]]:
    """A raw upstream that answers as each call's arguments ask (see `peers.echo`)."""
    peer = EchoUpstream()
    with served(peer, lifespan="off") as app:
        yield peer, app


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real Redis for the run, on a free loopback port; emptied by tests that need it."""
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A Redis of the test's own, for tests that stop and restart it."""
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()
