"""The sidecar's configuration: one typed model, read from a YAML or JSON file.

This is the single source of truth for the config format. The operator imports it to
write each namespace's ConfigMap, so what the operator writes is, by construction,
what the sidecar reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self
from urllib.parse import urlsplit

from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from .errors import environment_problem
from .fields import (
    DEFAULT_LISTEN_PORT,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_METRICS_PORT,
    Duration,
    Model,
    Quantity,
)
from .servers import (
    Server,
)
from .shared import SharedCache, shared_from_environment
from .tracing import Tracing

APP_ID_ENV = "MCPCACHE_APP_ID"
LISTEN_PORT_ENV = "MCPCACHE_LISTEN_PORT"
METRICS_HOST_ENV = "MCPCACHE_METRICS_HOST"
METRICS_PORT_ENV = "MCPCACHE_METRICS_PORT"
CACHE_MAX_ENTRIES_ENV = "MCPCACHE_CACHE_MAX_ENTRIES"
CACHE_MAX_BYTES_ENV = "MCPCACHE_CACHE_MAX_BYTES"


class Address(Model):
    host: str
    port: int = Field(ge=0, le=65535)


class CacheLimits(Model):
    """The one shared cache's budget: whichever limit is reached first applies."""

    max_entries: int = Field(default=DEFAULT_MAX_ENTRIES, ge=1)
    max_bytes: Quantity = DEFAULT_MAX_BYTES


class SidecarConfig(Model):
    """The whole sidecar configuration. Every field but `servers` has a default."""

    app_id: str = Field(default="default", min_length=1)
    listen: Address = Address(host="127.0.0.1", port=DEFAULT_LISTEN_PORT)
    metrics: Address = Address(host="127.0.0.1", port=DEFAULT_METRICS_PORT)
    """Loopback unless told otherwise; in a pod the operator binds it to the pod IP."""
    cache: CacheLimits = CacheLimits()
    shared_cache: SharedCache | None = None
    """Off unless set: the sidecar then caches in its own memory only."""
    max_request_bytes: Quantity = DEFAULT_MAX_REQUEST_BYTES
    max_header_bytes: Quantity = DEFAULT_MAX_HEADER_BYTES
    header_timeout: Duration = Field(default=10.0, gt=0)
    """Seconds a connection has to send a whole request, headers and body (both
    listeners); a slower one is closed."""
    send_timeout: Duration = Field(default=30.0, gt=0)
    """Seconds a response may wait for its client to take any of its bytes (the
    connection's buffers full) before the connection is reset (both listeners)."""
    max_connections: int = Field(default=1000, ge=1)
    """Connections or requests in flight a listener takes before answering 503."""
    allowed_hosts: tuple[str, ...] = ()
    """Extra `Host` values the listener accepts besides loopback names (DNS-rebinding guard)."""
    tracing: Tracing = Tracing()
    """Off unless set or the `OTEL_*` variables say so (see `config.tracing`)."""
    servers: tuple[Server, ...]

    @model_validator(mode="after")
    def _unique_server_names(self) -> Self:
        seen: set[str] = set()
        for server in self.servers:
            if server.name in seen:
                raise ValueError(f"server name {server.name!r} appears more than once")
            seen.add(server.name)
        return self

    def check_not_self(self) -> None:
        """Refuse a server URL that points back at this sidecar's own listener: every
        request to it would loop through the sidecar until memory ran out."""
        for server in self.servers:
            parts = urlsplit(server.url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if parts.hostname in _LOOPBACK and port == self.listen.port:
                raise ValueError(
                    f"server {server.name!r} points at the sidecar's own listener ({server.url})"
                )

    def server(self, name: str) -> Server | None:
        for server in self.servers:
            if server.name == name:
                return server
        return None

    def to_document(self) -> dict[str, Any]:
        """The file form: camelCase keys, durations and quantities as strings."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def with_environment(self, environ: Mapping[str, str]) -> SidecarConfig:
        """Apply the environment overrides: app id, the two ports, the cache budget, the
        shared tier.

        In Kubernetes these come from the injected container (the app id from the pod,
        the budget from the operator's settings), the servers from the namespace's
        ConfigMap."""
        update: dict[str, Any] = {}
        if app_id := environ.get(APP_ID_ENV):
            update["app_id"] = app_id
        if port := environ.get(LISTEN_PORT_ENV):
            update["listen"] = self.listen.model_copy(update={"port": _port(LISTEN_PORT_ENV, port)})
        metrics: dict[str, Any] = {}
        if host := environ.get(METRICS_HOST_ENV):
            metrics["host"] = host
        if port := environ.get(METRICS_PORT_ENV):
            metrics["port"] = _port(METRICS_PORT_ENV, port)
        if metrics:
            update["metrics"] = self.metrics.model_copy(update=metrics)
        limits: dict[str, Any] = {}
        if entries := environ.get(CACHE_MAX_ENTRIES_ENV):
            if not entries.isascii() or not entries.isdigit() or int(entries) < 1:
                raise ValueError(
                    environment_problem(CACHE_MAX_ENTRIES_ENV, entries, "use a whole number from 1")
                )
            limits["maxEntries"] = int(entries)
        if size := environ.get(CACHE_MAX_BYTES_ENV):
            limits["maxBytes"] = size
        if limits:
            current = self.cache.model_dump(by_alias=True)
            try:
                update["cache"] = CacheLimits.model_validate(current | limits)
            except ValidationError:
                raise ValueError(
                    environment_problem(
                        CACHE_MAX_BYTES_ENV,
                        environ.get(CACHE_MAX_BYTES_ENV, ""),
                        "use a size such as 64Mi",
                    )
                ) from None
        if (shared := shared_from_environment(self.shared_cache, environ)) is not None:
            update["shared_cache"] = shared
        return self.model_copy(update=update) if update else self


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _port(variable: str, value: str) -> int:
    if not value.isascii() or not value.isdigit() or int(value) > 65535:
        raise ValueError(environment_problem(variable, value, "use a port number from 0 to 65535"))
    return int(value)
