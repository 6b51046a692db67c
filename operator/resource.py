"""From an MCPServer resource to the sidecar's server configuration.

The CRD schema has already refused what is malformed and filled in defaults; this is
where the operator normalises what is valid but needs a decision: a `maxSize` above
the 1Mi ceiling is clamped, not refused; a tool rule hidden behind an earlier one is
reported, not refused; the purge annotation becomes the server's purge marker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from mcpcache.sidecar.config import MAX_SIZE_CEILING, Server, ServerCache
from mcpcache.sidecar.config.errors import problems
from mcpcache.sidecar.config.units import format_quantity

PURGE_ANNOTATION: Final = "mcpcache.io/purge"
"""Any new value on an MCPServer makes every sidecar of its namespace drop its entries."""
_MAX_MARKER: Final = 128


def purge_marker(annotations: Mapping[str, str] | None) -> str | None:
    """The purge marker the sidecars compare: the annotation's value, or a digest of a
    long one (a new value still gives a new marker)."""
    value = (annotations or {}).get(PURGE_ANNOTATION)
    if not value:
        return None
    if len(value) > _MAX_MARKER:
        return "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    return value


@dataclass(frozen=True)
class ResolvedServer:
    """What the sidecar will do for one MCPServer, or why it cannot."""

    server: Server | None
    clamped_from: str | None = None
    """The requested `maxSize` when it was clamped to the ceiling."""
    error: str | None = None
    shadowed: tuple[tuple[str, str], ...] = ()
    """(rule, earlier rule) name pairs: tool rules that can never apply."""


def resolve_server(
    name: str, spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> ResolvedServer:
    endpoint = spec.get("endpoint", {}).get("streamableHTTP", {})
    cache = dict(spec.get("cache") or {})
    try:
        requested = ServerCache.model_validate(cache)
    except ValidationError as exc:
        return ResolvedServer(None, error="; ".join(problems(exc, ServerCache, "spec.cache")))
    clamped_from = None
    if requested.max_size_clamped:
        clamped_from = str(cache.get("maxSize"))
        requested = requested.model_copy(update={"max_size": MAX_SIZE_CEILING})
    fields: dict[str, Any] = {"url": endpoint.get("url", "")}
    if "timeout" in endpoint:
        fields["timeout"] = endpoint["timeout"]
    try:
        server = Server.model_validate(
            {"name": name, **fields, "cache": requested, "purge": purge_marker(annotations)}
        )
    except ValidationError as exc:
        # The endpoint's fields are the only ones of Server the spec writes itself.
        return ResolvedServer(
            None, error="; ".join(problems(exc, Server, "spec.endpoint.streamableHTTP"))
        )
    shadowed = tuple((rule.name, earlier.name) for rule, earlier in requested.shadowed_rules())
    return ResolvedServer(server, clamped_from, shadowed=shadowed)


def ceiling_text() -> str:
    return str(format_quantity(MAX_SIZE_CEILING))
