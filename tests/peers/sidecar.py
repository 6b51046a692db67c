"""A real sidecar for tests: config file on disk, both listeners on loopback sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpcache.sidecar.app import Sidecar
from mcpcache.sidecar.reload import ConfigSource

from .serving import ThreadLoop, loopback_socket, wait_until


class RunningSidecar:
    def __init__(self, config_path: Path, document: dict[str, Any]) -> None:
        self.config_path = config_path
        self.write_config(document)
        self.source = ConfigSource(config_path, environ={})
        self.sidecar = Sidecar(self.source)
        self._proxy_socket = loopback_socket()
        self._metrics_socket = loopback_socket()
        self.port = self._proxy_socket.getsockname()[1]
        self.metrics_port = self._metrics_socket.getsockname()[1]
        self._loop = ThreadLoop(
            lambda: self.sidecar.serve(self._proxy_socket, self._metrics_socket), "sidecar"
        )

    def write_config(self, document: dict[str, Any]) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(document))
        tmp.replace(self.config_path)

    def start(self) -> RunningSidecar:
        self._loop.start()
        wait_until(lambda: self.sidecar.ready or self._loop.error, what="sidecar to be ready")
        if self._loop.error:
            raise self._loop.error
        return self

    def stop(self) -> None:
        self.sidecar.request_shutdown()
        self._loop.join()
        self._proxy_socket.close()
        self._metrics_socket.close()

    def url(self, server: str) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/{server}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def tasks(self) -> int:
        """How many asyncio tasks the sidecar's event loop runs right now."""

        async def count() -> int:
            return len(asyncio.all_tasks())

        assert self.sidecar.loop is not None
        return asyncio.run_coroutine_threadsafe(count(), self.sidecar.loop).result(5)

    def waiting(self) -> int:
        """Requests waiting for an identical request's upstream call right now."""
        return self.sidecar.proxy.coalescer.waiting()

    def scrape(self) -> Samples:
        """Every sample of /metrics, parsed by prometheus-client's own parser."""
        return parse_samples(httpx.get(f"{self.metrics_url}/metrics", timeout=10).text)

    def sample(self, name: str, **labels: str) -> float:
        return sample(self.scrape(), name, **labels)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_samples(text: str) -> Samples:
    """An exposition's samples by name and sorted labels, read by prometheus-client."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for item in family.samples:
            samples[(item.name, tuple(sorted(item.labels.items())))] = item.value
    return samples


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 for a series not (yet) exported."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def one_server(
    url: str, name: str = "s", timeout: str | None = None, **cache: Any
) -> dict[str, Any]:
    """A config document with one cached server (`cache` overrides its cache fields)."""
    server: dict[str, Any] = {"name": name, "url": url, "cache": {"enabled": True, **cache}}
    if timeout is not None:
        server["timeout"] = timeout
    return {"servers": [server]}
