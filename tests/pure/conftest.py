"""Pure tests: no sockets, no processes, no peers. Each test here runs with the network and
process creation taken away, so a test that reaches for either fails at once, naming what
it tried, instead of passing on a machine that happens to have the peer (and then being
run against mutants by tests/mutation.sh, which expects none).

Only the calls that reach out are refused: connecting, binding, sending to an address,
resolving a name and starting a process. A socket pair (asyncio's event loop wakes itself
with one) neither connects nor binds, so it stays allowed."""

from __future__ import annotations

import socket
import subprocess
from typing import Any, NoReturn

import pytest


class NetworkInPureTest(AssertionError):
    """A pure test reached for the network or a process; it belongs under tests/sidecar/
    or tests/operator/, with its peers."""


def refusal(what: str, method: bool) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        called_with = args[1:] if method else args  # never the half-made object itself
        raise NetworkInPureTest(f"a pure test may not {what} (called with {called_with!r})")

    return refuse


REFUSED = (
    (socket.socket, "connect", "connect a socket"),
    (socket.socket, "connect_ex", "connect a socket"),
    (socket.socket, "bind", "bind a socket"),
    (socket.socket, "sendto", "send to an address"),
    (socket, "getaddrinfo", "resolve a name"),
    (socket, "create_connection", "open a connection"),
    (socket, "create_server", "open a listener"),
    (subprocess.Popen, "__init__", "start a process"),
)
"""What a pure test may not call: the methods and functions every client, server and
process start of the standard library, asyncio, aiohttp, httpx and redis-py goes through."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    for owner, name, what in REFUSED:
        monkeypatch.setattr(owner, name, refusal(what, isinstance(owner, type)))
