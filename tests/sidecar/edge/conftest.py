"""Peers of the edge's tests only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peers.faulty import FaultyUpstream


@pytest.fixture(scope="session")
def faulty_upstream() -> Iterator[FaultyUpstream]:
    """A raw-socket upstream whose path picks a fault (see `peers.faulty`)."""
    peer = FaultyUpstream().start()
    yield peer
    peer.stop()
