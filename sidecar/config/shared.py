"""The shared tier's settings: where Redis is (one server, a Cluster or a Sentinel-managed
primary), how long an operation may take, and how the environment amends them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, ValidationError, model_validator

from .errors import problem
from .fields import DEFAULT_SHARED_RETRY_AFTER, DEFAULT_SHARED_TIMEOUT, Duration, Model

SHARED_CACHE_URL_ENV = "MCPCACHE_SHARED_CACHE_URL"
SHARED_CACHE_CLUSTER_NODES_ENV = "MCPCACHE_SHARED_CACHE_CLUSTER_NODES"
SHARED_CACHE_SENTINEL_NODES_ENV = "MCPCACHE_SHARED_CACHE_SENTINEL_NODES"
SHARED_CACHE_SENTINEL_MASTER_ENV = "MCPCACHE_SHARED_CACHE_SENTINEL_MASTER"
SHARED_CACHE_TIMEOUT_ENV = "MCPCACHE_SHARED_CACHE_TIMEOUT"
SHARED_CACHE_USERNAME_ENV = "MCPCACHE_SHARED_CACHE_USERNAME"
SHARED_CACHE_PASSWORD_ENV = "MCPCACHE_SHARED_CACHE_PASSWORD"
SHARED_CACHE_NAMESPACES_ENV = "MCPCACHE_SHARED_CACHE_NAMESPACES"
NAMESPACE_ENV = "MCPCACHE_NAMESPACE"

LOCATION_ENV = (
    SHARED_CACHE_URL_ENV,
    SHARED_CACHE_CLUSTER_NODES_ENV,
    SHARED_CACHE_SENTINEL_NODES_ENV,
    SHARED_CACHE_SENTINEL_MASTER_ENV,
)
"""The variables that say where Redis is (the ones a namespace list can withhold)."""

Mode = Literal["standalone", "cluster", "sentinel"]


def _redis_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("expected a redis://, rediss:// or unix:// URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("the URL names no host")
    return value


def _node_url(value: str) -> str:
    """A node of a Cluster or a Sentinel: a host and port over TCP, with or without TLS."""
    parts = urlsplit(_redis_url(value))
    if parts.scheme == "unix":
        raise ValueError("a node is redis://host:port or rediss://host:port")
    return value


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError(f"{value:g}s is not allowed: must be positive")
    return value


NodeUrl = Annotated[str, AfterValidator(_node_url)]


def _same_scheme(nodes: tuple[str, ...]) -> tuple[str, ...]:
    if len({urlsplit(node).scheme for node in nodes}) > 1:
        raise ValueError("the nodes mix redis:// and rediss://; use one for all")
    return nodes


Nodes = Annotated[tuple[NodeUrl, ...], Field(min_length=1), AfterValidator(_same_scheme)]


class ClusterNodes(Model):
    """Redis Cluster: seed nodes; the client discovers the others and follows redirections."""

    nodes: Nodes


class SentinelNodes(Model):
    """A primary that Redis Sentinel watches and fails over: the sentinels and the name
    they know the primary by. The database, TLS and credentials in a node URL apply to
    the sentinels; the primary takes the database and TLS of the first node and the
    credentials of the environment."""

    nodes: Nodes
    master: str = Field(min_length=1)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


class SharedCache(Model):
    """The optional second tier on Redis, shared by the sidecars of one app: exactly one
    of `url` (one Redis), `cluster` or `sentinel`.

    Credentials are read from the environment when the tier starts (never kept in this
    model, so that printing a configuration never prints them), or from the URLs."""

    url: Annotated[str, AfterValidator(_redis_url)] | None = None
    cluster: ClusterNodes | None = None
    sentinel: SentinelNodes | None = None
    timeout: Annotated[Duration, AfterValidator(_positive)] = DEFAULT_SHARED_TIMEOUT
    """The bound on every Redis operation; past it the request goes on without Redis."""
    retry_after: Annotated[Duration, AfterValidator(_positive)] = DEFAULT_SHARED_RETRY_AFTER
    """How long a failing Redis is left alone before it is tried again."""
    namespace: str = Field(
        default="default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63
    )
    """The first part of every key's prefix (the pod's namespace in Kubernetes)."""

    @model_validator(mode="after")
    def _one_location(self) -> Self:
        given = [name for name in ("url", "cluster", "sentinel") if getattr(self, name)]
        if len(given) != 1:
            found = " and ".join(given) if given else "none"
            raise ValueError(
                f"sharedCache needs exactly one of url, cluster or sentinel (found {found})"
            )
        return self

    @property
    def mode(self) -> Mode:
        if self.cluster is not None:
            return "cluster"
        return "sentinel" if self.sentinel is not None else "standalone"

    @property
    def urls(self) -> tuple[str, ...]:
        """Every URL that says where Redis is (one, or the nodes)."""
        if self.cluster is not None:
            return self.cluster.nodes
        if self.sentinel is not None:
            return self.sentinel.nodes
        return (self.url,) if self.url else ()

    def redacted(self) -> SharedCache:
        """The same settings with any password in a URL masked, for printing."""
        update: dict[str, Any] = {}
        if self.url and _redact(self.url) != self.url:
            update["url"] = _redact(self.url)
        for name in ("cluster", "sentinel"):
            nodes = getattr(self, name)
            masked = tuple(_redact(node) for node in nodes.nodes) if nodes else ()
            if nodes and masked != nodes.nodes:
                update[name] = nodes.model_copy(update={"nodes": masked})
        return self.model_copy(update=update) if update else self


def _listed(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def shared_from_environment(
    current: SharedCache | None, environ: Mapping[str, str]
) -> SharedCache | None:
    """The shared tier as the environment amends it, or None when unchanged: in Kubernetes
    where Redis is and the timeout come from the operator's settings, the namespace from
    the pod (the downward API). When the environment also lists namespaces, where Redis is
    applies only to sidecars in one of them. A location in the environment replaces the
    file's (a URL, cluster nodes, or sentinel nodes with the primary's name); two are
    refused."""
    listed = environ.get(SHARED_CACHE_NAMESPACES_ENV, "").strip()
    if listed and environ.get(NAMESPACE_ENV) not in set(_listed(listed)):
        environ = {k: v for k, v in environ.items() if k not in LOCATION_ENV}
    changes: dict[str, Any] = {}
    if url := environ.get(SHARED_CACHE_URL_ENV):
        changes["url"] = url
    if nodes := environ.get(SHARED_CACHE_CLUSTER_NODES_ENV):
        changes["cluster"] = {"nodes": _listed(nodes)}
    sentinels = environ.get(SHARED_CACHE_SENTINEL_NODES_ENV)
    master = environ.get(SHARED_CACHE_SENTINEL_MASTER_ENV)
    if sentinels or master:
        changes["sentinel"] = {"nodes": _listed(sentinels or ""), "master": master or ""}
    document = current.model_dump() if current is not None else {}
    if changes:  # the environment's location replaces the file's
        document.update(url=None, cluster=None, sentinel=None)
    for name, field in ((SHARED_CACHE_TIMEOUT_ENV, "timeout"), (NAMESPACE_ENV, "namespace")):
        if value := environ.get(name):
            changes[field] = value
    if not changes or not any((document | changes).get(k) for k in ("url", "cluster", "sentinel")):
        return None
    try:
        return SharedCache.model_validate(document | changes)
    except ValidationError as exc:
        raise ValueError("\n".join(_environment_problems(exc, changes))) from None


def _environment_problems(exc: ValidationError, changes: Mapping[str, Any]) -> list[str]:
    """Each problem named by the variable its value came from (the file's by its field)."""
    variables: dict[tuple[str, ...], str] = {
        ("url",): SHARED_CACHE_URL_ENV,
        ("cluster",): SHARED_CACHE_CLUSTER_NODES_ENV,
        ("sentinel", "master"): SHARED_CACHE_SENTINEL_MASTER_ENV,
        ("sentinel",): SHARED_CACHE_SENTINEL_NODES_ENV,
        ("timeout",): SHARED_CACHE_TIMEOUT_ENV,
        ("namespace",): NAMESPACE_ENV,
    }
    lines = []
    for error in exc.errors():
        path = tuple(str(part) for part in error["loc"])
        variable = next(
            (name for where, name in variables.items() if path[: len(where)] == where), None
        )
        if path and path[0] in changes and variable is not None:
            error["loc"] = ()
            lines.append(problem(error, None, f"{variable} (sharedCache.{'.'.join(path)})"))
        else:
            lines.append(problem(error, SharedCache, "sharedCache"))
    return list(dict.fromkeys(lines))
