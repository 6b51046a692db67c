"""The shared tier on Redis Cluster and on a Sentinel-managed primary: the same keys,
the same isolation and the same removals as on one Redis."""

from __future__ import annotations

from typing import Any

import pytest

from peers.clients import call_body, call_headers, post
from peers.rediscluster import RedisCluster
from peers.redissentinel import MASTER, RedisSentinel
from peers.sharedtier import (
    SHARED_HIT,
    call,
    new_app,
    on_loop,
    shared_config,
    stored_in_redis,
    text_of,
)

pytestmark = pytest.mark.redis


@pytest.fixture(params=["cluster", "sentinel"])
def location(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The `sharedCache` block that points at a real cluster or sentinel deployment."""
    if request.param == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"cluster": {"nodes": cluster.urls[:2]}}  # seeds; the rest is discovered
    sentinel: RedisSentinel = request.getfixturevalue("redis_sentinel")
    return {"sentinel": {"nodes": sentinel.urls, "master": MASTER}}


async def test_replicas_share_answers_and_callers_never_do_in_every_mode(
    make_sidecar, json_upstream, location
) -> None:
    peer, app = json_upstream
    document = shared_config(app, location)
    first, second = make_sidecar(document), make_sidecar(document)
    alice = {"authorization": "Bearer alice-token"}
    bob = {"authorization": "Bearer bob-token"}
    arguments = {"text": new_app()}
    before = peer.calls["whoami"]

    status, _, answer = await call(first, "whoami", arguments, **alice)
    assert status.startswith("mcpcache; fwd=miss")
    await stored_in_redis(first)
    status, _, shared = await call(second, "whoami", arguments, **alice)
    assert status == SHARED_HIT
    assert text_of(shared) == text_of(answer)
    status, _, other = await call(second, "whoami", arguments, **bob)
    assert status.startswith("mcpcache; fwd=miss")
    assert text_of(other).startswith("user=Bearer bob-token ")
    assert peer.calls["whoami"] == before + 2
    assert second.sample("mcpcache_shared_lookups_total", result="hit") == 1
    assert second.sample("mcpcache_shared_errors_total", op="get", kind="connection") == 0


async def test_an_entry_and_its_generation_share_a_cluster_slot(
    make_sidecar, json_upstream, redis_cluster
) -> None:
    _, app = json_upstream
    document = shared_config(app, {"cluster": {"nodes": redis_cluster.urls}})
    sidecar = make_sidecar(document)
    await call(sidecar, "echo", {"text": "slot"})
    await stored_in_redis(sidecar)
    shared = sidecar.sidecar.shared
    assert shared is not None
    with redis_cluster.client() as client:
        (entry,) = client.scan_iter(match=f"mcpcache:default:{{{document['appId']}:*", count=1000)
        assert on_loop(sidecar, shared.delete_server(document["appId"], "s")) == 1
        generation = shared.keys.generation(document["appId"], "s")
        assert client.get(generation) is not None
        assert client.keyslot(entry) == client.keyslot(generation)


def shard_counts(cluster: RedisCluster, app_id: str) -> list[int]:
    """How many of the app's entries each primary holds."""
    counts = []
    with cluster.client() as client:
        for node in client.get_primaries():
            names = client.scan_iter(
                match=f"mcpcache:default:{{{app_id}:*", count=1000, target_nodes=node
            )
            counts.append(len(list(names)))
    return counts


async def test_purges_and_clears_reach_every_shard_of_a_cluster(
    make_sidecar, json_upstream, redis_cluster
) -> None:
    _, app = json_upstream
    document = shared_config(app, {"cluster": {"nodes": redis_cluster.urls}})
    servers = [f"s{n}" for n in range(8)]  # eight hash tags: several shards
    document["servers"] = [document["servers"][0] | {"name": name} for name in servers]
    app_id = document["appId"]
    sidecar = make_sidecar(document)
    for server in servers:
        for text in ("one", "two"):
            response = await post(
                sidecar.url(server), call_body(1, "echo", {"text": text}), call_headers("echo"), 10
            )
            assert response.status_code == 200
    await stored_in_redis(sidecar, 2 * len(servers))
    counts = shard_counts(redis_cluster, app_id)
    assert sum(counts) == 16
    assert sum(1 for count in counts if count) >= 2, "the entries spread over shards"

    shared = sidecar.sidecar.shared
    assert shared is not None
    assert on_loop(sidecar, shared.delete_server(app_id, "s0")) == 2
    assert sum(shard_counts(redis_cluster, app_id)) == 14
    assert on_loop(sidecar, shared.clear(app_id)) == 14
    assert shard_counts(redis_cluster, app_id) == [0, 0, 0]


CLUSTER_ACL = (
    "ACL SETUSER mcpcache-agents on >agents-password resetkeys ~mcpcache:agents:* "
    "resetchannels -@all +get +set +unlink +scan +ping +cluster|slots +command"
)
"""The shared-tier guide's ACL for namespace `agents` on a cluster: the one-Redis set,
plus what the client needs to learn the topology (`CLUSTER SLOTS`, `COMMAND`)."""


async def test_a_namespace_confined_by_acl_works_on_every_node_of_a_cluster(
    make_sidecar, json_upstream, redis_cluster
) -> None:
    _, app = json_upstream
    for node in redis_cluster.nodes:  # ACLs are per node: every node gets the user
        node.client().execute_command(CLUSTER_ACL)
    nodes = [
        url.replace("redis://", "redis://mcpcache-agents:agents-password@")
        for url in redis_cluster.urls
    ]
    document = shared_config(app, {"cluster": {"nodes": nodes}}, namespace="agents")
    first, second = make_sidecar(document), make_sidecar(document)
    await call(first, "echo", {"text": "acl"})
    await stored_in_redis(first)
    status, _, _ = await call(second, "echo", {"text": "acl"})
    assert status == SHARED_HIT
    assert second.sample("mcpcache_shared_errors_total", op="get", kind="response") == 0
    outside = redis_cluster.nodes[0].client(username="mcpcache-agents", password="agents-password")
    with pytest.raises(Exception, match="no permissions"):
        outside.get("mcpcache:other:{x:s}:k")
