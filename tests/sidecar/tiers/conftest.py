"""Peers of the shared tier's tests only: Redis Cluster and Sentinel deployments (one
Redis, which tests of other folders use too, is in tests/sidecar/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peers.rediscluster import RedisCluster
from peers.redissentinel import RedisSentinel
from peers.redisserver import redis_server_binary


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """One real Redis Cluster for the run (3 primaries, 3 replicas); never failed over."""
    cluster = RedisCluster(redis_server_binary()).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_redis_cluster() -> Iterator[RedisCluster]:
    """A Redis Cluster of the test's own, for a test that kills a primary."""
    cluster = RedisCluster(redis_server_binary()).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    """One Sentinel-managed Redis for the run (a primary, a replica, three sentinels)."""
    deployment = RedisSentinel(redis_server_binary()).start()
    yield deployment
    deployment.stop()


@pytest.fixture
def own_redis_sentinel() -> Iterator[RedisSentinel]:
    """A Sentinel-managed Redis of the test's own, for a test that kills the primary."""
    deployment = RedisSentinel(redis_server_binary()).start()
    yield deployment
    deployment.stop()
