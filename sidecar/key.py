"""The cache key: what makes two calls the same call for the same caller.

sha256 over canonical JSON (sorted keys, no insignificant whitespace) of the server
name, the method, the params, the caller's app id and the request's identity: a hash of
each identity header present, of the legacy session id, and the protocol version.
Members of `params._meta` that differ on every call by design (the progress token and
W3C trace context) are dropped first; all other `_meta` members stay — `baggage` among
them, since it often carries tenant or user ids an upstream may answer by.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import orjson

VOLATILE_META_KEYS: Final = frozenset({"progressToken", "traceparent", "tracestate"})
"""`_meta` members unique to each call: a progress token and W3C trace context."""


def secret_digest(value: str | None) -> str:
    """A stable, one-way stand-in for a credential (never the raw value)."""
    if not value:
        return ""
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


def _stable_params(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    if not isinstance(meta, dict) or not VOLATILE_META_KEYS.intersection(meta):
        return params
    kept = {k: v for k, v in meta.items() if k not in VOLATILE_META_KEYS}
    stable = {k: v for k, v in params.items() if k != "_meta"}
    if kept:
        stable["_meta"] = kept
    return stable


def cache_key(
    server: str,
    method: str,
    params: dict[str, Any],
    app_id: str,
    identity: Mapping[str, str],
) -> str:
    """The hex sha256 key of one call; `identity` holds digests and non-secret values
    only (see `policy.identity`)."""
    material = {
        "server": server,
        "method": method,
        "params": _stable_params(params),
        "caller": app_id,
        "identity": identity,
    }
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()
