"""The upstream: an official MCP SDK server with tools that make cache behaviour visible.

It counts every HTTP request it receives and every tool or resource invocation, so a
test can assert that a cached answer caused no upstream traffic at all.
"""

from __future__ import annotations

import collections
import enum
import json
import threading
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.mcpserver import Context, Elicit, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CreateMessageResult,
    EmptyResult,
    PromptListChangedNotification,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
    ResourceUpdatedNotificationParams,
    SamplingMessage,
    SetLevelRequestParams,
    TextContent,
    ToolAnnotations,
    ToolListChangedNotification,
)
from pydantic import BaseModel

LIST_METHODS: tuple[CacheableMethod, ...] = (
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "server/discover",
)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Answer(BaseModel):
    colour: str


def ask_colour() -> Elicit[Answer]:
    return Elicit("Favourite colour?", Answer)


def ask_model() -> Sample:
    prompt = SamplingMessage(role="user", content=TextContent(type="text", text="Say a word"))
    return Sample([prompt], max_tokens=10)


class CountingASGI:
    """Counts HTTP requests by method before handing them to the SDK app."""

    def __init__(self, app: Any, counts: collections.Counter[str]) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.counts[scope["method"]] += 1
        await self.app(scope, receive, send)


class Upstream:
    """Tool and resource handlers plus the counters and gates tests drive them with."""

    def __init__(
        self,
        resource_ttl_ms: int = 60_000,
        list_ttl_ms: int | None = None,
        resource_scope: Literal["public", "private"] = "private",
    ) -> None:
        """`list_ttl_ms`: the `ttlMs` of list and discovery results (the SDK's own
        default, 0, when None); `resource_scope`: the `cacheScope` of `resources/read`
        results (the SDK's default, private)."""
        self.calls: collections.Counter[str] = collections.Counter()
        self.http: collections.Counter[str] = collections.Counter()
        self.callers: list[str] = []
        """The credential (`Authorization`) of each `whoami` call, in order."""
        self._gates: dict[str, threading.Event] = {}
        self.docs: dict[str, str] = {}
        self.issues: dict[tuple[str, str], list[str]] = {}
        hints: dict[CacheableMethod, CacheHint] = {
            "resources/read": CacheHint(ttl_ms=resource_ttl_ms, scope=resource_scope)
        }
        if list_ttl_ms is not None:
            for method in LIST_METHODS:
                hints[method] = CacheHint(ttl_ms=list_ttl_ms)
        self.server = MCPServer("upstream", cache_hints=hints)
        self._register()
        # `logging/setLevel` for clients of the 2025 protocol (the conformance suite's
        # sets a level before its logging scenario): gone in the 2026 revision, so the
        # SDK serves it only when registered on the low-level server, as its docs say to
        # (`mcp.server.extension.MethodBinding`); MCPServer has no public handle on it.
        self.server._lowlevel_server.add_request_handler(
            "logging/setLevel", SetLevelRequestParams, _set_level
        )

    def gate(self, name: str) -> threading.Event:
        """A named event a `slow` call waits on; tests open it with `.set()`."""
        return self._gates.setdefault(name, threading.Event())

    def app(
        self,
        json_response: bool = False,
        transport_security: TransportSecuritySettings | None = None,
    ) -> CountingASGI:
        starlette_app = self.server.streamable_http_app(
            json_response=json_response, transport_security=transport_security
        )
        return CountingASGI(starlette_app, self.http)

    def _register(self) -> None:
        mcp = self.server

        @mcp.tool()
        def echo(text: str) -> str:
            """Return the text, tagged with how many times echo ran."""
            self.calls["echo"] += 1
            return f"{text} #{self.calls['echo']}"

        @mcp.tool()
        def whoami(ctx: Context, text: str = "") -> str:
            """Answer with the credential the call carried (and `text`): differs per user."""
            self.calls["whoami"] += 1
            user = (ctx.headers or {}).get("authorization", "anonymous")
            self.callers.append(user)
            return f"user={user} text={text} #{self.calls['whoami']}"

        @mcp.tool()
        def stable(text: str) -> str:
            """Always the same answer for the same text (counted all the same)."""
            self.calls["stable"] += 1
            return f"stable {text}"

        @mcp.tool()
        def headers(ctx: Context) -> str:
            """The HTTP request headers this call arrived with, as JSON."""
            self.calls["headers"] += 1
            return json.dumps(dict(ctx.headers or {}))

        @mcp.tool()
        def blob(size: int) -> str:
            """A result of about `size` bytes."""
            self.calls["blob"] += 1
            return "x" * size

        @mcp.tool()
        async def chatty(frames: int, ctx: Context) -> str:
            """Many log frames before a small result."""
            self.calls["chatty"] += 1
            for i in range(frames):
                await ctx.info(f"log line {i} " + "y" * 200)
            return "small"

        @mcp.tool()
        def broken() -> str:
            """Always fails as a tool error (isError: true)."""
            self.calls["broken"] += 1
            raise ToolError("the backend is down")

        @mcp.tool()
        async def progress(steps: int, text: str, ctx: Context) -> str:
            """Report progress `steps` times, then answer."""
            self.calls["progress"] += 1
            for i in range(steps):
                await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            return f"{text} after {steps} steps #{self.calls['progress']}"

        @mcp.tool()
        async def narrated(steps: int, text: str, ctx: Context) -> str:
            """Log a line and report progress `steps` times, then answer."""
            self.calls["narrated"] += 1
            for i in range(steps):
                await ctx.info(f"{text}: step {i + 1} of {steps}")
                await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            return f"{text} narrated #{self.calls['narrated']}"

        @mcp.tool()
        async def test_tool_with_logging(ctx: Context) -> str:
            """The conformance suite's `tools-call-with-logging` tool: three log lines
            about 50 ms apart, as its scenario asks."""
            self.calls["test_tool_with_logging"] += 1
            for i, line in enumerate(("started", "processing data", "completed")):
                if i:
                    await anyio.sleep(0.05)
                await ctx.info(f"Tool execution {line}")
            return f"Tool executed with logging #{self.calls['test_tool_with_logging']}"

        @mcp.tool()
        async def test_tool_with_progress(ctx: Context) -> str:
            """The conformance suite's `tools-call-with-progress` tool: progress 0, 50
            and 100 of 100, about 50 ms apart, as its scenario asks."""
            self.calls["test_tool_with_progress"] += 1
            for done in (0, 50, 100):
                if done:
                    await anyio.sleep(0.05)
                await ctx.report_progress(done, 100)
            return f"Tool executed with progress #{self.calls['test_tool_with_progress']}"

        @mcp.tool()
        async def slow(steps: int, gate: str, ctx: Context) -> str:
            """Report progress, then wait until the test opens `gate`."""
            self.calls["slow"] += 1
            for i in range(steps):
                await ctx.report_progress(i + 1, steps + 1, f"step {i + 1}")
            await anyio.to_thread.run_sync(self.gate(gate).wait, abandon_on_cancel=True)
            return f"done after {steps} steps"

        @mcp.tool()
        async def held(gate: str, ctx: Context, outcome: str = "ok", size: int = 0) -> str:
            """Report progress, wait until the test opens `gate`, then answer with the
            caller's credential and this call's number; `outcome` `tool_error` fails as a
            tool error, and `size` pads the answer to about that many bytes."""
            self.calls["held"] += 1
            number = self.calls["held"]
            user = (ctx.headers or {}).get("authorization", "anonymous")
            await ctx.report_progress(0, 1, "waiting")
            await anyio.to_thread.run_sync(self.gate(gate).wait, abandon_on_cancel=True)
            if outcome == "tool_error":
                raise ToolError(f"held call #{number} failed")
            return f"user={user} #{number} " + "p" * size

        @mcp.tool()
        async def ask(ctx: Context) -> str:
            """Ask the client a question (elicitation) and answer with the reply."""
            self.calls["ask"] += 1
            reply = await ctx.elicit("Favourite colour?", Answer)
            colour = reply.data.colour if reply.action == "accept" and reply.data else "none"
            return f"colour={colour}"

        @mcp.tool()
        def survey(answer: Annotated[Answer, Resolve(ask_colour)]) -> str:
            """Ask the client a question in whichever way the protocol era allows."""
            self.calls["survey"] += 1
            return f"colour={answer.colour}"

        @mcp.tool()
        def word(sampled: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
            """Ask the client's model for a word (sampling) and answer with it."""
            self.calls["word"] += 1
            content = sampled.content
            return f"word={content.text if isinstance(content, TextContent) else '?'}"

        read_only = ToolAnnotations(readOnlyHint=True)

        @mcp.tool(annotations=read_only)
        def get_doc(ctx: Context, name: str) -> str:
            """A stored document, with the caller's credential: read-only, differs per user."""
            self.calls["get_doc"] += 1
            user = (ctx.headers or {}).get("authorization", "anonymous")
            return f"{self.docs.get(name, '')} for {user} #{self.calls['get_doc']}"

        @mcp.tool(annotations=read_only)
        def count_docs() -> str:
            """How many documents there are: read-only."""
            self.calls["count_docs"] += 1
            return f"{len(self.docs)} #{self.calls['count_docs']}"

        @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
        def update_doc(name: str, text: str) -> str:
            """Store a document; an empty text is refused (a tool error, nothing written)."""
            self.calls["update_doc"] += 1
            if not text:
                raise ToolError("refused: empty text")
            self.docs[name] = text
            return f"stored {name}"

        @mcp.tool(annotations=read_only)
        def search(ctx: Context, q: str, requestId: str = "") -> str:
            """Search results for `q` and the caller; `requestId` changes nothing."""
            self.calls["search"] += 1
            user = (ctx.headers or {}).get("authorization", "anonymous")
            return f"results for {q} for {user} #{self.calls['search']}"

        @mcp.tool(annotations=read_only)
        def list_issues(ctx: Context, owner: str, repo: str) -> str:
            """The issues of one repository, as the caller sees them."""
            self.calls["list_issues"] += 1
            user = (ctx.headers or {}).get("authorization", "anonymous")
            titles = ", ".join(self.issues.get((owner, repo), []))
            return f"{owner}/{repo}: [{titles}] for {user} #{self.calls['list_issues']}"

        @mcp.tool()
        def create_issue(owner: str, repo: str, title: str) -> str:
            """File an issue (a write)."""
            self.calls["create_issue"] += 1
            self.issues.setdefault((owner, repo), []).append(title)
            return f"filed {title}"

        @mcp.tool(annotations=read_only)
        def get_release(name: str, version: str = "latest") -> str:
            """A release of `name`; `version` defaults to latest (a plain schema default)."""
            self.calls["get_release"] += 1
            return f"{name} {version} #{self.calls['get_release']}"

        @mcp.tool(annotations=read_only)
        def paint(name: str, colour: Colour = Colour.RED) -> str:
            """A default behind a `$ref` (an enum's schema is in `$defs`)."""
            self.calls["paint"] += 1
            return f"{name} in {colour.value} #{self.calls['paint']}"

        @mcp.tool()
        async def announce(kind: str, ctx: Context, uri: str = "", scoped: bool = True) -> str:
            """Send a notification that answers are out of date: `resource` (for `uri`),
            `resources`, `prompts` or `tools` list changed; inside this call's own stream when
            `scoped`, else on the session's GET stream."""
            self.calls["announce"] += 1
            notification: Any
            if kind == "resource":
                params = ResourceUpdatedNotificationParams(uri=uri)
                notification = ResourceUpdatedNotification(params=params)
            elif kind == "resources":
                notification = ResourceListChangedNotification()
            elif kind == "prompts":
                notification = PromptListChangedNotification()
            else:
                notification = ToolListChangedNotification()
            related = ctx.request_id if scoped else None
            await ctx.session.send_notification(notification, related_request_id=related)
            return f"announced {kind}"

        @mcp.resource("doc://{name}")
        def doc(name: str) -> str:
            self.calls["doc"] += 1
            return f"document {name} #{self.calls['doc']}"

        @mcp.prompt()
        def greet(name: str) -> str:
            self.calls["greet"] += 1
            return f"Say hello to {name}"


async def _set_level(context: Any, params: SetLevelRequestParams) -> EmptyResult:
    """Accept any level: the tools log at `info` whatever is set."""
    return EmptyResult()
