"""The cache key: what makes two calls the same call for the same caller.

sha256 over canonical JSON (sorted keys, no insignificant whitespace) of the server
name, the method, the params, the caller's app id and the request's identity: a hash of
each identity header present, of the legacy session id, and the protocol version. An
object some parser may read otherwise (a name given twice, or names equal after case
folding) is written with its members in the order sent (`reading.body.Members`).
Members of `params._meta` that differ on every call by design (the progress token and
W3C trace context) are dropped first; all other `_meta` members stay — `baggage` among
them, since it often carries tenant or user ids an upstream may answer by.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import orjson

from ...config import Server
from ..reading.body import key_default

VOLATILE_META_KEYS: Final = frozenset({"progressToken", "traceparent", "tracestate"})
"""`_meta` members unique to each call: a progress token and W3C trace context."""


_SHA256: Final = hashlib.sha256()
"""Never updated, only copied: a copy skips the digest lookup a new OpenSSL hash object
makes each time (which shows in profiles of the hit path)."""


def _sha256_hex(data: bytes) -> str:
    digest = _SHA256.copy()
    digest.update(data)
    return digest.hexdigest()


def secret_digest(value: str | None) -> str:
    """A stable, one-way stand-in for a credential (never the raw value)."""
    if not value:
        return ""
    return _sha256_hex(value.encode("utf-8", "surrogateescape"))


def caller_digest(who: Mapping[str, str]) -> str:
    """One caller, as the key sees them (`callers.identity`), in one digest."""
    return _sha256_hex(orjson.dumps(who, option=orjson.OPT_SORT_KEYS))


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


class Sent(NamedTuple):
    """What else of the request the upstream sees besides its params: the query string
    as sent, and top-level members JSON-RPC does not define."""

    query: str = ""
    extra: Mapping[str, Any] | None = None
    filled: tuple[str, ...] = ()
    """The arguments filled in from schema defaults (a filled call is filed apart)."""


NOTHING_ELSE: Final = Sent()


def cache_key(
    server: str,
    method: str,
    params: dict[str, Any],
    app_id: str,
    identity: Mapping[str, str],
    ignore_arguments: tuple[str, ...] = (),
    public: bool = False,
    sent: Sent = NOTHING_ELSE,
) -> str:
    """The hex sha256 key of one call; `identity` holds digests and non-secret values
    only (see `callers.identity`).

    `ignore_arguments` (a tool rule's) leaves those top-level arguments out; the names
    themselves go into the key, so that entries made under different rules never meet.
    `public`: the key of an entry for every caller (`identity` then holds no caller's
    credential), marked as such, so that it never equals a caller's own key — not even
    that of a caller who sent no credential at all.

    `params` may hold what `reading.body.read_exactly` keeps (a number's spelling, every pair
    of an object that names a member twice): written as sent. `sent`: the query string
    and members beyond JSON-RPC's, only when there are any (so keys without them stay
    what they were)."""
    stable = _stable_params(params)
    if ignore_arguments:
        stable = _without_arguments(stable, ignore_arguments)
    material: dict[str, Any] = {
        "server": server,
        "method": method,
        "params": stable,
        "caller": app_id,
        "identity": identity,
    }
    if ignore_arguments:
        material["ignored"] = sorted(ignore_arguments)
    if public:
        material["public"] = True
    if sent.query:
        material["query"] = sent.query
    if sent.extra:
        material["members"] = sent.extra
    if sent.filled:
        material["filled"] = sent.filled
    return _sha256_hex(orjson.dumps(material, default=key_default, option=orjson.OPT_SORT_KEYS))


def session_scope(server: Server, session_id: str) -> str:
    """A legacy session, as the cache knows it: one server's session, by digest."""
    return secret_digest(f"{server.name}\0{session_id}")
