"""A real Prometheus for the tests, built from its Go module by tests/prometheus/build.sh.

`PrometheusServer` scrapes targets listed in file-based service discovery files, so a test
adds a target (a sidecar, the operator) while Prometheus runs; it scrapes every second and
answers PromQL through its HTTP API. `promtool()` runs the matching promtool.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from . import forward
from .serving import end_process_group, free_port, log_tail, spawn, wait_until

BIN_ENV = "MCPCACHE_PROMETHEUS_BIN"
"""Directory with the `prometheus` and `promtool` binaries and the Prometheus Operator's
CRDs in `../crds` (see tests/prometheus/build.sh)."""

SCRAPE_INTERVAL = 1.0
SIDECAR_JOB = "mcpcache-sidecar"
OPERATOR_JOB = "mcpcache-operator"


@dataclass(frozen=True)
class Traffic:
    """What a test sent through a sidecar, by server: the counts Prometheus must show."""

    hits: dict[str, int]
    misses: dict[str, int]
    stored: int
    not_stored_tool_error: int
    unreachable: int
    slow_seconds: float
    """How long each call to the `timed` server took upstream."""
    collapsed: dict[str, int]
    """Calls answered by an identical call's upstream call."""
    stale: dict[str, int]
    """Calls answered from an expired entry."""


class QueryError(Exception):
    """Prometheus refused a query (bad syntax, unknown function, …)."""


class PrometheusServer:
    def __init__(self, bin_dir: Path, netns: str | None = None) -> None:
        """`netns`: run inside that network namespace (a test node's, where pod IPs are),
        its HTTP API reached through a forwarded loopback port."""
        self.bin_dir = bin_dir
        self.netns = netns
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-prometheus-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.dir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.forwarder: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def start(self, jobs: tuple[str, ...]) -> PrometheusServer:
        """Start with one scrape job per name, each reading its targets from a file."""
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_INTERVAL:g}s",
                "scrape_timeout": f"{SCRAPE_INTERVAL:g}s",
                "evaluation_interval": f"{SCRAPE_INTERVAL:g}s",
            },
            "scrape_configs": [
                {
                    "job_name": job,
                    "file_sd_configs": [
                        {"files": [str(self._targets_file(job))], "refresh_interval": "1s"}
                    ],
                }
                for job in jobs
            ],
        }
        for job in jobs:
            self._targets_file(job).write_text("[]")
        config_file = self.dir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []
        self.process = spawn(
            [
                *prefix,
                str(self.bin_dir / "prometheus"),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            self.log_path,
        )
        try:
            if self.netns:
                log = self.dir / "forward.log"
                self.forwarder, port = forward.start(self.netns, "127.0.0.1", self.port, log)
                self.url = f"http://127.0.0.1:{port}"
                self.http = httpx.Client(base_url=self.url, timeout=10)
            wait_until(self._ready, 60, "Prometheus to be ready")
        except BaseException:
            self.stop()
            raise
        return self

    def _targets_file(self, job: str) -> Path:
        return self.dir / f"targets-{job}.json"

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{self.log_tail()}")
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def scrape(self, job: str, address: str, timeout: float = 30) -> None:
        """Add `address` (host:port) to `job`'s targets; return once it was scraped."""
        path = self._targets_file(job)
        targets = json.loads(path.read_text())
        targets.append({"targets": [address]})
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets))
        tmp.replace(path)
        self.wait_for(f'up{{job="{job}", instance="{address}"}} == 1', timeout=timeout)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The result of an instant query; QueryError when Prometheus refuses it."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self._api("/api/v1/query", params)["result"]  # type: ignore[no-any-return]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": start, "end": end, "step": step}
        return self._api("/api/v1/query_range", params)["result"]  # type: ignore[no-any-return]

    def values(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query's samples, keyed by their sorted label pairs."""
        return {
            tuple(sorted(sample["metric"].items())): float(sample["value"][1])
            for sample in self.query(expr)
        }

    def metric_names(self) -> set[str]:
        return set(self._api("/api/v1/label/__name__/values", {}))

    def _api(self, path: str, params: dict[str, Any]) -> Any:
        response = self.http.get(path, params=params)
        body = response.json()
        if body.get("status") != "success":
            raise QueryError(f"{params.get('query', path)}: {body.get('error', body)}")
        return body["data"]

    def wait_for(
        self,
        expr: str,
        check: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout: float = 30,
    ) -> list[dict[str, Any]]:
        """Poll an instant query until `check` accepts its result (default: not empty)."""
        last: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            last = self.query(expr)
            if check(last):
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expr!r} after {timeout}s: {last}\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        self.http.close()
        for process in (self.forwarder, self.process):
            if process is not None:
                end_process_group(process)
        shutil.rmtree(self.dir, ignore_errors=True)


def promtool(
    bin_dir: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run promtool; the caller asserts on the return code and output."""
    return subprocess.run(
        [str(bin_dir / "promtool"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
