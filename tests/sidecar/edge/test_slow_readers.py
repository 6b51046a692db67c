"""A client that stops reading a response does not hold its connection for good: once
the response has waited `sendTimeout` with the client taking none of its bytes, the
sidecar resets the connection and lets the upstream call go."""

from __future__ import annotations

import socket
import uuid

import httpx
import psutil
import pytest

from peers.clients import call_body, call_headers
from peers.serving import wait_until
from peers.sidecar import RunningSidecar


def connections(port: int, peer_port: int) -> int:
    """This process's TCP connections from local `port` to `peer_port`."""
    return sum(
        1
        for c in psutil.Process().net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.raddr and c.raddr.port == peer_port
    )


def stalled_client(
    sidecar: RunningSidecar, server: str, arguments: dict[str, object]
) -> socket.socket:
    """A connection that asks for an answer and then reads nothing (a small receive
    buffer, so that the sidecar's side fills up soon)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", sidecar.port))
    payload = httpx.Request("POST", "/", json=call_body(1, "t", arguments)).read()
    headers = call_headers("t") | {"host": "127.0.0.1", "content-length": str(len(payload))}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST /mcp/{server} HTTP/1.1\r\n{head}\r\n".encode() + payload)
    return sock


def read_to_end(sock: socket.socket) -> None:
    while sock.recv(1 << 20):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("cached", [False, True], ids=["pass-through", "cached server"])
def test_a_client_that_reads_nothing_is_cut_off_after_the_send_timeout(
    make_sidecar, echo_upstream, cached: bool
) -> None:
    _, app = echo_upstream
    server: dict[str, object] = {"name": "e", "url": app.base_url + "/mcp"}
    if cached:
        server["cache"] = {"enabled": True}
    sidecar = make_sidecar({"sendTimeout": "1s", "servers": [server]})
    sock = stalled_client(sidecar, "e", {"q": uuid.uuid4().hex, "huge_event": 32 << 20})
    try:
        client_port = sock.getsockname()[1]
        wait_until(lambda: connections(sidecar.port, client_port) == 1, 5, "the sidecar to take it")
        wait_until(
            lambda: connections(sidecar.port, client_port) == 0,
            10,
            "the sidecar to drop the stalled connection",
        )
        with pytest.raises(ConnectionResetError):
            read_to_end(sock)
    finally:
        sock.close()


def test_a_client_that_reads_slowly_but_keeps_up_is_not_cut_off(
    make_sidecar, echo_upstream
) -> None:
    """The control: a large answer read to its end, with the same send timeout."""
    _, app = echo_upstream
    sidecar = make_sidecar(
        {"sendTimeout": "1s", "servers": [{"name": "e", "url": app.base_url + "/mcp"}]}
    )
    arguments = {"q": uuid.uuid4().hex, "huge_event": 8 << 20}
    with httpx.Client(timeout=10) as http:
        body = call_body(1, "t", arguments)
        response = http.post(sidecar.url("e"), json=body, headers=call_headers("t"))
    assert response.status_code == 200
    assert len(response.content) > 8 << 20
