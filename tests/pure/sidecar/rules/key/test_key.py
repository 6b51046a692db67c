from __future__ import annotations

from typing import Any

from mcpcache.sidecar.rules.key.cache_key import cache_key, secret_digest
from mcpcache.sidecar.rules.key.callers import MEMO_VALUE_CHARS, header_digest


def key(params: dict[str, Any], app: str = "agent", auth: str | None = None) -> str:
    identity = {"authorization": secret_digest(auth)} if auth else {}
    return cache_key("docs", "tools/call", params, app, identity)


def test_argument_order_and_whitespace_do_not_matter() -> None:
    assert key({"name": "t", "arguments": {"a": 1, "b": [1, 2]}}) == key(
        {"arguments": {"b": [1, 2], "a": 1}, "name": "t"}
    )


def test_progress_token_and_trace_context_are_left_out() -> None:
    base = {"name": "t", "arguments": {}, "_meta": {"tenant": "x"}}
    noisy = {
        "name": "t",
        "arguments": {},
        "_meta": {
            "tenant": "x",
            "progressToken": 42,
            "traceparent": "00-abc-def-01",
            "tracestate": "k=v",
        },
    }
    assert key(base) == key(noisy)
    assert key({"name": "t", "arguments": {}}) == key(
        {"name": "t", "arguments": {}, "_meta": {"progressToken": "p"}}
    )


def test_other_meta_members_stay_in_the_key() -> None:
    assert key({"name": "t", "_meta": {"tenant": "x"}}) != key(
        {"name": "t", "_meta": {"tenant": "y"}}
    )


def test_callers_and_end_users_never_share_a_key() -> None:
    params = {"name": "t", "arguments": {"q": 1}}
    assert key(params, app="a") != key(params, app="b")
    assert key(params, auth="Bearer one") != key(params, auth="Bearer two")
    assert key(params, auth="Bearer one") != key(params)


def test_server_and_method_are_in_the_key() -> None:
    params = {"name": "t"}
    assert cache_key("a", "tools/call", params, "x", {}) != cache_key(
        "b", "tools/call", params, "x", {}
    )
    assert cache_key("a", "tools/call", params, "x", {}) != cache_key(
        "a", "resources/read", params, "x", {}
    )


def test_baggage_stays_in_the_key() -> None:
    # W3C baggage often carries tenant or user ids an upstream answers by.
    assert key({"name": "t", "_meta": {"baggage": "tenant=a"}}) != key(
        {"name": "t", "_meta": {"baggage": "tenant=b"}}
    )


def test_the_credential_identity_is_a_hash_not_the_token() -> None:
    identity = secret_digest("Bearer secret-token")
    assert "secret" not in identity
    assert len(identity) == 64


def test_a_header_digest_is_the_secret_digest_whether_remembered_or_not() -> None:
    for value in ("Bearer t", "Bearer t", "k" * (MEMO_VALUE_CHARS + 1), ""):
        assert header_digest(value) == secret_digest(value)
    assert header_digest("Bearer t") != header_digest("Bearer u")
