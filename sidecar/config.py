"""The sidecar's configuration: one typed model, read from a YAML or JSON file.

This is the single source of truth for the config format. The operator imports it to
write each namespace's ConfigMap, so what the operator writes is, by construction,
what the sidecar reads.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .units import format_duration, format_quantity, parse_duration, parse_quantity

DEFAULT_TTL_SECONDS = 30.0
DEFAULT_MAX_SIZE = 64 << 10
MAX_SIZE_CEILING = 1 << 20
"""A per-response cap above this is clamped to it, not refused."""
DEFAULT_MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_MAX_REQUEST_BYTES = 4 << 20
DEFAULT_MAX_HEADER_BYTES = 64 << 10
MAX_TTL_SECONDS = 24 * 3600.0
"""The longest `ttl` and `metadataTTL` a server may ask for (the CRD says the same)."""
DEFAULT_LISTEN_PORT = 3500
DEFAULT_METRICS_PORT = 9090

# The resource this configuration mirrors. The operator and its CRD use these names; the
# sidecar itself never talks to Kubernetes.
RESOURCE_GROUP = "mcpcache.io"
RESOURCE_VERSION = "v1alpha1"
RESOURCE_KIND = "MCPServer"
RESOURCE_PLURAL = "mcpservers"

DEFAULT_IDENTITY_HEADERS = ("authorization", "proxy-authorization", "cookie", "x-api-key")
"""Request headers that identify an end user: each value present is hashed into the key."""

ALWAYS_KEYED_HEADERS = ("mcp-session-id", "mcp-protocol-version")
"""The legacy session and the protocol version: in the key whatever the config says."""
MAX_IGNORED_HEADERS = 32

APP_ID_ENV = "MCPCACHE_APP_ID"
LISTEN_PORT_ENV = "MCPCACHE_LISTEN_PORT"
METRICS_HOST_ENV = "MCPCACHE_METRICS_HOST"
METRICS_PORT_ENV = "MCPCACHE_METRICS_PORT"
CACHE_MAX_ENTRIES_ENV = "MCPCACHE_CACHE_MAX_ENTRIES"
CACHE_MAX_BYTES_ENV = "MCPCACHE_CACHE_MAX_BYTES"
SHARED_CACHE_URL_ENV = "MCPCACHE_SHARED_CACHE_URL"
SHARED_CACHE_TIMEOUT_ENV = "MCPCACHE_SHARED_CACHE_TIMEOUT"
SHARED_CACHE_USERNAME_ENV = "MCPCACHE_SHARED_CACHE_USERNAME"
SHARED_CACHE_PASSWORD_ENV = "MCPCACHE_SHARED_CACHE_PASSWORD"
SHARED_CACHE_NAMESPACES_ENV = "MCPCACHE_SHARED_CACHE_NAMESPACES"
NAMESPACE_ENV = "MCPCACHE_NAMESPACE"
DEFAULT_SHARED_TIMEOUT = 0.05
DEFAULT_SHARED_RETRY_AFTER = 5.0


def _duration(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError("expected a duration such as 30s or 5m")


def _quantity(value: Any) -> int:
    if isinstance(value, int | str) and not isinstance(value, bool):
        return parse_quantity(value)
    raise ValueError("expected a size such as 64Ki or 1Mi")


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError("must not be negative")
    return value


Duration = Annotated[
    float,
    BeforeValidator(_duration),
    AfterValidator(_non_negative),
    PlainSerializer(format_duration, return_type=str),
]
"""Seconds in memory; a Go-style duration string in files."""

Quantity = Annotated[
    int,
    BeforeValidator(_quantity),
    PlainSerializer(format_quantity, return_type=str),
]
"""Bytes in memory; a Kubernetes quantity string in files."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


MAX_TOOL_RULES = 64
MAX_RULE_NAMES = 32
MAX_GLOB_LENGTH = 128

Glob = Annotated[str, Field(min_length=1, max_length=MAX_GLOB_LENGTH, pattern=r"^[^\x00-\x1f]+$")]
"""A tool-name pattern in `fnmatch` syntax (`*`, `?`, `[...]`), matched case-sensitively."""


def _distinct(values: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(values)) != len(values):
        raise ValueError("must not name the same value twice")
    return values


Names = Annotated[tuple[Glob, ...], Field(max_length=MAX_RULE_NAMES), AfterValidator(_distinct)]


def is_catch_all(glob: str) -> bool:
    """A pattern every tool name matches (`*`, `**`, ...)."""
    return set(glob) == {"*"}


class ToolRule(_Model):
    """How one tool (or a family, by glob) is cached; the first matching rule applies."""

    name: Glob
    enabled: bool | None = Field(default=None, strict=True)
    """Unset: the server's `enabled` (and `onlyReadOnlyTools`) decide."""
    ttl: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """Unset: the server's `ttl`."""
    ignore_arguments: Names = ()
    """Top-level arguments left out of the key (request ids, nonces): calls that differ
    only in them share an entry. The caller and the credential always stay in the key."""
    invalidates: Names = ()
    """Globs of tools whose entries a successful call of this tool removes, for every
    caller. Such a tool writes: it is never cached itself."""

    @model_validator(mode="after")
    def _writes_are_not_cached(self) -> Self:
        if self.enabled and self.invalidates:
            raise ValueError(
                "a tool that invalidates others changes state and cannot be cached: "
                "drop enabled: true"
            )
        return self

    def matches(self, tool: str) -> bool:
        return fnmatch.fnmatchcase(tool, self.name)

    def shadowed_by(self, earlier: ToolRule) -> bool:
        """`earlier` matches every name this rule could match, so this one never applies."""
        if is_catch_all(earlier.name) or earlier.name == self.name:
            return True
        literal = not any(c in self.name for c in "*?[")
        return literal and earlier.matches(self.name)


_RULE_MEMO_LIMIT = 4096


def _header_names(names: tuple[str, ...]) -> tuple[str, ...]:
    lowered = tuple(dict.fromkeys(name.lower() for name in names))
    for name in lowered:
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
    return lowered


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")


class ServerCache(_Model):
    """Per-server caching policy, mirroring the MCPServer's `spec.cache`.

    The bounds are the CRD's too (a test runs one table of values through both)."""

    enabled: bool = False
    ttl: Duration = Field(default=DEFAULT_TTL_SECONDS, gt=0, le=MAX_TTL_SECONDS)
    max_size: Quantity = Field(default=DEFAULT_MAX_SIZE, ge=1)
    metadata_ttl: Duration | None = Field(
        default=None, alias="metadataTTL", gt=0, le=MAX_TTL_SECONDS
    )
    """How long list results and `server/discover` are cached (per caller); unset: never."""
    stale_if_error: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long past its TTL an entry may answer when the upstream fails; unset: never."""
    stale_while_revalidate: Duration | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """How long past its TTL an entry may answer at once while it is fetched again."""
    only_read_only_tools: bool = Field(default=False, strict=True)
    """Cache only tools the server's `tools/list` marks `readOnlyHint: true` (a rule with
    `enabled: true` overrides); a tool the sidecar has not seen listed is not cached."""
    tools: tuple[ToolRule, ...] = Field(default=(), max_length=MAX_TOOL_RULES)
    identity_headers: Annotated[tuple[str, ...], AfterValidator(_header_names)] = (
        DEFAULT_IDENTITY_HEADERS
    )
    """Headers whose values (hashed) separate one end user's entries from another's,
    always, and that a request must send at most once."""
    ignore_headers: Annotated[tuple[str, ...], AfterValidator(_header_names)] = Field(
        default=(), max_length=MAX_IGNORED_HEADERS
    )
    """Forwarded request headers that do not change the answer (a per-request id, say),
    left out of the key. Every other forwarded header is key material (fail closed)."""
    ignore_set_cookie: bool = False
    """Store answers that set a cookie (a load balancer's affinity cookie, say). The
    cookie still reaches only the caller it was set for; it is never stored."""

    @model_validator(mode="after")
    def _identity_is_never_ignored(self) -> Self:
        never = {*DEFAULT_IDENTITY_HEADERS, *self.identity_headers, *ALWAYS_KEYED_HEADERS}
        named = sorted(never.intersection(self.ignore_headers))
        if named:
            raise ValueError(
                f"ignoreHeaders cannot name {', '.join(named)}: it carries identity or the "
                "protocol and always stays in the key"
            )
        return self

    @functools.cached_property
    def _rule_memo(self) -> dict[str, ToolRule | None]:
        return {}

    def rule_for(self, tool: str) -> ToolRule | None:
        """The first rule whose glob matches `tool`, or None (the server's defaults).

        Remembered per tool name for the life of this config, so a hit pays one dict
        lookup; the memo is bounded, since tool names come from callers."""
        if not self.tools:
            return None
        memo = self._rule_memo
        try:
            return memo[tool]
        except KeyError:
            pass
        rule = next((r for r in self.tools if r.matches(tool)), None)
        if len(memo) >= _RULE_MEMO_LIMIT:
            memo.clear()
        memo[tool] = rule
        return rule

    def shadowed_rules(self) -> list[tuple[ToolRule, ToolRule]]:
        """Each rule that can never apply, with the earlier rule that hides it."""
        found = []
        for i, rule in enumerate(self.tools):
            earlier = next((e for e in self.tools[:i] if rule.shadowed_by(e)), None)
            if earlier is not None:
                found.append((rule, earlier))
        return found

    @property
    def effective_max_size(self) -> int:
        return min(self.max_size, MAX_SIZE_CEILING)

    @property
    def max_size_clamped(self) -> bool:
        return self.max_size > MAX_SIZE_CEILING

    @property
    def keep_stale(self) -> float:
        """How long an expired entry of this server is kept for stale answers."""
        return max(self.stale_if_error or 0.0, self.stale_while_revalidate or 0.0)


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http or https URL")
    return value


class Server(_Model):
    """One upstream MCP server the sidecar proxies, reached at `/mcp/<name>`."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)
    url: Annotated[str, AfterValidator(_http_url)]
    timeout: Duration = 30.0
    cache: ServerCache = ServerCache()
    purge: str | None = Field(default=None, max_length=256)
    """A purge marker (the operator copies the MCPServer's `mcpcache.io/purge` annotation
    here): when it changes, every sidecar following this config drops the server's entries."""


class Address(_Model):
    host: str
    port: int = Field(ge=0, le=65535)


class CacheLimits(_Model):
    """The one shared cache's budget: whichever limit is reached first applies."""

    max_entries: int = Field(default=DEFAULT_MAX_ENTRIES, ge=1)
    max_bytes: Quantity = DEFAULT_MAX_BYTES


def _redis_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("expected a redis://, rediss:// or unix:// URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("the URL names no host")
    return value


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be positive")
    return value


class SharedCache(_Model):
    """The optional second tier on Redis, shared by the sidecars of one app.

    Credentials are read from the environment when the tier starts (never kept in this
    model, so that printing a configuration never prints them), or from the URL."""

    url: Annotated[str, AfterValidator(_redis_url)]
    timeout: Annotated[Duration, AfterValidator(_positive)] = DEFAULT_SHARED_TIMEOUT
    """The bound on every Redis operation; past it the request goes on without Redis."""
    retry_after: Annotated[Duration, AfterValidator(_positive)] = DEFAULT_SHARED_RETRY_AFTER
    """How long a failing Redis is left alone before it is tried again."""
    namespace: str = Field(
        default="default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63
    )
    """The first part of every key's prefix (the pod's namespace in Kubernetes)."""

    def redacted(self) -> SharedCache:
        """The same settings with any password in the URL masked, for printing."""
        parts = urlsplit(self.url)
        if parts.password is None:
            return self
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return self.model_copy(update={"url": parts._replace(netloc=netloc).geturl()})


class SidecarConfig(_Model):
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
            update["listen"] = self.listen.model_copy(update={"port": int(port)})
        metrics: dict[str, Any] = {}
        if host := environ.get(METRICS_HOST_ENV):
            metrics["host"] = host
        if port := environ.get(METRICS_PORT_ENV):
            metrics["port"] = int(port)
        if metrics:
            update["metrics"] = self.metrics.model_copy(update=metrics)
        limits: dict[str, Any] = {}
        if entries := environ.get(CACHE_MAX_ENTRIES_ENV):
            limits["maxEntries"] = int(entries)
        if size := environ.get(CACHE_MAX_BYTES_ENV):
            limits["maxBytes"] = size
        if limits:
            current = self.cache.model_dump(by_alias=True)
            update["cache"] = CacheLimits.model_validate(current | limits)
        if (shared := self._shared_from_environment(environ)) is not None:
            update["shared_cache"] = shared
        return self.model_copy(update=update) if update else self

    def _shared_from_environment(self, environ: Mapping[str, str]) -> SharedCache | None:
        """The shared tier as the environment amends it, or None when unchanged: in
        Kubernetes the URL and the timeout come from the operator's settings, the
        namespace from the pod (the downward API). When the environment also lists
        namespaces, its URL applies only to sidecars in one of them."""
        if listed := environ.get(SHARED_CACHE_NAMESPACES_ENV, "").strip():
            chosen = {name.strip() for name in listed.split(",")}
            if environ.get(NAMESPACE_ENV) not in chosen:
                environ = {k: v for k, v in environ.items() if k != SHARED_CACHE_URL_ENV}
        names = {
            SHARED_CACHE_URL_ENV: "url",
            SHARED_CACHE_TIMEOUT_ENV: "timeout",
            NAMESPACE_ENV: "namespace",
        }
        changes = {field: environ[name] for name, field in names.items() if environ.get(name)}
        current = self.shared_cache.model_dump() if self.shared_cache is not None else {}
        if not changes or "url" not in current | changes:
            return None
        return SharedCache.model_validate(current | changes)


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class ConfigError(ValueError):
    """The file could not be read or does not describe a valid configuration."""


def _document(text: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML or JSON: {exc}") from exc
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError("the top level must be a mapping")
    return document


def _validated(document: Mapping[str, Any], environ: Mapping[str, str] | None) -> SidecarConfig:
    try:
        config = SidecarConfig.model_validate(document)
        config = config.with_environment(os.environ if environ is None else environ)
        config.check_not_self()
        return config
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def parse_config(text: str, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Parse YAML or JSON (JSON is YAML) text into a config, applying the environment."""
    return _validated(_document(text), environ)


SERVERS_FILE_KEYS = frozenset({"servers"})
"""What the sidecar takes from an operator-owned servers file (`--servers-file`)."""

logger = logging.getLogger("mcpcache.sidecar.config")


def parse_servers_file(text: str, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Parse an operator-owned file: only its `servers`; every other setting comes from
    the defaults and the environment (the injected container's own arguments).

    In Kubernetes this file is the namespace's ConfigMap, which anyone who may edit
    ConfigMaps there can change. Listeners, budgets, limits and allowed hosts must not be
    theirs to set, so other top-level keys are ignored, with a warning naming them."""
    document = _document(text)
    if ignored := sorted(str(key) for key in document if key not in SERVERS_FILE_KEYS):
        logger.warning(
            "servers file: keys other than 'servers' are ignored; set them on the "
            "sidecar's command line or environment",
            extra={"ignored": ignored},
        )
    return _validated({k: v for k, v in document.items() if k in SERVERS_FILE_KEYS}, environ)


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return parse_config(text, environ)


def dump_config(config: SidecarConfig) -> str:
    """Serialise as YAML in the file form (stable key order, for diffable ConfigMaps)."""
    return yaml.safe_dump(config.to_document(), sort_keys=False)


def dump_servers(servers: tuple[Server, ...]) -> str:
    """The servers file: `servers` only, in the same file form."""
    document = SidecarConfig(servers=servers).to_document()
    return yaml.safe_dump({"servers": document["servers"]}, sort_keys=False)
