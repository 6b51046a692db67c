"""What a hit writes into a stored result without parsing it: the answer's age and when
it was stored in `_meta`, an optional note as the first text item, the freshness left
in `ttlMs`; laid out once, when the result is stored."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.sidecar.cache.entry import AGE as AGE_KEY
from mcpcache.sidecar.cache.entry import STORED_AT, encode, rfc3339, span
from mcpcache.sidecar.cache.store import ResponseCache
from mcpcache.sidecar.rules.protocol.results import frame_parts

WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hit(result: dict[str, Any], seconds_later: float, note: bool = False) -> dict[str, Any]:
    """The result a hit answers `seconds_later` after storing `result` for a minute."""
    clock = Clock()
    cache = ResponseCache(10, 1 << 20, timer=clock, wall=lambda: WALL)
    encoded, layout = encode(result)
    entry = cache.store("k", encoded, False, ttl=60, layout=layout, age_note=note)
    assert entry is not None
    clock.now += seconds_later
    answered: dict[str, Any] = orjson.loads(b"".join(entry.result_parts(clock.now)))
    return answered


AGE = {AGE_KEY: 42, STORED_AT: "2027-01-15T08:00:00Z"}


@pytest.mark.parametrize(
    ("result", "meta"),
    [
        ({"content": [{"type": "text", "text": "a"}]}, AGE),
        ({}, AGE),
        ({"content": [], "_meta": {}}, AGE),
        ({"content": [], "_meta": {"trace": "t1"}}, {"trace": "t1", **AGE}),
        ({"_meta": {"io.mcpcache/age": 3600, "x": 1}, "isError": False}, {"x": 1, **AGE}),
    ],
)
def test_a_hit_carries_its_age_and_storage_time_in_meta(
    result: dict[str, Any], meta: dict[str, Any]
) -> None:
    answered = hit(result, 42.7)
    assert answered.pop("_meta") == meta
    assert answered == {k: v for k, v in result.items() if k != "_meta"}


def test_a_meta_that_is_not_an_object_is_left_as_it_is() -> None:
    assert hit({"content": [], "_meta": "odd"}, 5) == {"content": [], "_meta": "odd"}


def test_age_note_puts_a_first_text_item_saying_how_old_the_answer_is() -> None:
    result = {"content": [{"type": "text", "text": "the answer"}], "structuredContent": {"a": 1}}
    answered = hit(result, 125, note=True)
    note, *rest = answered["content"]
    assert note == {
        "type": "text",
        "text": "[From a cache: this answer is 2m5s old, stored 2027-01-15T08:00:00Z.]",
    }
    assert rest == result["content"]
    assert answered["structuredContent"] == {"a": 1}
    assert answered["_meta"]["io.mcpcache/age"] == 125


def test_age_note_on_an_empty_content_list_is_its_only_item() -> None:
    answered = hit({"content": []}, 1, note=True)
    assert [item["type"] for item in answered["content"]] == ["text"]


def test_without_age_note_the_content_is_as_stored() -> None:
    result = {"content": [{"type": "text", "text": "x"}], "ttlMs": 60000}
    answered = hit(result, 10)
    assert answered["content"] == result["content"]
    assert answered["ttlMs"] == 50000


def test_the_age_and_the_freshness_left_both_move_with_the_clock() -> None:
    result = {"contents": [], "ttlMs": 60000, "cacheScope": "private", "_meta": {"k": "v"}}
    answered = hit(result, 30, note=True)  # no content list: no note
    assert answered == {
        "contents": [],
        "ttlMs": 30000,
        "cacheScope": "private",
        "_meta": {"k": "v", **AGE, "io.mcpcache/age": 30},
    }


def test_a_copy_stored_without_a_layout_is_laid_out_when_stored() -> None:
    clock = Clock()
    cache = ResponseCache(10, 1 << 20, timer=clock, wall=lambda: WALL)
    raw = orjson.dumps({"ttlMs": 60000, "content": [], "_meta": {"a": 1}})
    entry = cache.store("k", raw, True, ttl=60, age=20)
    assert entry is not None
    answered = orjson.loads(b"".join(entry.result_parts(clock.now)))
    assert answered["_meta"] == {
        "a": 1,
        "io.mcpcache/age": 20,
        "io.mcpcache/storedAt": "2027-01-15T07:59:40Z",
    }
    assert answered["ttlMs"] == 60000


def test_bytes_that_are_not_an_object_are_stored_as_they_are() -> None:
    cache = ResponseCache(10, 100, timer=Clock())
    entry = cache.store("k", b"x" * 10, False, ttl=60)
    assert entry is not None
    assert b"".join(entry.result_parts(1000.0)) == b"x" * 10


def test_a_hit_is_framed_as_json_or_as_one_event() -> None:
    parts = (b'{"content":[]', b',"ttlMs":', b"5}")
    assert orjson.loads(frame_parts(7, parts)) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [], "ttlMs": 5},
    }
    event = frame_parts("a", parts, event=True)
    assert event.startswith(b"event: message\ndata: {")
    assert event.endswith(b"}\n\n")
    assert orjson.loads(event.split(b"data: ", 1)[1])["id"] == "a"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, b"0s"), (59, b"59s"), (61, b"1m1s"), (3600, b"1h0m"), (90061, b"1d1h")],
)
def test_an_age_reads_as_a_short_span(seconds: int, text: bytes) -> None:
    assert span(seconds) == text


@pytest.mark.parametrize("content", [{"type": "text", "text": "hi"}, "plain", None, 3])
def test_a_content_member_that_is_not_a_list_is_kept_as_it_is(content: Any) -> None:
    result = {"content": content, "structuredContent": {"n": 1}}
    answered = hit(result, 5)
    assert answered["content"] == content
    assert answered["structuredContent"] == {"n": 1}


def test_a_rewritten_scope_replaces_the_results_own() -> None:
    encoded, _ = encode({"tools": [], "cacheScope": "public"}, ttl_ms=0, scope="private")
    assert orjson.loads(encoded) == {"tools": [], "cacheScope": "private", "ttlMs": 0}


def test_a_stamp_names_the_second_its_wall_time_falls_in() -> None:
    assert rfc3339(1.0) == rfc3339(1.999) == b"1970-01-01T00:00:01Z"
    assert rfc3339(1_767_225_599.5) == b"2025-12-31T23:59:59Z"
    assert rfc3339(1_767_225_600.0) == b"2026-01-01T00:00:00Z"


_NAMES = st.sampled_from(
    ["", "_meta", "content", "ttlMs", "cacheScope", "isError", "x", AGE_KEY, STORED_AT]
)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=3),
    max_leaves=6,
)


def parsed_once(data: bytes) -> Any:
    """`data` parsed by the standard library, failing on a name given twice in one
    object (parsers differ in which of the two values they keep)."""

    def members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in pairs]
        assert len(names) == len(set(names)), f"a name given twice: {names}"
        return dict(pairs)

    return json.loads(data, object_pairs_hook=members)


@settings(max_examples=400, deadline=None)
@given(
    result=st.dictionaries(_NAMES, _VALUES, max_size=7),
    ttl_ms=st.none() | st.integers(0, 10**6),
    scope=st.none() | st.sampled_from(["public", "private"]),
    note=st.booleans(),
)
def test_any_result_is_stored_and_answered_on_a_hit_as_it_came(
    result: dict[str, Any], ttl_ms: int | None, scope: str | None, note: bool
) -> None:
    """Whatever members a result has (names the layout moves, an empty name, our own
    `_meta` names, values of any kind), it is stored as it came (with the operator's
    `ttlMs` and scope where given, our `_meta` names dropped), `_meta` first and `ttlMs`
    last, and a hit answers exactly that with the age written in."""
    clock = Clock()
    cache = ResponseCache(10, 1 << 20, timer=clock, wall=lambda: WALL)
    encoded, layout = encode(result, ttl_ms, scope)
    expected = dict(result)
    if isinstance(expected.get("_meta"), dict):
        expected["_meta"] = {
            k: v for k, v in expected["_meta"].items() if k not in (AGE_KEY, STORED_AT)
        }
    if scope is not None:
        expected["cacheScope"] = scope
    if ttl_ms is not None:
        expected["ttlMs"] = ttl_ms
    stored = parsed_once(encoded)
    assert stored == expected
    order = list(stored)
    assert "_meta" not in order or order[0] == "_meta"
    assert "ttlMs" not in order or order[-1] == "ttlMs"
    entry = cache.store("k", encoded, False, ttl=60, layout=layout, age_note=note)
    assert entry is not None
    clock.now += 42.7
    answered = parsed_once(b"".join(entry.result_parts(clock.now)))
    aged = isinstance(stored.get("_meta", {}), dict)  # else left as it is, with no note
    assert set(answered) == set(stored) | ({"_meta"} if aged else set())
    if aged:
        assert answered.pop("_meta") == {**stored.pop("_meta", {}), **AGE}
    content = stored.get("content")
    if note and aged and isinstance(content, list):
        assert answered["content"][0]["text"].startswith("[From a cache: this answer is 42s")
        answered["content"] = answered["content"][1:]
    ttl = stored.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool):
        assert answered.pop("ttlMs") in (17_299, 17_300)  # 17.3 s left, in whole ms
        stored.pop("ttlMs")
    assert answered == stored
