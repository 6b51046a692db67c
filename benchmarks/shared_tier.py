"""The shared tier on Redis, next to its baselines in the same run.

Latency: one connection, sequential calls, each figure from its own calls: a memory
hit, a shared-tier hit (Redis, copied into memory), a miss through a sidecar with the
shared tier (a Redis GET, then the upstream), a miss through a sidecar with memory only,
and the upstream called directly.

Hit rate: one workload (calls over a set of distinct keys, each call sent to a replica
picked at random, as a Service spreads them) replayed against 1, 4 and 16 sidecar
replicas, with memory only and with the shared tier.

Every peer is a process of its own: redis-server and the upstream beside the client,
the sidecars on the other core. Results: `results/shared-tier.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
from run_all import (
    LOAD_CORE,
    RESULTS,
    _pinned,
    body,
    free_port,
    headers,
    p,
    sequential_ms,
    sidecar,
    upstream,
)


@contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway redis-server beside the client, as on another machine."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", workdir]
        proc = subprocess.Popen(
            _pinned(args, LOAD_CORE), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(port=port, socket_timeout=1)
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            client.close()
            proc.terminate()
            proc.wait(10)


SHARED_HIT = "mcpcache; hit; detail=shared"


def shared(url: str) -> dict[str, Any]:
    return {"url": url, "timeout": "50ms"}


def statuses(http: httpx.Client, url: str, payloads: list[bytes]) -> list[str]:
    return [status for _, status in timed(http, url, payloads)]


def timed(http: httpx.Client, url: str, payloads: list[bytes]) -> list[tuple[float, str]]:
    """Each call's milliseconds and Cache-Status."""
    results = []
    for payload in payloads:
        started = time.perf_counter()
        response = http.post(url, content=payload, headers=headers("payload"))
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
        results.append((elapsed, response.headers.get("cache-status", "")))
    return results


def settle(url: str) -> int:
    """Writes to Redis do not delay answers: wait until no more land (a write that met
    a busy moment past the timeout is dropped, as in production)."""
    client = redis.Redis.from_url(url)
    size, since = client.dbsize(), time.monotonic()
    while time.monotonic() - since < 0.5:
        time.sleep(0.05)
        if (now := client.dbsize()) != size:
            size, since = now, time.monotonic()
    client.close()
    return int(size)


def bench_latency(calls: int) -> dict[str, Any]:
    """The five kinds of call, interleaved one of each at a time, so that a shared
    machine's changing load falls on all of them alike."""
    run = f"{time.time_ns()}"

    def payloads(kind: str) -> list[bytes]:
        return [body("payload", {"key": f"{run}-{kind}-{i}"}) for i in range(calls)]

    fill = payloads("fill")
    with (
        redis_server() as url,
        upstream(core=LOAD_CORE) as up,
        sidecar(up, shared(url)) as (first, _, _),
        sidecar(up, shared(url)) as (second, _, _),
        sidecar(up) as (memory_only, _, _),
        httpx.Client() as http,
    ):
        warm = [body("payload", {"key": f"warm-{i}"}) for i in range(30)]
        for target in (first, second, memory_only, up):
            sequential_ms(http, target, warm, "payload")
        hot = body("payload", {"key": f"{run}-hot"})
        sequential_ms(http, first, [hot], "payload")
        sequential_ms(http, second, fill, "payload")  # stored in Redis by one replica
        settle(url)
        times: dict[str, list[float]] = {name: [] for name in ROWS.values()}
        kinds = ([hot] * calls, fill, payloads("miss"), payloads("alone"), payloads("direct"))
        for row in zip(*kinds, strict=True):
            for (name, target), payload in zip(TARGETS, row, strict=True):
                address = {"first": first, "memory_only": memory_only, "upstream": up}[target]
                ((ms, status),) = timed(http, address, [payload])
                if name != "shared_hit" or status == SHARED_HIT:
                    times[name].append(ms)
    return {
        name: {"calls": len(values), "p50_ms": p(values, 50), "p99_ms": p(values, 99)}
        for name, values in times.items()
    }


TARGETS = (
    ("memory_hit", "first"),
    ("shared_hit", "first"),  # stored through the second replica
    ("miss_with_shared_tier", "first"),
    ("miss_memory_only", "memory_only"),
    ("upstream_direct", "upstream"),
)
ROWS = {
    "memory hit": "memory_hit",
    "shared-tier hit (Redis, then memory)": "shared_hit",
    "miss, shared tier on (Redis GET + upstream)": "miss_with_shared_tier",
    "miss, memory only": "miss_memory_only",
    "upstream direct": "upstream_direct",
}


def workload(keys: int, calls: int, seed: int = 16) -> list[tuple[int, float]]:
    """(key, where the load balancer sends it) pairs; the second is mapped onto however
    many replicas there are, so every replica count replays the same calls."""
    rng = random.Random(seed)
    return [(rng.randrange(keys), rng.random()) for _ in range(calls)]


def hit_rate(replicas: int, calls: list[tuple[int, float]], with_shared: bool) -> dict[str, Any]:
    run = f"{time.time_ns()}"
    with ExitStack() as stack, httpx.Client() as http:
        up = stack.enter_context(upstream(core=LOAD_CORE))
        tier = shared(stack.enter_context(redis_server())) if with_shared else None
        urls = [stack.enter_context(sidecar(up, tier))[0] for _ in range(replicas)]
        counts = {"hit": 0, "shared": 0, "miss": 0}
        for key, spread in calls:
            url = urls[int(spread * replicas)]
            (status,) = statuses(http, url, [body("payload", {"key": f"{run}-{key}"})])
            if status == "mcpcache; hit":
                counts["hit"] += 1
            elif status == SHARED_HIT:
                counts["shared"] += 1
            else:
                counts["miss"] += 1
    return {
        **counts,
        "calls": len(calls),
        "hit_rate": (counts["hit"] + counts["shared"]) / len(calls),
        "upstream_calls": counts["miss"],
    }


def bench_replicas(keys: int, calls: int, counts: tuple[int, ...]) -> dict[str, Any]:
    plan = workload(keys, calls)
    results: dict[str, Any] = {"keys": keys, "calls": calls}
    for replicas in counts:
        results[str(replicas)] = {
            "memory_only": hit_rate(replicas, plan, with_shared=False),
            "shared_tier": hit_rate(replicas, plan, with_shared=True),
        }
    return results


def report(r: dict[str, Any]) -> None:
    latency, replicas = r["latency"], r["replicas"]
    print()
    print(f"{'one connection, sequential calls':46} {'p50 ms':>8} {'p99 ms':>8} {'calls':>6}")
    for label, key in ROWS.items():
        row = latency[key]
        print(f"  {label:44} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} {row['calls']:6d}")
    print()
    print(
        f"hit rate: {replicas['calls']} calls over {replicas['keys']} keys, "
        "each to a replica picked at random"
    )
    print(f"  {'replicas':>8} {'memory only':>12} {'shared tier':>12} {'upstream calls':>20}")
    for count in r["replica_counts"]:
        row = replicas[str(count)]
        alone, both = row["memory_only"], row["shared_tier"]
        print(
            f"  {count:8d} {alone['hit_rate']:12.1%} {both['hit_rate']:12.1%} "
            f"{alone['upstream_calls']:>9} -> {both['upstream_calls']:<8}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, for a smoke check")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    calls, keys, replayed = (40, 50, 400) if args.quick else (300, 200, 2000)
    counts = (1, 4, 16)
    print("shared tier latency ...", flush=True)
    results: dict[str, Any] = {"quick": args.quick, "replica_counts": list(counts)}
    results["latency"] = bench_latency(calls)
    print("hit rate by replicas ...", flush=True)
    results["replicas"] = bench_replicas(keys, replayed, counts)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (args.out / f"shared-tier{suffix}.json").write_text(json.dumps(results, indent=2) + "\n")
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
