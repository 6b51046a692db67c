"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long.

Pure functions over the server's config, the parsed message and the headers. The proxy
asks; nothing else decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .config import Server
from .key import cache_key, credential_identity
from .messages import (
    CACHEABLE_METHODS,
    REQUEST_STATE_PARAMS,
    BypassReason,
    Message,
    NotStoredReason,
    Verdict,
)

BYPASS_FWD: Final[dict[BypassReason, str]] = {
    "method": "method",  # the cache does not handle this method
    "disabled": "bypass",  # the server's cache is off
    "request_state": "request",  # the request itself rules the cache out
}
"""RFC 9211 `fwd` values for requests never looked up."""


@dataclass(frozen=True, slots=True)
class Bypass:
    """The request goes upstream without a lookup, and its answer is not stored."""

    reason: BypassReason

    @property
    def fwd(self) -> str:
        return BYPASS_FWD[self.reason]


@dataclass(frozen=True, slots=True)
class Lookup:
    """The request is looked up under `key`; on a miss its answer may be stored."""

    key: str


def bypass_reason(server: Server, message: Message) -> BypassReason | None:
    """Why this request is never answered from the cache, or None if it may be."""
    if message.method not in CACHEABLE_METHODS or not message.is_request:
        return "method"
    if any(name in message.params for name in REQUEST_STATE_PARAMS):
        return "request_state"
    if not server.cache.enabled:
        return "disabled"
    return None


def plan(
    server: Server, message: Message, headers: Mapping[str, str], app_id: str
) -> Bypass | Lookup:
    """Look this request up, and under which key, or forward it untouched."""
    reason = bypass_reason(server, message)
    if reason is not None:
        return Bypass(reason)
    assert message.method is not None
    key = cache_key(
        server.name,
        message.method,
        message.params,
        app_id,
        credential_identity(headers.get("authorization")),
    )
    return Lookup(key)


def response_refusal(status: int, headers: Mapping[str, str]) -> NotStoredReason | None:
    """Why the upstream's answer may not be stored whatever its body says, or None."""
    if status != 200:
        return "upstream_status"
    directives = headers.get("cache-control", "").lower()
    if "no-store" in directives or "private" in directives:
        return "no_store"
    return None


def storage_ttl(server: Server, verdict: Verdict) -> float:
    """How long a storable answer is kept: the server's TTL, shortened by the result's
    own freshness hint."""
    ttl = server.cache.ttl
    if verdict.ttl_cap is not None:
        ttl = min(ttl, verdict.ttl_cap)
    return ttl
