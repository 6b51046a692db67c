"""Where the shared tier's Redis is, as pure rules: exactly one of one server, a Cluster
or a Sentinel-managed primary, from the file or the environment, never two."""

from __future__ import annotations

import pytest
import yaml

from mcpcache.sidecar.config import ConfigError, SharedCache, parse_config

SERVERS = {"servers": [{"name": "docs", "url": "http://docs/mcp"}]}
CLUSTER = {"nodes": ["redis://a:6379", "redis://b:6379"]}
SENTINEL = {"nodes": ["redis://s1:26379", "redis://s2:26379"], "master": "cache"}


def shared(environ: dict[str, str], **document: object) -> SharedCache | None:
    return parse_config(yaml.safe_dump(SERVERS | document), environ=environ).shared_cache


def test_a_cluster_or_a_sentinel_primary_stands_in_for_the_url() -> None:
    cluster = shared({}, sharedCache={"cluster": CLUSTER})
    assert cluster is not None
    assert (cluster.mode, cluster.urls) == ("cluster", ("redis://a:6379", "redis://b:6379"))
    sentinel = shared({}, sharedCache={"sentinel": SENTINEL})
    assert sentinel is not None
    assert sentinel.sentinel is not None
    assert (sentinel.mode, sentinel.sentinel.master) == ("sentinel", "cache")
    one = shared({}, sharedCache={"url": "redis://r:6379/0"})
    assert one is not None
    assert one.mode == "standalone"


@pytest.mark.parametrize(
    ("block", "found"),
    [
        ({"url": "redis://r:6379", "cluster": CLUSTER}, "url and cluster"),
        ({"cluster": CLUSTER, "sentinel": SENTINEL}, "cluster and sentinel"),
        ({"timeout": "1s"}, "none"),
    ],
)
def test_exactly_one_place_for_redis_is_accepted(block: dict[str, object], found: str) -> None:
    with pytest.raises(
        ConfigError, match=f"exactly one of url, cluster or sentinel \\(found {found}\\)"
    ):
        shared({}, sharedCache=block)


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"cluster": {"nodes": []}}, "at least 1 item"),
        ({"cluster": {"nodes": ["unix:///run/redis.sock"]}}, "a node is redis://host:port"),
        ({"cluster": {"nodes": ["redis://a:1", "rediss://b:1"]}}, "mix redis:// and rediss://"),
        ({"sentinel": {"nodes": ["redis://s:26379"]}}, "master"),
        ({"sentinel": {"nodes": ["http://s:26379"], "master": "m"}}, "expected a redis://"),
    ],
)
def test_nodes_are_tcp_urls_of_one_scheme(block: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        shared({}, sharedCache=block)


def test_passwords_in_node_urls_are_masked_for_printing() -> None:
    tier = shared({}, sharedCache={"cluster": {"nodes": ["rediss://u:secret@a:6380"]}})
    assert tier is not None
    printed = tier.redacted()
    assert printed.cluster is not None
    assert printed.cluster.nodes == ("rediss://u:***@a:6380",)
    assert "secret" not in repr(printed)


def test_the_environment_names_a_cluster_or_sentinels_in_place_of_the_files_url() -> None:
    document = {"sharedCache": {"url": "redis://file:6379", "timeout": "20ms"}}
    nodes = {"MCPCACHE_SHARED_CACHE_CLUSTER_NODES": "redis://a:6379, redis://b:6379"}
    tier = shared(nodes, **document)
    assert tier is not None
    assert (tier.url, tier.urls, tier.timeout) == (None, ("redis://a:6379", "redis://b:6379"), 0.02)
    sentinels = {
        "MCPCACHE_SHARED_CACHE_SENTINEL_NODES": "redis://s1:26379,redis://s2:26379",
        "MCPCACHE_SHARED_CACHE_SENTINEL_MASTER": "cache",
    }
    tier = shared(sentinels)
    assert tier is not None
    assert tier.sentinel is not None
    assert (tier.sentinel.master, tier.mode) == ("cache", "sentinel")


def test_two_places_in_the_environment_are_refused() -> None:
    environ = {
        "MCPCACHE_SHARED_CACHE_URL": "redis://r:6379",
        "MCPCACHE_SHARED_CACHE_CLUSTER_NODES": "redis://a:6379",
    }
    with pytest.raises(ConfigError, match="found url and cluster"):
        shared(environ)
    with pytest.raises(ConfigError, match="master"):
        shared({"MCPCACHE_SHARED_CACHE_SENTINEL_NODES": "redis://s:26379"})


def test_a_namespace_not_listed_gets_no_cluster_from_the_environment() -> None:
    environ = {
        "MCPCACHE_SHARED_CACHE_CLUSTER_NODES": "redis://a:6379",
        "MCPCACHE_SHARED_CACHE_NAMESPACES": "agents",
    }
    assert shared(environ | {"MCPCACHE_NAMESPACE": "other"}) is None
    tier = shared(environ | {"MCPCACHE_NAMESPACE": "agents"})
    assert tier is not None
    assert (tier.mode, tier.namespace) == ("cluster", "agents")
