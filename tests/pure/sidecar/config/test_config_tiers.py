"""The config model's newer parts as pure rules: the shared tier's URL, its password
never printed, the environment's say over it, and tool rules that can never apply."""

from __future__ import annotations

import pytest
import yaml

from mcpcache.sidecar.config import ConfigError, ServerCache, SharedCache, parse_config

SERVERS = {"servers": [{"name": "docs", "url": "http://docs/mcp"}]}


def shared(environ: dict[str, str], **document: object) -> SharedCache | None:
    return parse_config(yaml.safe_dump(SERVERS | document), environ=environ).shared_cache


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://redis:6379", "expected a redis://, rediss:// or unix:// URL"),
        ("redis:///0", "the URL names no host"),
        ("redis://redis:6379/0", None),
        ("rediss://redis:6380/0", None),
        ("unix:///run/redis.sock", None),
    ],
)
def test_the_shared_tier_needs_a_redis_url_with_a_host(url: str, problem: str | None) -> None:
    document = {"sharedCache": {"url": url}}
    if problem is None:
        assert shared({}, **document) == SharedCache(url=url)
    else:
        with pytest.raises(ConfigError, match=problem):
            shared({}, **document)


@pytest.mark.parametrize("timeout", ["0s", 0])
def test_the_shared_tiers_timeout_must_be_positive(timeout: object) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        shared({}, sharedCache={"url": "redis://r:6379", "timeout": timeout})


def test_a_password_in_the_url_is_masked_for_printing() -> None:
    tier = SharedCache(url="redis://user:s3cret@redis:6379/0")
    assert tier.redacted().url == "redis://user:***@redis:6379/0"
    assert tier.url == "redis://user:s3cret@redis:6379/0", "the setting itself is unchanged"
    plain = SharedCache(url="redis://redis:6379/0")
    assert plain.redacted() is plain


def test_the_environment_sets_the_tiers_url_timeout_and_namespace() -> None:
    environ = {
        "MCPCACHE_SHARED_CACHE_URL": "redis://env:6379/1",
        "MCPCACHE_SHARED_CACHE_TIMEOUT": "20ms",
        "MCPCACHE_NAMESPACE": "agents",
    }
    tier = shared(environ)
    assert tier is not None
    assert (tier.url, tier.timeout, tier.namespace) == ("redis://env:6379/1", 0.02, "agents")
    assert shared({"MCPCACHE_NAMESPACE": "agents"}) is None, "no URL, no tier"
    from_file = shared({"MCPCACHE_NAMESPACE": "agents"}, sharedCache={"url": "redis://f:1"})
    assert from_file == SharedCache(url="redis://f:1", namespace="agents")
    assert shared({}, sharedCache={"url": "redis://f:1"}) == SharedCache(url="redis://f:1")


@pytest.mark.parametrize(
    ("listed", "namespace", "url"),
    [
        ("agents, tools", "tools", "redis://env:6379/1"),
        ("agents", "tools", None),
        ("", "tools", "redis://env:6379/1"),
    ],
)
def test_a_listed_namespace_alone_takes_the_environments_url(
    listed: str, namespace: str, url: str | None
) -> None:
    environ = {
        "MCPCACHE_SHARED_CACHE_URL": "redis://env:6379/1",
        "MCPCACHE_SHARED_CACHE_NAMESPACES": listed,
        "MCPCACHE_NAMESPACE": namespace,
    }
    tier = shared(environ)
    assert (tier.url if tier is not None else None) == url


def test_rules_hidden_behind_an_earlier_one_are_named() -> None:
    cache = ServerCache.model_validate(
        {
            "tools": [
                {"name": "search_*"},
                {"name": "search_docs"},
                {"name": "get_*"},
                {"name": "get_*"},
                {"name": "get?x"},
                {"name": "*"},
                {"name": "list_all"},
            ]
        }
    )
    hidden = [(rule.name, earlier.name) for rule, earlier in cache.shadowed_rules()]
    assert hidden == [("search_docs", "search_*"), ("get_*", "get_*"), ("list_all", "*")]
