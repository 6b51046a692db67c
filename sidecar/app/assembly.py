"""The sidecar process: the proxy listener, the metrics listener and the config follower.

Two listeners, because they face different callers: the proxy serves the agent on
loopback, the metrics port serves Prometheus and the kubelet's probes on the pod IP.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import uvicorn
from prometheus_client import make_asgi_app
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..cache.store import ResponseCache
from ..config import Address, SidecarConfig
from ..edge.errors import UNKNOWN_SERVER, ProxyError
from ..edge.incoming import Incoming
from ..edge.listener import uvicorn_config
from ..edge.origin import OriginPolicy
from ..metrics import Metrics, SharedMetrics
from ..proxy.invalidator import Invalidator
from ..proxy.learned import Learned
from ..proxy.router import Proxy
from ..rules.protocol.messages import INVALID_REQUEST
from ..tiers.announcement import Announcement
from ..tiers.redis_tier import RedisTier
from ..upstream.client import UpstreamClient
from .admin import Admin
from .reload import ConfigSource

if TYPE_CHECKING:
    from .tracing import Tracer

logger = logging.getLogger("mcpcache.sidecar")

RELOAD_INTERVAL = 1.0
"""Seconds between checks of the config file; a change takes effect within this."""


FIRST_LISTEN_SECONDS = 3.0
"""How long readiness waits for the first subscription to the other replicas' removals."""


class Sidecar:
    """One sidecar: a shared cache, its metrics, and the apps that serve them."""

    def __init__(self, config: Callable[[], SidecarConfig]) -> None:
        self.config = config
        current = config()
        self.metrics = Metrics()
        self.cache = ResponseCache(
            current.cache.max_entries,
            current.cache.max_bytes,
            on_evict=self.metrics.record_eviction,
        )
        self.metrics.watch_cache(self.cache)
        self.cache.age_notes = self._age_note
        self.client = UpstreamClient()
        self.shared: RedisTier | None = None
        if current.shared_cache is not None:
            self.shared = RedisTier(current.shared_cache, SharedMetrics(self.metrics.registry))
        self.learned = Learned.new(self.cache)
        self.invalidator = Invalidator(
            self.cache,
            self.metrics,
            self.learned.tools,
            on_drop=self._drop_shared,
            # Waited for before a write's or a purge's answer: SET then PUBLISH, each
            # bounded by the tier's own timeout (sharedCache changes at the next start).
            announce_within=2 * self.shared.settings.timeout if self.shared else 0.0,
        )
        self.invalidator.follow_config(current)
        origin_policy = OriginPolicy(current.allowed_hosts)
        self.proxy = Proxy(
            config,
            self.cache,
            self.metrics,
            self.client,
            origin_policy,
            self.invalidator,
            self.learned,
            self.shared,
        )
        self.admin = Admin(
            config,
            self.cache,
            self.metrics,
            self.invalidator,
            origin_policy,
            self.learned.observations,
        )
        self.tracer: Tracer | None = None
        if current.tracing.active(os.environ):
            # Imported here, and only here: a sidecar that does not trace never loads
            # the OpenTelemetry SDK (benchmarks/tracing.py measures what it would cost).
            from .tracing import Tracer

            self.tracer = Tracer(current.tracing, os.environ, self.metrics.registry)
        self.ready = False
        self._servers: list[uvicorn.Server] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    def _age_note(self, name: str) -> bool:
        server = self.config().server(name)
        return server is not None and server.cache.age_note

    def _drop_shared(self, server: str, told: Announcement) -> asyncio.Future[None] | None:
        if self.shared is None:
            return None
        return self.shared.forget_server(self.config().app_id, server, told)

    def request_shutdown(self) -> None:
        """Ask both listeners to finish (safe to call from another thread)."""
        for server in self._servers:
            server.should_exit = True

    def proxy_app(self) -> ProxyApp:
        return ProxyApp(self.proxy, self.admin, self.tracer)

    def metrics_app(self) -> MetricsApp:
        return MetricsApp(self)

    async def serve(
        self,
        proxy_socket: socket.socket | None = None,
        metrics_socket: socket.socket | None = None,
    ) -> None:
        """Run both listeners (and the config follower) until either listener stops."""
        self.loop = asyncio.get_running_loop()
        current = self.config()
        servers = self._servers = [
            _server(self.proxy_app(), current.listen, current),
            _server(self.metrics_app(), current.metrics, current),
        ]
        sockets = [proxy_socket, metrics_socket]
        tasks = [
            asyncio.create_task(srv.serve(sockets=[sock] if sock else None))
            for srv, sock in zip(servers, sockets, strict=True)
        ]
        follower = None
        if isinstance(self.config, ConfigSource):
            follower = asyncio.create_task(self._follow(self.config))
        watcher = asyncio.create_task(self._mark_ready(servers))
        listener = None
        if self.shared is not None:
            self.shared.warm_up()
            listener = asyncio.create_task(
                self.shared.listen(current.app_id, self.invalidator.apply, self.invalidator.resync)
            )
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.ready = False
            for srv in servers:
                srv.should_exit = True
            await asyncio.gather(*tasks, return_exceptions=True)
            for task in (follower, watcher, listener):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await self.proxy.aclose()
            await self.client.aclose()
            if self.shared is not None:
                await self.shared.aclose()
            if self.tracer is not None:
                await asyncio.to_thread(self.tracer.shutdown)

    async def _follow(self, source: ConfigSource) -> None:
        while True:
            await asyncio.sleep(RELOAD_INTERVAL)
            outcome = source.poll()
            if outcome is not None:
                self.metrics.config_reloads.labels("applied" if outcome else "rejected").inc()
            if outcome:
                self.invalidator.follow_config(source.current)

    async def _mark_ready(self, servers: list[uvicorn.Server]) -> None:
        # uvicorn exposes start-up only as a flag, so it is polled.
        while not all(srv.started for srv in servers):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        if self.shared is not None:
            # Hearing the other replicas drops memory and the answers in flight: ready
            # once that has happened (or could not, within FIRST_LISTEN_SECONDS).
            deadline = asyncio.get_running_loop().time() + FIRST_LISTEN_SECONDS
            while not self.shared.listening and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        self.ready = True
        # Everything allocated so far (framework, models, clients) lives as long as the
        # process: keep it out of the collector's generations, so that collections on
        # the request path only walk the request's own garbage.
        gc.collect()
        gc.freeze()
        logger.info("sidecar ready", extra={"servers": [s.name for s in self.config().servers]})


class ProxyApp:
    """The proxy listener: a plain ASGI app with one route, `/mcp/<server>`, and the
    admin endpoints under `/admin/`.

    No framework routing or middleware on this path: a cache hit is a handful of
    microseconds of work, and per-request framework layers would cost more than that.
    """

    def __init__(self, proxy: Proxy, admin: Admin, tracer: Tracer | None = None) -> None:
        self.proxy = proxy
        self.admin = admin
        self.tracer = tracer
        """Set when tracing is on: each MCP request is then answered inside its span."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # no lifespan: the listeners run with lifespan="off"
            return
        path: str = scope["path"]
        name = path[5:] if path.startswith("/mcp/") else ""
        if not name and path.startswith("/admin/"):
            await self.admin(scope, receive, send)
            return
        response: ASGIApp
        if not name or "/" in name:
            response = ProxyError(
                404, UNKNOWN_SERVER, f"no MCP endpoint at {path}; use /mcp/<server>"
            ).to_response()
        elif scope["method"] not in ("POST", "GET", "DELETE"):
            response = ProxyError(
                405,
                INVALID_REQUEST,
                f"method {scope['method']} is not allowed; use POST, GET or DELETE",
                headers={"allow": "POST, GET, DELETE"},
            ).to_response()
        elif self.tracer is not None:
            await self.tracer.serve(scope, receive, send, self.proxy, name)
            return
        else:
            response = await self.proxy.handle(Incoming(scope, receive), name)
        await response(scope, receive, send)


class MetricsApp:
    """The metrics listener: `/metrics`, prometheus-client's own app (which negotiates
    the format and the compression), `/healthz` and `/readyz`.

    A plain ASGI app, as the proxy's is: every probe and every scrape of an idle pod
    comes here, and a framework here would be loaded by every sidecar (FastAPI's import
    is about 6 MiB: benchmarks/idle_memory.py). Other paths and methods get the answers
    FastAPI gave them before.
    """

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.exposition: ASGIApp = make_asgi_app(sidecar.metrics.registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # no lifespan: the listeners run with lifespan="off"
            return
        path: str = scope["path"]
        response: ASGIApp
        if path not in _METRICS_PATHS:
            response = JSONResponse({"detail": "Not Found"}, 404)
        elif scope["method"] != "GET":
            response = JSONResponse({"detail": "Method Not Allowed"}, 405, {"allow": "GET"})
        elif path == "/metrics":
            response = self.exposition
            scope = _readable(scope)
        elif path == "/healthz":
            response = JSONResponse({"status": "ok"})
        elif not self.sidecar.ready:
            response = JSONResponse({"status": "starting"}, 503)
        else:
            servers = len(self.sidecar.config().servers)
            response = JSONResponse({"status": "ready", "servers": servers})
        await response(scope, receive, send)


_METRICS_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


def _readable(scope: Scope) -> Scope:
    """A scrape as prometheus-client can read it: it decodes `Accept` and
    `Accept-Encoding` as UTF-8, so a value that is not is left out (the default format,
    uncompressed, answers), where it would fail the scrape."""
    headers = scope["headers"]
    kept = [(name, value) for name, value in headers if _utf8(value)]
    return scope if len(kept) == len(headers) else {**scope, "headers": kept}


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def _server(app: ASGIApp, address: Address, config: SidecarConfig) -> uvicorn.Server:
    return uvicorn.Server(
        uvicorn_config(
            app,
            address.host,
            address.port,
            header_timeout=config.header_timeout,
            max_connections=config.max_connections,
            send_timeout=config.send_timeout,
        )
    )
