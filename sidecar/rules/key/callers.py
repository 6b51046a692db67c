"""Who is asking, as the key sees it: the request headers the key depends on, and the
digests of the ones present. Pure; `policy` builds keys from these."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from ...config import Server
from ..reading.headers import NOT_KEY_MATERIAL, connection_named, forwarded, repeated_or_hidden
from .cache_key import caller_digest, secret_digest

SESSION_HEADER: Final = "mcp-session-id"
PROTOCOL_HEADER: Final = "mcp-protocol-version"
ROUTING_HEADERS: Final = frozenset({"mcp-method", "mcp-name"})


class RequestRefused(ValueError):
    """The request is ambiguous about who is asking; it is answered with 400."""


def keyed_headers(
    server: Server,
    headers: Mapping[str, str],
    hidden: frozenset[str] = frozenset(),
    bound_session: bool = False,
) -> frozenset[str]:
    """Every request header the key depends on: each one present that reaches the
    upstream (`hidden`: those a `Connection` header keeps from it), but for the few that
    cannot carry identity or change the answer and the server's `ignoreHeaders`; the
    identity headers and the version whether present or not; and the legacy session
    where it is keyed (`session_keyed`; `bound_session`: see `upstream.sessions`)."""
    cache = server.cache
    scoped = cache.session_scoped or bound_session
    return _keyed(cache.identity_headers, cache.ignore_headers, tuple(headers), hidden, scoped)


@functools.lru_cache(maxsize=512)
def _keyed(
    identity_headers: tuple[str, ...],
    ignored: tuple[str, ...],
    present: tuple[str, ...],
    hidden: frozenset[str],
    session_scoped: bool,
) -> frozenset[str]:
    # Memoised: a client sends the same header names on every call.
    material = {
        name
        for name in present
        if forwarded(name)
        and name not in NOT_KEY_MATERIAL
        and name not in ignored
        and name not in hidden
        and name != SESSION_HEADER
    }
    always = {*identity_headers, PROTOCOL_HEADER}
    if session_keyed(session_scoped, SESSION_HEADER in present, PROTOCOL_HEADER in present):
        always.add(SESSION_HEADER)
    return frozenset({*material, *always})


def session_keyed(session_scoped: bool, in_session: bool, versioned: bool) -> bool:
    """Whether the legacy session is key material (and its entries end with it).

    A session is not an identity (servers must not authenticate by it): a new session
    of the same caller — app id, identity headers, protocol version — reads what an
    earlier one stored. It stays in the key on a `sessionScoped` server (one that keeps
    per-session state a tool reads, or binds a user at `initialize`), and for a request
    in a session that does not say its protocol version: the version its session
    negotiated is then unknown, and two sessions of one caller may speak different
    versions."""
    return session_scoped or (in_session and not versioned)


@functools.lru_cache(maxsize=64)
def unambiguous_headers(identity_headers: tuple[str, ...]) -> frozenset[str]:
    """Headers a request must send at most once and must not hide behind `Connection`:
    the credentials, the session and the version (servers differ in which copy of a
    repeated credential they read), and the routing headers. Any other keyed header is
    keyed on exactly as sent, every copy in order."""
    return frozenset({*identity_headers, SESSION_HEADER, PROTOCOL_HEADER, *ROUTING_HEADERS})


def extra_keyed_headers(server: Server, keyed: frozenset[str]) -> frozenset[str]:
    """The keyed headers beyond the identity headers, the session and the version: what
    an operator looks at when calls that should hit keep missing."""
    return keyed - unambiguous_headers(server.cache.identity_headers)


MEMO_DIGESTS: Final = 256
MEMO_VALUE_CHARS: Final = 1024
"""Header values (of at most this many characters) whose digests are remembered: a
caller sends the same credential on every call, and a SHA-256 run with cold caches
after a wait on the network costs tens of microseconds. Bounded in count and size, in
this process's memory only (the header sets a request is decoded from are kept as sent
beside it, `edge.incoming`)."""


def header_digest(value: str) -> str:
    """`cache_key.secret_digest` of a keyed header's value, memoised when it is short."""
    if len(value) > MEMO_VALUE_CHARS:
        return secret_digest(value)
    return _remembered_digest(value)


@functools.lru_cache(maxsize=MEMO_DIGESTS)
def _remembered_digest(value: str) -> str:
    return secret_digest(value)


def identity(
    headers: Mapping[str, str],
    keyed: frozenset[str],
    raw_headers: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """Who is asking, as key material: a digest of each keyed header present (any of
    them may be a credential, the session id too) and the protocol version as it is. A
    header sent more than once (`raw_headers`) is keyed on every copy in order, so that
    two copies never share an entry with one header holding both values."""
    material = {
        f"header:{name}": header_digest(headers[name])
        for name in keyed
        if name in headers and name != PROTOCOL_HEADER
    }
    if len(raw_headers) > len(headers):
        copies: dict[str, list[str]] = {}
        for name, value in raw_headers:
            copies.setdefault(name.lower(), []).append(value)
        for name, values in copies.items():
            if len(values) > 1 and f"header:{name}" in material:
                material[f"header:{name}"] = header_digest("\n".join(values))
    if PROTOCOL_HEADER in headers:
        material["protocol"] = headers[PROTOCOL_HEADER]
    return material


def anyone_identity(
    server: Server,
    headers: Mapping[str, str],
    keyed: frozenset[str],
    raw_headers: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """The key material of an entry for every caller (`keyed` from `public_keyed`): as
    `identity`, and which identity headers are present, never their values. A caller
    sending no credential never meets an entry fetched with one, nor the reverse: an
    upstream that refuses anonymous callers is never bypassed through a shared entry."""
    material = identity(headers, keyed, raw_headers)
    present = [n for n in server.cache.identity_headers if credential_in(n, headers.get(n))]
    material["credentials"] = ",".join(present)
    return material


AUTH_SCHEMES: Final = frozenset(
    {"basic", "bearer", "digest", "dpop", "hoba", "mutual", "negotiate", "token", "apikey"}
)
"""HTTP authentication schemes: an `Authorization` holding one alone carries no token."""
_AUTHORIZATION: Final = frozenset({"authorization", "proxy-authorization"})


def credential_in(name: str, value: str | None) -> bool:
    """Whether an identity header carries a credential: absent, empty or blank, it does
    not, nor does an `Authorization` holding a scheme alone (`Bearer`): such a caller is
    anonymous to an entry for every caller."""
    if value is None or not value.strip():
        return False
    if name in _AUTHORIZATION:
        return value.strip().lower() not in AUTH_SCHEMES
    return True


def credential_digest(server: Server, headers: Mapping[str, str]) -> str:
    """The caller's credentials (the identity headers that carry one) as one digest;
    "" for an anonymous caller (`suggest` tells callers apart by it)."""
    held = [
        f"{name}:{headers[name]}"
        for name in server.cache.identity_headers
        if credential_in(name, headers.get(name))
    ]
    return header_digest("\n".join(held)) if held else ""  # memoised: same on every call


def opening_digest(server: Server, headers: Mapping[str, str], query: str) -> str:
    """A legacy session's opener as a later request in it is compared with (see
    `upstream.sessions`): every keyed header present but the session and the version
    (an `initialize` need not say one), and the query string. A server may bind the
    user at `initialize` by any of them, not only by the identity headers; "" for a
    request with none. Headers a `Connection` header names never reach the upstream and
    are left out of the key, so they are left out here too: a request hiding the one
    its session's opener sent differs from that opener."""
    hidden = frozenset(connection_named(headers.items()))
    who = identity(headers, keyed_headers(server, headers, hidden))
    who.pop(f"header:{SESSION_HEADER}", None)
    who.pop("protocol", None)
    if query:
        who["query"] = query
    return caller_digest(who) if who else ""


@functools.lru_cache(maxsize=64)
def public_keyed(keyed: frozenset[str], identity_headers: tuple[str, ...]) -> frozenset[str]:
    """The keyed headers of an entry for every caller: all but the identity headers and
    the legacy session. Every other header stays, known or not (fail closed): a header
    the operator has not named may still carry who is asking or change the answer, and a
    caller who sends one must not meet entries made without it (`ignoreHeaders` is the
    way to share across a header)."""
    return keyed - frozenset(identity_headers) - {SESSION_HEADER}


class Caller(NamedTuple):
    """Who is asking, as the key sees them: the headers the key depends on, and their
    key material (`callers.identity`)."""

    keyed: frozenset[str]
    who: dict[str, str]

    @property
    def digest(self) -> str:
        return caller_digest(self.who)


def caller_of(
    server: Server,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    bound_session: bool = False,
) -> Caller:
    """Who is asking. Raises `RequestRefused` when the headers the key depends on are
    ambiguous: a credential sent twice, or hidden behind `Connection`.
    `bound_session`: the request's legacy session is keyed as on a `sessionScoped`
    server (a session the server may have bound a user to)."""
    hidden: frozenset[str] = frozenset()
    # Only a request with a repeated header or a `Connection` header can be ambiguous.
    if len(raw_headers) != len(headers) or "connection" in headers:
        unambiguous = unambiguous_headers(server.cache.identity_headers)
        problem = repeated_or_hidden(raw_headers, unambiguous)
        if problem is not None:
            raise RequestRefused(problem)
        hidden = frozenset(connection_named(raw_headers))
    keyed = keyed_headers(server, headers, hidden, bound_session)
    who = identity(headers, keyed, raw_headers)
    if SESSION_HEADER in headers and SESSION_HEADER not in keyed:
        # Which session is not key material, but being in one is: a request outside any
        # session (which a session-era upstream refuses) never reads a session's entries;
        # nor does one naming a blank session (which it refuses too).
        who["session"] = "any" if headers[SESSION_HEADER].strip() else "blank"
    return Caller(keyed, who)


def unambiguous_caller(
    server: Server,
    headers: Mapping[str, str],
    raw_headers: Sequence[tuple[str, str]],
    bound_session: bool = False,
) -> Caller | None:
    """The caller, or None when the headers are ambiguous (then nothing is learned or
    filled in; a lookup is refused on its own)."""
    try:
        return caller_of(server, headers, raw_headers, bound_session)
    except RequestRefused:
        return None
