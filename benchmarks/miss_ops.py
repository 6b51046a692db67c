"""Python bytecodes executed per JSON miss: the sidecar's ASGI app beside the bare
forwarder's and the least caching proxy's (`servers.least_cache_miss_app`), each called
in this process on uvloop as `trace_miss.py` calls it, the upstream the benchmarks' SDK
server in a process of its own.

A count, not a time: on an idle machine the same build gives the same figures within a
few bytecodes; under load they move by a few percent (a busy upstream's answer may
arrive in more reads, each a pass through the client's code), where the CPU figures of
`in_process.py` and `ab.py` move by a fifth from run to run. It does not see work done
in C (orjson, hashlib, the event loop, the socket calls), which is why it is read beside
those figures, not in place of them. Counted with `sys.settrace` opcode events, grouped
by where the code lives: the sidecar's own modules by package, each other library by
its top-level name, the standard library, and `<generated>` for the functions
dataclasses and named tuples make at import (their `__init__` and `__new__`).

    python benchmarks/miss_ops.py [--calls 100] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import sysconfig
import uuid
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import run_all as bench
import uvloop
from servers import forwarder_app, least_cache_miss_app, shut_down
from trace_miss import PACKAGE, bench_sidecar, one_call

STDLIB = sysconfig.get_paths()["stdlib"]
HERE = str(Path(__file__).parent)


def group(code: CodeType) -> str:
    """Where a function lives: `sidecar/<package>`, a library's name, `stdlib`, ..."""
    path = code.co_filename
    if path.startswith(str(PACKAGE)):
        return "sidecar/" + Path(path).relative_to(PACKAGE).parts[0].removesuffix(".py")
    if "site-packages" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if path.startswith("<"):
        return "<generated>"
    if path.startswith(HERE):
        return "benchmark driver"
    return "stdlib" if path.startswith(STDLIB) else "other"


class OpcodeCount:
    """Bytecodes executed, per function, while it is the thread's trace function."""

    def __init__(self) -> None:
        self.by_code: Counter[CodeType] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> OpcodeCount:
        if event == "call":
            frame.f_trace_lines = False
            frame.f_trace_opcodes = True
        elif event == "opcode":
            self.by_code[frame.f_code] += 1
        return self


async def count(app: Any, calls: int) -> OpcodeCount:
    """The bytecodes of `calls` misses (each with new arguments) through `app`."""
    counted = OpcodeCount()
    for _ in range(20):  # warm: connection pool, imports, learned listings
        await one_call(app, uuid.uuid4().hex, 1, None)
    sys.settrace(counted)
    try:
        for _ in range(calls):
            await one_call(app, uuid.uuid4().hex, 1, None)
    finally:
        sys.settrace(None)
    return counted


async def measure(upstream_url: str, calls: int) -> dict[str, OpcodeCount]:
    sidecar = bench_sidecar(upstream_url)
    apps = {
        "forwarder": forwarder_app(upstream_url),
        "least cache": least_cache_miss_app(upstream_url),
        "sidecar": sidecar.proxy_app(),
    }
    counts = {name: await count(app, calls) for name, app in apps.items()}
    await shut_down(apps["forwarder"])
    await shut_down(apps["least cache"])
    await sidecar.proxy.aclose()
    await sidecar.client.aclose()
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100, help="misses counted per app")
    parser.add_argument("--top", type=int, default=25, help="the sidecar's busiest functions")
    args = parser.parse_args()
    with bench.upstream() as url:
        uvloop.install()
        counts = asyncio.run(measure(url, args.calls))
    per_group = {name: Counter[str]() for name in counts}
    for name, counted in counts.items():
        for code, ops in counted.by_code.items():
            per_group[name][group(code)] += ops
    groups = sorted(
        {g for c in per_group.values() for g in c},
        key=lambda g: -max(c[g] for c in per_group.values()),
    )
    names = list(counts)
    print("bytecodes per JSON miss".ljust(24) + "".join(f"{n:>14}" for n in names))
    for g in groups:
        print(g.ljust(24) + "".join(f"{per_group[n][g] / args.calls:14.0f}" for n in names))
    totals = {n: sum(per_group[n].values()) / args.calls for n in names}
    print("total".ljust(24) + "".join(f"{totals[n]:14.0f}" for n in names))
    print(
        "x the forwarder".ljust(24)
        + "".join(f"{totals[n] / totals['forwarder']:14.2f}" for n in names)
    )
    own = Counter(
        {
            f"{Path(code.co_filename).relative_to(PACKAGE)}:{code.co_qualname}": ops
            for code, ops in counts["sidecar"].by_code.items()
            if group(code).startswith("sidecar/")
        }
    )
    print(f"\nthe sidecar's own code: {len(own)} functions; the busiest:")
    for function, ops in own.most_common(args.top):
        print(f"{ops / args.calls:8.0f}  {function}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
