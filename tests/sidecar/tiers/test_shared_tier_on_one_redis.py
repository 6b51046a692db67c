"""The shared tier on a real Redis: replicas share answers, callers never do (but for
entries for every caller, which the replicas of one app share and no other app sees),
and Redis trouble never becomes the caller's."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from mcpcache.sidecar.config import ConfigError, parse_config
from mcpcache.sidecar.tiers.breaker import Breaker
from mcpcache.sidecar.tiers.codec import MAGIC, decode, encode
from peers.clients import (
    LEGACY,
    MODERN,
    call_body,
    call_headers,
    http_client,
    introduce,
    mcp_client,
    post,
    read_body,
    unique,
)
from peers.controlplane import Authority
from peers.redisserver import RedisServer, redis_server_binary
from peers.serving import ServedApp, async_wait_until
from peers.sharedtier import (
    SHARED_HIT,
    call,
    new_app,
    on_loop,
    shared_config,
    stored_in_redis,
    text_of,
)
from peers.sidecar import RunningSidecar, one_server
from peers.upstream import Upstream


def keys(redis_server: RedisServer, app_id: str, namespace: str = "default") -> set[bytes]:
    return set(redis_server.client().scan_iter(match=f"mcpcache:{namespace}:{{{app_id}:*"))


@pytest.mark.parametrize("kind", ["json", "sse"])
async def test_a_call_through_one_replica_is_a_hit_through_another(
    make_sidecar, redis_server, upstream, json_upstream, kind
) -> None:
    peer, app = json_upstream if kind == "json" else upstream
    document = shared_config(app, redis_server.url)
    app_id = document["appId"]
    first, second = make_sidecar(document), make_sidecar(document)
    before = peer.calls["echo"]
    arguments = {"text": f"shared-{kind}"}

    status, type_1, answer_1 = await call(first, "echo", arguments)
    assert status.startswith("mcpcache; fwd=miss")
    await stored_in_redis(first)
    status, type_2, answer_2 = await call(second, "echo", arguments)
    assert status == SHARED_HIT
    assert (type_2, text_of(answer_2)) == (type_1, text_of(answer_1))
    assert answer_2["id"] == 7
    status, _, answer_3 = await call(second, "echo", arguments)
    assert status == "mcpcache; hit"  # copied into the second replica's memory
    assert text_of(answer_3) == text_of(answer_1)
    assert peer.calls["echo"] == before + 1
    assert second.sample("mcpcache_shared_lookups_total", result="hit") == 1
    assert second.sample("mcpcache_requests_total", server="s", method="tools/call", outcome="hit")
    assert len(keys(redis_server, app_id)) == 1


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_a_shared_hit_replays_the_log_lines_and_progress_of_the_stream(
    make_sidecar, redis_server, upstream, mode: str
) -> None:
    peer, app = upstream
    document = shared_config(app, redis_server.url)
    first, second = make_sidecar(document), make_sidecar(document)
    arguments = {"steps": 2, "text": uuid.uuid4().hex}

    async def narrated(sidecar: RunningSidecar) -> list[Any]:
        """What the client's logging and progress callbacks saw, then the answer."""
        seen: list[Any] = []

        async def on_log(params: Any) -> None:
            seen.append(params.data)

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            seen.append((done, total, message))

        async with mcp_client(
            sidecar.url("s"), mode=mode, logging_callback=on_log, log_level="info"
        ) as client:
            result = await client.call_tool("narrated", arguments, progress_callback=on_progress)
        return [*seen, result.content[0].text]

    seen = [await narrated(first)]
    calls = peer.calls["narrated"]
    await stored_in_redis(first)
    seen.append(await narrated(second))
    assert peer.calls["narrated"] == calls
    assert second.sample("mcpcache_shared_lookups_total", result="hit") == 1
    assert len(seen[0]) == 5
    assert seen[1] == seen[0]


async def test_a_shared_hit_keeps_the_remaining_life_and_age(
    make_sidecar, redis_server, json_upstream
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    app_id = document["appId"]
    document["servers"][0]["cache"]["ttl"] = "40s"
    first, second = make_sidecar(document), make_sidecar(document)
    await call(first, "echo", {"text": "ttl"})
    await stored_in_redis(first)
    (name,) = keys(redis_server, app_id)
    assert 0 < redis_server.client().pttl(name) <= 40_000
    response = await post(
        second.url("s"), call_body(1, "echo", {"text": "ttl"}), call_headers("echo"), 10
    )
    assert response.headers["cache-status"] == SHARED_HIT
    assert 0 <= int(response.headers["age"]) <= 40
    (entry,) = second.sidecar.cache.values()
    assert entry.expires_at - second.sidecar.cache.timer() <= 40


async def test_different_apps_and_users_never_share_across_the_tier(
    make_sidecar, redis_server, json_upstream
) -> None:
    peer, app = json_upstream
    app_a, app_b = new_app(), new_app()
    alice_1 = make_sidecar(shared_config(app, redis_server.url, app_a))
    alice_2 = make_sidecar(shared_config(app, redis_server.url, app_a))
    other_app = make_sidecar(shared_config(app, redis_server.url, app_b))
    arguments = {"text": "private"}
    alice = {"authorization": "Bearer alice-secret-token"}
    bob = {"authorization": "Bearer bob-secret-token"}
    before = peer.calls["whoami"]

    status, _, answer = await call(alice_1, "whoami", arguments, **alice)
    assert text_of(answer).startswith("user=Bearer alice-secret-token")
    await stored_in_redis(alice_1)
    # Another end user of the same app, on the replica that could share: a miss.
    status, _, answer = await call(alice_2, "whoami", arguments, **bob)
    assert status.startswith("mcpcache; fwd=miss")
    assert text_of(answer).startswith("user=Bearer bob-secret-token")
    # The same end user through another app: a miss too.
    status, _, answer = await call(other_app, "whoami", arguments, **alice)
    assert status.startswith("mcpcache; fwd=miss")
    # The same user of the same app: shared.
    status, _, answer = await call(alice_2, "whoami", arguments, **alice)
    assert status == SHARED_HIT
    assert text_of(answer).startswith("user=Bearer alice-secret-token")
    assert peer.calls["whoami"] == before + 3
    await stored_in_redis(other_app)
    assert len(keys(redis_server, app_a)) == 2
    assert len(keys(redis_server, app_b)) == 1


async def test_redis_holds_only_the_result_never_headers_or_tokens(
    make_sidecar, redis_server, json_upstream
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    app_id = document["appId"]
    sidecar = make_sidecar(document)
    _, _, answer = await call(
        sidecar, "echo", {"text": "plain"}, authorization="Bearer never-in-redis-42"
    )
    await stored_in_redis(sidecar)
    (name,) = keys(redis_server, app_id)
    value = redis_server.client().get(name)
    assert b"never-in-redis" not in value
    assert b"authorization" not in value.lower()
    key = name.decode().rsplit(":", 1)[1]
    entry = decode(value, key)
    assert entry is not None
    assert json.loads(entry.result) == answer["result"]
    assert entry.fetch_seconds > 0  # and the upstream time its fetch took
    stamps = (entry.stored_at, entry.expires_at)
    assert value == encode(key, entry.result, False, *stamps, b"", entry.fetch_seconds)


async def test_nothing_goes_to_redis_that_memory_would_not_keep(
    make_sidecar, redis_server, json_upstream
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    app_id = document["appId"]
    document["servers"][0]["cache"]["maxSize"] = "2Ki"
    sidecar = make_sidecar(document)
    status, _, _ = await call(sidecar, "broken", {})
    assert status == "mcpcache; fwd=miss; detail=tool-error"
    status, _, _ = await call(sidecar, "blob", {"size": 4096})
    assert status == "mcpcache; fwd=miss; detail=too-large"
    status, _, _ = await call(sidecar, "echo", {"text": "small"})
    assert status == "mcpcache; fwd=miss; stored"
    await stored_in_redis(sidecar)
    assert len(keys(redis_server, app_id)) == 1
    assert sidecar.sample("mcpcache_shared_stores_total", result="stored") == 1


def corruptions(value: bytes, key: str, foreign: bytes) -> dict[str, bytes]:
    entry = decode(value, key)
    assert entry is not None
    injected = b'{"content":[]}\n\nevent: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}'
    deep = b'{"d":' + b"[" * 300 + b"]" * 300 + b"}"  # read by orjson, too deep to write
    return {
        "garbage": b"not a value at all",
        "truncated": value[:-3],
        "other version": b"mcpcache/9\n" + value[len(MAGIC) :],
        "another key's value": foreign,
        "event injection": encode(key, injected, True, entry.stored_at, entry.expires_at),
        "not an object": encode(key, b"[1,2]", False, entry.stored_at, entry.expires_at),
        "too deep": encode(key, deep, False, entry.stored_at, entry.expires_at),
    }


async def test_a_corrupted_or_misfiled_value_is_refused_counted_and_deleted(
    make_sidecar, redis_server, json_upstream
) -> None:
    peer, app = json_upstream
    document = shared_config(app, redis_server.url)
    app_id = document["appId"]
    writer, reader = make_sidecar(document), make_sidecar(document)
    client = redis_server.client()
    # A value stored for one end user, to be planted under another's key.
    await call(writer, "whoami", {"text": "victim"}, authorization="Bearer victim")
    await stored_in_redis(writer)
    (victim_name,) = keys(redis_server, app_id)
    foreign = client.get(victim_name)
    stored = 1
    for refused, label in enumerate(corruptions(foreign, victim_name.decode()[-64:], b"")):
        known = keys(redis_server, app_id)
        arguments = {"text": f"corrupt-{refused}"}
        _, _, original = await call(writer, "whoami", arguments, authorization="Bearer mallory")
        stored += 1
        await stored_in_redis(writer, stored)
        (name,) = keys(redis_server, app_id) - known
        key = name.decode()[-64:]
        value = corruptions(client.get(name), key, foreign)[label]
        client.set(name, value, px=30_000)
        calls = peer.calls["whoami"]

        status, _, answer = await call(reader, "whoami", arguments, authorization="Bearer mallory")

        assert status.startswith("mcpcache; fwd=miss"), label
        assert text_of(answer).startswith("user=Bearer mallory"), label
        assert text_of(answer) != text_of(original), label  # answered by the upstream
        assert peer.calls["whoami"] == calls + 1, label
        assert reader.sample("mcpcache_shared_lookups_total", result="refused") == refused + 1
        await async_wait_until(lambda n=name, v=value: client.get(n) != v, what=f"{label} gone")


async def test_answers_keep_coming_while_redis_hangs_or_is_gone_then_it_is_used_again(
    make_sidecar, own_redis_server, json_upstream
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    document = shared_config(app, redis.url, timeout="50ms", retryAfter="300ms")
    app_id = document["appId"]
    sidecar = make_sidecar(document)
    await call(sidecar, "echo", {"text": "before"})
    await stored_in_redis(sidecar)

    async def answered_without_redis(text: str) -> None:
        started = time.monotonic()
        status, _, answer = await call(sidecar, "echo", {"text": text})
        assert status.startswith("mcpcache; fwd=miss")
        assert text_of(answer).startswith(text)
        assert time.monotonic() - started < 5

    redis.pause()  # accepts connections, never answers
    for i in range(4):
        await answered_without_redis(f"hung-{i}")
    status, _, _ = await call(sidecar, "echo", {"text": "before"})
    assert status == "mcpcache; hit"  # memory still answers
    assert sidecar.sample("mcpcache_shared_errors_total", op="get", kind="timeout") >= 1
    assert sidecar.sample("mcpcache_shared_breaker", mcpcache_shared_breaker="open") == 1
    # Every Redis operation, failed ones included, ended within the timeout (and the
    # loop's scheduling): none waited for the frozen server.
    samples = sidecar.scrape()
    gets = samples[("mcpcache_shared_operation_duration_seconds_count", (("op", "get"),))]
    bounded = samples[
        ("mcpcache_shared_operation_duration_seconds_bucket", (("le", "0.25"), ("op", "get")))
    ]
    assert bounded == gets

    redis.kill()  # gone: connections refused
    for i in range(3):
        await answered_without_redis(f"gone-{i}")
    assert sidecar.sample("mcpcache_shared_lookups_total", result="skipped") >= 1

    redis.start()  # back on the same port, empty
    # After the pause one lookup probes Redis, finds it back, and closes the breaker.
    deadline = time.monotonic() + 10
    probes = 0
    while sidecar.sample("mcpcache_shared_breaker", mcpcache_shared_breaker="closed") != 1:
        assert time.monotonic() < deadline, "the breaker never closed again"
        probes += 1
        await answered_without_redis(f"probe-{probes}")
    # Subscribed again, the sidecar drops its memory (removals may have been missed)
    # and with it every answer still in flight: wait for that before the next miss.
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_shared_removals_listening") == 1,
        what="the removals to be heard again",
    )
    status, _, _ = await call(sidecar, "echo", {"text": "after"})
    assert status == "mcpcache; fwd=miss; stored"
    await async_wait_until(lambda: keys(redis, app_id), what="a write after recovery")


async def test_a_namespace_confined_by_acl_uses_its_prefix_and_no_other(
    make_sidecar, own_redis_server, json_upstream, monkeypatch
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    # The shared-tier guide's ACL pattern for namespace `agents`.
    redis.client().execute_command(
        "ACL SETUSER mcpcache-agents on >agents-password resetkeys ~mcpcache:agents:* "
        "resetchannels &mcpcache:agents:* -@all +get +set +unlink +scan +ping +publish +subscribe"
    )
    monkeypatch.setenv("MCPCACHE_SHARED_CACHE_PASSWORD", "agents-password")
    url = f"redis://mcpcache-agents@127.0.0.1:{redis.port}/0"
    app_id = new_app()
    own = shared_config(app, url, app_id, namespace="agents")
    first, second = make_sidecar(own), make_sidecar(own)
    await call(first, "echo", {"text": "acl"})
    await stored_in_redis(first)
    status, _, _ = await call(second, "echo", {"text": "acl"})
    assert status == SHARED_HIT
    assert keys(redis, app_id, "agents")
    assert first.sample("mcpcache_shared_removals_listening") == 1  # the channel allowed

    trespasser = make_sidecar(shared_config(app, url, app_id, namespace="tools"))
    status, _, _ = await call(trespasser, "echo", {"text": "acl"})
    assert status.startswith("mcpcache; fwd=miss")
    assert trespasser.sample("mcpcache_shared_errors_total", op="get", kind="response") == 1
    assert not keys(redis, app_id, "tools")


async def test_without_shared_cache_nothing_changes(make_sidecar, json_upstream) -> None:
    _, app = json_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    assert sidecar.sidecar.shared is None
    await call(sidecar, "echo", {"text": "memory only"})
    status, _, _ = await call(sidecar, "echo", {"text": "memory only"})
    assert status == "mcpcache; hit"
    assert not any(name.startswith("mcpcache_shared") for name, _ in sidecar.scrape())


def test_the_shared_cache_comes_from_the_file_or_the_environment() -> None:
    config = parse_config(
        "servers: []\nsharedCache: {url: 'rediss://cache.example:6380/1', timeout: 20ms}", {}
    )
    assert config.shared_cache is not None
    assert (config.shared_cache.timeout, config.shared_cache.namespace) == (0.02, "default")
    env = {"MCPCACHE_SHARED_CACHE_URL": "redis://r:6379/0", "MCPCACHE_NAMESPACE": "agents"}
    shared = parse_config("servers: []", env).shared_cache
    assert shared is not None
    assert (shared.url, shared.timeout, shared.namespace) == ("redis://r:6379/0", 0.05, "agents")
    assert parse_config("servers: []", {"MCPCACHE_NAMESPACE": "agents"}).shared_cache is None
    for bad in ("{url: 'http://r:6379'}", "{url: 'redis://'}", "{url: 'redis://r', timeout: 0s}"):
        with pytest.raises(ConfigError):
            parse_config(f"servers: []\nsharedCache: {bad}", {})
    with pytest.raises(ConfigError):
        parse_config("servers: []", env | {"MCPCACHE_NAMESPACE": "a:b*"})


def test_the_breaker_opens_after_failures_and_probes_after_the_pause() -> None:
    now = [0.0]
    breaker = Breaker(pause=5, failures=3, clock=lambda: now[0])
    for _ in range(2):
        assert breaker.allow()
        breaker.failure()
    assert breaker.state == "closed"
    breaker.failure()
    assert (breaker.state, breaker.allow()) == ("open", False)
    now[0] = 5.0
    assert (breaker.allow(), breaker.state) == (True, "half_open")
    assert not breaker.allow()  # one probe at a time
    breaker.failure()
    assert breaker.state == "open"
    now[0] = 10.0
    assert breaker.allow()
    breaker.success()
    assert (breaker.state, breaker.allow()) == ("closed", True)


async def test_writes_never_delay_the_answer_and_none_outlives_the_sidecar(
    make_sidecar, own_redis_server, json_upstream
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    document = shared_config(app, redis.url, new_app(), timeout="1s")
    sidecar = make_sidecar(document)
    await call(sidecar, "echo", {"text": "warm"})  # the pool has a connection
    await stored_in_redis(sidecar)
    shared = sidecar.sidecar.shared
    assert shared is not None
    # Reads go on; every write waits for the pause to end.
    redis.client().execute_command("CLIENT", "PAUSE", "20000", "WRITE")
    started = time.monotonic()
    status, _, _ = await call(sidecar, "echo", {"text": "paused writes"})
    assert status == "mcpcache; fwd=miss; stored"
    assert time.monotonic() - started < 2
    assert shared.pending_writes == 1

    stopping = time.monotonic()
    sidecar.stop()
    assert time.monotonic() - stopping < 10
    assert shared.pending_writes == 0


async def test_purges_reach_the_shared_tier_and_only_their_own_prefix(
    make_sidecar, redis_server, json_upstream
) -> None:
    _, app = json_upstream
    suffix = uuid.uuid4().hex[:8]
    # An app id with glob characters must not reach past its own prefix.
    wild, tame = f"team*{suffix}", f"teamx{suffix}"
    sidecars = {}
    for app_id in (wild, tame):
        document = shared_config(app, redis_server.url, app_id)
        document["servers"].append(document["servers"][0] | {"name": "t"})
        sidecars[app_id] = make_sidecar(document)
    for sidecar in sidecars.values():
        for server in ("s", "t"):
            for text in ("one", "two"):
                await post(
                    sidecar.url(server),
                    call_body(1, "echo", {"text": text}),
                    call_headers("echo"),
                    10,
                )
        await stored_in_redis(sidecar, 4)
    client = redis_server.client()

    def count(app_id: str, server: str = "*") -> int:
        quoted = quote(app_id, safe="")
        return len(list(client.scan_iter(match=f"mcpcache:default:{{{quoted}:{server}}}:*")))

    sidecar = sidecars[wild]
    shared = sidecar.sidecar.shared
    assert shared is not None
    (name, *_) = client.scan_iter(match=f"mcpcache:default:{{{quote(wild, safe='')}:s}}:*")
    assert on_loop(sidecar, shared.delete(wild, "s", [name.decode()[-64:]])) == 1
    assert count(wild, "s") == 1
    assert on_loop(sidecar, shared.delete_server(wild, "t")) == 2
    assert (count(wild, "s"), count(wild, "t")) == (1, 0)
    assert on_loop(sidecar, shared.clear(wild)) == 1
    assert count(wild) == 0
    assert count(tame) == 4  # untouched by the other app's purges


async def test_answers_inside_a_legacy_session_stay_in_memory_on_a_session_scoped_server(
    make_sidecar, redis_server, json_upstream
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    document["servers"][0]["cache"]["sessionScoped"] = True
    sidecar = make_sidecar(document)
    async with mcp_client(sidecar.url("s"), mode=LEGACY) as client:
        first = await client.call_tool("echo", {"text": "in a session"})
        second = await client.call_tool("echo", {"text": "in a session"})
    assert second.content == first.content  # a hit, from memory
    await call(sidecar, "echo", {"text": "outside any session"})
    await stored_in_redis(sidecar)
    assert len(keys(redis_server, document["appId"])) == 1
    lookups = sum(
        sidecar.sample("mcpcache_shared_lookups_total", result=result)
        for result in ("hit", "miss", "refused", "error", "skipped")
    )
    assert lookups == 1


async def test_a_new_session_on_another_replica_reads_what_an_earlier_session_stored(
    make_sidecar, redis_server, json_upstream
) -> None:
    peer, app = json_upstream
    document = shared_config(app, redis_server.url)
    first, second = make_sidecar(document), make_sidecar(document)
    text = uuid.uuid4().hex
    async with mcp_client(first.url("s"), mode=LEGACY) as client:
        stored = await client.call_tool("echo", {"text": text})
    await stored_in_redis(first)
    calls = peer.calls["echo"]
    async with mcp_client(second.url("s"), mode=LEGACY) as client:
        again = await client.call_tool("echo", {"text": text})
    assert again.content == stored.content
    assert peer.calls["echo"] == calls  # answered from the shared tier: the session was not a key
    assert second.sample("mcpcache_shared_lookups_total", result="hit") == 1


async def test_a_shared_hit_restates_ttl_ms_as_the_freshness_left(
    make_sidecar, redis_server, json_upstream
) -> None:
    _, app = json_upstream
    document = shared_config(app, redis_server.url)
    document["servers"][0]["cache"]["ttl"] = "10m"
    first, second = make_sidecar(document), make_sidecar(document)
    uri = f"doc://{uuid.uuid4().hex[:8]}"
    body = call_body(3, "unused", {})
    body |= {"method": "resources/read", "params": {"uri": uri, "_meta": body["params"]["_meta"]}}
    headers = call_headers(uri, method="resources/read")
    answers = []
    for sidecar in (first, second):
        response = await post(sidecar.url("s"), body, headers, 10)
        answers.append(response)
        await stored_in_redis(first)
    assert answers[1].headers["cache-status"] == SHARED_HIT
    upstream_result, shared_result = (a.json()["result"] for a in answers)
    assert shared_result["contents"] == upstream_result["contents"]
    assert upstream_result["ttlMs"] == 60_000  # the upstream's cache hint
    assert 0 < shared_result["ttlMs"] <= 60_000  # what is left of it


@pytest.mark.redis
async def test_rediss_is_verified_tls(make_sidecar, json_upstream) -> None:
    _, app = json_upstream
    redis = RedisServer(redis_server_binary(), tls=Authority.create("redis-test-ca")).start()
    try:
        document = shared_config(app, redis.url, timeout="1s")  # a handshake on a busy host
        first, second = make_sidecar(document), make_sidecar(document)
        await call(first, "echo", {"text": "over tls"})
        await stored_in_redis(first)
        status, _, _ = await call(second, "echo", {"text": "over tls"})
        assert status == SHARED_HIT
        # A server whose certificate the sidecar cannot verify is not used.
        untrusted = make_sidecar(
            shared_config(app, f"rediss://127.0.0.1:{redis.port}/0", timeout="1s")
        )
        status, _, _ = await call(untrusted, "echo", {"text": "over tls"})
        assert status.startswith("mcpcache; fwd=miss")
        assert untrusted.sample("mcpcache_shared_lookups_total", result="error") == 1
    finally:
        redis.stop()


async def test_a_purge_on_one_replica_reaches_every_replicas_shared_entries(
    make_sidecar, redis_server, json_upstream
) -> None:
    peer, app = json_upstream
    document = shared_config(app, redis_server.url)
    first, second = make_sidecar(document), make_sidecar(document)
    arguments = {"text": "purged-" + uuid.uuid4().hex}
    await call(first, "echo", arguments)
    await stored_in_redis(first)
    assert len(keys(redis_server, document["appId"])) == 1
    async with http_client(timeout=10) as http:
        purged = await http.post(
            f"http://127.0.0.1:{first.port}/admin/purge",
            json={"server": "s"},
        )
    assert purged.status_code == 200
    await async_wait_until(
        lambda: not keys(redis_server, document["appId"]), what="the shared entries to go"
    )
    before = peer.calls["echo"]
    status, _, _ = await call(second, "echo", arguments)
    assert status.startswith("mcpcache; fwd=miss")
    assert peer.calls["echo"] == before + 1


# --- entries for every caller ------------------------------------------------------

SHARED_PUBLIC_HIT = "mcpcache; hit; detail=shared-public"


@pytest.fixture(scope="module")
def public_upstream() -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server that marks its `resources/read` results `cacheScope: "public"`."""
    peer = Upstream(resource_scope="public")
    app = ServedApp(peer.app(json_response=True)).start()
    yield peer, app
    app.stop()


def stored(sidecar: RunningSidecar) -> Any:
    return async_wait_until(
        lambda: sidecar.sample("mcpcache_shared_stores_total", result="stored") >= 1,
        what="the shared tier to store",
    )


async def read(sidecar: RunningSidecar, uri: str, user: str) -> httpx.Response:
    headers = call_headers(uri, "resources/read", authorization=f"Bearer {user}")
    return await post(sidecar.url("s"), read_body(3, uri), headers, 10)


async def test_a_public_tool_entry_is_shared_by_the_replicas_of_one_app_and_no_other(
    make_sidecar, redis_server, json_upstream
) -> None:
    peer, app = json_upstream
    app_id = new_app()
    rules = [{"name": "search", "scope": "public"}]

    def replica(of: str) -> RunningSidecar:
        document = shared_config(app, redis_server.url, of)
        document["servers"][0]["cache"]["tools"] = rules
        return make_sidecar(document)

    first, second, other_app = replica(app_id), replica(app_id), replica(new_app())
    arguments = {"q": unique()}
    # Each replica checks its callers: Bob's credential, accepted upstream there.
    await introduce(second.url("s"), "Bearer bob", "search", {"q": unique()})
    before = peer.calls["search"]
    await call(first, "search", arguments, authorization="Bearer alice")
    await stored(first)
    status, _, answer = await call(second, "search", arguments, authorization="Bearer bob")
    assert status == SHARED_PUBLIC_HIT
    assert "for Bearer alice" in text_of(answer), "one entry, fetched for alice"
    status, _, answer = await call(other_app, "search", arguments, authorization="Bearer bob")
    assert status.startswith("mcpcache; fwd=miss")
    assert "for Bearer bob" in text_of(answer)
    assert peer.calls["search"] == before + 2


async def test_a_result_the_server_marks_public_reaches_another_replica_and_private_does_not(
    make_sidecar, redis_server, public_upstream, json_upstream
) -> None:
    app_id = new_app()
    for peer, app, shared in (
        (public_upstream[0], public_upstream[1], True),
        (json_upstream[0], json_upstream[1], False),
    ):
        document = shared_config(app, redis_server.url, app_id)
        document["servers"][0]["cache"]["trustPublicHints"] = True
        first, second = make_sidecar(document), make_sidecar(document)
        uri = f"doc://{unique()}"
        await introduce(second.url("s"), "Bearer bob", uri=f"doc://{unique()}")
        before = peer.calls["doc"]
        mine = await read(first, uri, "alice")
        await stored(first)
        theirs = await read(second, uri, "bob")
        contents = [json.loads(r.text)["result"]["contents"] for r in (mine, theirs)]
        if shared:
            assert contents[0] == contents[1]
            assert theirs.headers["cache-status"] == SHARED_PUBLIC_HIT
            assert peer.calls["doc"] == before + 1
        else:
            assert theirs.headers["cache-status"].startswith("mcpcache; fwd=miss")
            assert peer.calls["doc"] == before + 2


async def test_a_public_entry_too_large_for_a_replicas_memory_is_still_answered_as_public(
    make_sidecar, redis_server, json_upstream
) -> None:
    # Replicas mid-rollout may differ in budget: one that cannot keep the tier's entry
    # still answers it as it is, an entry for every caller, with its age.
    peer, app = json_upstream
    app_id = new_app()
    rules = [{"name": "blob", "scope": "public"}]
    documents = [shared_config(app, redis_server.url, app_id) for _ in range(2)]
    for document in documents:
        document["servers"][0]["cache"]["tools"] = rules
    documents[1]["cache"] = {"maxBytes": "1Ki"}
    roomy, small = (make_sidecar(document) for document in documents)
    arguments = {"size": 4000}
    await introduce(small.url("s"), "Bearer bob", "blob", {"size": 10})
    before = peer.calls["blob"]
    await call(roomy, "blob", arguments, authorization="Bearer alice")
    await stored(roomy)
    for _ in range(2):
        status, _, answer = await call(small, "blob", arguments, authorization="Bearer bob")
        assert status == SHARED_PUBLIC_HIT
        assert "io.mcpcache/age" in answer["result"]["_meta"]
    assert peer.calls["blob"] == before + 1
    assert small.sample("mcpcache_cache_entries") == 1, "served, not kept (one: bob's own)"


def rechecking_replicas(
    app: ServedApp, redis_server: RedisServer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two configs of one app on the shared tier: a plain replica's, and one that
    rechecks every hit (`revalidateSample: 1`)."""
    plain = shared_config(app, redis_server.url)
    plain["servers"][0]["cache"]["ttl"] = "60s"
    checking = json.loads(json.dumps(plain))
    checking["servers"][0]["cache"]["revalidateSample"] = 1
    return plain, checking


async def test_an_answer_a_revalidation_found_out_of_date_is_not_copied_back_from_the_tier(
    make_sidecar, redis_server, own_upstream
) -> None:
    _, app = own_upstream
    plain, checking = rechecking_replicas(app, redis_server)
    first, checker = make_sidecar(plain), make_sidecar(checking)
    arguments = {"text": unique()}
    _, _, old = await call(first, "echo", arguments)  # "<text> #1", in memory and Redis
    await stored_in_redis(first)
    assert (await call(checker, "echo", arguments))[0] == SHARED_HIT
    assert (await call(checker, "echo", arguments))[0] == "mcpcache; hit"  # rechecked
    await async_wait_until(
        lambda: checker.sample("mcpcache_revalidations_total", server="s", result="changed") == 1,
        10,
        "the revalidation",
    )
    await async_wait_until(
        lambda: not keys(redis_server, plain["appId"]),
        10,
        "the out-of-date copy to leave Redis",
    )
    status, _, later = await call(make_sidecar(plain), "echo", arguments)
    assert status.startswith("mcpcache; fwd=miss"), "a new replica asks the upstream"
    assert text_of(later) != text_of(old)


async def test_a_callers_rechecks_that_find_changes_leave_other_entries_in_the_tier(
    make_sidecar, redis_server, own_upstream
) -> None:
    peer, app = own_upstream
    plain, checking = rechecking_replicas(app, redis_server)
    first, checker = make_sidecar(plain), make_sidecar(checking)
    alice_args = {"text": unique()}  # a stable tool's answer, shared through the tier
    await call(first, "stable", alice_args, authorization="Bearer alice")
    await stored_in_redis(first)
    mallory_args = {"text": unique()}  # `echo` answers differently every time
    await call(checker, "echo", mallory_args, authorization="Bearer mallory")
    for n in range(1, 4):
        status = (await call(checker, "echo", mallory_args, authorization="Bearer mallory"))[0]
        assert status == "mcpcache; hit"
        await async_wait_until(
            lambda n=n: (
                checker.sample("mcpcache_revalidations_total", server="s", result="changed") == n
            ),
            10,
            "the recheck",
        )
    calls = peer.calls["stable"]
    later = make_sidecar(plain)
    status = (await call(later, "stable", alice_args, authorization="Bearer alice"))[0]
    assert status == SHARED_HIT, "another caller's entry stays in the tier"
    assert peer.calls["stable"] == calls
