"""The cache policy: the one place that decides what is looked up, under which key, and
what is stored for how long.

Pure functions over the server's config, the parsed message and the headers. The proxy
asks; nothing else decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from .config import Server
from .key import cache_key, credential_identity
from .messages import (
    CACHEABLE_METHODS,
    METADATA_METHODS,
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
    """Why this request is never answered from the cache, or None if it may be.

    List methods and `server/discover` are looked up only on servers with a
    `metadataTTL`; the key rules are the same as for calls (every cursor is its own
    page, every caller its own entry)."""
    if not message.is_request:
        return "method"
    if message.method in METADATA_METHODS:
        if not server.cache.metadata_ttl:
            return "method"
    elif message.method not in CACHEABLE_METHODS:
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


def storage_ttl(server: Server, verdict: Verdict, method: str | None = None) -> float:
    """How long a storable answer is kept: the server's TTL (`metadataTTL` for lists
    and discovery), shortened by the result's own freshness hint."""
    ttl = server.cache.ttl
    if method in METADATA_METHODS and server.cache.metadata_ttl:
        ttl = server.cache.metadata_ttl
    if verdict.ttl_cap is not None:
        ttl = min(ttl, verdict.ttl_cap)
    return ttl


FollowerShare = Literal["shared", "failed", "alone"]

_ANSWERS_OF_ONE: Final[frozenset[NotStoredReason]] = frozenset(
    {"upstream_status", "no_store", "input_required", "server_request"}
)
"""Answers that belong to the one request that went upstream: a status other than 200
(and the headers that explain it), what the upstream marked private, a question for the
client or an answer that depends on the client's reply."""


def follower_share(status: int, verdict: Verdict, final_kept: bool) -> FollowerShare:
    """What requests collapsed onto another identical request (same key) receive.

    `shared`: its final answer, stored or not (an error or `isError` is theirs too).
    `failed`: the upstream failed them all (a stale entry may stand in). `alone`: each
    forwards on its own, also when the answer was too large to keep for them."""
    if status >= 500 or verdict.reason == "incomplete":
        return "failed"
    if verdict.reason in _ANSWERS_OF_ONE or not final_kept:
        return "alone"
    return "shared"


def stale_while_revalidating(server: Server, expires_at: float, now: float) -> bool:
    """An expired entry may answer at once while it is fetched again."""
    return now < expires_at + server.cache.stale_while_revalidate


def stale_on_error(server: Server, expires_at: float, now: float) -> bool:
    """An expired entry may answer because the upstream failed."""
    return now < expires_at + server.cache.stale_if_error
