"""The shared tier's values and keys on their own (no Redis): what a value holds, which
values are refused, where a server's entries and generation live, and the breaker."""

from __future__ import annotations

import struct

import orjson
import pytest

from mcpcache.sidecar.rules.protocol.results import encode_result
from mcpcache.sidecar.tiers import announcement
from mcpcache.sidecar.tiers.breaker import FAILED, POOL_FULL, SKIPPED, Breaker, Failed
from mcpcache.sidecar.tiers.codec import MAGIC, KeyLayout, TierEntry, decode, encode, glob_escape
from peers.clock import Clock

KEY = "a" * 64
GENERATION = b"0123456789abcdef"
RESULT, TTL_AT = encode_result({"content": [{"type": "text", "text": "hi"}], "ttlMs": 5000})


def test_a_value_reads_back_as_written_for_its_key_and_generation() -> None:
    value = encode(KEY, RESULT, True, 100.5, 160.25, GENERATION)
    assert value.startswith(MAGIC + KEY.encode() + b":" + GENERATION + b"\n")
    assert value.endswith(RESULT)
    entry = decode(value, KEY, GENERATION)
    assert entry == TierEntry(RESULT, True, 100.5, 160.25, TTL_AT)
    assert TTL_AT > 0
    plain = decode(encode(KEY, RESULT, False, 1.0, 1.0), KEY)
    assert plain is not None
    assert plain.event_stream is False, "a JSON answer stays one"
    assert plain.stored_at == plain.expires_at == 1.0, "an entry may expire as it is stored"


def test_the_value_holds_the_result_and_nothing_of_the_request() -> None:
    value = encode(KEY, b'{"content":[]}', False, 1.0, 2.0, GENERATION)
    head = struct.pack("!BddIf", 0, 1.0, 2.0, len(b'{"content":[]}'), 0.0)
    assert value == MAGIC + KEY.encode() + b":" + GENERATION + b"\n" + head + b'{"content":[]}'


@pytest.mark.parametrize(
    ("written", "read"), [(0.25, 0.25), (-1.0, 0.0), (float("nan"), 0.0), (1e9, 0.0)]
)
def test_the_fetch_time_travels_with_the_value_and_an_unbelievable_one_counts_as_none(
    written: float, read: float
) -> None:
    entry = decode(encode(KEY, RESULT, False, 1.0, 2.0, GENERATION, written), KEY, GENERATION)
    assert entry is not None
    assert entry.fetch_seconds == read


@pytest.mark.parametrize(
    ("key", "generation"),
    [("b" * 64, GENERATION), (KEY, b"fedcba9876543210"), (KEY, b"")],
    ids=["another key", "another generation", "no generation"],
)
def test_a_value_of_another_key_or_generation_is_refused(key: str, generation: bytes) -> None:
    assert decode(encode(KEY, RESULT, False, 1.0, 2.0, GENERATION), key, generation) is None


def corrupted(how: str) -> bytes:
    value = encode(KEY, RESULT, False, 1.0, 2.0, GENERATION)
    head_at = len(MAGIC) + len(KEY) + 2 + len(GENERATION)
    body_at = head_at + struct.calcsize("!BddIf")
    body = value[body_at:]
    if how == "magic":
        return b"mcpcache/2\n" + value[len(MAGIC) :]  # the previous release's
    if how == "short":
        return value[: body_at - 1]
    if how == "flags":
        return value[:head_at] + b"\x02" + value[head_at + 1 :]
    if how == "length":
        return value[:body_at] + body + b" "
    if how == "times":
        return value[:head_at] + struct.pack("!BddIf", 0, 3.0, 2.0, len(body), 0.0) + body
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["magic", "short", "flags", "length", "times"])
def test_a_value_with_a_broken_frame_is_refused(how: str) -> None:
    assert decode(corrupted(how), KEY, GENERATION) is None


def framed(result: bytes) -> bytes:
    return encode(KEY, result, False, 1.0, 2.0, GENERATION)


@pytest.mark.parametrize(
    "result",
    [
        b'{"content":[],\n"x":1}',
        b'{"content":[],\r"x":1}',
        b'{"content":[]',
        b"[1,2]",
        b'{"content": []}',
        b'{"ttlMs":5,"content":[]}',
        b'{"d":' + b"[" * 300 + b"]" * 300 + b"}",
    ],
    ids=[
        "line feed",
        "carriage return",
        "not JSON",
        "not an object",
        "spaces",
        "ttl first",
        "too deep to write",
    ],
)
def test_a_result_not_exactly_as_the_memory_tier_encodes_it_is_refused(result: bytes) -> None:
    assert decode(framed(result), KEY, GENERATION) is None


def test_the_smallest_frame_and_an_empty_object_are_accepted() -> None:
    entry = decode(framed(b"{}"), KEY, GENERATION)
    assert entry is not None
    assert (entry.result, entry.ttl_at) == (b"{}", 0)
    assert decode(framed(b""), KEY, GENERATION) is None, "an empty result is no object"


def test_every_key_of_an_app_is_under_its_prefix_and_the_generation_beside_it() -> None:
    """A server's entries and generation share one Redis Cluster hash tag (the braces)."""
    keys = KeyLayout("agents")
    assert keys.app_prefix("checkout") == "mcpcache:agents:{checkout:"
    assert keys.server_prefix("checkout", "docs") == "mcpcache:agents:{checkout:docs}:"
    assert keys.entry("checkout", "docs", KEY) == f"mcpcache:agents:{{checkout:docs}}:{KEY}"
    assert keys.generation("checkout", "docs") == "mcpcache:agents:@generation:{checkout:docs}"
    assert KeyLayout("other").app_prefix("checkout") == "mcpcache:other:{checkout:"


def test_an_app_id_cannot_reach_out_of_its_prefix() -> None:
    """Separators, braces and glob characters in an app id are quoted, `@` included, so
    that no app's prefix holds another's keys or the generations."""
    keys = KeyLayout("agents")
    prefix = keys.app_prefix("a:b*?[x]@/ {c}")
    assert prefix == "mcpcache:agents:{a%3Ab%2A%3F%5Bx%5D%40%2F%20%7Bc%7D:"
    assert keys.generation("a:b/c", "s") == "mcpcache:agents:@generation:{a%3Ab%2Fc:s}"
    assert not keys.generation("x", "s").startswith(keys.app_prefix("@generation"))


def test_a_purge_pattern_matches_its_keys_literally() -> None:
    """Glob characters a server name may hold match only themselves in a SCAN pattern."""
    keys = KeyLayout("agents")
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"
    assert glob_escape("Plain-name_1.X") == "Plain-name_1.X"
    assert keys.server_pattern("app", "s*") == "mcpcache:agents:{app:s\\*}:*"
    assert keys.app_pattern("app") == "mcpcache:agents:{app:*"


def test_the_breaker_opens_after_failures_in_a_row_and_a_probe_closes_it() -> None:
    clock = Clock(1000.0)
    changes: list[str] = []
    breaker = Breaker(10.0, failures=3, clock=clock, on_change=changes.append)
    breaker.failure()
    breaker.success()  # a success in between starts the count again
    breaker.failure()
    breaker.failure()
    assert breaker.state == "closed"
    assert breaker.allow()
    breaker.failure()
    assert breaker.state == "open"
    assert not breaker.allow()
    clock.now += 9.99
    assert not breaker.allow(), "skipped for the whole pause"
    clock.now += 0.01
    assert breaker.allow(), "one probe once the pause is over"
    assert breaker.state == "half_open"
    assert not breaker.allow(), "only one probe per pause"
    breaker.success()
    assert breaker.state == "closed"
    assert changes == ["open", "half_open", "closed"]


def test_a_new_breaker_counts_failures_from_none() -> None:
    breaker = Breaker(5.0, failures=2, clock=Clock(1000.0))
    breaker.failure()
    assert breaker.state == "closed"
    breaker.failure()
    assert breaker.state == "open"


def test_a_failed_probe_opens_the_breaker_again_at_once() -> None:
    clock = Clock(1000.0)
    breaker = Breaker(5.0, failures=2, clock=clock)
    breaker.failure()
    breaker.failure()
    clock.now += 5
    assert breaker.allow()
    breaker.failure()  # one failure is enough while half open
    assert breaker.state == "open"
    clock.now += 4.9
    assert not breaker.allow(), "the pause starts again at the failed probe"
    clock.now += 0.1
    assert breaker.allow()


def test_a_probe_that_never_reports_back_lets_another_probe_after_a_pause() -> None:
    clock = Clock(1000.0)
    breaker = Breaker(5.0, failures=1, clock=clock)
    breaker.failure()
    clock.now += 5
    assert breaker.allow()
    clock.now += 5
    assert breaker.allow(), "a cancelled probe does not keep the tier skipped for good"
    assert breaker.state == "half_open"


def test_an_operation_that_did_not_happen_says_why_in_its_metric_label() -> None:
    assert [f.label for f in (FAILED, SKIPPED, POOL_FULL)] == ["error", "skipped", "pool_full"]


def test_an_operation_that_did_not_happen_keeps_the_label_it_was_given() -> None:
    assert Failed("timeout").label == "timeout"


def test_a_message_whose_globs_would_cost_too_much_to_match_reads_as_every_entry() -> None:
    """Matching compiles each glob with wildcards: past MAX_PATTERN characters of them, a
    message removes every entry of its server (as a sender writes it), and costs a
    reader no more; plain tool names are compared, not compiled, and stay as they are."""
    heavy = tuple(f"{'*x' * 250}{n}" for n in range(3))
    forged = {
        "v": 1, "app": "app", "from": "x", "server": "s", "tools": list(heavy), "uri": None,
        "resources": False, "listings": [], "everything": False, "keys": [],
    }  # fmt: skip
    every = ("x", announcement.Announcement("s", everything=True))
    assert announcement.decode(orjson.dumps(forged), "app") == every
    assert (
        announcement.decode(
            announcement.encode("app", "x", announcement.Announcement("s", tools=heavy)), "app"
        )
        == every
    )
    plain = announcement.Announcement("s", tools=tuple(f"{'t' * 500}{n}" for n in range(3)))
    assert announcement.decode(announcement.encode("app", "x", plain), "app") == ("x", plain)


NOTES = (
    (b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message"}\n\n', b""),
    (b'event: message\ndata: {"jsonrpc":"2.0","params":{"progressToken":', b',"progress":1}}\n\n'),
)


def test_the_notifications_a_hit_replays_travel_with_the_value() -> None:
    entry = decode(encode(KEY, RESULT, True, 1.0, 2.0, GENERATION, 0.5, NOTES), KEY, GENERATION)
    assert entry == TierEntry(RESULT, True, 1.0, 2.0, TTL_AT, 0.5, NOTES)
    assert entry.size == len(RESULT) + sum(len(a) + len(b) for a, b in NOTES)


@pytest.mark.parametrize(
    "notes",
    [
        ((b"data: {}\n\n", b""),),
        ((b"event: message\ndata: {}\n\nevent: message\ndata: {}\n\n", b""),),
        ((b"event: message\ndata: {}\n", b""),),
        ((b"event: message\ndata: {\r}\n\n", b""),),
        ((b"event: message\ndata: {", b"}\n\n"),),
    ],
    ids=["no event head", "two events", "unended", "carriage return", "progress unended"],
)
def test_notifications_not_framed_as_this_tier_writes_them_are_refused(
    notes: tuple[tuple[bytes, bytes], ...],
) -> None:
    value = encode(KEY, RESULT, True, 1.0, 2.0, GENERATION, 0.0, notes)
    assert decode(value, KEY, GENERATION) is None


def test_a_value_cut_inside_its_notifications_is_refused() -> None:
    value = encode(KEY, RESULT, True, 1.0, 2.0, GENERATION, 0.0, NOTES)
    assert decode(value[:-1], KEY, GENERATION) is None
    assert decode(value[: len(value) - len(NOTES[1][1]) - 3], KEY, GENERATION) is None
