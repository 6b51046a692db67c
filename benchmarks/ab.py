"""Two builds of the sidecar side by side in one run: misses and first SSE events with
the calls interleaved (direct, bare forwarder, build A, build B, one call each), and
hits with wrk runs alternating between the two.

A shared machine's load changes from minute to minute; interleaving puts the same load
on both builds, so their difference is the change's own. Build A is any other install
of the project, named by its Python interpreter (a virtualenv with that checkout
installed); build B is this one.

    python benchmarks/ab.py --a-python /path/to/other/venv/bin/python [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psutil
import run_all as bench


@contextmanager
def sidecar_on(python: str, upstream_url: str) -> Iterator[bench.Server]:
    """A sidecar run by `python` (so from whichever checkout that interpreter has)."""
    with bench.sidecar(upstream_url, python=python) as (url, _, pid):
        yield bench.Server.at(url, pid)


def forwarded(a_python: str, calls: int, sse: bool) -> tuple[dict[str, float], dict[str, float]]:
    """p50 ms of each path, interleaved one call at a time, and the CPU each proxy's
    process spent per counted call (µs, user and system)."""
    with (
        bench.upstream(sse=sse, core=bench.LOAD_CORE) as up,
        bench.forwarder(up) as bare,
        sidecar_on(a_python, up) as a,
        sidecar_on(sys.executable, up) as b,
        httpx.Client() as http,
    ):
        urls = {"direct": up, "forwarder": bare, "a": a, "b": b}
        times: dict[str, list[float]] = {name: [] for name in urls}
        processes = {name: psutil.Process(urls[name].pid) for name in ("forwarder", "a", "b")}
        cpu: dict[str, float] = {}
        for i in range(20 + calls):
            if i == 20:
                cpu = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
            for name, url in urls.items():
                if sse:
                    elapsed = bench.first_event_ms(http, url, i)
                else:
                    payload = bench.body("payload", {"key": uuid.uuid4().hex})
                    elapsed = bench.sequential_ms(http, url, [payload], "payload")[0]
                if i >= 20:  # the first calls warm every path up
                    times[name].append(elapsed)
        spent = {
            name: (sum(p.cpu_times()[:2]) - cpu[name]) / calls * 1e6
            for name, p in processes.items()
        }
    return {name: bench.p(values, 50) for name, values in times.items()}, spent


def hits(a_python: str, rounds: int, seconds: int) -> dict[str, dict[str, float]]:
    """wrk against A, then B, `rounds` times: median req/s and CPU per hit of each."""
    payload = bench.body("payload", {"key": "hot"})
    with (
        bench.upstream() as up,
        sidecar_on(a_python, up) as a,
        sidecar_on(sys.executable, up) as b,
    ):
        runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
        for url in (a, b):
            for _ in range(2):  # a miss, then the hit wrk repeats
                httpx.post(url, content=payload, headers=bench.headers("payload"))
        for _ in range(rounds):
            for name, url in (("a", a), ("b", b)):
                runs[name].append(bench.wrk(url, payload, seconds, url.pid))
    return {
        name: {
            "rps": statistics.median(run["rps"] for run in results),
            "cpu_us_per_hit": statistics.median(
                run["server_cpu_us_per_request"] for run in results
            ),
        }
        for name, results in runs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--a-python", required=True, help="interpreter of build A")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4, help="wrk runs per build")
    args = parser.parse_args()
    bench.require_wrk()
    for label, sse in (("miss", False), ("first SSE event", True)):
        p50, cpu = forwarded(args.a_python, args.calls if not sse else args.calls // 3, sse)
        added = {name: p50[name] - p50["direct"] for name in ("forwarder", "a", "b")}
        print(
            f"{label} p50 ms: direct {p50['direct']:.3f}; added by the bare forwarder "
            f"{added['forwarder']:.3f}, A {added['a']:.3f}, B {added['b']:.3f}"
        )
        ratio = {name: cpu[name] / cpu["forwarder"] for name in ("a", "b")}
        print(
            f"{label} CPU µs per call: bare forwarder {cpu['forwarder']:.0f}, "
            f"A {cpu['a']:.0f} ({ratio['a']:.2f} x), B {cpu['b']:.0f} ({ratio['b']:.2f} x)"
        )
    result = hits(args.a_python, args.rounds, 5)
    print(
        f"hits (median of {args.rounds} wrk runs each): "
        f"A {result['a']['rps']:,.0f} req/s at {result['a']['cpu_us_per_hit']:.0f} µs CPU, "
        f"B {result['b']['rps']:,.0f} req/s at {result['b']['cpu_us_per_hit']:.0f} µs CPU"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
