"""The cache policy as pure decisions: no sockets, only config, messages and headers."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.sidecar.cache.store import Scope
from mcpcache.sidecar.config import Server
from mcpcache.sidecar.rules.admission.response_headers import response_refusal, storage_ttl
from mcpcache.sidecar.rules.invalidation.removals import EVERY_ENTRY
from mcpcache.sidecar.rules.key.cache_key import session_scope
from mcpcache.sidecar.rules.learned_tools import LearnedTools
from mcpcache.sidecar.rules.policy.plan import Bypass, Lookup, plan
from mcpcache.sidecar.rules.protocol.asked import Asked
from mcpcache.sidecar.rules.protocol.messages import Message
from mcpcache.sidecar.rules.protocol.results import Verdict


def server(**cache: Any) -> Server:
    return Server.model_validate(
        {"name": "docs", "url": "http://docs/mcp", "cache": {"enabled": True, **cache}}
    )


def request(method: str = "tools/call", **params: Any) -> Message:
    return Message({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def planned(
    server: Server,
    message: Message,
    headers: dict[str, str],
    app: str = "agent",
    hints: LearnedTools | None = None,
) -> Any:
    return plan(Asked.of(server, message, headers), app, hints)


def test_a_cacheable_call_is_looked_up_under_a_key() -> None:
    plan_ = planned(server(), request(name="search", arguments={"q": "x"}), {})
    assert isinstance(plan_, Lookup)
    assert len(plan_.key) == 64


@pytest.mark.parametrize(
    ("message", "reason", "fwd"),
    [
        (request("tools/list"), "method", "method"),
        (request("initialize"), "method", "method"),
        (
            Message({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "t"}}),
            "method",
            "method",
        ),
        (request(name="t", inputResponses={}), "request_state", "request"),
        (request(name="t", requestState="s"), "request_state", "request"),
    ],
)
def test_requests_the_cache_never_answers(message: Message, reason: str, fwd: str) -> None:
    decided = planned(server(), message, {})
    assert isinstance(decided, Bypass)
    assert (decided.reason, decided.invalidates) == (reason, ())
    assert decided.fwd == fwd
    # Every listing on a caching server teaches the tools' hints (writers among them).
    assert (decided.learner is not None) is (message.method == "tools/list")


def test_a_server_with_caching_off_is_bypassed() -> None:
    assert planned(server(enabled=False), request(name="t"), {}) == Bypass("disabled")


def test_the_key_depends_on_the_caller_and_the_credential() -> None:
    message = request(name="t", arguments={})
    keys = {
        planned(server(), message, headers, app)
        for app in ("a", "b")
        for headers in ({}, {"authorization": "Bearer 1"}, {"authorization": "Bearer 2"})
    }
    assert len(keys) == 6


@pytest.mark.parametrize(
    ("status", "headers", "reason"),
    [
        (200, {}, None),
        (200, {"cache-control": "max-age=60"}, None),
        (201, {}, "upstream_status"),
        (500, {}, "upstream_status"),
        (200, {"cache-control": "no-store"}, "no_store"),
        (200, {"cache-control": "Private"}, "no_store"),
    ],
)
def test_response_refusal(status: int, headers: dict[str, str], reason: str | None) -> None:
    lookup = Lookup("k", 30.0, Scope("docs"))
    assert response_refusal(server(), lookup, status, headers, event_stream=False) == reason


def lookup(cached: Server, **params: Any) -> Lookup:
    found = planned(cached, request(**params), {})
    assert isinstance(found, Lookup)
    return found


def test_storage_ttl_is_the_shorter_of_the_server_ttl_and_the_result_hint() -> None:
    def ttl(cached: Server, cap: float | None = None) -> float:
        verdict = Verdict(None, b"{}", ttl_cap=cap)
        planned = lookup(cached, name="t").ttl
        return storage_ttl(cached, verdict, {}, "tools/call", planned)

    assert ttl(server(ttl="60s")) == 60
    assert ttl(server(ttl="60s"), cap=5) == 5
    assert ttl(server(ttl="2s"), cap=5) == 2
    assert ttl(server(ttl="60s", tools=[{"name": "t", "ttl": "10s"}]), cap=30) == 10


RULES = [
    {"name": "search_*", "ttl": "5m", "ignoreArguments": ["requestId"]},
    {"name": "create_*", "invalidates": ["search_*"]},
    {"name": "audit", "enabled": False},
    {"name": "lookup", "enabled": True},
]


def test_the_first_matching_rule_applies_else_the_server_defaults() -> None:
    ruled = server(ttl="60s", tools=[*RULES, {"name": "search_old", "ttl": "1s"}])
    assert lookup(ruled, name="search_docs").ttl == 300
    assert lookup(ruled, name="search_old").ttl == 300
    assert lookup(ruled, name="other").ttl == 60
    assert planned(ruled, request(name="audit"), {}) == Bypass("tool_rule")


def test_a_tool_that_invalidates_is_never_cached_and_carries_its_globs() -> None:
    write = planned(server(tools=RULES), request(name="create_doc"), {})
    assert write == Bypass("tool_rule", ("search_*",))
    assert (write.fwd, write.detail) == ("bypass", "tool-rule")


def test_ignored_arguments_leave_the_key_and_nothing_else_does() -> None:
    ruled = server(tools=RULES)

    def key(app: str = "a", auth: str = "", **arguments: Any) -> str:
        headers = {"authorization": auth} if auth else {}
        message = request(name="search_docs", arguments=arguments)
        found = planned(ruled, message, headers, app)
        assert isinstance(found, Lookup)
        return str(found.key)

    assert key(q="x", requestId=1) == key(q="x", requestId=2) == key(q="x")
    assert key(q="x") != key(q="y")
    assert key(q="x") != key(app="b", q="x")
    assert key(q="x") != key(auth="Bearer one", q="x") != key(auth="Bearer two", q="x")
    unruled = planned(server(), request(name="search_docs", arguments={"q": "x"}), {}, "a")
    assert isinstance(unruled, Lookup)
    assert unruled.key != key(q="x"), "entries made under other rules never meet"


def test_only_read_only_tools_caches_what_a_listing_called_read_only() -> None:
    hints = LearnedTools()
    ruled = server(onlyReadOnlyTools=True, tools=RULES)

    def decide(name: str) -> Bypass | Lookup:
        return planned(ruled, request(name=name), {}, hints=hints)

    assert decide("get") == Bypass("not_read_only")
    hints.learn(
        "docs",
        {
            "tools": [
                {"name": "get", "annotations": {"readOnlyHint": True}},
                {"name": "put", "annotations": {"readOnlyHint": False}},
                {"name": "other"},
            ]
        },
        "someone",
    )
    assert isinstance(decide("get"), Lookup)
    assert decide("put") == Bypass("declared_writer", (EVERY_ENTRY,))
    assert decide("other") == Bypass("not_read_only")
    assert isinstance(decide("lookup"), Lookup), "enabled: true overrides"
    hints.learn("docs", {"tools": [{"name": "get"}]}, "someone")
    assert decide("get") == Bypass("not_read_only"), "one listing saying no is enough"
    listing = planned(ruled, request("tools/list"), {}, hints=hints)
    assert isinstance(listing, Bypass)
    assert (listing.reason, listing.invalidates) == ("method", ())
    assert listing.learner is not None, "the listing teaches, and names whom it was shown"


def test_no_cache_on_an_event_stream_is_the_streams_convention_not_a_refusal() -> None:
    lookup = Lookup("k", 30.0, Scope("docs"))
    no_cache = {"cache-control": "no-cache, no-transform"}
    assert response_refusal(server(), lookup, 200, no_cache, event_stream=True) is None
    no_store = {"cache-control": "no-store"}
    refusal = response_refusal(server(), lookup, 200, no_store, event_stream=True)
    assert refusal == "no_store"


def test_every_forwarded_header_is_keyed_unless_it_cannot_change_the_answer() -> None:
    message = request(name="t", arguments={})
    keys = {
        planned(server(identityHeaders=["authorization"]), message, headers).key
        for headers in (
            {"x-auth-token": "alice"},
            {"x-auth-token": "bob"},
            {"x-tenant-id": "a"},
            {"user-agent": "a"},
            {"x-request-id": "1"},
        )
    }
    assert len(keys) == 5
    neutral = {
        planned(server(), message, headers).key
        for headers in (
            {"traceparent": "00-a-b-01"},
            {"traceparent": "00-c-d-01", "tracestate": "v=1"},
            {"accept": "application/json, text/event-stream"},
            {"x_api_key": "never forwarded"},
            {},
        )
    }
    assert len(neutral) == 1
    ignoring = server(ignoreHeaders=["x-request-id"])
    assert len({planned(ignoring, message, {"x-request-id": n}).key for n in "12"}) == 1


def test_routing_headers_sent_twice_are_never_looked_up() -> None:
    message = request(name="t", arguments={})
    raw = [("mcp-name", "t"), ("mcp-name", "other")]
    decided = plan(Asked(server(), message, {"mcp-name": "t, other"}, raw), "agent")
    assert decided == Bypass("ambiguous_headers")


def test_a_session_is_scoped_to_its_server() -> None:
    assert session_scope(server(), "s") != session_scope(
        Server.model_validate({"name": "other", "url": "http://o/mcp"}), "s"
    )
