"""A TCP proxy on loopback that can stop passing bytes: a network that cuts one
process off from the API server without closing its connections, as a partition does.

`cut()` stops passing bytes both ways (connections stay open, new ones are accepted and
stall); `mend()` closes every connection it holds, so that nothing sent during the cut
arrives late, and passes bytes again.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from pathlib import Path

import yaml

from .serving import loopback_socket

POLL = 0.05
"""Seconds a pump waits for bytes before it looks at the switch again."""


class CutOff:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = loopback_socket()
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.passing = threading.Event()
        self.passing.set()
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def cut(self) -> None:
        self.passing.clear()

    def mend(self) -> None:
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()
        self.passing.set()

    def close(self) -> None:
        self.closed.set()
        self.mend()
        self.listener.close()
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(POLL)
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy bytes while passing; while cut, leave them unread (they go nowhere)."""
        while not self.closed.is_set():
            if not self.passing.wait(POLL):
                continue
            try:
                ready, _, _ = select.select([source], [], [], POLL)
                if not ready:
                    continue
                if not self.passing.is_set():
                    continue
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            except (OSError, ValueError):
                break
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def through(kubeconfig: Path, proxy: CutOff) -> Path:
    """A copy of `kubeconfig` that reaches its API server through `proxy` (on the same
    loopback address, so the server's certificate still matches)."""
    document = yaml.safe_load(kubeconfig.read_text())
    for cluster in document["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = kubeconfig.with_name(f"{kubeconfig.name}-via-{proxy.port}")
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path
