"""A real sidecar for tests, in this process or as its own: config file on disk, both
listeners on loopback sockets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpcache.sidecar.app.assembly import Sidecar
from mcpcache.sidecar.app.reload import ConfigSource

from .clients import ask, http_get
from .kubelet import project
from .serving import (
    STOPPING,
    ThreadLoop,
    end_process_group,
    free_port,
    loopback_socket,
    wait_until,
)


class RunningSidecar:
    def __init__(
        self, config_path: Path, document: dict[str, Any], projected: bool = False
    ) -> None:
        """`projected`: the config file is laid out and updated as the kubelet projects
        a ConfigMap (a symlink through `..data`), not replaced by a rename."""
        self.config_path = config_path
        self.projected = projected
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
        if self.projected:
            project(self.config_path.parent, {self.config_path.name: yaml.safe_dump(document)})
            return
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
        self._finish()

    def stop_soon(self) -> None:
        """Stop, waiting for the listeners' last steps only later (`STOPPING`): for a
        fixture's teardown. The upstream fetches still running are ended first, as the
        sidecar's own shutdown ends them, so that nothing of this sidecar reaches an
        upstream once its test is over. A sidecar with a shared tier (whose writes may
        still be under way) stops at once."""
        loop = self.sidecar.loop
        if self.sidecar.shared is not None or loop is None or not self._loop.thread.is_alive():
            self.stop()
            return
        self.sidecar.request_shutdown()
        asyncio.run_coroutine_threadsafe(self.sidecar.proxy.aclose(), loop).result(15)
        STOPPING.later(self._loop.thread, self._finish)

    def _finish(self) -> None:
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
        return parse_samples(http_get(f"{self.metrics_url}/metrics", timeout=10).text)

    def sample(self, name: str, **labels: str) -> float:
        return sample(self.scrape(), name, **labels)

    async def ask(
        self,
        method: str,
        request_id: Any = 1,
        credential: str | None = None,
        **params: Any,
    ) -> httpx.Response:
        """One raw modern request of a method other than a call (`clients.ask`), to the
        server `s` (the name `one_server` gives)."""
        return await ask(self.url("s"), method, request_id, credential, **params)


SidecarFactory = Callable[..., RunningSidecar]
"""The `make_sidecar` fixture: starts a sidecar from a config document (and, with
`projected=True`, a file the kubelet's way), stopped at the end of the test."""


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


SIDECAR_COMMAND = (sys.executable, "-m", "mcpcache.sidecar.cli", "sidecar")


@contextmanager
def following_servers_file(
    config_file: Path, server: str, **environment: str
) -> Iterator[tuple[str, str]]:
    """A real `mcpcache sidecar` process following a servers file that may not exist yet
    (as in a pod that starts before its namespace's ConfigMap is written), with these
    extra environment variables; yields the URL of `server` and the metrics listener."""
    listen_port, metrics_port = free_port(), free_port()
    env = os.environ | environment
    env |= {"MCPCACHE_LISTEN_PORT": str(listen_port), "MCPCACHE_METRICS_PORT": str(metrics_port)}
    command = [*SIDECAR_COMMAND, "--servers-file", str(config_file), "--allow-missing-config"]
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{listen_port}/mcp/{server}", f"http://127.0.0.1:{metrics_port}"
    finally:
        process.terminate()
        process.wait(10)


class SidecarProcess:
    """`mcpcache sidecar --config FILE` as a real process on loopback ports, its stderr
    (the structured log) kept in a file beside the config."""

    def __init__(self, config_path: Path, document: dict[str, Any]) -> None:
        self.config_path = config_path
        self.port, self.metrics_port = free_port(), free_port()
        listeners = {
            "listen": {"host": "127.0.0.1", "port": self.port},
            "metrics": {"host": "127.0.0.1", "port": self.metrics_port},
        }
        self.document = listeners | document
        self.stderr_path = config_path.with_suffix(".stderr")
        self.process: subprocess.Popen[bytes] | None = None

    def write_config(self, document: dict[str, Any]) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(document))
        tmp.replace(self.config_path)

    def start(self, environ: dict[str, str] | None = None) -> SidecarProcess:
        self.write_config(self.document)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPCACHE_")}
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [*SIDECAR_COMMAND, "--config", str(self.config_path)],
                env=env | (environ or {}),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        try:
            wait_until(self.ready, 30, "the sidecar process to be ready")
        except BaseException:  # a fixture that fails to start never reaches its teardown
            self.stop()
            raise
        return self

    def ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the sidecar exited:\n{self.stderr()}")
        try:
            return http_get(f"{self.metrics_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            end_process_group(self.process)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """Every complete stderr line, each parsed as one JSON object (or the test fails)."""
        lines = self.stderr().splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines.pop()  # still being written
        records = []
        for line in lines:
            record = json.loads(line)
            assert isinstance(record, dict), f"not one JSON object: {line!r}"
            records.append(record)
        return records

    def url(self, server: str) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/{server}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def sample(self, name: str, **labels: str) -> float:
        text = http_get(f"{self.metrics_url}/metrics", timeout=10).text
        return sample(parse_samples(text), name, **labels)
