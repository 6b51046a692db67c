"""An agent's day replayed through the sidecar: what the cache saves, and whether every
answer it gave was the one the upstream would have given at that moment.

The trace (`replay_trace.py`, seeded) has the shape the caching essay describes: the same
questions asked again within a conversation, in the user's later conversations (the next
morning, in a fresh session) and by teammates, and writes followed by reads of what they
change, from five users whose clients hold sessions in the three ways deployed clients
do, through three replicas of the sidecar that share one `redis-server`. Its calls run
one at a time in trace order, so that "the answer the upstream would have given at that
moment" is defined: the benchmark keeps a copy of the upstream's store
(`replay_store.py`), applies the writes the upstream's ledger says it ran, and compares
every answer with the copy's. A wrong answer is one that differs; it is named by what it
is: an answer given before a write that changed it (stale), a write answered from the
cache (never ran), another user's answer (must never happen), or anything else.

Each world is one build of the sidecar under one configuration, with its own upstream,
Redis and replicas: build A is another install of the project, named by its interpreter
(`--a-python`), build B this checkout; `plain` is `cache: {enabled: true}`, `rules` adds
what an operator writes after reading the tools' docs (which writes invalidate which
reads, and the search answers shared by all users), and `suggested` (build B only) runs
as `plain` for the first half of the trace, then takes the `tools:` rules that
`mcpcache suggest --output yaml` (over every replica's admin endpoint, `--also`)
proposed from that half, written into its config file and reloaded by each replica
without a restart. The worlds are compared over the second half of the trace, the
same calls for all (each with the cache its first half left); the first half's figures
are kept in the JSON. Every call of the trace goes to every
world in turn before the next call, so a shared machine's changing load falls on all
alike. Each server's TTL is an hour: the trace compresses a day into minutes, and with a
TTL shorter than the run, hit rates would follow the machine's speed; here every miss and
every wrong answer comes from the cache's rules.

    python benchmarks/replay.py --a-python /path/to/other/venv/bin/python [--quick]

A call is a hit when the upstream's ledger shows it did not run (the `Cache-Status` the
client saw says whether memory or the shared tier answered it); the seconds saved are the
upstream's own service times of the calls that right answers from the cache avoided.
The replicas' tier timeout is 250 ms, not the product's 50 ms: on a loaded machine a
sidecar's event loop alone can take 50 ms. Writes to the tier are made after the answer,
as in production, so a shared hit now and then depends on timing; everything else in the
trace is fixed by the seed.

Prints a table of the worlds side by side and writes `results/replay.json`. Exits 1 when
any answer of build B was wrong or any call of B failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from replay_store import Store, service_seconds
from replay_trace import USERS, Op, trace
from run_all import LOAD_CORE, RESULTS, _pinned, free_port, p, wait_ready
from shared_tier import redis_server

HERE = Path(__file__).resolve().parent
MODERN = "2026-07-28"
CALL_SECONDS = 30.0
TTL = "1h"

RULES: list[dict[str, Any]] = [
    {"name": "search", "scope": "public"},
    {
        "name": "update_doc",
        "invalidates": [{"tool": "get_doc", "match": ["name"]}, "search", "list_folder"],
    },
    {"name": "create_doc", "invalidates": ["search", {"tool": "list_folder", "match": ["folder"]}]},
]
CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"enabled": True, "ttl": TTL},
    "rules": {"enabled": True, "ttl": TTL, "tools": RULES},
    "suggested": {"enabled": True, "ttl": TTL},  # until the rules suggest proposes
}
LEARNS = "suggested"


@dataclass
class Tally:
    """What one world's answers were, op by op."""

    latencies: list[float] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)
    hits_by: Counter[str] = field(default_factory=Counter)
    """Hits by the read's repeat kind and by the user's client style."""
    examples: list[str] = field(default_factory=list)
    spent: float = 0.0
    saved: float = 0.0
    without_cache: float = 0.0


class World:
    """One build under one configuration: its upstream, Redis, replicas and clients."""

    def __init__(self, build: str, config: str, python: str) -> None:
        self.build, self.config, self.python = build, config, python
        self.label = f"{build} {config}"
        self.upstream = ""
        self.replicas: list[str] = []
        self.store: Store
        self.tally = Tally()
        self.ledger_seen = 0
        self.answered: dict[tuple[str, str], set[str]] = {}
        """Every answer the upstream would have given to each question, to anyone."""
        self.statuses: list[str] = []
        self.conversations: dict[str, Conversation] = {}
        self.sidecars: list[Sidecar] = []
        self.first_half = Tally()
        self.suggested = ""
        """What `mcpcache suggest` printed at the half (the `suggested` world)."""

    def sidecar_config(self, redis_url: str) -> dict[str, Any]:
        server = {"name": "docs", "url": f"{self.upstream}/mcp", "cache": CONFIGS[self.config]}
        return {
            "appId": "replay",
            "sharedCache": {"url": redis_url, "timeout": "250ms"},
            "servers": [server],
        }

    async def learn(self) -> None:
        """Ask `mcpcache suggest` for rules over every replica's evidence, and give them
        to every replica (its config file, reloaded without a restart)."""
        admin = [f"http://127.0.0.1:{s.listen}" for s in self.sidecars]
        command = [self.python, "-m", "mcpcache.sidecar.cli", "suggest", "--output", "yaml"]
        command += ["--url", admin[0], *(a for url in admin[1:] for a in ("--also", url))]
        printed = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60, check=True
        )
        self.suggested = printed.stdout
        tools = (yaml.safe_load(self.suggested) or {}).get("tools") or []
        for sidecar in self.sidecars:
            document = json.loads(sidecar.config.read_text())
            document["servers"][0]["cache"] = {**CONFIGS[self.config], "tools": tools}
            written = sidecar.config.with_suffix(".new")
            written.write_text(json.dumps(document))
            written.replace(sidecar.config)  # whole, or not at all, when it is read
        async with httpx.AsyncClient(timeout=5) as http:
            for sidecar in self.sidecars:
                await sidecar.reloaded(http)

    async def note_status(self, response: httpx2.Response) -> None:
        if status := response.headers.get("cache-status"):
            self.statuses.append(status)

    def client(self, replica: int, user: str, style: str) -> tuple[httpx2.AsyncClient, Client]:
        """An SDK client of `user` on one replica, with its own response cache off."""
        http = httpx2.AsyncClient(
            headers={"authorization": f"Bearer {user}"},
            timeout=httpx2.Timeout(CALL_SECONDS),
            event_hooks={"response": [self.note_status]},
        )
        transport = streamable_http_client(self.replicas[replica], http_client=http)
        mode = MODERN if style == "modern" else "legacy"
        return http, Client(transport, mode=mode, cache=None, read_timeout_seconds=CALL_SECONDS)

    async def call(self, op: Op) -> tuple[str, float]:
        """The answer's text and the milliseconds the agent waited for it."""
        if op.user.style == "per-call":
            if op.first:  # get_tools(), in a session of its own
                await self._in_new_session(op, lambda c: c.list_tools())
            started = time.perf_counter()
            text = await self._in_new_session(op, lambda c: _call(c, op))
            return text, (time.perf_counter() - started) * 1000
        if op.first:
            self.conversations[op.conversation] = Conversation.open(self, op)
        conversation = self.conversations[op.conversation]
        try:
            return await conversation.ask(op)
        finally:
            if op.last:
                await self.conversations.pop(op.conversation).close()

    async def _in_new_session(self, op: Op, work: Callable[[Client], Awaitable[Any]]) -> Any:
        http, client = self.client(op.replica, op.user.name, op.user.style)
        async with http, client:
            return await work(client)

    async def ledger(self, http: httpx.AsyncClient) -> list[dict[str, Any]]:
        """The calls the upstream ran since the last look."""
        response = await http.get(f"{self.upstream}/ledger", params={"since": self.ledger_seen})
        entries: list[dict[str, Any]] = response.json()
        self.ledger_seen += len(entries)
        return entries


class Conversation:
    """A `long` or `modern` conversation: one SDK client held open for all its calls, in a
    task of its own (a client is entered and left in the same task)."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[tuple[Op, asyncio.Future[tuple[str, float]]] | None]
        self.inbox = asyncio.Queue()
        self.task: asyncio.Task[None]

    @classmethod
    def open(cls, world: World, op: Op) -> Conversation:
        conversation = cls()
        conversation.task = asyncio.create_task(conversation._serve(world, op))
        return conversation

    async def _serve(self, world: World, first: Op) -> None:
        http, client = world.client(first.replica, first.user.name, first.user.style)
        try:
            async with http, client:
                await client.list_tools()
                while (item := await self.inbox.get()) is not None:
                    op, answer = item
                    started = time.perf_counter()
                    try:
                        text = await _call(client, op)
                        answer.set_result((text, (time.perf_counter() - started) * 1000))
                    except Exception as error:  # counted as a failed call
                        answer.set_exception(error)
        finally:
            while not self.inbox.empty():  # the client could not open: fail what waits
                if (item := self.inbox.get_nowait()) is not None:
                    item[1].set_exception(RuntimeError("the conversation's client failed"))

    async def ask(self, op: Op) -> tuple[str, float]:
        if self.task.done():
            raise RuntimeError("the conversation's client failed")
        answer: asyncio.Future[tuple[str, float]] = asyncio.get_running_loop().create_future()
        await self.inbox.put((op, answer))
        either: set[asyncio.Future[Any]] = {answer, self.task}
        done, _ = await asyncio.wait(
            either, timeout=CALL_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        if answer not in done:
            raise RuntimeError("no answer")
        return answer.result()

    async def close(self) -> None:
        await self.inbox.put(None)
        await asyncio.wait_for(self.task, CALL_SECONDS)


async def _call(client: Client, op: Op) -> str:
    result = await client.call_tool(op.tool, op.arguments)
    text = str(getattr(result.content[0], "text", ""))
    return f"error: {text}" if result.is_error else text


def repeat_kinds(ops: list[Op]) -> list[str]:
    """For each read, whether its question was asked before in the same conversation, by
    the same user in an earlier one, by another user, or never; writes are `write`."""
    asked: dict[tuple[str, str], list[tuple[str, str]]] = {}
    kinds = []
    for op in ops:
        if op.writes:
            kinds.append("write")
            continue
        before = asked.setdefault(op.question, [])
        if any(c == op.conversation for _, c in before):
            kinds.append("same conversation")
        elif any(u == op.user.name for u, _ in before):
            kinds.append("later conversation")
        else:
            kinds.append("another user" if before else "first time")
        before.append((op.user.name, op.conversation))
    return kinds


async def step(world: World, op: Op, kind: str, http: httpx.AsyncClient) -> None:
    """Send one call of the trace to `world` and check its answer."""
    tally = world.tally
    expected = world.store.answer(op.tool, op.arguments, op.user.name)
    world.statuses.clear()
    try:
        text, ms = await asyncio.wait_for(world.call(op), CALL_SECONDS)
    except Exception as error:  # counted: the cache must break no call
        text, ms = None, 0.0
        tally.counts["failed"] += 1
        tally.examples.append(f"op {op.index} failed: {error!r}")
    entries = await world.ledger(http)
    ran = [e for e in entries if (e["tool"], e["arguments"]) == (op.tool, op.arguments)]
    for entry in entries:
        said = world.store.run(entry["tool"], entry["arguments"], entry["user"])
        if said != entry["answer"]:
            raise RuntimeError(f"the store's copy disagrees with the upstream: {entry}")
        tally.spent += entry["seconds"]
    seconds = service_seconds(op.tool, op.arguments)
    tally.without_cache += seconds
    tally.counts["ops"] += 1
    tally.counts["writes" if op.writes else "reads"] += 1
    tally.counts["upstream calls"] += len(entries)
    if text is None:
        return
    tally.latencies.append(ms)
    right = text == expected
    if not ran and not op.writes:
        tally.counts["hits"] += 1
        tally.hits_by[kind] += 1
        tally.hits_by[op.user.style] += 1
        shared = any("detail=shared" in s for s in world.statuses if "hit" in s)
        tally.counts["shared hits" if shared else "memory hits"] += 1
    if not ran and right:
        tally.saved += seconds
    if not right:
        wrong = _wrong_kind(world, op, text, bool(ran))
        tally.wrong[wrong] += 1
        if len(tally.examples) < 8:
            tally.examples.append(f"op {op.index} ({wrong}): {text!r}, upstream: {expected!r}")
    world.answered.setdefault(op.question, set()).add(expected)


def _wrong_kind(world: World, op: Op, text: str, ran: bool) -> str:
    if any(f"for {u.name})" in text for u in USERS if u.name != op.user.name):
        return "another user's"
    if op.writes and not ran:
        return "write never ran"
    if text in world.answered.get(op.question, ()):
        return "stale after a write"
    return "other"


@dataclass
class Sidecar:
    """One replica: its listener (the MCP path and the admin endpoint), its metrics
    listener and its config file."""

    listen: int
    metrics: int
    config: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listen}/mcp/docs"

    async def reloaded(self, http: httpx.AsyncClient, seconds: float = 30.0) -> None:
        """Wait until it has applied its config file once more (its reload counter)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = (await http.get(f"http://127.0.0.1:{self.metrics}/metrics")).text
            if 'mcpcache_config_reloads_total{result="applied"} 1.0' in text:
                return
            if 'mcpcache_config_reloads_total{result="rejected"} 0.0' not in text:
                raise RuntimeError(f"the sidecar refused its new config: {self.config}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"no reload of {self.config}")


class Processes:
    """The processes of every world, started together (each takes seconds to import its
    libraries, on a machine that may be busy) and ended by their own handles."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[subprocess.Popen[bytes]] = []
        self.ready_urls: list[str] = []

    def start(self, args: list[str], ready_url: str, core: int) -> None:
        log = self.workdir / f"process-{len(self.started)}.log"
        with log.open("wb") as stderr:
            self.started.append(
                subprocess.Popen(_pinned(args, core), stdout=subprocess.DEVNULL, stderr=stderr)
            )
        self.ready_urls.append(ready_url)

    def sidecar(self, python: str, document: dict[str, Any]) -> Sidecar:
        """A sidecar run by `python` (so from that interpreter's install)."""
        listen, metrics = free_port(), free_port()
        document = document | {
            "listen": {"host": "127.0.0.1", "port": listen},
            "metrics": {"host": "127.0.0.1", "port": metrics},
        }
        path = self.workdir / f"sidecar-{listen}.json"
        path.write_text(json.dumps(document))
        args = [python, "-m", "mcpcache.sidecar.cli", "sidecar", "--config", str(path)]
        args += ["--log-level", "WARNING"]
        self.start(args, f"http://127.0.0.1:{metrics}/readyz", 1)
        return Sidecar(listen, metrics, path)

    def wait_ready(self) -> None:
        for url in self.ready_urls:
            wait_ready(url, 120)

    def stop(self) -> None:
        for process in self.started:
            process.terminate()
        for process in self.started:
            process.wait(10)


@contextmanager
def worlds(
    builds: dict[str, str], configs: list[str], replicas: int, seed: int
) -> Iterator[list[World]]:
    """Every build under every config: each its own upstream, Redis and replicas."""
    with ExitStack() as stack:
        processes = Processes(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        stack.callback(processes.stop)
        made = []
        for config in configs:
            for build, python in builds.items():
                if config == LEARNS and build != "B":
                    continue  # another install may not propose rules
                world = World(build, config, python)
                port = free_port()
                world.upstream = f"http://127.0.0.1:{port}"
                world.store = Store(seed)
                args = [sys.executable, str(HERE / "replay_store.py"), "--port", str(port)]
                processes.start([*args, "--seed", str(seed)], f"{world.upstream}/ledger", LOAD_CORE)
                document = world.sidecar_config(stack.enter_context(redis_server()))
                world.sidecars = [processes.sidecar(python, document) for _ in range(replicas)]
                world.replicas = [sidecar.url for sidecar in world.sidecars]
                made.append(world)
        processes.wait_ready()
        yield made


async def replay(all_worlds: list[World], ops: list[Op], progress: bool) -> None:
    kinds = repeat_kinds(ops)
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=CALL_SECONDS))
        for op, kind in zip(ops, kinds, strict=True):
            if op.index == len(ops) // 2:  # the second half: compared, with learnt rules
                for world in all_worlds:
                    world.first_half, world.tally = world.tally, Tally()
                    if world.config == LEARNS:
                        await world.learn()
            turn = op.index % len(all_worlds)  # each world goes first as often
            for world in all_worlds[turn:] + all_worlds[:turn]:
                await step(world, op, kind, http)
            if progress and op.index % 100 == 99:
                print(f"  {op.index + 1} of {len(ops)} calls", flush=True)


Cell = Callable[[Tally], str]


def _share(part: float, whole: float) -> str:
    return f"{part / max(whole, 1):.1%}"


def _hit_share(group: str, reads: int) -> Cell:
    return lambda t: _share(t.hits_by[group], reads)


ROWS: list[tuple[str, Cell]] = [
    (
        "calls (reads / writes)",
        lambda t: f"{t.counts['ops']} ({t.counts['reads']} / {t.counts['writes']})",
    ),
    ("hit rate of reads", lambda t: _share(t.counts["hits"], t.counts["reads"])),
    (
        "hits: memory / shared tier",
        lambda t: f"{t.counts['memory hits']} / {t.counts['shared hits']}",
    ),
    (
        "upstream calls (without cache)",
        lambda t: f"{t.counts['upstream calls']} ({t.counts['ops']})",
    ),
    ("upstream seconds spent", lambda t: f"{t.spent:.1f} of {t.without_cache:.1f}"),
    ("upstream seconds saved", lambda t: f"{t.saved:.1f}"),
    ("WRONG ANSWERS", lambda t: str(sum(t.wrong.values()))),
    *(
        (f"  {kind}", lambda t, kind=kind: str(t.wrong[kind]))
        for kind in ("stale after a write", "write never ran", "another user's", "other")
    ),
    ("failed calls", lambda t: str(t.counts["failed"])),
    ("latency p50 / p90 ms", lambda t: f"{p(t.latencies, 50):.1f} / {p(t.latencies, 90):.1f}"),
]
REPEATS = ("first time", "same conversation", "later conversation", "another user")
STYLES = ("long", "per-call", "modern")


def report(all_worlds: list[World], ops: list[Op]) -> None:
    """The second half's figures (the calls all worlds are compared on)."""
    half = len(ops) // 2
    kinds, ops = repeat_kinds(ops)[half:], ops[half:]
    width = max(16, *(len(w.label) + 2 for w in all_worlds))

    def table(title: str, rows: list[tuple[str, Cell]]) -> None:
        print()
        print(f"{title:32}" + "".join(f"{w.label:>{width}}" for w in all_worlds))
        for label, cell in rows:
            print(f"{label:32}" + "".join(f"{cell(w.tally):>{width}}" for w in all_worlds))

    def rates(groups: tuple[str, ...], reads: Counter[str]) -> list[tuple[str, Cell]]:
        return [(f"  {g} ({reads[g]})", _hit_share(g, reads[g])) for g in groups]

    repeats = Counter(kinds)
    styles = Counter[str](op.user.style for op in ops if not op.writes)
    table(f"second half: {len(ops)} calls", ROWS)
    table("hit rate of reads asked", rates(REPEATS, repeats))
    table("hit rate of reads by client", rates(STYLES, styles))
    for world in all_worlds:
        for example in world.tally.examples[:3]:
            print(f"{world.label}: {example}")
        if world.suggested:
            print(f"\n{world.label}: what suggest proposed after the first half\n")
            print(world.suggested)


def summary(world: World) -> dict[str, Any]:
    return {
        "build": world.build,
        "config": world.config,
        **figures(world.tally),
        "first_half": figures(world.first_half),
        "suggested": world.suggested,
    }


def figures(t: Tally) -> dict[str, Any]:
    return {
        **t.counts,
        "hit_rate": t.counts["hits"] / max(t.counts["reads"], 1),
        "upstream_seconds": {"spent": t.spent, "saved": t.saved, "without_cache": t.without_cache},
        "wrong": dict(t.wrong),
        "hits_by": dict(t.hits_by),
        "p50_ms": p(t.latencies, 50),
        "p90_ms": p(t.latencies, 90),
        "examples": t.examples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--a-python", help="interpreter of build A (another install)")
    parser.add_argument("--quick", action="store_true", help="a short day, for a smoke run")
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--days", type=int, default=2, help="days in the trace (2)")
    parser.add_argument("--replicas", type=int, help="sidecar replicas per world (3; quick: 2)")
    parser.add_argument("--configs", default="plain,rules,suggested")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    size = {"conversations": 1, "turns": 5} if args.quick else {"conversations": 2, "turns": 16}
    replicas = args.replicas or (2 if args.quick else 3)
    ops = trace(args.seed, days=args.days, replicas=replicas, **size)
    builds = {"B": sys.executable}
    if args.a_python is not None:
        builds = {"A": args.a_python, **builds}
    configs = args.configs.split(",")
    users = ", ".join(f"{u.name} ({u.style})" for u in USERS)
    print(f"{len(ops)} calls, seed {args.seed}, {replicas} replicas, users: {users}")
    started = time.monotonic()
    with worlds(builds, configs, replicas, args.seed) as made:
        print(f"{len(made)} worlds started in {time.monotonic() - started:.0f} s", flush=True)
        asyncio.run(replay(made, ops, progress=True))
    print(f"replayed and stopped in {time.monotonic() - started:.0f} s")
    report(made, ops)
    results = {"seed": args.seed, "calls": len(ops), "replicas": replicas, "quick": args.quick}
    results["days"] = args.days
    results["worlds"] = [summary(w) for w in made]
    args.out.mkdir(parents=True, exist_ok=True)
    name = "replay-quick.json" if args.quick else "replay.json"
    (args.out / name).write_text(json.dumps(results, indent=2) + "\n")
    b = [t for w in made if w.build == "B" for t in (w.first_half, w.tally)]
    return 1 if any(sum(t.wrong.values()) or t.counts["failed"] for t in b) else 0


if __name__ == "__main__":
    sys.exit(main())
