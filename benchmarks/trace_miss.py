"""How a request travels through the sidecar's own code: one JSON miss (and one hit),
traced with `sys.setprofile`, counted as functions called, files visited and switches
from one file to another (every call or return that lands in another file than the last).

The sidecar's ASGI app is called in this process with the request's bytes; the upstream
is the benchmarks' SDK server in a process of its own. Only frames of the `mcpcache`
package are counted, so the figures say how the code is laid out, not how fast it is.

    python benchmarks/trace_miss.py
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import run_all as bench

import mcpcache.sidecar
from mcpcache.sidecar.app.assembly import Sidecar
from mcpcache.sidecar.config import SidecarConfig

PACKAGE = Path(mcpcache.sidecar.__file__).parent


class Trace:
    def __init__(self) -> None:
        self.functions: Counter[str] = Counter()
        self.files: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        path = frame.f_code.co_filename
        if not path.startswith(str(PACKAGE)):
            return
        name = str(Path(path).relative_to(PACKAGE))
        if event == "call":
            self.functions[f"{name}:{frame.f_code.co_qualname}"] += 1
        if not self.files or self.files[-1] != name:
            self.files.append(name)

    def summary(self) -> dict[str, int]:
        return {
            "functions": len(self.functions),
            "files": len(set(self.files)),
            "switches": len(self.files) - 1,
        }


async def one_call(app: Any, key: str, request_id: int, trace: Trace | None) -> list[Any]:
    tool = "payload"
    payload = bench.body(tool, {"key": key}, request_id)
    headers = [(k.encode(), v.encode()) for k, v in bench.headers(tool).items()]
    headers += [(b"host", b"127.0.0.1"), (b"content-length", str(len(payload)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp/bench",
        "raw_path": b"/mcp/bench",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 3500),
        "extensions": {},
    }
    sent: list[Any] = []
    body = [{"type": "http.request", "body": payload, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if body:
            return body.pop()
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    if trace is not None:
        sys.setprofile(trace)
    try:
        await app(scope, receive, send)
    finally:
        sys.setprofile(None)
    return sent


def bench_sidecar(upstream_url: str) -> Sidecar:
    """A sidecar for one server, `bench` at `upstream_url`, with its cache on."""
    config = SidecarConfig.model_validate(
        {
            "appId": "bench",
            "servers": [{"name": "bench", "url": upstream_url, "cache": {"enabled": True}}],
        }
    )
    return Sidecar(lambda: config)


async def run(upstream_url: str) -> dict[str, dict[str, int]]:
    sidecar = bench_sidecar(upstream_url)
    app = sidecar.proxy_app()
    await one_call(app, "warm", 1, None)  # warm: connection pool, imports, hints
    miss, hit = Trace(), Trace()
    await one_call(app, "traced", 2, miss)
    await one_call(app, "traced", 3, hit)
    await sidecar.aclose() if hasattr(sidecar, "aclose") else None
    return {"miss": miss.summary(), "hit": hit.summary()}


def main() -> int:
    with bench.upstream() as url:
        figures = asyncio.run(run(url))
    for kind, counts in figures.items():
        print(f"{kind}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
