"""The operator's own client for what it sends the API itself: its writes (ConfigMaps,
statuses, events, the Lease) and its own reads (listings, the ConfigMap watch).

Our own rather than the `kubernetes` package, which the product otherwise uses (for its
credentials, and kopf's login): that package is synchronous, so each call takes a thread
from a pool, and its model layer costs CPU on every call. Measured with
`bash benchmarks/operator_client.sh 1000` (a status merge patch, 16 at a time, on the
test control plane): 0.89 ms of CPU per call with the package, 0.52 ms with this client.
A run of 10,000 MCPServers sends about 15,000 writes: the package would add about half a
millisecond per MCPServer, a fifth of the operator's whole budget. This client sends
JSON over one pooled aiohttp session, on the event loop, with a timeout on every
request, and counts what it sends (the operator's writes and reads are a figure we
benchmark). Credentials come from the `kubernetes` package's configuration loaders: in
a pod the service-account token (re-read as the kubelet rotates it), elsewhere a
kubeconfig.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
from kubernetes import client, config

from ..metrics import OperatorMetrics

API_TIMEOUT = 30.0
"""Seconds any one API call may take; a pass that times out is retried."""

MERGE_PATCH = "application/merge-patch+json"
TOKEN_REFRESH = 60.0


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


def load_configuration() -> client.Configuration:
    """In a pod, the service account; elsewhere, $KUBECONFIG or ~/.kube/config."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


class NotHolding(Exception):
    """A fenced write refused: this replica's hold on the Lease has ended."""

    quiet = True  # expected: retried, logged at DEBUG (see `scheduling`)


class KubeAPI:
    def __init__(
        self,
        configuration: client.Configuration,
        metrics: OperatorMetrics,
        connections: int = 16,
        timeout: float = API_TIMEOUT,
    ) -> None:
        self.configuration = configuration
        self.metrics = metrics
        self.base = str(configuration.host).rstrip("/")
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        if not configuration.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._ssl = context
        self._connections = connections
        self._slots = asyncio.Semaphore(connections)
        """Requests in flight (watches aside): a request waits here, not in the pool, so
        its timeout and its fence start when it is sent."""
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._cached_token: str | None = None
        self._token_until = 0.0

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "mcpcache-operator"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self._token()
        if token:
            headers["Authorization"] = token
        return headers

    def _token(self) -> str | None:
        """The bearer token, asked of the configuration (whose refresh hook re-reads a
        rotated service-account token) once a minute: asking costs more than a request."""
        now = time.monotonic()
        if now >= self._token_until:
            self._cached_token = self.configuration.get_api_key_with_prefix(
                "BearerToken", alias="authorization"
            )
            self._token_until = now + TOKEN_REFRESH
        return self._cached_token

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Requests are bounded by `_slots`; watches hold a connection each beside them.
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def request(
        self,
        method: str,
        resource: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        fence: Callable[[], float] | None = None,
    ) -> dict[str, Any]:
        """One call. With `fence` (seconds this replica may still write), it is sent
        only while the fence is open, and given no longer than it stays open."""
        session = self._open()
        async with self._slots:
            limit = self._timeout
            if fence is not None:
                remaining = fence()
                if remaining <= 0:
                    raise NotHolding(f"{method} {path}: not holding the lease")
                if remaining < float(self._timeout.total or API_TIMEOUT):
                    limit = aiohttp.ClientTimeout(total=remaining)
            self.metrics.api_requests.labels(method, resource).inc()
            async with session.request(
                method,
                self.base + path,
                json=body,
                headers=self._headers(content_type if body is not None else None),
                timeout=limit,
            ) as response:
                if response.status >= 400:
                    raise ApiError(response.status, method, path, await response.text())
                result: dict[str, Any] = await response.json(content_type=None)
                return result

    async def stream(self, resource: str, path: str, silence: float) -> AsyncIterator[Any]:
        """The JSON documents of a watch, one a line, until the server ends it (it does
        after the request's `timeoutSeconds`; `silence` bounds the time between lines,
        which bookmarks keep short)."""
        session = self._open()
        self.metrics.api_requests.labels("WATCH", resource).inc()
        limit = aiohttp.ClientTimeout(total=None, sock_connect=API_TIMEOUT, sock_read=silence)
        async with session.get(
            self.base + path, headers=self._headers(None), timeout=limit
        ) as response:
            if response.status >= 400:
                raise ApiError(response.status, "WATCH", path, await response.text())
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
