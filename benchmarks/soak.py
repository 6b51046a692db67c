"""A soak with faults: two sidecars sharing one redis-server in front of a raw MCP
upstream, many callers, faults on a schedule; every answer checked.

    python benchmarks/soak.py --minutes 10 [--callers 50]

Each caller sends `tools/call`s that mix repeats, fresh calls, bursts of identical calls,
event streams with progress, slow answers, tool and JSON-RPC errors and answers from
100 B to 400 KiB. Every answer the callers get is checked for its id, its caller, its
arguments and its completeness: a wrong answer is one that is complete but not the
caller's (the soak's one hard number: it must be 0). A transfer that breaks (the
connection reset, a body cut short) is counted as broken, never as an answer.

Faults, in turn, every `--period` seconds (8 s each): the upstream killed; killed in
the middle of large answers; paused; Redis paused; Redis killed; Redis and the upstream
killed together; clients leaving mid-stream, reading one byte a second, never finishing
their request. Everything runs on loopback; every loop is bounded by the run's length.

Printed: calls by outcome, wrong answers, errors per fault window and in the 15 s after
each (a call counts in the window it was sent in, or in the fault that caught it in
flight), RSS and open descriptors of both sidecars over time, cache bytes against the
budget. Exit status 1 if any answer was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import psutil

FAULTS = (
    "upstream killed",
    "upstream killed mid-answer",
    "upstream paused",
    "redis paused",
    "redis killed",
    "redis and upstream killed",
    "clients misbehave",
)
FAULT_SECONDS = 8.0
RECOVERY_SECONDS = 15.0
CACHE_BYTES = 8 << 20

# The upstream: a raw ASGI app (the SDK server cannot be made to die mid-answer).


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers every tools/call with who asked, what, and under which id. Arguments:
    `size` (bytes of text), `steps` (progress events on an event stream), `delay` (s),
    `fail` (`tool` for isError, `rpc` for a JSON-RPC error). While the file that
    `MCPCACHE_SOAK_DIE` names exists, a large JSON answer is cut off by the process
    exiting in the middle of it."""
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    request = json.loads(body or b"{}")
    arguments = request.get("params", {}).get("arguments", {})
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    who = headers.get("authorization", "")
    if delay := arguments.get("delay"):
        await asyncio.sleep(float(delay))
    text = json.dumps({"who": who, "arguments": arguments}) + "~" * int(arguments.get("size", 0))
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if arguments.get("fail") == "tool":
        result["isError"] = True
    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request.get("id"), "result": result}
    if arguments.get("fail") == "rpc":
        answer = {"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": -1, "message": who}}
    encoded = json.dumps(answer).encode()
    steps = int(arguments.get("steps", 0))
    if steps:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        token = request.get("params", {}).get("_meta", {}).get("progressToken", 0)
        for step in range(steps):
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": step + 1},
            }
            event = b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await asyncio.sleep(0.01)
        final = b"event: message\ndata: " + encoded + b"\n\n"
        await send({"type": "http.response.body", "body": final})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(encoded)).encode()),
            ],
        }
    )
    if len(encoded) > 100_000 and dying():
        await send(
            {
                "type": "http.response.body",
                "body": encoded[: len(encoded) * 3 // 4],
                "more_body": True,
            }
        )
        await asyncio.sleep(0.05)
        os._exit(1)
    await send({"type": "http.response.body", "body": encoded})


def dying() -> bool:
    """Whether the fault window that kills the upstream mid-answer is open."""
    return os.path.exists(os.environ.get("MCPCACHE_SOAK_DIE", "-"))


def mark(path: Path, on: bool) -> None:
    if on:
        path.touch()
    else:
        path.unlink(missing_ok=True)


def serve_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(upstream_app, host="127.0.0.1", port=port, log_level="error", lifespan="off")


# Processes.


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Process:
    """A child process that can be killed, paused and started again on the same port."""

    def __init__(self, name: str, command: list[str], port: int, log: Path) -> None:
        self.name, self.command, self.port, self.log = name, command, port, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start (see {self.log})")

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


# The run.


class Tally:
    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.errors_by_window: Counter[str] = Counter()
        self.fault = "none"
        self.samples: list[dict[str, Any]] = []

    def error(self, kind: str, window: str) -> None:
        """An error of a call sent in `window`: counted there, or, for a call sent in no
        fault window, in the window it ended in (a fault that caught it in flight)."""
        self.outcomes[kind] += 1
        self.errors_by_window[window if window != "none" else self.fault] += 1


def check(message: dict[str, Any], request_id: str, who: str, arguments: dict[str, Any]) -> str:
    """'ok' when `message` is this caller's complete answer; otherwise why not."""
    if message.get("id") != request_id:
        return f"id {message.get('id')!r} for {request_id!r}"
    if "error" in message:
        if arguments.get("fail") == "rpc" and message["error"].get("message") == who:
            return "ok"
        if arguments.get("fail") != "rpc" and message["error"].get("code") in (-32001, -32002):
            return "upstream-error"  # the sidecar's own error event on a broken stream
        return f"error {message['error']!r}"
    text = message["result"]["content"][0]["text"]
    decoded = json.loads(text.rstrip("~"))
    if decoded["who"] != who:
        return "another caller's answer"
    if decoded["arguments"] != arguments:
        return "another call's answer"
    if len(text) - len(text.rstrip("~")) != int(arguments.get("size", 0)):
        return "a short answer"
    return "ok"


async def one_call(
    http: httpx.AsyncClient, url: str, tally: Tally, who: str, arguments: dict[str, Any]
) -> None:
    request_id = uuid.uuid4().hex
    window = tally.fault
    params: dict[str, Any] = {"name": "t", "arguments": arguments}
    if arguments.get("steps"):
        params["_meta"] = {"progressToken": request_id}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "t",
        "authorization": who,
    }
    try:
        response = await http.post(url, json=body, headers=headers)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        tally.error("broken transfer", window)
        return
    except httpx.TimeoutException:
        tally.error("timeout", window)
        return
    except httpx.ConnectError:
        tally.error("sidecar unreachable", window)
        return
    if response.status_code != 200:
        tally.error(f"HTTP {response.status_code}", window)
        return
    status = response.headers.get("cache-status", "")
    outcome = "hit" if "hit" in status else "collapsed" if "collapsed" in status else "miss"
    if response.headers["content-type"].startswith("text/event-stream"):
        finals = [
            json.loads(line[6:])
            for line in response.text.splitlines()
            if line.startswith("data: ") and '"id"' in line
        ]
        finals = [m for m in finals if "result" in m or "error" in m]
        if not finals:
            tally.error("stream without answer", window)
            return
        message = finals[-1]
    else:
        try:
            message = response.json()
        except json.JSONDecodeError:
            tally.wrong.append("a body that is not JSON with a 200")
            return
    verdict = check(message, request_id, who, arguments)
    if verdict == "ok":
        tally.outcomes[outcome] += 1
    elif verdict == "upstream-error":
        tally.error("error event", window)
    else:
        tally.wrong.append(verdict)


async def misbehave(port: int, stop: float) -> None:
    """Clients that leave mid-stream, read a byte a second, or never finish a request."""

    async def unfinished() -> None:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST /mcp/up HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 100\r\n\r\n{"
            )
            await asyncio.sleep(max(0.0, stop - time.monotonic()))
            writer.close()

    async def slow_reader() -> None:
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "t", "arguments": {"size": 400_000, "n": uuid.uuid4().hex}},
                }
            ).encode()
            writer.write(
                b"POST /mcp/up HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                b"accept: application/json, text/event-stream\r\nmcp-method: tools/call\r\n"
                b"mcp-name: t\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
            for _ in range(int(FAULT_SECONDS)):  # one byte a second, for the fault window
                if not await reader.read(1):
                    break
                await asyncio.sleep(1)
            writer.close()

    await asyncio.gather(*(unfinished() for _ in range(3)), *(slow_reader() for _ in range(3)))


async def drive(
    die_marker: Path,
    args: argparse.Namespace,
    urls: list[str],
    procs: dict[str, Process],
    sidecars: list[psutil.Process],
    metrics: list[str],
) -> Tally:
    tally = Tally()
    rng = random.Random(args.seed)
    started = time.monotonic()
    end = started + args.minutes * 60
    callers = [f"Bearer caller-{n}-{uuid.uuid4().hex[:8]}" for n in range(args.callers)]
    repeats = {
        who: [{"q": f"r{k}", "size": rng.choice([100, 2_000, 40_000])} for k in range(5)]
        for who in callers
    }

    async def caller(who: str, http: httpx.AsyncClient) -> None:
        local = random.Random(who)
        while time.monotonic() < end:
            url = local.choice(urls)
            kind = local.choices(
                ["repeat", "fresh", "burst", "stream", "slow", "tool", "rpc", "large"],
                [40, 15, 5, 10, 5, 5, 5, 5],
            )[0]
            arguments: dict[str, Any] = {"q": uuid.uuid4().hex, "size": local.choice([100, 5_000])}
            if kind == "repeat":
                arguments = dict(local.choice(repeats[who]))
            elif kind == "stream":
                arguments |= {"steps": 3}
            elif kind == "slow":
                arguments |= {"delay": 0.5}
            elif kind in ("tool", "rpc"):
                arguments |= {"fail": kind}
            elif kind == "large":
                arguments |= {"size": 400_000}
            if kind == "burst":
                arguments |= {"delay": 0.1}
                await asyncio.gather(
                    *(one_call(http, url, tally, who, dict(arguments)) for _ in range(5))
                )
            else:
                await one_call(http, url, tally, who, arguments)
            await asyncio.sleep(local.uniform(0.05, 0.3))

    async def watch(http: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            sample: dict[str, Any] = {"t": round(time.monotonic() - started)}
            for n, (process, url) in enumerate(zip(sidecars, metrics, strict=True)):
                with contextlib.suppress(psutil.Error, httpx.HTTPError):
                    sample[f"rss{n}"] = process.memory_info().rss >> 20
                    sample[f"fds{n}"] = process.num_fds()
                    text = (await http.get(url, timeout=2)).text
                    for line in text.splitlines():
                        if line.startswith(
                            ("mcpcache_cache_bytes ", "mcpcache_cache_expired_bytes ")
                        ):
                            name, value = line.split()
                            sample[f"{name.removeprefix('mcpcache_cache_')}{n}"] = int(float(value))
            tally.samples.append(sample)
            await asyncio.sleep(5)

    async def faults() -> None:
        index = 0
        while time.monotonic() + args.period < end:
            await asyncio.sleep(args.period - FAULT_SECONDS)
            fault = FAULTS[index % len(FAULTS)]
            index += 1
            tally.fault = fault
            stop = time.monotonic() + FAULT_SECONDS
            if fault in ("upstream killed", "redis and upstream killed"):
                procs["upstream"].kill()
            if fault in ("redis killed", "redis and upstream killed"):
                procs["redis"].kill()
            if fault == "upstream paused":
                procs["upstream"].signal(signal.SIGSTOP)
            if fault == "redis paused":
                procs["redis"].signal(signal.SIGSTOP)
            if fault == "upstream killed mid-answer":
                mark(die_marker, True)
            if fault == "clients misbehave":
                await misbehave(int(urls[0].split(":")[2].split("/")[0]), stop)
            else:
                await asyncio.sleep(max(0.0, stop - time.monotonic()))
            mark(die_marker, False)
            for proc in procs.values():
                proc.signal(signal.SIGCONT)
                if not proc.alive():
                    proc.start()
            tally.fault = f"after {fault}"
            await asyncio.sleep(RECOVERY_SECONDS)
            tally.fault = "none"

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
    async with httpx.AsyncClient(timeout=30, limits=limits, trust_env=False) as http:
        tasks = [asyncio.ensure_future(caller(who, http)) for who in callers]
        await asyncio.gather(watch(http), faults(), *tasks)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--period", type=float, default=40.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--upstream-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream_port:
        serve_upstream(args.upstream_port)
        return 0
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    work = Path(tempfile.mkdtemp(prefix="mcpcache-soak-"))
    os.environ["MCPCACHE_SOAK_DIE"] = str(work / "die")
    ports = {name: free_port() for name in ("upstream", "redis", "a", "b", "ma", "mb")}
    procs = {
        "upstream": Process(
            "upstream",
            [sys.executable, __file__, "--upstream-port", str(ports["upstream"])],
            ports["upstream"],
            work / "upstream.log",
        ),
        "redis": Process(
            "redis",
            [
                redis_binary,
                "--port",
                str(ports["redis"]),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(work),
            ],
            ports["redis"],
            work / "redis.log",
        ),
    }
    sidecars: dict[str, Process] = {}
    for name in ("a", "b"):
        config = {
            "appId": "soak",
            "listen": {"host": "127.0.0.1", "port": ports[name]},
            "metrics": {"host": "127.0.0.1", "port": ports["m" + name]},
            "cache": {"maxEntries": 1024, "maxBytes": CACHE_BYTES},
            "sharedCache": {"url": f"redis://127.0.0.1:{ports['redis']}/0", "retryAfter": "1s"},
            "servers": [
                {
                    "name": "up",
                    "url": f"http://127.0.0.1:{ports['upstream']}/mcp",
                    "timeout": "5s",
                    "cache": {
                        "enabled": True,
                        "ttl": "20s",
                        "maxSize": "1Mi",
                        "staleIfError": "30s",
                    },
                }
            ],
        }
        path = work / f"sidecar-{name}.json"
        path.write_text(json.dumps(config))
        sidecars[name] = Process(
            f"sidecar {name}",
            [sys.executable, "-m", "mcpcache.sidecar.cli", "sidecar", "--config", str(path)],
            ports[name],
            work / f"sidecar-{name}.log",
        )
    try:
        for proc in (*procs.values(), *sidecars.values()):
            proc.start()
        urls = [f"http://127.0.0.1:{ports[n]}/mcp/up" for n in ("a", "b")]
        metrics = [f"http://127.0.0.1:{ports['m' + n]}/metrics" for n in ("a", "b")]
        watched = [psutil.Process(s.process.pid) for s in sidecars.values() if s.process]
        tally = asyncio.run(drive(work / "die", args, urls, procs, watched, metrics))
    finally:
        for proc in (*sidecars.values(), *procs.values()):
            proc.stop()
    report(tally, args)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if tally.wrong else 0


def report(tally: Tally, args: argparse.Namespace) -> None:
    total = sum(tally.outcomes.values()) + len(tally.wrong)
    print(f"soak: {args.minutes:g} min, {args.callers} callers, {total} calls")
    for outcome, count in tally.outcomes.most_common():
        print(f"  {outcome:24} {count}")
    print(f"  {'WRONG ANSWERS':24} {len(tally.wrong)}  (must be 0)")
    for wrong in Counter(tally.wrong).most_common(5):
        print(f"    {wrong}")
    print("errors by window:")
    windows: dict[str, int] = defaultdict(int, tally.errors_by_window)
    for window in ("none", *FAULTS, *(f"after {f}" for f in FAULTS)):
        if window in windows or window == "none":
            print(f"  {window:32} {windows[window]}")
    print(
        f"cache bytes budget {CACHE_BYTES}; samples every 5 s (MiB RSS, fds, live/expired bytes):"
    )
    for sample in tally.samples[:: max(1, len(tally.samples) // 20)]:
        print("  " + "  ".join(f"{k}={v}" for k, v in sample.items()))
    peak = max((s.get(f"bytes{n}", 0) for s in tally.samples for n in (0, 1)), default=0)
    print(f"peak live cache bytes {peak} <= {CACHE_BYTES}: {peak <= CACHE_BYTES}")


if __name__ == "__main__":
    sys.exit(main())
