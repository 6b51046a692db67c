"""Replicas agree: a removal through one sidecar (a write, a purge, a list-changed notice,
a recheck that found a changed answer) reaches the memory of every other sidecar of the
app on one Redis, Sentinel or Cluster; a sidecar that may have missed one while it was not
listening does not answer from memory what Redis can answer instead, and drops its memory
when it hears again."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest
import redis as redis_py

from mcpcache.sidecar.config import SharedCache
from mcpcache.sidecar.tiers.announcement import Announcement
from mcpcache.sidecar.tiers.breaker import Failed
from mcpcache.sidecar.tiers.codec import KeyLayout
from mcpcache.sidecar.tiers.connect import RedisClient
from mcpcache.sidecar.tiers.generations import Generations
from peers.clients import call_body, call_headers, http_client, post, unique
from peers.paths import ROOT
from peers.rediscluster import RedisCluster
from peers.redissentinel import MASTER, RedisSentinel
from peers.redisserver import RedisServer
from peers.serving import async_wait_until, past
from peers.sharedtier import SHARED_HIT, call, new_app, shared_config, stored_in_redis, text_of
from peers.sidecar import RunningSidecar

pytestmark = pytest.mark.redis

T = TypeVar("T")

HIT = "mcpcache; hit"
WRITER_RULES = [{"name": "update_doc", "enabled": False, "invalidates": ["get_doc"]}]
GUIDE = ROOT / "docs" / "guide" / "shared-tier.md"


@pytest.fixture(params=["one", "cluster", "sentinel"])
def location(request: pytest.FixtureRequest) -> str | dict[str, Any]:
    """Where the shared tier is: one Redis, a cluster or a sentinel-managed primary."""
    if request.param == "one":
        server: RedisServer = request.getfixturevalue("redis_server")
        return server.url
    if request.param == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return {"cluster": {"nodes": cluster.urls[:2]}}
    sentinel: RedisSentinel = request.getfixturevalue("redis_sentinel")
    return {"sentinel": {"nodes": sentinel.urls, "master": MASTER}}


def listening(*sidecars: RunningSidecar) -> Any:
    return async_wait_until(
        lambda: all(s.sample("mcpcache_shared_removals_listening") == 1 for s in sidecars),
        10,
        "the replicas to listen for removals",
    )


def received(sidecar: RunningSidecar, count: float = 1) -> Any:
    return async_wait_until(
        lambda: (
            sidecar.sample("mcpcache_shared_removal_messages_total", result="received") >= count
        ),
        10,
        "the removal to be announced",
    )


async def in_both_memories(
    first: RunningSidecar, second: RunningSidecar, tool: str, arguments: dict[str, Any]
) -> str:
    """Read `tool` through `first` (a miss, stored in Redis), then twice through
    `second` (copied from Redis into its memory, then a memory hit); its text."""
    await listening(first, second)
    status, _, answer = await call(first, tool, arguments)
    assert status.startswith("mcpcache; fwd=miss"), status
    await stored_in_redis(first)
    assert (await call(second, tool, arguments))[0] == SHARED_HIT
    assert (await call(second, tool, arguments))[0] == HIT
    return text_of(answer)


@asynccontextmanager
async def deaf(redis: RedisServer, sidecar: RunningSidecar) -> AsyncIterator[None]:
    """While inside, no replica can subscribe (or publish): the ACL lacks the channels
    and every subscription is cut. `sidecar` has noticed it when this enters."""
    with redis.client() as admin:
        admin.execute_command("ACL SETUSER default resetchannels")
        admin.execute_command("CLIENT KILL TYPE pubsub")
        try:
            await async_wait_until(
                lambda: sidecar.sample("mcpcache_shared_removals_listening") == 0,
                10,
                "the subscription to be lost",
            )
            yield
        finally:
            admin.execute_command("ACL SETUSER default allchannels")


async def both_holding_a_doc(
    make_sidecar: Any, app: Any, redis: RedisServer, **cache: str
) -> tuple[RunningSidecar, RunningSidecar, str]:
    """Two replicas of a server whose `update_doc` invalidates `get_doc` (with `cache`'s
    settings), both holding one document's `get_doc` in memory; that document's name."""
    document = shared_config(app, redis.url, retryAfter="300ms")
    document["servers"][0]["cache"] |= {"tools": WRITER_RULES, **cache}
    first, second = make_sidecar(document), make_sidecar(document)
    name = unique()
    await in_both_memories(first, second, "get_doc", {"name": name})
    return first, second, name


def per_app_user(redis: RedisServer, app_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Create the shared-tier guide's user for one app of namespace `agents`, for
    `app_id`, exactly as the guide writes it; the URL a sidecar of that app uses."""
    text = GUIDE.read_text()
    (line,) = [
        x for x in text.splitlines() if x.startswith("ACL SETUSER") and "checkout-agent" in x
    ]
    with redis.client() as admin:
        admin.execute_command(line.replace("checkout-agent", app_id).replace("LONG-", "A-"))
    monkeypatch.setenv("MCPCACHE_SHARED_CACHE_PASSWORD", "A-RANDOM-PASSWORD")
    return f"redis://mcpcache-agents-{app_id}@127.0.0.1:{redis.port}/0"


async def purge(sidecar: RunningSidecar) -> None:
    async with http_client(timeout=10) as http:
        done = await http.post(f"http://127.0.0.1:{sidecar.port}/admin/purge", json={"server": "s"})
    assert done.status_code == 200


async def test_a_write_through_one_replica_removes_the_entry_from_anothers_memory(
    make_sidecar, json_upstream, location
) -> None:
    peer, app = json_upstream
    document = shared_config(app, location)
    document["servers"][0]["cache"]["tools"] = WRITER_RULES
    first, second = make_sidecar(document), make_sidecar(document)
    name = unique()
    await in_both_memories(first, second, "get_doc", {"name": name})
    calls = peer.calls["get_doc"]

    await call(first, "update_doc", {"name": name, "text": "rewritten"})
    await received(second)
    status, _, answer = await call(second, "get_doc", {"name": name})
    assert status.startswith("mcpcache; fwd=miss")
    assert text_of(answer).startswith("rewritten for anonymous")
    assert peer.calls["get_doc"] == calls + 1
    assert first.sample("mcpcache_shared_removal_messages_total", result="sent") >= 1
    assert second.sample("mcpcache_invalidations_total", server="s", cause="replica") >= 1


async def test_a_purge_through_one_replica_removes_the_entry_from_anothers_memory(
    make_sidecar, json_upstream, location
) -> None:
    peer, app = json_upstream
    document = shared_config(app, location)
    first, second = make_sidecar(document), make_sidecar(document)
    arguments = {"text": unique()}
    await in_both_memories(first, second, "echo", arguments)
    calls = peer.calls["echo"]

    await purge(first)
    await received(second)
    assert (await call(second, "echo", arguments))[0].startswith("mcpcache; fwd=miss")
    assert peer.calls["echo"] == calls + 1


async def test_a_list_changed_notice_through_one_replica_reaches_anothers_memory(
    make_sidecar, upstream, location
) -> None:
    peer, app = upstream
    document = shared_config(app, location)
    first, second = make_sidecar(document), make_sidecar(document)
    arguments = {"text": unique()}
    await in_both_memories(first, second, "echo", arguments)
    calls = peer.calls["echo"]

    await call(first, "announce", {"kind": "tools", "uri": unique()})  # tools list changed
    await received(second)
    assert (await call(second, "echo", arguments))[0].startswith("mcpcache; fwd=miss")
    assert peer.calls["echo"] == calls + 1


async def test_a_recheck_that_finds_a_change_reaches_the_other_replicas_memory(
    make_sidecar, own_upstream, location
) -> None:
    _, app = own_upstream
    plain = shared_config(app, location)
    plain["servers"][0]["cache"]["ttl"] = "60s"
    checking = json.loads(json.dumps(plain))
    checking["servers"][0]["cache"]["revalidateSample"] = 1
    first, checker = make_sidecar(plain), make_sidecar(checking)
    arguments = {"text": unique()}
    await listening(first, checker)
    old = text_of((await call(first, "echo", arguments))[2])  # "<text> #1"
    await stored_in_redis(first)
    assert (await call(first, "echo", arguments))[0] == HIT  # in the first one's memory
    assert (await call(checker, "echo", arguments))[0] == SHARED_HIT
    assert (await call(checker, "echo", arguments))[0] == HIT  # rechecked: "#2" differs

    await received(first)
    status, _, answer = await call(first, "echo", arguments)
    assert status.startswith("mcpcache; fwd=miss")
    assert text_of(answer) != old
    assert checker.sample("mcpcache_revalidations_total", server="s", result="changed") == 1


async def test_a_replica_that_could_not_listen_while_a_write_happened_never_serves_the_old_entry(
    make_sidecar, json_upstream, own_redis_server
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    document = shared_config(app, redis.url, retryAfter="300ms")
    document["servers"][0]["cache"]["tools"] = WRITER_RULES
    first, second = make_sidecar(document), make_sidecar(document)
    name = unique()
    await in_both_memories(first, second, "get_doc", {"name": name})
    resyncs = second.sample("mcpcache_shared_removal_resyncs_total")

    with redis.client() as admin:
        # The subscriptions are cut and cannot be made again: every message is lost.
        admin.execute_command("ACL SETUSER default resetchannels")
        admin.execute_command("CLIENT KILL TYPE pubsub")
        await async_wait_until(
            lambda: second.sample("mcpcache_shared_removals_listening") == 0,
            10,
            "the subscription to be lost",
        )
        await call(first, "update_doc", {"name": name, "text": "while deaf"})
        assert first.sample("mcpcache_shared_removal_messages_total", result="failed") >= 1
        status, _, answer = await call(second, "get_doc", {"name": name})
        assert status.startswith("mcpcache; fwd=miss"), "Redis answered for the old copy"
        assert text_of(answer).startswith("while deaf for anonymous")

        admin.execute_command("ACL SETUSER default allchannels")
    await listening(second)
    assert second.sample("mcpcache_shared_removal_resyncs_total") > resyncs
    assert second.sample("mcpcache_shared_removal_messages_total", result="received") == 0


async def test_a_replica_deaf_while_redis_restarted_drops_what_it_held_when_it_hears_again(
    make_sidecar, json_upstream, own_redis_server
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    document = shared_config(app, redis.url, retryAfter="300ms")
    document["servers"][0]["cache"]["tools"] = WRITER_RULES
    first, second = make_sidecar(document), make_sidecar(document)
    name = unique()
    await in_both_memories(first, second, "get_doc", {"name": name})

    redis.kill()
    # Redis out of reach: nothing can be fenced or announced; memory still answers.
    await call(first, "update_doc", {"name": name, "text": "during the restart"})
    redis.start()  # empty: the old entry, its generation and every subscription gone
    await async_wait_until(
        lambda: second.sample("mcpcache_shared_removal_resyncs_total") >= 2,
        10,
        "the second replica to subscribe again",
    )
    await listening(second)
    status, _, answer = await call(second, "get_doc", {"name": name})
    assert status.startswith("mcpcache; fwd=miss")
    assert text_of(answer).startswith("during the restart for anonymous")


async def test_a_forged_message_removes_nothing_of_another_app_and_nothing_unknown(
    make_sidecar, json_upstream, redis_server
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    victim = make_sidecar(document)
    arguments = {"text": unique()}
    await listening(victim)
    await call(victim, "echo", arguments)
    assert (await call(victim, "echo", arguments))[0] == HIT
    shared = victim.sidecar.shared
    assert shared is not None
    own_channel = shared.keys.channel(document["appId"])
    other_channel = shared.keys.channel("another-app")
    everything = {
        "v": 1, "from": "x", "server": "s", "tools": [], "uri": None, "resources": False,
        "listings": [], "everything": True, "keys": [],
    }  # fmt: skip
    with redis_server.client() as attacker:
        # Another app's channel, another app's id on this app's channel, and junk.
        attacker.publish(other_channel, json.dumps(everything | {"app": "another-app"}))
        attacker.publish(own_channel, json.dumps(everything | {"app": "another-app"}))
        attacker.publish(own_channel, b"\xff" * 20000)
        attacker.publish(own_channel, json.dumps(everything | {"app": document["appId"]})[:-1])
        unknown = everything | {"app": document["appId"], "server": "not-a-server"}
        attacker.publish(own_channel, json.dumps(unknown))
    await async_wait_until(
        lambda: (
            victim.sample("mcpcache_shared_removal_messages_total", result="dropped") == 3
            and victim.sample("mcpcache_shared_removal_messages_total", result="received") == 1
        ),
        10,
        "the messages to arrive",
    )
    assert (await call(victim, "echo", arguments))[0] == HIT


async def test_a_deaf_replica_never_serves_stale_while_revalidate_an_entry_a_write_removed(
    make_sidecar, json_upstream, own_redis_server
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    first, second, name = await both_holding_a_doc(
        make_sidecar, app, redis, ttl="1s", staleWhileRevalidate="1m"
    )
    stored = time.monotonic()

    async with deaf(redis, second):
        await call(first, "update_doc", {"name": name, "text": "while deaf"})
        await past(stored + 1.1)
        status, _, answer = await call(second, "get_doc", {"name": name})
    assert text_of(answer).startswith("while deaf for anonymous"), (status, text_of(answer))
    assert status.startswith("mcpcache; fwd=miss"), status


async def test_a_deaf_replica_never_serves_stale_if_error_an_entry_a_write_removed(
    make_sidecar, own_upstream, own_redis_server
) -> None:
    """The upstream fails after another replica's write: without the cache the caller
    would get an error, and that is what it gets, not the entry the write removed."""
    _, app = own_upstream
    redis = own_redis_server
    first, second, name = await both_holding_a_doc(
        make_sidecar, app, redis, ttl="1s", staleIfError="1m"
    )
    stored = time.monotonic()

    async with deaf(redis, second):
        await call(first, "update_doc", {"name": name, "text": "while deaf"})
        await async_wait_until(lambda: time.monotonic() > stored + 1.1, what="the clock")
        app.stop()
        response = await post(
            second.url("s"),
            call_body(7, "get_doc", {"name": name}),
            call_headers("get_doc"),
            10,
        )
    assert response.status_code == 502, (response.headers, response.text)


async def test_a_deaf_replica_whose_one_lookup_failed_goes_upstream_instead_of_trusting_memory(
    make_sidecar, json_upstream, own_redis_server
) -> None:
    """One lookup that timed out is not Redis out of reach: other replicas still fence
    and announce removals through it, so memory this replica cannot vouch for does not
    answer (nor while the places are full, the breaker half open or a removal owed)."""
    peer, app = json_upstream
    redis = own_redis_server
    first, second, name = await both_holding_a_doc(make_sidecar, app, redis)
    calls = peer.calls["get_doc"]

    async with deaf(redis, second):
        await call(first, "update_doc", {"name": name, "text": "while deaf"})
        redis.pause()  # the next lookup times out
        try:
            status, _, answer = await call(second, "get_doc", {"name": name})
        finally:
            redis.resume()
    assert second.sample("mcpcache_shared_lookups_total", result="error") == 1
    assert second.sample("mcpcache_shared_breaker", mcpcache_shared_breaker="closed") == 1
    assert text_of(answer).startswith("while deaf for anonymous"), (status, text_of(answer))
    assert status.startswith("mcpcache; fwd=miss"), status
    assert peer.calls["get_doc"] == calls + 1


async def test_a_removal_made_while_the_fence_is_on_its_way_gets_a_generation_of_its_own(
    redis_server,
) -> None:
    """Sequence: a write's new generation lands in Redis; another replica reads it and
    fetches the old answer; a second write is made here before the SET's reply is read.
    The second write is announced only under a generation set after it, so that what
    the other replica stores under the first one is dead on arrival."""
    settings = SharedCache.model_validate(
        {"url": redis_server.url, "timeout": "5s", "retryAfter": "60s"}
    )
    client, keys = RedisClient(settings, {}), KeyLayout(settings.namespace)
    app_id = new_app()
    name = keys.generation(app_id, "s")
    read_between: list[bytes] = []
    announced: list[tuple[Announcement, bytes]] = []

    async def run(op: str, call: Callable[[], Awaitable[T]], guarded: bool = True) -> T | Failed:
        value = await call()  # landed in Redis; its reply not yet read by the removal
        if op == "set" and not read_between:
            with redis_server.client() as other_replica:
                read_between.append(other_replica.get(name))
            removals.forget_server(app_id, "s", Announcement("s", tools=("second",)))
        return value

    async def announce(app: str, told: Announcement) -> None:
        with redis_server.client() as other_replica:
            announced.append((told, other_replica.get(name)))

    removals = Generations(run, client, keys, settings.retry_after, announce)
    try:
        told = removals.forget_server(app_id, "s", Announcement("s", tools=("first",)))
        await asyncio.wait_for(told, 10)
    finally:
        await client.aclose()
    ((announcement, generation),) = announced
    assert announcement.tools == ("first", "second")
    assert read_between[0] is not None
    assert generation != read_between[0], "the second write was announced unfenced"


async def test_replicas_confined_by_the_guides_per_app_acl_share_entries_and_hear_removals(
    make_sidecar, json_upstream, own_redis_server, monkeypatch
) -> None:
    peer, app = json_upstream
    app_id = new_app()
    url = per_app_user(own_redis_server, app_id, monkeypatch)
    document = shared_config(app, url, app_id, namespace="agents", retryAfter="300ms")
    document["servers"][0]["cache"]["tools"] = WRITER_RULES
    first, second = make_sidecar(document), make_sidecar(document)
    name = unique()
    await in_both_memories(first, second, "get_doc", {"name": name})  # a shared hit
    calls = peer.calls["get_doc"]

    await call(first, "update_doc", {"name": name, "text": "confined"})  # its generation
    await received(second)
    status, _, answer = await call(second, "get_doc", {"name": name})
    assert status.startswith("mcpcache; fwd=miss")
    assert text_of(answer).startswith("confined for anonymous")
    assert peer.calls["get_doc"] == calls + 1
    for sidecar in (first, second):
        assert sidecar.sample("mcpcache_shared_errors_total", op="get", kind="response") == 0
        assert sidecar.sample("mcpcache_shared_breaker", mcpcache_shared_breaker="closed") == 1


async def test_another_apps_user_from_the_guides_acl_can_neither_announce_nor_read_for_an_app(
    make_sidecar, json_upstream, own_redis_server, monkeypatch
) -> None:
    """A message names its app, which a forger writes as it likes: the channel's ACL is
    what keeps another app's pods from removing this app's entries."""
    _, app = json_upstream
    redis = own_redis_server
    app_id, other = new_app(), new_app()
    url = per_app_user(redis, app_id, monkeypatch)
    victim = make_sidecar(shared_config(app, url, app_id, namespace="agents"))
    arguments = {"text": unique()}
    await listening(victim)
    await call(victim, "echo", arguments)
    assert (await call(victim, "echo", arguments))[0] == HIT
    per_app_user(redis, other, monkeypatch)
    shared = victim.sidecar.shared
    assert shared is not None
    forged = {
        "v": 1, "app": app_id, "from": "x", "server": "s", "tools": [], "uri": None,
        "resources": False, "listings": [], "everything": True, "keys": [],
    }  # fmt: skip
    user = f"mcpcache-agents-{other}"
    with redis.client(username=user, password="A-RANDOM-PASSWORD") as intruder:
        intruder.publish(shared.keys.channel(other), b"its own channel: allowed")
        with pytest.raises(redis_py.exceptions.NoPermissionError):
            intruder.publish(shared.keys.channel(app_id), json.dumps(forged))
        with pytest.raises(redis_py.exceptions.NoPermissionError):
            intruder.get(shared.keys.generation(app_id, "s"))
    assert (await call(victim, "echo", arguments))[0] == HIT
    assert victim.sample("mcpcache_shared_removal_messages_total", result="received") == 0


async def test_a_flood_of_refused_messages_is_counted_each_and_logged_once(
    make_sidecar, json_upstream, redis_server, caplog
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    victim = make_sidecar(document)
    await listening(victim)
    shared = victim.sidecar.shared
    assert shared is not None
    with caplog.at_level(logging.WARNING, logger="mcpcache"):
        with redis_server.client() as publisher:
            for n in range(30):
                publisher.publish(shared.keys.channel(document["appId"]), f"junk {n}")
        await async_wait_until(
            lambda: victim.sample("mcpcache_shared_removal_messages_total", result="dropped") == 30,
            10,
            "the messages to arrive",
        )
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in refused]


async def test_writes_during_a_redis_outage_are_answered_without_waiting_for_redis(
    make_sidecar, json_upstream, own_redis_server
) -> None:
    """A write's answer waits (up to twice the timeout) for its removal to be announced;
    once Redis has refused the removal's generation, it is announced when Redis takes
    it, and nobody waits for that. With a 3 s timeout, each write would wait 6 s."""
    peer, app = json_upstream
    redis = own_redis_server
    document = shared_config(app, redis.url, timeout="3s", retryAfter="300ms")
    document["servers"][0]["cache"]["tools"] = WRITER_RULES
    sidecar = make_sidecar(document)
    await listening(sidecar)
    calls = peer.calls["update_doc"]

    redis.kill()
    for n in range(2):
        body = call_body(7, "update_doc", {"name": unique(), "text": f"write {n}"})
        response = await post(sidecar.url("s"), body, call_headers("update_doc"), 3)
        assert response.status_code == 200
    assert peer.calls["update_doc"] == calls + 2
    assert sidecar.sample("mcpcache_shared_removal_messages_total", result="sent") == 0
