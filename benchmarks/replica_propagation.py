"""How long a removal on one replica takes to reach the other replicas' memory, next to
a plain Redis PUBLISH → receive round trip in the same run.

Each trial puts a fresh entry in every replica's memory (a miss on the first, a shared
hit then a memory hit on each other), removes it through the first replica (an admin
purge of the tool: the path a write takes — the tier fenced, the removal announced, then
the answer), and from the moment the removal was sent asks the other replicas in turn
until none answers from memory any more. Reported: that time (p50/p99), the purge's own
answer time, and how many first reads sent right after the purge's answer still met the
old entry (the window a client writing through one replica and reading through another
can fall into). Sidecars, Redis and the upstream are processes of their own.

Run: `bash benchmarks/run.sh replicas [--quick]`. Results: `results/replica-propagation.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from typing import Any

import httpx
import redis
from run_all import RESULTS, body, headers, p, sidecar, upstream
from shared_tier import redis_server

MEMORY_HIT = "mcpcache; hit"


def publish_round_trips(url: str, trials: int) -> list[float]:
    """Milliseconds from PUBLISH sent to the message received by a subscriber."""
    client = redis.Redis.from_url(url)
    pubsub = client.pubsub()
    pubsub.subscribe("baseline")
    pubsub.get_message(timeout=5)  # the confirmation
    times = []
    for i in range(trials):
        started = time.perf_counter()
        client.publish("baseline", str(i))
        while pubsub.get_message(timeout=5) is None:
            pass
        times.append((time.perf_counter() - started) * 1000)
    pubsub.close()
    client.close()
    return times


def status(http: httpx.Client, url: str, payload: bytes) -> str:
    response = http.post(url, content=payload, headers=headers("payload"))
    return response.headers.get("cache-status", "")


def trial(http: httpx.Client, urls: list[str], key: str) -> tuple[float, float, bool]:
    """(ms until no other replica answers from memory, ms of the purge's answer,
    whether the first read after the answer met the old entry)."""
    payload = body("payload", {"key": key})
    first, others = urls[0], urls[1:]
    assert status(http, first, payload).startswith("mcpcache; fwd=miss")
    for url in others:  # a shared hit (or, before the tier write lands, a miss), then memory
        deadline = time.perf_counter() + 5
        while status(http, url, payload) != MEMORY_HIT:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{url} never answered from memory")
    purge = first.replace("/mcp/bench", "/admin/purge")
    started = time.perf_counter()
    http.post(purge, json={"server": "bench", "tool": "payload"}).raise_for_status()
    answered = (time.perf_counter() - started) * 1000
    pending = set(others)
    stale_first = False
    first_read = True
    while pending:
        for url in sorted(pending):
            if status(http, url, payload) != MEMORY_HIT:
                pending.discard(url)
            elif first_read:
                stale_first = True
            first_read = False
        if time.perf_counter() - started > 10:
            raise RuntimeError("the removal never arrived")
    return (time.perf_counter() - started) * 1000, answered, stale_first


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    trials = 20 if args.quick else 200
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        url = stack.enter_context(redis_server())
        origin = stack.enter_context(upstream())
        shared = {"url": url, "timeout": "50ms"}
        replicas = [stack.enter_context(sidecar(origin, shared))[0] for _ in range(3)]
        results["publish_ms"] = publish_round_trips(url, trials)
        with httpx.Client(timeout=10) as http:
            for count in (2, 3):
                rows = [trial(http, replicas[:count], f"{count}-{i}-{time.time_ns()}")
                        for i in range(trials)]  # fmt: skip
                results[f"{count}"] = {
                    "gone_ms": [r[0] for r in rows],
                    "purge_answer_ms": [r[1] for r in rows],
                    "stale_first_reads": sum(r[2] for r in rows),
                    "trials": trials,
                }
    baseline = results["publish_ms"]
    print(f"{'':32}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'Redis PUBLISH -> receive':32}{p(baseline, 50):>10.2f}{p(baseline, 99):>10.2f}")
    for count in ("2", "3"):
        r = results[count]
        for name, values in (("purge answered", r["purge_answer_ms"]), ("gone", r["gone_ms"])):
            label = f"{count} replicas: {name}"
            print(f"{label:32}{p(values, 50):>10.2f}{p(values, 99):>10.2f}")
        print(f"{count} replicas: first reads after the answer that met the old entry: "
              f"{r['stale_first_reads']} of {r['trials']}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "replica-propagation.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
