"""The cache key: what makes two calls the same call for the same caller.

sha256 over canonical JSON (sorted keys, no insignificant whitespace) of the server
name, the method, the params, the caller's app id and a hash of the end-user credential.
Members of `params._meta` that differ on every call by design are dropped first; all
other `_meta` members stay, because an upstream may vary its answer on them.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson

VOLATILE_META_KEYS: Final = frozenset({"progressToken", "traceparent", "tracestate", "baggage"})
"""`_meta` members unique to each call: a progress token and W3C trace context."""


def credential_identity(authorization: str | None) -> str:
    """A stable, one-way identity for the end-user credential (never the raw token)."""
    if not authorization:
        return ""
    return hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()


def _stable_params(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    if not isinstance(meta, dict) or not VOLATILE_META_KEYS.intersection(meta):
        return params
    kept = {k: v for k, v in meta.items() if k not in VOLATILE_META_KEYS}
    stable = {k: v for k, v in params.items() if k != "_meta"}
    if kept:
        stable["_meta"] = kept
    return stable


def _without_arguments(params: dict[str, Any], ignored: tuple[str, ...]) -> dict[str, Any]:
    """`params` with the named top-level `arguments` members left out."""
    arguments = params.get("arguments")
    if not isinstance(arguments, dict) or not any(name in arguments for name in ignored):
        return params
    kept = {k: v for k, v in arguments.items() if k not in ignored}
    return {**params, "arguments": kept}


def cache_key(
    server: str,
    method: str,
    params: dict[str, Any],
    app_id: str,
    credential: str,
    ignore_arguments: tuple[str, ...] = (),
) -> str:
    """The hex sha256 key of one call; `credential` is `credential_identity(...)`.

    `ignore_arguments` (a tool rule's) leaves those top-level arguments out; the names
    themselves go into the key, so that entries made under different rules never meet."""
    stable = _stable_params(params)
    if ignore_arguments:
        stable = _without_arguments(stable, ignore_arguments)
    material: dict[str, Any] = {
        "server": server,
        "method": method,
        "params": stable,
        "caller": app_id,
        "user": credential,
    }
    if ignore_arguments:
        material["ignored"] = sorted(ignore_arguments)
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()
