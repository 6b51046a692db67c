"""A real sidecar for tests: config file on disk, both listeners on loopback sockets."""

from __future__ import annotations

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

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics, parsed by prometheus-client's own parser."""
        text = httpx.get(f"{self.metrics_url}/metrics").text
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def sample(self, name: str, **labels: str) -> float:
        return self.scrape().get((name, tuple(sorted(labels.items()))), 0.0)


def one_server(url: str, name: str = "s", **cache: Any) -> dict[str, Any]:
    """A config document with one cached server (`cache` overrides its cache fields)."""
    return {"servers": [{"name": name, "url": url, "cache": {"enabled": True, **cache}}]}
