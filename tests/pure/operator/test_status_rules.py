"""An MCPServer's status and effective server, whole, without an API server: every
condition's fields, when a transition time is kept, what an invalid spec says."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from mcpcache.operator.resource import (
    PURGE_ANNOTATION,
    ResolvedServer,
    ceiling_text,
    purge_marker,
    resolve_server,
)
from mcpcache.operator.status import desired_status, effective_tools, same_status

URL = "http://docs.tools.svc:8000/mcp"
SPEC: dict[str, Any] = {
    "endpoint": {"streamableHTTP": {"url": URL}},
    "cache": {"enabled": True, "ttl": "90s", "maxSize": "256Ki"},
}
THEN = "2020-01-01T00:00:00Z"


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_valid_server_is_ready_within_the_ceiling_with_every_rule_reachable() -> None:
    effective = resolve_server("docs", SPEC)
    assert effective.clamped_from is None
    status = desired_status(effective, 3, None)
    now = status["conditions"][0]["lastTransitionTime"]
    assert now.endswith("Z")
    assert len(now) == len("2020-01-01T00:00:00Z")
    assert status == {
        "observedGeneration": 3,
        "effectiveTTL": "1m30s",
        "effectiveMaxSize": "256Ki",
        "effectiveTimeout": "30s",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Configured",
                "message": "written to the namespace's sidecar configuration",
                "observedGeneration": 3,
                "lastTransitionTime": now,
            },
            {
                "type": "MaxSizeClamped",
                "status": "False",
                "reason": "WithinCeiling",
                "message": "maxSize is within the 1Mi ceiling",
                "observedGeneration": 3,
                "lastTransitionTime": now,
            },
            {
                "type": "RulesShadowed",
                "status": "False",
                "reason": "AllRulesReachable",
                "message": "every tool rule can apply",
                "observedGeneration": 3,
                "lastTransitionTime": now,
            },
        ],
    }
    assert ceiling_text() == "1Mi"


def test_a_server_with_caching_off_says_so() -> None:
    status = desired_status(resolve_server("docs", {**SPEC, "cache": {}}), 1, None)
    assert conditions(status)["Ready"]["message"] == (
        "written to the namespace's sidecar configuration (caching disabled)"
    )
    assert (status["effectiveTTL"], status["effectiveMaxSize"]) == ("30s", "64Ki")


def test_a_clamped_max_size_is_reported_with_what_was_asked() -> None:
    effective = resolve_server("docs", {**SPEC, "cache": {"enabled": True, "maxSize": "8Mi"}})
    assert effective.clamped_from == "8Mi"
    clamped = conditions(desired_status(effective, 1, None))["MaxSizeClamped"]
    assert (clamped["status"], clamped["reason"]) == ("True", "AboveCeiling")
    assert clamped["message"] == "maxSize 8Mi is above the 1Mi ceiling; 1Mi applies"


def test_shadowed_rules_are_each_named_in_the_condition() -> None:
    rules = [{"name": "*"}, {"name": "a"}, {"name": "b"}]
    effective = resolve_server("docs", {**SPEC, "cache": {"enabled": True, "tools": rules}})
    shadowed = conditions(desired_status(effective, 1, None))["RulesShadowed"]
    assert (shadowed["status"], shadowed["reason"]) == ("True", "EarlierRuleMatches")
    assert shadowed["message"] == (
        "tool rule 'a' never applies: '*' before it matches first; "
        "tool rule 'b' never applies: '*' before it matches first"
    )


def test_an_invalid_spec_is_not_ready_and_says_why() -> None:
    spec = {**SPEC, "cache": {"ttl": "soon", "maxSize": "big"}}
    effective = resolve_server("docs", spec)
    assert effective.server is None
    assert effective.error == (
        "spec.cache.ttl: invalid duration 'soon': use a number and a unit, e.g. 30s, 5m, "
        "1h30m; spec.cache.maxSize: invalid quantity 'big': use bytes or a suffix, e.g. "
        "64Ki, 1Mi, 500k"
    )
    status = desired_status(effective, 4, {"lastPurge": "7"})
    assert status == {
        "observedGeneration": 4,
        "lastPurge": "7",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "InvalidSpec",
                "message": effective.error,
                "observedGeneration": 4,
                "lastTransitionTime": status["conditions"][0]["lastTransitionTime"],
            }
        ],
    }
    assert conditions(desired_status(ResolvedServer(None), 1, None))["Ready"]["message"] == (
        "invalid spec"
    )


def test_a_problem_of_the_whole_cache_block_is_told_as_the_specs() -> None:
    cache = {"ignoreHeaders": ["authorization"]}
    effective = resolve_server("docs", {**SPEC, "cache": cache})
    assert effective.error == (
        "spec.cache: ignoreHeaders cannot name authorization: it carries identity "
        "or the protocol and always stays in the key"
    )


@pytest.mark.parametrize(
    "spec",
    [{}, {"endpoint": {}}, {"endpoint": {"streamableHTTP": {}}}],
    ids=["no endpoint", "no transport", "no url"],
)
def test_a_server_without_a_url_is_invalid(spec: dict[str, Any]) -> None:
    effective = resolve_server("docs", spec)
    assert effective.error == "spec.endpoint.streamableHTTP.url: '' is not an http or https URL"


def test_the_timeout_and_set_cookie_opt_out_reach_the_server_and_the_status() -> None:
    spec = {
        "endpoint": {"streamableHTTP": {"url": "http://docs/mcp", "timeout": "2m"}},
        "cache": {"enabled": True, "ignoreSetCookie": True},
    }
    effective = resolve_server("docs", spec)
    assert effective.server is not None
    assert effective.server.timeout == 120
    assert effective.server.cache.ignore_set_cookie is True
    status = desired_status(effective, 1, None)
    assert status["effectiveTimeout"] == "2m"
    assert desired_status(resolve_server("docs", SPEC), 1, None)["effectiveTimeout"] == "30s"


def test_a_bad_timeout_is_told_as_the_endpoints() -> None:
    spec = {"endpoint": {"streamableHTTP": {"url": "http://docs/mcp", "timeout": "soon"}}}
    assert resolve_server("docs", spec).error == (
        "spec.endpoint.streamableHTTP.timeout: invalid duration 'soon': use a number and a "
        "unit, e.g. 30s, 5m, 1h30m"
    )


def test_a_transition_time_is_kept_while_the_status_does_not_flip() -> None:
    effective = resolve_server("docs", SPEC)
    current = {
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": THEN},
            {"type": "MaxSizeClamped", "status": "True", "lastTransitionTime": THEN},
            {"type": "RulesShadowed", "status": "False"},
        ]
    }
    found = conditions(desired_status(effective, 2, current))
    assert found["Ready"]["lastTransitionTime"] == THEN
    assert found["MaxSizeClamped"]["lastTransitionTime"] != THEN, "it flipped to False"
    assert found["RulesShadowed"]["lastTransitionTime"].endswith("Z"), "none kept: now"
    assert found["RulesShadowed"]["lastTransitionTime"] != THEN


def test_the_last_purge_is_the_current_marker_or_the_one_before() -> None:
    annotated = resolve_server("docs", SPEC, {PURGE_ANNOTATION: "2"})
    assert desired_status(annotated, 1, {"lastPurge": "1"})["lastPurge"] == "2"
    plain = resolve_server("docs", SPEC)
    assert desired_status(plain, 1, {"lastPurge": "1"})["lastPurge"] == "1"
    assert "lastPurge" not in desired_status(plain, 1, None)


def test_a_long_purge_value_becomes_a_digest_at_129_characters() -> None:
    assert purge_marker(None) is None
    assert purge_marker({PURGE_ANNOTATION: ""}) is None
    assert purge_marker({"other": "1"}) is None
    assert purge_marker({PURGE_ANNOTATION: "x" * 128}) == "x" * 128
    long = "x" * 129
    assert purge_marker({PURGE_ANNOTATION: long}) == (
        "sha256:" + hashlib.sha256(long.encode()).hexdigest()
    )


def test_effective_tools_say_how_each_rule_caches() -> None:
    rules = [
        {"name": "off", "enabled": False},
        {"name": "writes", "invalidates": ["x"]},
        {"name": "forced", "enabled": True, "ttl": "5s"},
        {"name": "default"},
    ]
    for only_read_only, default in ((False, "on"), (True, "read-only")):
        cache = {"enabled": True, "onlyReadOnlyTools": only_read_only, "tools": rules}
        server = resolve_server("docs", {**SPEC, "cache": cache}).server
        assert server is not None
        assert [(t["name"], t["caching"], t["ttl"]) for t in effective_tools(server.cache)] == [
            ("off", "off", "30s"),
            ("writes", "off", "30s"),
            ("forced", "on", "5s"),
            ("default", default, "30s"),
        ]
    disabled = resolve_server("docs", {**SPEC, "cache": {"tools": rules}}).server
    assert disabled is not None
    assert {t["caching"] for t in effective_tools(disabled.cache)} == {"off"}


def test_statuses_differ_in_anything_but_transition_times() -> None:
    effective = resolve_server("docs", SPEC)
    first = desired_status(effective, 1, None)
    moved = {
        **first,
        "conditions": [{**c, "lastTransitionTime": THEN} for c in first["conditions"]],
    }
    assert same_status(first, moved)
    assert not same_status(first, {**first, "effectiveTTL": "1s"})
    assert not same_status(None, first)
    assert same_status({}, {}) is True
    assert same_status(None, {})


def test_every_condition_keeps_its_transition_time_while_it_holds() -> None:
    valid = desired_status(resolve_server("docs", SPEC), 1, None)
    then = {**valid, "conditions": [{**c, "lastTransitionTime": THEN} for c in valid["conditions"]]}
    again = desired_status(resolve_server("docs", SPEC), 2, then)
    assert [c["lastTransitionTime"] for c in again["conditions"]] == [THEN, THEN, THEN]
    invalid = resolve_server("docs", {})
    current = {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": THEN}]}
    (ready,) = desired_status(invalid, 2, current)["conditions"]
    assert ready["lastTransitionTime"] == THEN


def test_statuses_that_differ_in_a_condition_are_not_the_same() -> None:
    first = desired_status(resolve_server("docs", SPEC), 1, None)
    other = {**first, "conditions": [{**first["conditions"][0], "message": "else"}]}
    assert not same_status(first, other)
    assert same_status({"observedGeneration": 1}, {"observedGeneration": 1})
    assert not same_status({"observedGeneration": 1}, {"observedGeneration": 1, "conditions": [{}]})
