"""What the sidecar learns from answers passing through: which tools a server calls
read-only (`tools/list`), and which notifications say cached answers are out of date.
Pure."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.sidecar.rules.invalidation.notices import (
    MAX_NOTICE_EVENT,
    Notice,
    NoticeWatch,
    might_be_notice,
    notice_of,
)
from mcpcache.sidecar.rules.learned_tools import MAX_TOOLS_PER_SERVER, LearnedTools


def listing(*tools: tuple[str, Any]) -> dict[str, Any]:
    """A tools/list result; each tool's `readOnlyHint` as given (None: no annotations)."""
    return {
        "tools": [
            {"name": name}
            if hint is None
            else {"name": name, "annotations": {"readOnlyHint": hint}}
            for name, hint in tools
        ]
    }


def test_a_tool_is_read_only_once_listed_so_and_never_before() -> None:
    hints = LearnedTools()
    assert not hints.read_only("s", "get")
    assert hints.learn("s", listing(("get", True), ("put", False), ("who", None)), "someone") == 3
    assert hints.read_only("s", "get")
    assert not hints.read_only("s", "put")
    assert not hints.read_only("s", "who")
    assert not hints.read_only("other", "get"), "per server"


def test_one_listing_calling_a_tool_a_write_wins_over_any_other() -> None:
    hints = LearnedTools()
    hints.learn("s", listing(("get", True)), "someone")
    hints.learn("s", listing(("get", False)), "someone")
    hints.learn("s", listing(("get", True)), "someone")
    assert not hints.read_only("s", "get")


@pytest.mark.parametrize("hint", ["true", 1, {"x": 1}])
def test_only_a_true_read_only_hint_counts(hint: Any) -> None:
    hints = LearnedTools()
    hints.learn("s", listing(("get", hint)), "someone")
    assert not hints.read_only("s", "get")


@pytest.mark.parametrize(
    "result",
    [None, [], {"tools": "x"}, {"tools": [1, {"name": 2}, {"annotations": {}}]}, {}],
)
def test_results_that_are_not_listings_teach_nothing(result: Any) -> None:
    hints = LearnedTools()
    assert hints.learn("s", result, "someone") == 0
    assert not hints.read_only("s", "2")


def test_tools_annotations_that_are_not_an_object_are_not_read_only() -> None:
    hints = LearnedTools()
    result = {"tools": [{"name": "get", "annotations": ["readOnlyHint"]}]}
    assert hints.learn("s", result, "someone") == 1
    assert not hints.read_only("s", "get")


def test_forgetting_a_server_forgets_its_tools_only() -> None:
    hints = LearnedTools()
    hints.learn("s", listing(("get", True)), "someone")
    hints.learn("t", listing(("get", True)), "someone")
    hints.forget("s")
    hints.forget("never-seen")
    assert not hints.read_only("s", "get")
    assert hints.read_only("t", "get")


def test_a_server_past_the_bound_has_its_further_tools_not_remembered() -> None:
    hints = LearnedTools()
    many = [(f"t{n}", True) for n in range(MAX_TOOLS_PER_SERVER)]
    assert hints.learn("s", listing(*many, ("late", True)), "someone") == MAX_TOOLS_PER_SERVER + 1
    assert hints.read_only("s", f"t{MAX_TOOLS_PER_SERVER - 1}")
    assert not hints.read_only("s", "late")
    hints.learn("s", listing(("t0", False)), "someone")
    assert not hints.read_only("s", "t0"), "a known tool can still be called a write"


@pytest.mark.parametrize(
    ("message", "notice"),
    [
        (
            {"method": "notifications/resources/updated", "params": {"uri": "doc://a"}},
            Notice("resource", "doc://a"),
        ),
        ({"method": "notifications/resources/list_changed"}, Notice("resources")),
        ({"method": "notifications/tools/list_changed"}, Notice("tools")),
        ({"method": "notifications/prompts/list_changed"}, Notice("prompts")),
        ({"method": "notifications/resources/updated", "params": {"uri": 3}}, None),
        ({"method": "notifications/resources/updated", "params": "doc://a"}, None),
        ({"method": "notifications/resources/updated"}, None),
        ({"method": "notifications/tools/list_changed", "id": 1}, None),
        ({"method": "notifications/progress"}, None),
        ({"method": 7}, None),
        ({}, None),
    ],
)
def test_the_notifications_that_make_answers_stale(
    message: dict[str, Any], notice: Notice | None
) -> None:
    assert notice_of({"jsonrpc": "2.0", **message}) == notice


def test_only_events_carrying_a_marker_are_parsed() -> None:
    assert might_be_notice(b'{"method":"notifications/resources/updated"}')
    assert might_be_notice(b'{"method":"notifications/tools/list_changed"}')
    assert not might_be_notice(b'{"method":"notifications/progress"}')


def test_a_watched_stream_yields_its_notices_across_chunks() -> None:
    watch = NoticeWatch()
    stream = (
        b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
        b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
        b"event: message\ndata: not json but list_changed\n\n"
        b'event: message\ndata: ["list_changed"]\n\n'
        b": a comment\n\n"
        b'data: {"jsonrpc":"2.0","method":"notifications/resources/updated",'
        b'"params":{"uri":"doc://x"}}\n\n'
    )
    found = []
    for start in range(0, len(stream), 7):
        found += watch.feed(stream[start : start + 7])
    assert found == [Notice("tools"), Notice("resource", "doc://x")]


def test_a_watched_event_past_the_bound_is_skipped_not_kept() -> None:
    watch = NoticeWatch()
    padding = b"x" * MAX_NOTICE_EVENT
    huge = b'data: {"method":"notifications/tools/list_changed","p":"' + padding + b'"}\n\n'
    after = b'data: {"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}\n\n'
    assert watch.feed(huge + after) == [Notice("prompts")]


def test_a_tool_listed_read_only_again_stays_read_only() -> None:
    hints = LearnedTools()
    hints.learn("s", listing(("get", True)), "someone")
    hints.learn("s", listing(("get", True)), "someone")
    assert hints.read_only("s", "get") is True
    assert hints.read_only("s", "unknown") is False


def test_a_malformed_tool_does_not_hide_the_tools_after_it() -> None:
    hints = LearnedTools()
    result = {"tools": [1, {"name": 2}, {"name": "get", "annotations": {"readOnlyHint": True}}]}
    assert hints.learn("s", result, "someone") == 1
    assert hints.read_only("s", "get")


def test_notices_after_other_events_in_one_chunk_are_all_found() -> None:
    watch = NoticeWatch()
    chunk = (
        b'data: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
        b'data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
        b"data: not json, list_changed\n\n"
        b'data: {"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}\n\n'
    )
    assert watch.feed(chunk) == [Notice("tools"), Notice("prompts")]


def test_a_tool_marked_as_a_writer_stays_one_until_the_server_announces_a_change() -> None:
    hints = LearnedTools()
    hints.learn(
        "s",
        {
            "tools": [
                {"name": "create", "annotations": {"readOnlyHint": False}},
                {"name": "wipe", "annotations": {"destructiveHint": True}},
                {"name": "search", "annotations": {}},
                {"name": "get", "annotations": {"readOnlyHint": True, "destructiveHint": False}},
            ]
        },
        "alice",
    )
    assert [hints.declared_writer("s", t) for t in ("create", "wipe", "search", "get")] == [
        True,
        True,
        False,
        False,
    ]
    hints.learn("s", {"tools": [{"name": "create", "annotations": {"readOnlyHint": True}}]}, "b")
    assert hints.declared_writer("s", "create"), "hints only make caching more careful"
    assert not hints.declared_writer("other", "create")
    hints.forget("s")
    assert not hints.declared_writer("s", "create")
