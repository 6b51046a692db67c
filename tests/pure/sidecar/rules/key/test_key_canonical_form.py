"""The key's exact canonical form. Keys are shared beyond one process (a second cache
tier, sidecars of two versions during a rollout), so the form is pinned here, computed
independently of the code: sha256 of sorted-key, whitespace-free UTF-8 JSON."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mcpcache.sidecar.rules.key.cache_key import cache_key, secret_digest


def canonical(material: dict[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_key_is_sha256_of_the_canonical_json_of_its_five_parts() -> None:
    params = {"name": "search", "arguments": {"q": "café", "n": 3}}
    identity = {"header:authorization": secret_digest("Bearer a"), "protocol": "2026-07-28"}
    expected = canonical(
        {
            "server": "docs",
            "method": "tools/call",
            "params": params,
            "caller": "checkout",
            "identity": identity,
        }
    )
    assert cache_key("docs", "tools/call", params, "checkout", identity) == expected


def test_volatile_meta_members_are_dropped_and_an_emptied_meta_with_them() -> None:
    noisy = {"name": "t", "_meta": {"progressToken": 7, "traceparent": "00-a-b-01", "k": "v"}}
    expected = canonical(
        {
            "server": "s",
            "method": "tools/call",
            "params": {"name": "t", "_meta": {"k": "v"}},
            "caller": "a",
            "identity": {},
        }
    )
    assert cache_key("s", "tools/call", noisy, "a", {}) == expected
    only_volatile = {"name": "t", "_meta": {"progressToken": 7, "tracestate": "x=y"}}
    expected = canonical(
        {
            "server": "s",
            "method": "tools/call",
            "params": {"name": "t"},
            "caller": "a",
            "identity": {},
        }
    )
    assert cache_key("s", "tools/call", only_volatile, "a", {}) == expected
    unchanged = {"name": "t", "_meta": "not an object"}
    assert cache_key("s", "tools/call", unchanged, "a", {}) == canonical(
        {"server": "s", "method": "tools/call", "params": unchanged, "caller": "a", "identity": {}}
    )


def test_a_credential_is_hashed_and_an_absent_one_is_empty() -> None:
    assert secret_digest("Bearer a") == hashlib.sha256(b"Bearer a").hexdigest()
    assert secret_digest("") == ""
    assert secret_digest(None) == ""


def test_a_header_value_that_is_not_text_still_has_a_digest() -> None:
    # Header bytes that are not UTF-8 reach the key as surrogate escapes; each byte counts.
    assert secret_digest("\udcff") == hashlib.sha256(b"\xff").hexdigest()
    assert secret_digest("\udcfe") != secret_digest("\udcff")


def test_ignored_arguments_leave_the_params_and_their_names_join_the_key() -> None:
    params = {"name": "search", "arguments": {"q": "x", "requestId": "r-1", "nonce": 4}}
    expected = canonical(
        {
            "server": "docs",
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"q": "x"}},
            "caller": "a",
            "identity": {},
            "ignored": ["nonce", "requestId"],
        }
    )
    assert cache_key("docs", "tools/call", params, "a", {}, ("requestId", "nonce")) == expected
