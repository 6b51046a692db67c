"""An HTTP/1.0 client (`curl --http1.0`, `ab`, health checkers) reads every answer: one
that comes whole has its length, one relayed as it streams ends when the connection
closes, never in chunks (HTTP/1.0 has none), on a pass-through, a miss and a hit alike."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from peers.clients import TRUST, call_body, call_headers, sse_messages, unique
from peers.sidecar import RunningSidecar


def http10_post(
    sidecar: RunningSidecar, server: str, body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """One POST as an HTTP/1.0 client sends it, its answer read as HTTP/1.0 reads it:
    the status line, the headers, then `Content-Length` bytes or all to the close."""
    headers = call_headers("echo") | {"host": "127.0.0.1", "content-length": str(len(body))}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", sidecar.port), timeout=10) as sock:
        sock.sendall(f"POST /mcp/{server} HTTP/1.0\r\n{head}\r\n".encode() + body)
        received = b""
        while chunk := sock.recv(1 << 16):
            received += chunk
    answer_head, _, rest = received.partition(b"\r\n\r\n")
    status_line, *lines = answer_head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    length = fields.get("content-length")
    answer = rest if length is None else rest[: int(length)]
    if length is not None:
        assert len(rest) == int(length), "the body is as long as its Content-Length says"
    return int(status_line.split()[1]), fields, answer


def result_text(fields: dict[str, str], body: bytes) -> str:
    if fields["content-type"].startswith("text/event-stream"):
        response = httpx.Response(200, headers=fields, content=body)
        message = sse_messages(response)[-1]
    else:
        message = json.loads(body)
    return message["result"]["content"][0]["text"]


@pytest.mark.parametrize("server", ["sse", "json"])
def test_an_http10_client_reads_a_pass_through_a_miss_and_a_hit(
    sidecar: RunningSidecar, server: str
) -> None:
    text = unique()
    body = json.dumps(call_body(1, "echo", {"text": text})).encode()
    through = http10_post(sidecar, "plain", body)  # the SDK's event stream, uncached
    miss = http10_post(sidecar, server, json.dumps(call_body(2, "echo", {"text": text})).encode())
    hit = http10_post(sidecar, server, json.dumps(call_body(3, "echo", {"text": text})).encode())
    for status, fields, answer in (through, miss, hit):
        assert status == 200
        assert "transfer-encoding" not in fields, "HTTP/1.0 has no chunked transfer coding"
        assert result_text(fields, answer).startswith(f"{text} #")
    assert miss[1]["cache-status"] == "mcpcache; fwd=miss; stored"
    assert hit[1]["cache-status"] == "mcpcache; hit"
    assert result_text(hit[1], hit[2]) == result_text(miss[1], miss[2])


def test_a_json_answer_passed_through_keeps_the_upstreams_length(
    make_sidecar, json_upstream
) -> None:
    """Relayed whole and unchanged, a JSON answer goes with the upstream's own
    `Content-Length`, not chunked, to any client."""
    _, app = json_upstream
    sidecar = make_sidecar({"servers": [{"name": "plain", "url": app.base_url + "/mcp"}]})
    body = json.dumps(call_body(1, "echo", {"text": unique()})).encode()
    status, fields, answer = http10_post(sidecar, "plain", body)
    assert status == 200
    assert fields["cache-status"] == "mcpcache; fwd=bypass"
    assert fields["content-length"] == str(len(answer))
    with httpx.Client(timeout=10, verify=TRUST) as http:
        response = http.post(sidecar.url("plain"), content=body, headers=call_headers("echo"))
    assert response.headers["content-length"] == str(len(response.content))
    assert "transfer-encoding" not in response.headers
