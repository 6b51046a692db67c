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
    assert policy.response_refusal(server(), status, headers, event_stream=False) == reason


def test_storage_ttl_is_the_shorter_of_the_server_ttl_and_the_result_hint() -> None:
    assert policy.storage_ttl(server(ttl="60s"), Verdict(None, b"{}"), {}) == 60
    assert policy.storage_ttl(server(ttl="60s"), Verdict(None, b"{}", ttl_cap=5), {}) == 5
    assert policy.storage_ttl(server(ttl="2s"), Verdict(None, b"{}", ttl_cap=5), {}) == 2
