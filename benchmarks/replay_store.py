"""The upstream of `replay.py`: a small document store behind an official MCP SDK server.

Every answer is a pure function of the store's state, the tool's arguments and the
caller, with no call counter in it, so that whoever holds the same state can say what
the upstream would answer at any moment: `replay.py` keeps a copy of the store, applies
to it exactly the writes the upstream ran (from the upstream's ledger), and checks every
answer it gets against that copy's.

Each call costs a fixed, deterministic service time (20 to 50 ms, slept inside the tool):
the upstream's cost that a hit saves. The ledger (`GET /ledger?since=N`, beside the MCP
endpoint and not through it) lists every tool call the upstream ran: the tool, its
arguments, the caller, the answer and the service time.

    python benchmarks/replay_store.py --port 8000 --seed 39
"""

from __future__ import annotations

import argparse
import random
import zlib
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations

FOLDERS = ("runbooks", "design", "incidents", "api", "onboarding")
WORDS = (
    *("deploy", "rollback", "latency", "quota", "token", "cache", "index", "shard", "replica"),
    *("lease", "backup", "restore", "alert", "pager", "budget", "schema", "migration"),
    *("webhook", "retry", "timeout", "gateway", "secret", "audit", "canary", "region"),
    *("failover", "metrics", "tracing", "queue"),
)
DOCS_PER_FOLDER = 8
READS = ("search", "get_doc", "list_folder")
WRITES = ("update_doc", "create_doc")
BASE_SECONDS = {
    "search": 0.040,
    "get_doc": 0.020,
    "list_folder": 0.030,
    "update_doc": 0.035,
    "create_doc": 0.035,
}
"""Each tool's service time before a per-call part of 0 to 10 ms: 20 to 50 ms in all."""


def service_seconds(tool: str, arguments: dict[str, Any]) -> float:
    """What one call costs the upstream: fixed by the tool and its arguments, so that the
    seconds a hit saved are known without the call being made."""
    spread = zlib.crc32(tool.encode() + orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS))
    return BASE_SECONDS[tool] + (spread % 11) / 1000


def words(rng: random.Random, count: int = 5) -> str:
    return " ".join(rng.sample(WORDS, count))


@dataclass
class Doc:
    folder: str
    text: str
    version: int = 1


class Store:
    """The documents, and each tool's answer to a caller in the current state."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.docs = {
            f"{folder}-{i}": Doc(folder, words(rng))
            for folder in FOLDERS
            for i in range(DOCS_PER_FOLDER)
        }

    def answer(self, tool: str, arguments: dict[str, Any], user: str) -> str:
        """What the upstream would answer now, without changing anything."""
        if tool == "search":
            query = arguments["query"]
            found = sorted(n for n, d in self.docs.items() if query in d.text.split())
            return f"search {query}: " + ", ".join(self._version(n) for n in found)
        if tool == "get_doc":
            name = arguments["name"]
            if (doc := self.docs.get(name)) is None:
                return f"no document {name}"
            access = "edit" if zlib.crc32(f"{user}/{doc.folder}".encode()) % 2 else "read"
            return f"{name} v{doc.version} in {doc.folder} ({access} for {user}): {doc.text}"
        if tool == "list_folder":
            folder = arguments["folder"]
            names = sorted(n for n, d in self.docs.items() if d.folder == folder)
            return f"{folder}: " + ", ".join(self._version(n) for n in names)
        if tool == "update_doc":
            name = arguments["name"]
            if (doc := self.docs.get(name)) is None:
                return f"no document {name}"
            return f"updated {name} to v{doc.version + 1}"
        if tool == "create_doc":
            name = arguments["name"]
            if (doc := self.docs.get(name)) is not None:
                return f"{name} already exists (v{doc.version})"
            return f"created {name} in {arguments['folder']}"
        raise ValueError(f"unknown tool {tool}")

    def run(self, tool: str, arguments: dict[str, Any], user: str) -> str:
        """The answer, and the write done when `tool` writes."""
        said = self.answer(tool, arguments, user)
        name = arguments.get("name", "")
        if tool == "update_doc" and (doc := self.docs.get(name)) is not None:
            doc.text, doc.version = arguments["text"], doc.version + 1
        elif tool == "create_doc" and name not in self.docs:
            self.docs[name] = Doc(arguments["folder"], arguments["text"])
        return said

    def _version(self, name: str) -> str:
        return f"{name}@v{self.docs[name].version}"


def user_of(ctx: Context) -> str:
    """The caller, from its bearer token (`Bearer <user>` in this benchmark)."""
    return (ctx.headers or {}).get("authorization", "anonymous").removeprefix("Bearer ")


class Upstream:
    """The SDK server over a `Store`, and the ledger of the calls it ran."""

    def __init__(self, seed: int) -> None:
        self.store = Store(seed)
        self.ledger: list[dict[str, Any]] = []
        self.server = MCPServer("docs")
        reads = ToolAnnotations(read_only_hint=True)
        writes = ToolAnnotations(read_only_hint=False, destructive_hint=False)
        mcp = self.server

        @mcp.tool(annotations=reads)
        async def search(query: str, ctx: Context) -> str:
            """The documents whose text has the word `query`, with their versions."""
            return await self.call("search", {"query": query}, ctx)

        @mcp.tool(annotations=reads)
        async def get_doc(name: str, ctx: Context) -> str:
            """One document, with the caller's access to its folder."""
            return await self.call("get_doc", {"name": name}, ctx)

        @mcp.tool(annotations=reads)
        async def list_folder(folder: str, ctx: Context) -> str:
            """The documents of a folder, with their versions."""
            return await self.call("list_folder", {"folder": folder}, ctx)

        @mcp.tool(annotations=writes)
        async def update_doc(name: str, text: str, ctx: Context) -> str:
            """Replace a document's text (its version goes up by one)."""
            return await self.call("update_doc", {"name": name, "text": text}, ctx)

        @mcp.tool(annotations=writes)
        async def create_doc(folder: str, name: str, text: str, ctx: Context) -> str:
            """Add a document (a name already taken changes nothing)."""
            arguments = {"folder": folder, "name": name, "text": text}
            return await self.call("create_doc", arguments, ctx)

    async def call(self, tool: str, arguments: dict[str, Any], ctx: Context) -> str:
        user = user_of(ctx)
        said = self.store.run(tool, arguments, user)
        seconds = service_seconds(tool, arguments)
        self.ledger.append(
            {"tool": tool, "arguments": arguments, "user": user, "answer": said, "seconds": seconds}
        )
        await anyio.sleep(seconds)
        return said

    def app(self) -> Any:
        """The MCP endpoint at `/mcp`, and `GET /ledger?since=N` beside it."""
        mcp_app = self.server.streamable_http_app()

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] != "/ledger":
                await mcp_app(scope, receive, send)
                return
            query = dict(p.split("=", 1) for p in scope["query_string"].decode().split("&") if p)
            body = orjson.dumps(self.ledger[int(query.get("since", 0)) :])
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    app = Upstream(args.seed).app()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
