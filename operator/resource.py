"""From an MCPServer resource to the sidecar's server configuration.

The CRD schema has already refused what is malformed and filled in defaults; this is
where the operator normalises what is valid but needs a decision: a `maxSize` above
the 1Mi ceiling is clamped, not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from mcpcache.sidecar.config import MAX_SIZE_CEILING, Server, ServerCache
from mcpcache.sidecar.units import format_quantity


@dataclass(frozen=True)
class Effective:
    """What the sidecar will do for one MCPServer, or why it cannot."""

    server: Server | None
    clamped_from: str | None = None
    """The requested `maxSize` when it was clamped to the ceiling."""
    error: str | None = None


def effective_server(name: str, spec: Mapping[str, Any]) -> Effective:
    endpoint = spec.get("endpoint", {}).get("streamableHTTP", {})
    cache = dict(spec.get("cache") or {})
    try:
        requested = ServerCache.model_validate(cache)
        clamped_from = None
        if requested.max_size_clamped:
            clamped_from = str(cache.get("maxSize"))
            requested = requested.model_copy(update={"max_size": MAX_SIZE_CEILING})
        server = Server(name=name, url=endpoint.get("url", ""), cache=requested)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'spec'}: {error['msg']}"
            for error in exc.errors()
        )
        return Effective(None, error=problems)
    return Effective(server, clamped_from)


def ceiling_text() -> str:
    return str(format_quantity(MAX_SIZE_CEILING))
