"""CPU per miss and per hit of the sidecar's ASGI app called in this process, beside the
bare forwarder's app and the least caching proxy's (`servers.least_cache_miss_app`: the
least any cache must do on a miss) for misses, in rounds that alternate between them.

No HTTP server stands in front of any of them (the request's bytes are handed to each as
`trace_miss.py` does), so the figures are each app's own work plus its upstream client's;
the upstream is the benchmarks' SDK server in a process of its own. On a shared machine
they still move by a fifth between runs: compare several. Run it with another install's
interpreter for that build's figures:

    python benchmarks/in_process.py [--calls 300] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import run_all as bench
import uvloop
from servers import forwarder_app, least_cache_miss_app, shut_down
from trace_miss import bench_sidecar, one_call


async def cpu_us(app: Any, calls: int, key: Callable[[], str]) -> float:
    """Process CPU per call, in µs, over `calls` calls with the keys `key` gives."""
    started = time.process_time()
    for _ in range(calls):
        await one_call(app, key(), 1, None)
    return (time.process_time() - started) / calls * 1e6


async def measure(upstream_url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    sidecar = bench_sidecar(upstream_url)
    apps = {
        "sidecar": sidecar.proxy_app(),
        "forwarder": forwarder_app(upstream_url),
        "least cache": least_cache_miss_app(upstream_url),
    }
    for app in apps.values():  # warm: connection pools, imports
        await cpu_us(app, 50, lambda: uuid.uuid4().hex)
    await one_call(apps["sidecar"], "hot", 1, None)
    figures: dict[str, list[float]] = {
        "sidecar miss": [],
        "forwarder": [],
        "least cache": [],
        "sidecar hit": [],
    }
    for _ in range(rounds):
        new_key = lambda: uuid.uuid4().hex  # noqa: E731 - every call a miss
        figures["sidecar miss"].append(await cpu_us(apps["sidecar"], calls, new_key))
        figures["forwarder"].append(await cpu_us(apps["forwarder"], calls, new_key))
        figures["least cache"].append(await cpu_us(apps["least cache"], calls, new_key))
        figures["sidecar hit"].append(await cpu_us(apps["sidecar"], calls * 10, lambda: "hot"))
    await shut_down(apps["forwarder"])
    await shut_down(apps["least cache"])
    await sidecar.proxy.aclose()
    await sidecar.client.aclose()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="misses per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with bench.upstream() as url:
        uvloop.install()
        figures = asyncio.run(measure(url, args.calls, args.rounds))
    median = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in median.items():
        print(f"{name:13} CPU per call, median of {args.rounds} rounds: {value:7.1f} µs")
    ratio = median["sidecar miss"] / median["forwarder"]
    least = median["least cache"] / median["forwarder"]
    print(f"a miss: {ratio:.2f} x the bare forwarder's CPU (goal <= 1.5)")
    print(f"the least cache's miss: {least:.2f} x the bare forwarder's CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
