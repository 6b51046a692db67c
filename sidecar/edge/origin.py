"""DNS-rebinding protection for the sidecar's own listener.

The MCP transport asks local servers to validate `Origin` and to bind to loopback: a web
page the agent's user opens must not be able to reach the sidecar through a hostile DNS
name. Requests must name a loopback host (or one the config allows), and a browser's
`Origin`, when present, must be a loopback origin too (`null` is not one).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


_AUTHORITY = re.compile(r"(\[[0-9a-f:.]+\]|[^:\[\]]+)(?::[0-9]*)?")
"""RFC 3986's `host [":" port]`, the host a bracketed IPv6 address or a name: nothing
may follow the port, or the bracket (`localhost:3500.evil` and `[::1].evil` are names of
somebody else's)."""


def _hostname(authority: str) -> str:
    """The host part of a `Host` header value, without port or IPv6 brackets; "" for a
    value that is not a well-formed authority (it then matches no allowed host)."""
    match = _AUTHORITY.fullmatch(authority)
    if match is None:
        return ""
    host = match.group(1)
    return host[1:-1] if host.startswith("[") else host


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(.*)")
"""RFC 6454's serialised origin: a scheme, `://` and an authority with no userinfo,
path, query or fragment (`http://localhost:3500.evil`, `http://a@localhost` and
`http://localhost/x` name no loopback origin)."""


def _origin_host(origin: str) -> str:
    """The host of an `Origin` value read as strictly as `Host`; "" for anything that is
    not a serialised origin (`null` included)."""
    match = _ORIGIN.fullmatch(origin)
    return _hostname(match.group(1)) if match is not None else ""


class OriginPolicy:
    def __init__(self, allowed_hosts: Iterable[str] = ()) -> None:
        self.allowed = LOOPBACK_HOSTS | {h.lower() for h in allowed_hosts}

    def refusal(self, headers: Mapping[str, str]) -> str | None:
        """Why this request is refused, or None when it may proceed."""
        return self._refusal(headers.get("host"), headers.get("origin"))

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one policy per process, few distinct values
    def _refusal(self, host: str | None, origin: str | None) -> str | None:
        if host is not None and _hostname(host.lower()) not in self.allowed:
            return f"Host {host!r} is not allowed: the sidecar serves loopback callers"
        # `null` is what a sandboxed frame or a file: page sends: not a loopback page.
        if origin is not None and _origin_host(origin.lower()) not in self.allowed:
            return f"Origin {origin!r} is not allowed"
        return None
