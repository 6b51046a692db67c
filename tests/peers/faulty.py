"""A misbehaving upstream, for the failures no well-behaved MCP server can be asked for.

The official SDK server never resets a connection half-way through an event stream or
sends half an event, so these faults come from a small HTTP/1.1 server on a raw
loopback socket. Each request's path picks the fault:

- `/status-500`: an HTTP 500 with a JSON-RPC error body.
- `/reset-mid-stream`: SSE headers, one progress event, then a TCP reset.
- `/reset-mid-chunked-stream[?gate=NAME]`: as `/reset-mid-stream`, the stream chunked (a
  body whose end can be told from a break); with a gate, the reset waits for it.
- `/stall-after-head?gate=NAME`: SSE headers and one progress event, then nothing until
  the test opens the gate (an upstream that stops answering mid-stream).
- `/truncated-event`: SSE headers, half an event, then a clean close.
- `/resumable-end`: SSE headers, one progress event with an event id, then a clean
  close before the answer (a client may resume such a stream).
- `/cut-json`: a JSON body announced as 1000 bytes, closed after 100 (a broken body).
- `/cut-long-json?announced=N&sent=M`: a JSON answer announced as N bytes, closed after
  M (an upstream that dies in the middle of a large answer).
- `/gated-json?bytes=N&gate=NAME`: a JSON body of N bytes, the first half at once, the
  rest when the test opens the gate (and never before: a relay that waited for the
  whole body would wait until the client gives up).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from urllib.parse import parse_qs, urlsplit

import psutil

PROGRESS = (
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":1,"progress":1}}\n\n'
)


class FaultyUpstream:
    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.requests = 0
        self.gates: dict[str, threading.Event] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, fault: str) -> str:
        return f"http://127.0.0.1:{self.port}/{fault}"

    def gate(self, name: str) -> threading.Event:
        return self.gates.setdefault(name, threading.Event())

    def connections(self) -> int:
        """Connections to this upstream that this process holds open."""
        return sum(
            1
            for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == self.port and c.status == psutil.CONN_ESTABLISHED
        )

    def start(self) -> FaultyUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        for gate in self.gates.values():
            gate.set()
        # close() alone does not wake a thread blocked in accept() on Linux; shutdown does.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(5)
        if self._thread.is_alive():
            raise RuntimeError("the faulty upstream's accept loop did not stop within 5s")

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self._respond(conn)
        except OSError:
            pass  # the sidecar hung up first, as some tests make it do
        finally:
            conn.close()

    def _respond(self, conn: socket.socket) -> None:
        request = self._read_request(conn)
        if request is None:
            return
        self.requests += 1
        target = urlsplit(request)
        query = parse_qs(target.query)
        fault = target.path.strip("/")
        if fault == "status-500":
            body = json.dumps(
                {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}}
            ).encode()
            conn.sendall(_head(500, "application/json", len(body)) + body)
        elif fault == "reset-mid-stream":
            conn.sendall(_head(200, "text/event-stream") + PROGRESS)
            # SO_LINGER with a zero timeout turns close() into a TCP reset.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif fault == "reset-mid-chunked-stream":
            head = _head(200, "text/event-stream").replace(
                b"connection: close", b"transfer-encoding: chunked"
            )
            conn.sendall(head + b"%x\r\n%s\r\n" % (len(PROGRESS), PROGRESS))
            if "gate" in query:
                self.gate(query["gate"][0]).wait()
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif fault == "stall-after-head":
            conn.sendall(_head(200, "text/event-stream") + PROGRESS)
            self.gate(query["gate"][0]).wait()  # `stop` opens every gate
        elif fault == "truncated-event":
            conn.sendall(_head(200, "text/event-stream") + b'event: message\ndata: {"jsonrpc":')
        elif fault == "resumable-end":
            conn.sendall(_head(200, "text/event-stream") + b"id: 1\n" + PROGRESS)
        elif fault == "cut-json":
            conn.sendall(_head(200, "application/json", 1000) + b'{"jsonrpc":"2.0",' * 6)
        elif fault == "cut-long-json":
            announced, sent = int(query["announced"][0]), int(query["sent"][0])
            body = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
            body += b"c" * (sent - len(body))
            conn.sendall(_head(200, "application/json", announced) + body)
        elif fault == "gated-json":
            size = int(query["bytes"][0])
            body = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
            body += b"z" * (size - len(body) - 5) + b'"}]}}'
            conn.sendall(_head(200, "application/json", len(body)) + body[: size // 2])
            self.gate(query["gate"][0]).wait()  # `stop` opens every gate
            conn.sendall(body[size // 2 :])

    @staticmethod
    def _read_request(conn: socket.socket) -> str | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return lines[0].split()[1]


def _head(status: int, content_type: str, length: int | None = None) -> bytes:
    reason = {200: "OK", 500: "Internal Server Error"}[status]
    lines = [f"HTTP/1.1 {status} {reason}", f"content-type: {content_type}"]
    lines.append(f"content-length: {length}" if length is not None else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
