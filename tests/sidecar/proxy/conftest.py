"""Peers of the proxy's tests only: a sidecar on the echoing upstream, and the TypeScript
SDK's server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peers.echo import EchoUpstream
from peers.serving import ServedApp
from peers.sidecar import RunningSidecar, SidecarFactory, one_server
from peers.typescript_sdk import TypeScriptServer, typescript_server


@pytest.fixture
def sidecar_on_echo(
    make_sidecar: SidecarFactory, echo_upstream: tuple[EchoUpstream, ServedApp]
) -> RunningSidecar:
    """A sidecar caching one server, `echo`, on the raw upstream that says who asked."""
    return make_sidecar(one_server(echo_upstream[1].base_url + "/mcp", name="echo"))


@pytest.fixture(scope="module")
def ts_server() -> Iterator[TypeScriptServer]:
    """The TypeScript SDK's server, one per module (its call count is read relative to
    what the module's earlier tests left)."""
    with typescript_server() as server:
        yield server
