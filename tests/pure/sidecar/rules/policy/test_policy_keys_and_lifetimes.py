"""The policy's rules one by one, as pure decisions: what is never looked up, exactly
what the key is made of, and which answers a shared cache may keep and for how long."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.sidecar.cache.store import Scope
from mcpcache.sidecar.config import Server
from mcpcache.sidecar.rules.admission import freshness
from mcpcache.sidecar.rules.admission.response_headers import response_refusal, storage_ttl
from mcpcache.sidecar.rules.admission.sharing import follower_share
from mcpcache.sidecar.rules.invalidation.writes import write_happened
from mcpcache.sidecar.rules.key import callers
from mcpcache.sidecar.rules.key.cache_key import cache_key, secret_digest, session_scope
from mcpcache.sidecar.rules.policy.plan import Bypass, Lookup, plan, tool_rule
from mcpcache.sidecar.rules.protocol.asked import Asked
from mcpcache.sidecar.rules.protocol.messages import Message, read_message
from mcpcache.sidecar.rules.protocol.results import Verdict


def server(name: str = "docs", **cache: Any) -> Server:
    return Server.model_validate(
        {"name": name, "url": "http://docs/mcp", "cache": {"enabled": True, **cache}}
    )


def request(method: str = "tools/call", raw: bytes = b"", **params: Any) -> Message:
    return Message({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, raw)


def planned(message: Message, headers: dict[str, str], on: Server | None = None) -> Any:
    return plan(Asked.of(on or server(), message, headers), "agent")


def test_a_task_request_is_never_looked_up_and_numbers_are_keyed_as_spelt() -> None:
    task = planned(request(name="t", task={"ttl": 1000}), {})
    assert (task, task.fwd) == (Bypass("task"), "request")
    keys = set()
    for number in (b"18446744073709551617", b"18446744073709551618", b"1.0", b"1.00", b"1e0"):
        raw = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t",'
        decided = planned(read_message(raw + b'"arguments":{"n":' + number + b"}}}"), {})
        assert isinstance(decided, Lookup)
        keys.add(decided.key)
    assert len(keys) == 5


def test_the_key_is_made_of_server_method_params_caller_and_identity() -> None:
    headers = {
        "authorization": "Bearer a",
        "mcp-session-id": "s-1",
        "mcp-protocol-version": "2025-06-18",
        "user-agent": "agent/1",
    }
    message = request(name="t", arguments={"q": 1})
    scoped = server(sessionScoped=True)
    decided = planned(message, headers, scoped)
    identity = {
        "header:authorization": secret_digest("Bearer a"),
        "header:mcp-session-id": secret_digest("s-1"),
        "header:user-agent": secret_digest("agent/1"),  # any forwarded header (fail closed)
        "protocol": "2025-06-18",
    }
    assert decided.key == cache_key("docs", "tools/call", message.params, "agent", identity)
    assert decided.session == session_scope(scoped, "s-1")
    assert decided.keyed == frozenset(
        {*server().cache.identity_headers, "mcp-session-id", "mcp-protocol-version", "user-agent"}
    )
    assert planned(message, {}, scoped).session == ""
    assert callers.identity({}, decided.keyed) == {}


def test_a_legacy_session_is_not_key_material_unless_the_server_is_session_scoped() -> None:
    message = request(name="t", arguments={"q": 1})
    versioned = {"authorization": "Bearer a", "mcp-protocol-version": "2025-06-18"}
    first = planned(message, versioned | {"mcp-session-id": "s-1"})
    second = planned(message, versioned | {"mcp-session-id": "s-2"})
    # Another session of the same caller: one key, and the entry ends with no session.
    assert first.key == second.key
    assert first.session == second.session == ""
    assert "mcp-session-id" not in first.keyed
    identity = {
        "header:authorization": secret_digest("Bearer a"),
        "protocol": "2025-06-18",
        "session": "any",
    }
    assert first.key == cache_key("docs", "tools/call", message.params, "agent", identity)
    # Being in a session is: outside one, a request never reads a session's entries.
    assert planned(message, versioned).key != first.key
    # Never across callers.
    other = planned(message, versioned | {"authorization": "Bearer b", "mcp-session-id": "s-1"})
    assert other.key != first.key
    # A session that does not say its version keeps its own entries (the version it
    # negotiated is unknown); so does every session of a session-scoped server.
    unversioned = [planned(message, {"mcp-session-id": s}) for s in ("s-1", "s-2")]
    assert unversioned[0].key != unversioned[1].key
    assert unversioned[0].session == session_scope(server(), "s-1")
    scoped = server(sessionScoped=True)
    apart = [planned(message, versioned | {"mcp-session-id": s}, scoped) for s in ("s-1", "s-2")]
    assert apart[0].key != apart[1].key
    assert apart[0].session == session_scope(scoped, "s-1")


def test_the_server_and_the_method_split_the_key() -> None:
    keys = {
        planned(request(method, name="t", uri="doc://a"), {}, server(name)).key
        for name in ("docs", "other")
        for method in ("tools/call", "resources/read")
    }
    assert len(keys) == 4


def test_an_ambiguous_credential_is_never_looked_up() -> None:
    raw = [("authorization", "Bearer a"), ("authorization", "Bearer b")]
    decided = plan(Asked(server(), request(name="t"), {"authorization": "Bearer a"}, raw), "agent")
    assert decided == Bypass("ambiguous_headers")
    assert decided.detail == "ambiguous-headers"


KEYED = frozenset({"authorization", "mcp-session-id", "mcp-protocol-version"})


@pytest.mark.parametrize(
    ("headers", "event_stream", "reason"),
    [
        ({"cache-control": "no-cache"}, False, "no_cache"),
        ({"cache-control": "max-age=0"}, True, "no_cache"),
        ({"cache-control": "public, s-maxage=0, max-age=60"}, False, "no_cache"),
        ({"cache-control": "max-age=-5"}, False, "no_cache"),
        ({"cache-control": "max-age=soon"}, False, "no_cache"),
        ({"cache-control": "max-age=1"}, False, None),
        ({"cache-control": "s-maxage=1, max-age=0"}, False, None),
        ({"vary": "*"}, False, "vary"),
        ({"vary": "x-tenant"}, False, "vary"),
        ({"vary": "Authorization"}, False, None),
        ({"vary": "accept,accept-encoding,mcp-method,mcp-name"}, False, None),
        (
            {
                "vary": ", ".join(
                    sorted(KEYED | {"accept", "accept-encoding", "mcp-method", "mcp-name"})
                )
            },
            False,
            None,
        ),
        ({"vary": "authorization, *"}, False, "vary"),
        ({"set-cookie": "lb=1"}, False, "set_cookie"),
    ],
)
def test_what_a_shared_cache_may_not_keep(
    headers: dict[str, str], event_stream: bool, reason: str | None
) -> None:
    lookup = Lookup("k", 30.0, Scope("docs"), keyed=KEYED)
    assert response_refusal(server(), lookup, 200, headers, event_stream) == reason


def test_a_cookie_may_be_ignored_when_the_server_says_so() -> None:
    lookup = Lookup("k", 30.0, Scope("docs"), keyed=KEYED)
    cookie = {"set-cookie": "lb=1"}
    assert response_refusal(server(ignoreSetCookie=True), lookup, 200, cookie, False) is None


@pytest.mark.parametrize(
    ("cache_control", "ttl"),
    [
        ("max-age=7", 7),
        ("s-maxage=3, max-age=7", 3),
        ("max-age=100", 60),
        ("no-transform", 60),
    ],
)
def test_the_upstreams_lifetime_shortens_the_entry(cache_control: str, ttl: float) -> None:
    headers = {"cache-control": cache_control}
    assert storage_ttl(server(ttl="60s"), Verdict(None, b"{}"), headers) == ttl
    capped = storage_ttl(server(ttl="60s"), Verdict(None, b"{}", ttl_cap=2), headers)
    assert capped == 2


def test_each_lookup_is_scoped_and_timed_by_what_it_asks() -> None:
    docs = server(ttl="30s", metadataTTL="5m", tools=[{"name": "search_*", "ttl": "2m"}])
    call = planned(request(name="get_doc", arguments={}), {}, docs)
    assert (call.ttl, call.scope) == (30, Scope("docs", tool="get_doc"))
    ruled = planned(request(name="search_docs", arguments={}), {}, docs)
    assert (ruled.ttl, ruled.scope) == (120, Scope("docs", tool="search_docs"))
    read = planned(request("resources/read", uri="doc://a"), {}, docs)
    assert (read.ttl, read.scope) == (30, Scope("docs", uri="doc://a"))
    listing = planned(request("tools/list"), {}, docs)
    assert (listing.ttl, listing.scope) == (300, Scope("docs", listing="tools/list"))


def test_a_tool_rule_never_turns_on_a_server_that_caches_nothing() -> None:
    off = server(enabled=False, tools=[{"name": "t", "enabled": True}])
    assert planned(request(name="t", arguments={}), {}, off) == Bypass("disabled")
    assert tool_rule(server(tools=[{"name": "*"}]), request(name=5)) is None


def test_connection_naming_a_keyed_header_is_never_looked_up_even_without_repeats() -> None:
    headers = {"authorization": "Bearer a", "connection": "authorization"}
    assert planned(request(name="t"), headers) == Bypass("ambiguous_headers")


def test_stored_lifetimes_follow_the_method_and_the_plan() -> None:
    docs = server(ttl="30s", metadataTTL="5m")
    ok = Verdict(None, b"{}")
    assert storage_ttl(docs, ok, {}, "tools/list") == 300
    assert storage_ttl(docs, ok, {}, "tools/call") == 30
    assert storage_ttl(server(ttl="30s"), ok, {}, "tools/list") == 30
    assert storage_ttl(docs, ok, {}, "tools/call", planned=7) == 7


@pytest.mark.parametrize(
    ("status", "verdict", "answered", "kept", "share"),
    [
        (500, Verdict(None, b"{}"), True, True, "failed"),
        (503, Verdict("upstream_status"), False, False, "failed"),
        (200, Verdict("incomplete"), False, True, "failed"),
        (200, Verdict("incomplete"), True, True, "alone"),
        (404, Verdict("upstream_status"), True, True, "alone"),
        (200, Verdict("set_cookie"), True, True, "alone"),
        (200, Verdict(None, b"{}"), True, False, "alone"),
        (200, Verdict("error"), True, True, "answer"),
        (200, Verdict("too_large"), True, True, "answer"),
        (200, Verdict(None, b"{}"), True, True, "answer"),
    ],
)
def test_what_collapsed_followers_receive(
    status: int, verdict: Verdict, answered: bool, kept: bool, share: str
) -> None:
    assert follower_share(status, verdict, answered, kept) == share


@pytest.mark.parametrize(
    ("window", "now", "allowed"),
    [
        (None, 99.9, True),
        (None, 100.0, False),
        (None, 100.5, False),
        ("10s", 105.0, True),
        ("10s", 109.9, True),
        ("10s", 110.0, False),
    ],
)
def test_stale_windows_run_from_expiry_for_their_length(
    window: str | None, now: float, allowed: bool
) -> None:
    revalidating = server(**({"staleWhileRevalidate": window} if window else {}))
    on_error = server(**({"staleIfError": window} if window else {}))
    assert freshness.stale_while_revalidating(revalidating, 100.0, now) is allowed
    assert freshness.stale_on_error(on_error, 100.0, now) is allowed


@pytest.mark.parametrize(
    ("reason", "status", "wrote"),
    [
        ("error", 200, False),
        ("tool_error", 200, False),
        ("input_required", 200, False),
        (None, 200, True),
        ("too_large", 200, True),
        ("incomplete", 200, True),
        ("upstream_status", 500, True),
        ("incomplete", 502, True),
        ("upstream_status", 401, False),
        ("incomplete", 400, False),
        ("incomplete", 404, False),
        ("upstream_status", 429, False),
    ],
)
def test_a_write_may_have_happened_unless_its_answer_says_it_did_not(
    reason: str | None, status: int, wrote: bool
) -> None:
    assert write_happened(Verdict(reason), status) is wrote  # type: ignore[arg-type]


def test_the_extra_keyed_headers_are_those_beyond_identity_session_and_version() -> None:
    headers = {"authorization": "a", "x-tenant": "t", "mcp-protocol-version": "v"}
    keyed = callers.keyed_headers(server(), headers)
    assert callers.extra_keyed_headers(server(), keyed) == {"x-tenant"}


def test_a_keyed_header_sent_twice_is_keyed_on_both_copies_in_order() -> None:
    raw = [("authorization", "first"), ("Authorization", "second"), ("x-request-id", "1")]
    raw += [("x-request-id", "2")]
    headers = {"authorization": "first, second", "x-request-id": "1, 2"}
    on = server(ignoreHeaders=["x-request-id"])
    keyed = callers.keyed_headers(on, headers)
    material = callers.identity(headers, keyed, raw)
    assert material == {"header:authorization": secret_digest("first\nsecond")}


def test_an_entry_for_every_caller_names_the_credentials_sent_never_their_values() -> None:
    on = server()
    headers = {"cookie": "c", "authorization": "a"}
    keyed = callers.public_keyed(callers.keyed_headers(on, headers), on.cache.identity_headers)
    material = callers.anyone_identity(on, headers, keyed)
    assert material == {"credentials": "authorization,cookie"}


def test_a_caller_is_keyed_on_every_copy_of_a_header_and_not_on_one_connection_hides() -> None:
    raw = [("x-tenant", "a"), ("x-tenant", "b"), ("x-trace", "t"), ("connection", "x-trace")]
    headers = {"x-tenant": "a, b", "x-trace": "t", "connection": "x-trace"}
    caller = callers.caller_of(server(), headers, raw)
    assert "x-trace" not in caller.keyed
    assert caller.who["header:x-tenant"] == secret_digest("a\nb")
