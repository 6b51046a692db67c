"""What an idle sidecar holds in memory, the cost every agent pod pays: the resident set
of a sidecar with one server, no shared tier and no traffic, beside the floor of its
server stack (uvicorn with uvloop and httptools, serving a minimal ASGI app), and each
library's share as the sidecar's modules load them, in order, then what the admin API's
first request, a configured shared tier or tracing would add (none is imported
otherwise).

    python benchmarks/idle_memory.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap

import psutil
import run_all as bench

FLOOR = textwrap.dedent(
    """
    import sys
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop",
                http="httptools", ws="none", lifespan="off", log_level="warning")
    """
)

SHARES = textwrap.dedent(
    """
    import importlib, json, sys

    def rss():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024

    rows = [("python", rss())]
    for name in sys.argv[1:]:
        before = rss()
        importlib.import_module(name)
        rows.append((name, rss() - before))
    print(json.dumps(rows))
    """
)

LIBRARIES = [
    "uvicorn",
    "uvloop",
    "httptools",
    "pydantic",
    "yaml",
    "orjson",
    "cachetools",
    "prometheus_client",
    "starlette.responses",
    "aiohttp",
    "mcpcache.sidecar.app.assembly",
]
ON_DEMAND = {
    "fastapi": "only when used",
    "redis.asyncio": "only when configured",
    "opentelemetry.sdk.trace": "only when configured",
}
"""Loaded only on the admin API's first request (FastAPI) or when the feature is
configured (a shared tier, tracing): measured after the rest, never part of the idle
sidecar above."""


def memory_mib(pid: int) -> dict[str, float]:
    """Resident, of it anonymous (the process's own), and proportional (shared pages
    divided among the processes that map them)."""
    info = psutil.Process(pid).memory_full_info()
    anonymous = info.rss - info.shared
    return {"rss": info.rss / 2**20, "anonymous": anonymous / 2**20, "pss": info.pss / 2**20}


def floor_mib() -> dict[str, float]:
    port = bench.free_port()
    args = [sys.executable, "-c", FLOOR, str(port)]
    with bench.process(args, f"http://127.0.0.1:{port}/") as pid:
        return memory_mib(pid)


def sidecar_mib() -> dict[str, float]:
    listen, metrics = bench.free_port(), bench.free_port()
    config = {
        "appId": "idle",
        "listen": {"host": "127.0.0.1", "port": listen},
        "metrics": {"host": "127.0.0.1", "port": metrics},
        "servers": [{"name": "docs", "url": "http://127.0.0.1:9/mcp", "cache": {"enabled": True}}],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(config, file)
        file.flush()
        args = [sys.executable, "-m", "mcpcache.sidecar.cli", "sidecar", "--config", file.name]
        with bench.process(args, f"http://127.0.0.1:{metrics}/readyz") as pid:
            return memory_mib(pid)


def shares() -> list[tuple[str, float]]:
    out = subprocess.run(
        [sys.executable, "-c", SHARES, *LIBRARIES, *ON_DEMAND],
        capture_output=True,
        text=True,
        check=True,
    )
    return [(name, mib) for name, mib in json.loads(out.stdout)]


def main() -> int:
    floor, sidecar = floor_mib(), sidecar_mib()
    print("idle memory (MiB)   resident  anonymous  proportional")
    for name, row in (("sidecar", sidecar), ("uvicorn floor", floor)):
        print(f"  {name:16s} {row['rss']:9.1f} {row['anonymous']:10.1f} {row['pss']:13.1f}")
    print("each import's share, in load order (MiB):")
    for name, mib in shares():
        when = f"  ({ON_DEMAND[name]})" if name in ON_DEMAND else ""
        print(f"  {name:34s} {mib:6.1f}{when}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
