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


def test_a_cacheable_call_is_looked_up_under_a_key() -> None:
    plan = policy.plan(server(), request(name="search", arguments={"q": "x"}), {}, "agent")
    assert isinstance(plan, policy.Lookup)
    assert len(plan.key) == 64


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
    plan = policy.plan(server(), message, {}, "agent")
    assert plan == policy.Bypass(reason)  # type: ignore[arg-type]
    assert isinstance(plan, policy.Bypass)
    assert plan.fwd == fwd


def test_a_server_with_caching_off_is_bypassed() -> None:
    plan = policy.plan(server(enabled=False), request(name="t"), {}, "agent")
    assert plan == policy.Bypass("disabled")


def test_the_key_depends_on_the_caller_and_the_credential() -> None:
    message = request(name="t", arguments={})
    keys = {
        policy.plan(server(), message, headers, app)
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
    assert policy.response_refusal(status, headers) == reason


def test_storage_ttl_is_the_shorter_of_the_server_ttl_and_the_result_hint() -> None:
    assert policy.storage_ttl(server(ttl="60s"), Verdict(None, b"{}")) == 60
    assert policy.storage_ttl(server(ttl="60s"), Verdict(None, b"{}", ttl_cap=5)) == 5
    assert policy.storage_ttl(server(ttl="2s"), Verdict(None, b"{}", ttl_cap=5)) == 2
