"""Every benchmark, each next to its baseline in the same run.

Starts the peers as separate processes (the MCP SDK upstream, a minimal ASGI app, the
sidecar), drives them with wrk or a sequential client, and writes
`benchmarks/results/latest.json` and `benchmarks/results/benchmarks.svg`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import psutil
from prometheus_client.parser import text_string_to_metric_families

from mcpcache.sidecar.rules.key.cache_key import cache_key, secret_digest

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODERN = "2026-07-28"
BUDGET = 64 << 20
LOAD_CORE = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise TimeoutError(url)


def _pinned(args: list[str], core: int) -> list[str]:
    """Servers on one core, the load generator on the other: neither steals the other's
    CPU, which on a 2-core machine is the largest source of noise."""
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(core), *args]
    return args


@contextmanager
def process(args: list[str], ready_url: str, core: int = 1) -> Iterator[int]:
    """A server process pinned to `core` (1 by default, the load generator has 0)."""
    proc = subprocess.Popen(
        _pinned(args, core),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(ready_url)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


class Server(str):
    """A server's URL that also knows the server's process id."""

    pid: int

    @classmethod
    def at(cls, url: str, pid: int) -> Server:
        server = cls(url)
        server.pid = pid
        return server


@contextmanager
def upstream(sse: bool = False, core: int = 1) -> Iterator[Server]:
    """The MCP SDK server. On the server core when it is measured under load; beside
    the client when the sidecar is measured in front of it, as on another machine."""
    port = free_port()
    args = [sys.executable, str(HERE / "servers.py"), "upstream", "--port", str(port)]
    with process(args + (["--sse"] if sse else []), f"http://127.0.0.1:{port}/", core) as pid:
        yield Server.at(f"http://127.0.0.1:{port}/mcp", pid)


@contextmanager
def ceiling(body: bytes, kind: str = "ceiling") -> Iterator[Server]:
    """The minimal ASGI app answering `body`; with `kind="least-cache"`, the least a
    caching proxy does to answer a hit with the result in `body`."""
    port = free_port()
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(body)
        file.flush()
        args = [
            sys.executable,
            str(HERE / "servers.py"),
            kind,
            "--port",
            str(port),
            "--body",
            file.name,
        ]
        with process(args, f"http://127.0.0.1:{port}/") as pid:
            yield Server.at(f"http://127.0.0.1:{port}/mcp", pid)


@contextmanager
def forwarder(target: str) -> Iterator[Server]:
    """The least a proxy on this stack adds: uvicorn and the same HTTP client, no cache."""
    port = free_port()
    args = [
        sys.executable,
        str(HERE / "servers.py"),
        "forwarder",
        "--port",
        str(port),
        "--target",
        target,
    ]
    with process(args, f"http://127.0.0.1:{port}/") as pid:
        yield Server.at(f"http://127.0.0.1:{port}/mcp", pid)


@contextmanager
def sidecar(
    upstream_url: str,
    shared_cache: dict[str, Any] | None = None,
    core: int = 1,
    python: str = sys.executable,
) -> Iterator[tuple[str, str, int]]:
    """A sidecar process (its proxy URL, metrics URL and pid); `shared_cache` is its
    `sharedCache` section, when it has a shared tier; `python` the interpreter that runs
    it (another install of the project, to set two builds side by side)."""
    listen, metrics = free_port(), free_port()
    config: dict[str, Any] = {
        "appId": "bench",
        "listen": {"host": "127.0.0.1", "port": listen},
        "metrics": {"host": "127.0.0.1", "port": metrics},
        "servers": [
            {
                "name": "bench",
                "url": upstream_url,
                "cache": {"enabled": True, "ttl": "1h", "maxSize": "1Mi"},
            }
        ],
    }
    if shared_cache is not None:
        config["sharedCache"] = shared_cache
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(config, file)
        file.flush()
        args = [
            python,
            "-m",
            "mcpcache.sidecar.cli",
            "sidecar",
            "--config",
            file.name,
            "--log-level",
            "WARNING",
        ]
        with process(args, f"http://127.0.0.1:{metrics}/readyz", core) as pid:
            yield f"http://127.0.0.1:{listen}/mcp/bench", f"http://127.0.0.1:{metrics}/metrics", pid


def body(tool: str, arguments: dict[str, Any], request_id: int = 1, **meta: Any) -> bytes:
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        **meta,
    }
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": envelope},
        }
    )


def headers(tool: str) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }


def require_wrk() -> None:
    """Stop at once, saying what is missing, when `wrk` is not installed (`run.sh`
    installs it), rather than after the benchmarks that come before the hits."""
    if shutil.which("wrk") is None:
        raise SystemExit(
            "the hit benchmarks need wrk: apt-get install wrk, or run bash benchmarks/run.sh"
        )


def wrk(
    url: str, payload: bytes, seconds: int, pid: int, connections: int = 16
) -> dict[str, float]:
    """wrk's figures, plus the server's own CPU time per request: steadier than req/s on a
    shared machine, where another tenant's load moves throughput but not CPU cost."""
    server = psutil.Process(pid)
    before = sum(server.cpu_times()[:2])
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(payload)
        file.flush()
        out = subprocess.run(
            _pinned(
                [
                    "wrk",
                    "-t1",
                    f"-c{connections}",
                    f"-d{seconds}s",
                    "--latency",
                    "-s",
                    str(HERE / "post.lua"),
                    url,
                ],
                LOAD_CORE,
            ),
            env=os.environ | {"BODY": file.name, "TOOL": "payload"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    result["server_cpu_us_per_request"] = (
        (sum(server.cpu_times()[:2]) - before) / result["requests"] * 1e6
    )
    return result


def sequential_ms(http: httpx.Client, url: str, payloads: list[bytes], tool: str) -> list[float]:
    times = []
    for payload in payloads:
        started = time.perf_counter()
        response = http.post(url, content=payload, headers=headers(tool))
        response.read()
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
    return times


def p(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
        if len(values) > 1
        else values[0]
    )


def metric_value(metrics_url: str, name: str) -> float:
    """One unlabelled sample from the sidecar's /metrics (0 when absent)."""
    for family in text_string_to_metric_families(httpx.get(metrics_url).text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return 0.0


def cache_bytes(metrics_url: str) -> float:
    return metric_value(metrics_url, "mcpcache_cache_bytes")


def bench_hits(seconds: int, rounds: int) -> dict[str, Any]:
    """Hits at 16 connections: sidecar vs the upstream itself vs the minimal ASGI ceiling,
    and the least cache (what any caching proxy must do on a hit) vs the same ceiling.

    The four servers run side by side and take turns, `rounds` wrk runs each, the order
    rotated every round. Each server's row is the median of each of its figures; the
    ratios are the medians of each round's ratios (servers compared within one round),
    so that a shared machine's changing load falls on all four alike."""
    payload = body("payload", {"key": "hot"})
    with upstream() as up, sidecar(up) as (proxy, _, pid):
        first = httpx.post(proxy, content=payload, headers=headers("payload"))
        hit = httpx.post(proxy, content=payload, headers=headers("payload"))
        assert hit.headers["cache-status"] == "mcpcache; hit"
        with ceiling(first.content) as floor, ceiling(first.content, "least-cache") as least:
            servers = [
                ("sidecar_hit", proxy, pid),
                ("upstream_direct", up, up.pid),
                ("minimal_asgi", floor, floor.pid),
                ("least_cache", least, least.pid),
            ]
            runs: list[dict[str, dict[str, float]]] = []
            for turn in range(rounds):
                order = servers[turn % 4 :] + servers[: turn % 4]
                runs.append({name: wrk(url, payload, seconds, at) for name, url, at in order})

    def median_ratio(over: str, under: str, figure: str) -> float:
        return statistics.median(run[over][figure] / run[under][figure] for run in runs)

    rps, cpu = "rps", "server_cpu_us_per_request"
    return {
        "response_bytes": len(hit.content),
        "rounds": rounds,
        **{
            name: {figure: statistics.median(run[name][figure] for run in runs) for figure in row}
            for name, row in runs[0].items()
        },
        "ratio_to_ceiling": median_ratio("sidecar_hit", "minimal_asgi", rps),
        "ratio_to_upstream": median_ratio("sidecar_hit", "upstream_direct", rps),
        "cpu_ratio_to_ceiling": median_ratio("sidecar_hit", "minimal_asgi", cpu),
        "least_cache_ratio_to_ceiling": median_ratio("least_cache", "minimal_asgi", rps),
        "least_cache_cpu_ratio_to_ceiling": median_ratio("least_cache", "minimal_asgi", cpu),
    }


def bench_miss(calls: int) -> dict[str, Any]:
    """A forwarded call (always a miss: new arguments each time) vs the same call direct,
    and vs the bare forwarder (the least a proxy on this stack adds), interleaved."""
    with (
        upstream(core=LOAD_CORE) as up,
        sidecar(up) as (proxy, _, proxy_pid),
        forwarder(up) as bare,
        httpx.Client() as http,
    ):
        warm = [body("payload", {"key": f"warm-{i}"}) for i in range(30)]
        for url in (proxy, up, bare):
            sequential_ms(http, url, warm, "payload")
        direct: list[float] = []
        through: list[float] = []
        forwarded: list[float] = []
        cpu = {
            name: psutil.Process(pid) for name, pid in (("sidecar", proxy_pid), ("bare", bare.pid))
        }
        cpu_before = {name: sum(process.cpu_times()[:2]) for name, process in cpu.items()}
        for _ in range(calls):
            key = uuid.uuid4().hex
            direct += sequential_ms(http, up, [body("payload", {"key": key})], "payload")
            through += sequential_ms(http, proxy, [body("payload", {"key": key + "x"})], "payload")
            forwarded += sequential_ms(http, bare, [body("payload", {"key": key + "y"})], "payload")
        cpu_ms = {
            name: (sum(process.cpu_times()[:2]) - cpu_before[name]) * 1000 / calls
            for name, process in cpu.items()
        }
    return {
        "calls": calls,
        "sidecar_cpu_ms_per_miss": cpu_ms["sidecar"],
        "forwarder_cpu_ms_per_miss": cpu_ms["bare"],
        "cpu_ratio_to_forwarder": cpu_ms["sidecar"] / cpu_ms["bare"],
        "direct_p50_ms": p(direct, 50),
        "sidecar_miss_p50_ms": p(through, 50),
        "forwarder_p50_ms": p(forwarded, 50),
        "added_p50_ms": p(through, 50) - p(direct, 50),
        "forwarder_added_p50_ms": p(forwarded, 50) - p(direct, 50),
        "direct_p99_ms": p(direct, 99),
        "sidecar_miss_p99_ms": p(through, 99),
        "forwarder_p99_ms": p(forwarded, 99),
    }


def first_event_ms(http: httpx.Client, url: str, request_id: int) -> float:
    payload = body(
        "first_progress", {"key": uuid.uuid4().hex}, request_id, progressToken=request_id
    )
    started = time.perf_counter()
    elapsed = None
    with http.stream("POST", url, content=payload, headers=headers("first_progress")) as response:
        for chunk in response.iter_raw():
            if elapsed is None and b"notifications/progress" in chunk:
                elapsed = (time.perf_counter() - started) * 1000
    assert elapsed is not None, "no progress event"
    return elapsed


def bench_sse(calls: int) -> dict[str, Any]:
    """Time to the first progress event of a streamed call, through the sidecar vs direct
    and vs the bare forwarder, interleaved."""
    with (
        upstream(sse=True, core=LOAD_CORE) as up,
        sidecar(up) as (proxy, _, _),
        forwarder(up) as bare,
        httpx.Client() as http,
    ):
        for i in range(10):
            for url in (up, proxy, bare):
                first_event_ms(http, url, i)
        direct, through, forwarded = [], [], []
        for i in range(calls):
            direct.append(first_event_ms(http, up, i))
            through.append(first_event_ms(http, proxy, i))
            forwarded.append(first_event_ms(http, bare, i))
    return {
        "calls": calls,
        "direct_p50_ms": p(direct, 50),
        "sidecar_p50_ms": p(through, 50),
        "forwarder_p50_ms": p(forwarded, 50),
        "added_p50_ms": p(through, 50) - p(direct, 50),
        "forwarder_added_p50_ms": p(forwarded, 50) - p(direct, 50),
    }


def bench_memory(entry_kib: int) -> dict[str, Any]:
    """RSS of the sidecar with its cache filled past the 64 MiB budget, against empty."""
    with upstream() as up, sidecar(up) as (proxy, metrics, pid), httpx.Client() as http:
        rss = psutil.Process(pid)
        warm = [body("blob", {"key": f"w{i}", "size": 64}) for i in range(50)]
        sequential_ms(http, proxy, warm, "blob")
        empty = rss.memory_info().rss
        peak_bytes = 0.0
        count = int(BUDGET * 1.3) // (entry_kib << 10)
        for i in range(count):
            sequential_ms(
                http, proxy, [body("blob", {"key": f"f{i}", "size": entry_kib << 10})], "blob"
            )
            if i % 25 == 0:
                peak_bytes = max(peak_bytes, cache_bytes(metrics))
        peak_bytes = max(peak_bytes, cache_bytes(metrics))
        full = rss.memory_info().rss
    growth = full - empty
    return {
        "entry_kib": entry_kib,
        "stored_calls": count,
        "rss_empty_mib": empty / 2**20,
        "rss_full_mib": full / 2**20,
        "rss_growth_mib": growth / 2**20,
        "growth_to_budget": growth / BUDGET,
        "peak_cache_bytes": peak_bytes,
        "within_budget": peak_bytes <= BUDGET,
    }


def bench_clients(calls: int) -> dict[str, Any]:
    """The forward client alone: httpx against aiohttp and the sidecar's own client, each
    sending sequential POSTs to the minimal ASGI app (in its own process)."""
    with ceiling(b'{"jsonrpc":"2.0","id":1,"result":{}}') as floor:
        out = subprocess.run(
            _pinned([sys.executable, str(HERE / "clients.py"), floor, str(calls)], LOAD_CORE),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    results: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return results


def bench_scale(calls: int) -> dict[str, Any]:
    """Sequential hit latency with 1, 100 and 1024 entries in the cache."""
    results: dict[str, Any] = {}
    with upstream() as up, sidecar(up) as (proxy, _, _), httpx.Client() as http:
        stored = 0
        for entries in (1, 100, 1024):
            fill = [body("payload", {"key": f"k{i}"}) for i in range(stored, entries)]
            sequential_ms(http, proxy, fill, "payload")
            stored = entries
            keys = [body("payload", {"key": f"k{(i * 7919) % entries}"}) for i in range(calls)]
            times = sequential_ms(http, proxy, keys, "payload")
            results[str(entries)] = {"p50_ms": p(times, 50), "p99_ms": p(times, 99)}
    return results


def upstream_calls(metrics_url: str) -> float:
    """Upstream calls the sidecar has made (its upstream latency histogram's count)."""
    return metric_value(metrics_url, "mcpcache_upstream_request_duration_seconds_count")


async def burst_ms(url: str, n: int, ready: Callable[[], None] = lambda: None) -> list[float]:
    """N identical calls (new arguments) sent at once over warm connections; each one's
    latency. `ready` runs once the connections are open, before the burst. The client
    is aiohttp's: httpx's pool serialises this many concurrent requests noticeably."""

    async def one(http: aiohttp.ClientSession, request_id: int, key: str) -> float:
        payload = body("slow", {"key": key}, request_id)
        started = time.perf_counter()
        async with http.post(url, data=payload, headers=headers("slow")) as response:
            await response.read()
            assert response.status == 200
        return (time.perf_counter() - started) * 1000

    connector = aiohttp.TCPConnector(limit=n)
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(one(http, i, uuid.uuid4().hex) for i in range(n)))
        ready()
        key = uuid.uuid4().hex
        return list(await asyncio.gather(*(one(http, i, key) for i in range(n))))


def bench_burst(rounds: int) -> dict[str, Any]:
    """N concurrent identical misses (a tool that takes 50 ms), through the sidecar
    against the upstream alone: upstream calls made, and each call's latency."""
    results: dict[str, Any] = {}
    with upstream(core=LOAD_CORE) as up, sidecar(up) as (proxy, metrics, _):
        for n in (1, 2, 4, 8, 16, 32, 64):
            direct: list[float] = []
            through: list[float] = []
            calls = 0.0
            for _ in range(rounds):
                direct += asyncio.run(burst_ms(up, n))
                before: list[float] = []
                through += asyncio.run(
                    burst_ms(proxy, n, lambda b=before: b.append(upstream_calls(metrics)))
                )
                calls += upstream_calls(metrics) - before[0]
            results[str(n)] = {
                "upstream_calls_direct": n,
                "upstream_calls_sidecar": calls / rounds,
                "direct_p50_ms": p(direct, 50),
                "direct_p99_ms": p(direct, 99),
                "sidecar_p50_ms": p(through, 50),
                "sidecar_p99_ms": p(through, 99),
            }
    return results


def bench_key(repeat: int) -> dict[str, Any]:
    """Key computation for arguments of 1 KiB to 1 MiB, against serialising them alone."""
    results: dict[str, Any] = {}
    credential = {"authorization": secret_digest("Bearer token")}
    for size in (1 << 10, 16 << 10, 256 << 10, 1 << 20):
        params = {
            "name": "search",
            "arguments": {
                "query": "q" * (size // 2),
                "filters": [str(i) for i in range(size // 16)],
            },
            "_meta": {"progressToken": 7, "traceparent": "00-a-b-01"},
        }
        number = max(3, repeat * 1024 // (size >> 10) // 64)
        key_s = min(
            timeit.repeat(
                lambda p=params: cache_key("s", "tools/call", p, "app", credential),
                number=number,
                repeat=5,
            )
        )
        dump_s = min(timeit.repeat(lambda p=params: orjson.dumps(p), number=number, repeat=5))
        results[f"{size >> 10}KiB"] = {
            "key_us": key_s / number * 1e6,
            "serialise_only_us": dump_s / number * 1e6,
        }
    return results


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    hits = results["hits"]
    rows = ("minimal_asgi", "least_cache", "sidecar_hit", "upstream_direct")
    names = ["minimal ASGI\n(ceiling)", "least\ncache", "sidecar\nhit", "upstream\ndirect"]
    rps = [hits[row]["rps"] for row in rows]
    ax = axes[0][0]
    ax.bar(names, rps, color=["#999999", "#bbbbbb", "#2a7ab9", "#d9822b"])
    ax.set_title("tools/call, 4 KiB result, 16 connections")
    ax.set_ylabel("requests / s")
    for i, value in enumerate(rps):
        ax.text(i, value, f"{value:,.0f}", ha="center", va="bottom")
    ax = axes[0][1]
    p50 = [hits[row]["p50_ms"] for row in rows]
    p99 = [hits[row]["p99_ms"] for row in rows]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
    ax.set_xticks(list(xs), names)
    ax.set_yscale("log")
    ax.set_ylabel("latency (ms, log)")
    ax.set_title("latency at 16 connections")
    ax.legend()
    ax = axes[1][0]
    miss, sse = results["miss"], results["sse"]
    labels = [
        "miss:\ndirect",
        "miss:\nforwarder",
        "miss:\nsidecar",
        "1st SSE:\ndirect",
        "1st SSE:\nforwarder",
        "1st SSE:\nsidecar",
    ]
    values = [
        miss["direct_p50_ms"],
        miss["forwarder_p50_ms"],
        miss["sidecar_miss_p50_ms"],
        sse["direct_p50_ms"],
        sse["forwarder_p50_ms"],
        sse["sidecar_p50_ms"],
    ]
    ax.bar(labels, values, color=["#d9822b", "#999999", "#2a7ab9"] * 2)
    ax.set_ylabel("p50 (ms)")
    ax.set_title("forwarded calls, one connection")
    ax = axes[1][1]
    memory = results["memory"]
    ax.bar(
        ["RSS empty", "RSS full", "cache budget"],
        [memory["rss_empty_mib"], memory["rss_full_mib"], BUDGET / 2**20],
    )
    ax.set_ylabel("MiB")
    ax.set_title(f"memory, cache filled with {memory['entry_kib']} KiB results")
    fig.suptitle(f"mcpcache benchmarks ({results['machine']})")
    fig.tight_layout()
    fig.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, for a smoke check")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--only", choices=["burst"], help="run this benchmark alone")
    args = parser.parse_args()
    if args.only == "burst":
        burst = bench_burst(2 if args.quick else 10)
        report_burst(burst)
        args.out.mkdir(parents=True, exist_ok=True)
        suffix = "-quick" if args.quick else ""
        (args.out / f"burst{suffix}.json").write_text(json.dumps(burst, indent=2) + "\n")
        return 0
    calls = 40 if args.quick else 300
    results: dict[str, Any] = {
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "quick": args.quick,
    }
    print("hits ...", flush=True)
    results["hits"] = bench_hits(*((2, 1) if args.quick else (5, 3)))  # seconds, rounds
    print("misses ...", flush=True)
    results["miss"] = bench_miss(calls)
    print("first SSE event ...", flush=True)
    results["sse"] = bench_sse(calls // 3)
    print("forward clients ...", flush=True)
    results["clients"] = bench_clients(calls * 7)
    print("memory ...", flush=True)
    results["memory"] = bench_memory(100)
    print("scale ...", flush=True)
    results["scale"] = bench_scale(calls)
    print("key cost ...", flush=True)
    results["key"] = bench_key(200 if not args.quick else 20)
    print("bursts of identical misses ...", flush=True)
    results["burst"] = bench_burst(2 if args.quick else 10)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (args.out / f"latest{suffix}.json").write_text(json.dumps(results, indent=2) + "\n")
    chart(results, args.out / f"benchmarks{suffix}.svg")
    report(results)
    return 0


def report(r: dict[str, Any]) -> None:
    hits, miss, sse, memory = r["hits"], r["miss"], r["sse"], r["memory"]
    print()
    print(
        f"{'hits, 16 connections':34} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>11}"
    )
    rows = (
        ("minimal ASGI (ceiling)", "minimal_asgi"),
        ("least cache", "least_cache"),
        ("sidecar hit", "sidecar_hit"),
        ("upstream direct", "upstream_direct"),
    )
    for name, key in rows:
        row = hits[key]
        print(
            f"  {name:32} {row['rps']:10,.0f} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f}"
            f" {row['server_cpu_us_per_request']:11.0f}"
        )
    print(
        f"  sidecar / ceiling {hits['ratio_to_ceiling']:.2f} req/s (goal >= 0.7), "
        f"{hits['cpu_ratio_to_ceiling']:.2f} x CPU (goal <= 1.5); "
        f"sidecar / upstream {hits['ratio_to_upstream']:.1f} (goal >= 10)"
    )
    print(
        f"  least cache / ceiling {hits['least_cache_ratio_to_ceiling']:.2f} req/s, "
        f"{hits['least_cache_cpu_ratio_to_ceiling']:.2f} x CPU"
    )
    for label, row, through in (
        ("miss", miss, "sidecar_miss_p50_ms"),
        ("first SSE event", sse, "sidecar_p50_ms"),
    ):
        print(
            f"{label} p50: direct {row['direct_p50_ms']:.3f} ms, sidecar {row[through]:.3f} ms, "
            f"added {row['added_p50_ms']:.3f} ms (goal <= 0.5); bare forwarder "
            f"{row['forwarder_p50_ms']:.3f} ms, added {row['forwarder_added_p50_ms']:.3f} ms"
        )
    print(
        f"memory: RSS {memory['rss_empty_mib']:.1f} MiB empty, {memory['rss_full_mib']:.1f} MiB "
        f"full, growth {memory['growth_to_budget']:.2f} x 64 MiB (goal <= 1.25); peak cache "
        f"bytes {memory['peak_cache_bytes']:,.0f} <= {BUDGET:,}: {memory['within_budget']}"
    )
    clients = ", ".join(
        f"{name} {v['p50_ms']:.3f} ms (p99 {v['p99_ms']:.3f})" for name, v in r["clients"].items()
    )
    print(f"forward client, sequential POST p50: {clients}")
    scale = ", ".join(f"{n}: {v['p50_ms']:.3f} ms" for n, v in r["scale"].items())
    print(f"hit p50 by entries: {scale}")
    key = ", ".join(
        f"{n}: {v['key_us']:.0f} us (serialise alone {v['serialise_only_us']:.0f})"
        for n, v in r["key"].items()
    )
    print(f"key cost: {key}")
    report_burst(r["burst"])


def report_burst(burst: dict[str, Any]) -> None:
    print()
    print(f"{'N identical misses at once':28} {'upstream calls':>16} {'p50 ms':>15} {'p99 ms':>15}")
    print(f"{'':28} {'direct sidecar':>16} {'direct sidecar':>15} {'direct sidecar':>15}")
    for n, row in burst.items():
        print(
            f"  {n:>26} {row['upstream_calls_direct']:>7} {row['upstream_calls_sidecar']:>8.1f}"
            f" {row['direct_p50_ms']:>7.1f} {row['sidecar_p50_ms']:>7.1f}"
            f" {row['direct_p99_ms']:>7.1f} {row['sidecar_p99_ms']:>7.1f}"
        )


if __name__ == "__main__":
    sys.exit(main())
