"""The pure folder's own promise: a test here that reaches for the network or starts a
process fails, naming what it tried (tests/pure/conftest.py)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest


def test_connecting_a_socket_to_loopback_fails() -> None:
    with socket.socket() as sock, pytest.raises(AssertionError, match="connect a socket"):
        sock.connect(("127.0.0.1", 9))


def test_binding_a_listener_fails() -> None:
    with socket.socket() as sock, pytest.raises(AssertionError, match="bind a socket"):
        sock.bind(("127.0.0.1", 0))


def test_resolving_a_name_fails() -> None:
    with pytest.raises(AssertionError, match="resolve a name"):
        socket.getaddrinfo("localhost", 80)


async def test_an_asyncio_connection_fails() -> None:
    with pytest.raises(AssertionError, match="connect a socket"):
        await asyncio.wait_for(asyncio.open_connection("127.0.0.1", 9), timeout=5)


def test_starting_a_process_fails() -> None:
    with pytest.raises(AssertionError, match="start a process"):
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=5)


async def test_the_event_loop_still_runs_on_its_socket_pair() -> None:
    assert await asyncio.wait_for(asyncio.sleep(0, result="woken"), timeout=5) == "woken"
