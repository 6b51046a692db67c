"""The cache policy as pure decisions: no sockets, only config, messages and headers."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.sidecar import policy
from mcpcache.sidecar.config import Server
from mcpcache.sidecar.messages import Message, Verdict


def server(**cache: Any) -> Server:
    return Server.model_validate(
        {"name": "docs", "url": "http://docs/mcp", "cache": {"enabled": True, **cache}}
    )


def request(method: str = "tools/call", **params: Any) -> Message:
    return Message({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def plan(server: Server, message: Message, headers: dict[str, str], app: str = "agent") -> Any:
    return policy.plan(server, message, headers, list(headers.items()), app)


def test_a_cacheable_call_is_looked_up_under_a_key() -> None:
    plan_ = plan(server(), request(name="search", arguments={"q": "x"}), {})
    assert isinstance(plan_, policy.Lookup)
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
    decided = plan(server(), message, {})
    assert decided == policy.Bypass(reason)
    assert decided.fwd == fwd


def test_a_server_with_caching_off_is_bypassed() -> None:
    assert plan(server(enabled=False), request(name="t"), {}) == policy.Bypass("disabled")


def test_the_key_depends_on_the_caller_and_the_credential() -> None:
    message = request(name="t", arguments={})
    keys = {
        plan(server(), message, headers, app)
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
    lookup = policy.Lookup("k")
    assert policy.response_refusal(server(), lookup, status, headers, event_stream=False) == reason


def test_storage_ttl_is_the_shorter_of_the_server_ttl_and_the_result_hint() -> None:
    assert policy.storage_ttl(server(ttl="60s"), Verdict(None, b"{}"), {}) == 60
    assert policy.storage_ttl(server(ttl="60s"), Verdict(None, b"{}", ttl_cap=5), {}) == 5
    assert policy.storage_ttl(server(ttl="2s"), Verdict(None, b"{}", ttl_cap=5), {}) == 2


def test_no_cache_on_an_event_stream_is_the_streams_convention_not_a_refusal() -> None:
    lookup = policy.Lookup("k")
    no_cache = {"cache-control": "no-cache, no-transform"}
    assert policy.response_refusal(server(), lookup, 200, no_cache, event_stream=True) is None
    no_store = {"cache-control": "no-store"}
    refusal = policy.response_refusal(server(), lookup, 200, no_store, event_stream=True)
    assert refusal == "no_store"


def test_headers_that_look_like_credentials_are_keyed_even_when_not_listed() -> None:
    message = request(name="t", arguments={})
    keys = {
        plan(server(identityHeaders=["authorization"]), message, headers).key
        for headers in ({"x-auth-token": "alice"}, {"x-auth-token": "bob"}, {"x-tenant-id": "a"})
    }
    assert len(keys) == 3
    neutral = {
        plan(server(), message, headers).key
        for headers in ({"user-agent": "a"}, {"user-agent": "b"}, {"x-request-id": "1"})
    }
    assert len(neutral) == 1


def test_routing_headers_sent_twice_are_refused() -> None:
    message = request(name="t", arguments={})
    raw = [("mcp-name", "t"), ("mcp-name", "other")]
    with pytest.raises(policy.RequestRefused):
        policy.plan(server(), message, {"mcp-name": "t, other"}, raw, "agent")


def test_a_session_is_scoped_to_its_server() -> None:
    assert policy.session_scope(server(), "s") != policy.session_scope(
        Server.model_validate({"name": "other", "url": "http://o/mcp"}), "s"
    )
