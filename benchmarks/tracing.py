"""What tracing costs, on and off side by side in one run: the idle resident set of a
sidecar process without tracing and of one with it (turned on by the standard
`OTEL_EXPORTER_OTLP_ENDPOINT`), and the CPU per hit and per miss of the sidecar's ASGI
app in this process, without tracing and with it, in rounds that alternate between them.

Spans go to the tests' OpenTelemetry Collector (tests/otelcol/build.sh builds it, or
`MCPCACHE_OTELCOL_BIN` names it), so the CPU with tracing on includes the export thread's
work (encoding and sending each batch): the process's CPU time counts every thread.

    python benchmarks/tracing.py [--calls 300] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import run_all as bench
import uvloop
from trace_miss import one_call

from mcpcache.sidecar.app.assembly import Sidecar
from mcpcache.sidecar.config import SidecarConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from peers.otelcol import Collector  # noqa: E402


def collector_bin() -> Path:
    if found := os.environ.get("MCPCACHE_OTELCOL_BIN"):
        return Path(found)
    build = ROOT / "tests" / "otelcol" / "build.sh"
    out = subprocess.run(["bash", str(build)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


@contextmanager
def collector() -> Iterator[str]:
    """The test suite's collector peer, receiving OTLP/HTTP; its endpoint."""
    running = Collector(collector_bin()).start()
    try:
        yield running.endpoint
    finally:
        running.remove()


async def cpu_us(sidecar: Sidecar, app: Any, calls: int, key: Callable[[], str]) -> float:
    """Process CPU per call, in µs, over `calls` calls with the keys `key` gives, the
    export of their spans included: with tracing on, the round ends once the export
    thread has sent every queued span."""
    started = time.process_time()
    for _ in range(calls):
        await one_call(app, key(), 1, None)
    if sidecar.tracer is not None:
        export = sidecar.tracer.export
        export.force_flush()
        deadline = time.monotonic() + 30
        while export.queued and time.monotonic() < deadline:  # noqa: ASYNC110 - the export thread says nothing when done
            await asyncio.sleep(0.005)
    return (time.process_time() - started) / calls * 1e6


def idle_rss_mib(upstream_url: str, endpoint: str | None) -> float:
    """The resident set of an idle sidecar process, tracing on when `endpoint` is set."""
    saved = os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if endpoint is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    try:
        with bench.sidecar(upstream_url) as (_, _, pid):
            time.sleep(1.0)  # settled after start-up's last allocations
            return float(psutil.Process(pid).memory_info().rss) / (1 << 20)
    finally:
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        if saved is not None:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = saved


async def measure(
    upstream_url: str, endpoint: str, calls: int, rounds: int
) -> dict[str, list[float]]:
    apps: dict[str, Any] = {}
    sidecars = []
    for name, tracing in (("off", None), ("on", {"enabled": True, "endpoint": endpoint})):
        document: dict[str, Any] = {
            "appId": "bench",
            "servers": [{"name": "bench", "url": upstream_url, "cache": {"enabled": True}}],
        }
        if tracing is not None:
            document["tracing"] = tracing
        config = SidecarConfig.model_validate(document)
        sidecar = Sidecar(lambda config=config: config)
        sidecars.append(sidecar)
        apps[name] = sidecar.proxy_app()
        await cpu_us(sidecar, apps[name], 50, lambda: uuid.uuid4().hex)  # warm
        await one_call(apps[name], "hot", 1, None)
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        for (name, app), sidecar in zip(apps.items(), sidecars, strict=True):
            new_key = lambda: uuid.uuid4().hex  # noqa: E731 - every call a miss
            figures.setdefault(f"miss, tracing {name}", []).append(
                await cpu_us(sidecar, app, calls, new_key)
            )
            # Fewer hits than the export queue holds: none dropped, all paid for.
            figures.setdefault(f"hit, tracing {name}", []).append(
                await cpu_us(sidecar, app, min(calls * 5, 1500), lambda: "hot")
            )
    for sidecar in sidecars:
        await sidecar.proxy.aclose()
        if sidecar.tracer is not None:
            sidecar.tracer.shutdown()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="misses per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with bench.upstream() as url, collector() as endpoint:
        off, on = idle_rss_mib(url, None), idle_rss_mib(url, endpoint)
        print(f"idle RSS, tracing off: {off:6.1f} MiB")
        print(f"idle RSS, tracing on:  {on:6.1f} MiB  (+{on - off:.1f} MiB)")
        uvloop.install()
        figures = asyncio.run(measure(url, endpoint, args.calls, args.rounds))
    median = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in median.items():
        print(f"{name:18} CPU per call, median of {args.rounds} rounds: {value:7.1f} µs")
    for kind in ("hit", "miss"):
        cost = median[f"{kind}, tracing on"] - median[f"{kind}, tracing off"]
        print(f"tracing on costs {cost:6.1f} µs of CPU per {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
