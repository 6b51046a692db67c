"""What a hit replays of a call's stream: log lines as sent, progress under the caller's
own token (none without one), announcements of the server's state not at all, and
nothing it could not repeat faithfully (then the call is not stored)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcpcache.sidecar.cache.entry import replayed
from mcpcache.sidecar.rules.protocol.notifications import replayable


def seen(*messages: dict[str, Any]) -> list[tuple[dict[str, Any], bytes]]:
    return [(message, orjson.dumps(message)) for message in messages]


LOG = {
    "jsonrpc": "2.0",
    "method": "notifications/message",
    "params": {"level": "info", "data": "é"},
}
CANCELLED = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}


def progress(token: Any, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": 1, **params},
    }


def test_log_lines_are_replayed_as_the_upstream_wrote_them() -> None:
    pretty = b'{"jsonrpc": "2.0",\n "method": "notifications/message",\n "params": {}}'
    notes = replayable([(LOG, orjson.dumps(LOG)), (orjson.loads(pretty), pretty)], None)
    assert notes is not None
    assert replayed(notes, None) == (
        b"event: message\ndata: " + orjson.dumps(LOG) + b"\n\n"
        b'event: message\ndata: {"jsonrpc": "2.0",\ndata:  "method": "notifications/message",'
        b'\ndata:  "params": {}}\n\n'
    )


def test_progress_goes_under_the_callers_own_token_and_to_no_caller_without_one() -> None:
    notes = replayable(seen(progress("mine", total=2.5, message="half"), LOG), "mine")
    assert notes is not None
    events = replayed(notes, b'"theirs"').split(b"\n\n")[:-1]
    assert [orjson.loads(e.split(b"data: ", 1)[1]) for e in events] == [
        progress("theirs", total=2.5, message="half"),
        LOG,
    ]
    assert replayed(notes, b"7").startswith(b'event: message\ndata: {"jsonrpc":"2.0","method"')
    assert orjson.loads(replayed(notes, b"7").split(b"data: ")[1].split(b"\n")[0]) == progress(
        7, total=2.5, message="half"
    )
    assert replayed(notes, None) == b"event: message\ndata: " + orjson.dumps(LOG) + b"\n\n"


def test_announcements_of_the_servers_state_are_not_replayed() -> None:
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {}}
    assert replayable(seen(changed, updated), None) == ()


@pytest.mark.parametrize(
    ("messages", "token"),
    [
        ([progress("other")], "mine"),
        ([progress(1)], "1"),
        ([progress("mine")], None),
        ([{**progress("mine"), "extra": 1}], "mine"),
        ([CANCELLED], None),
        ([{"jsonrpc": "2.0", "method": "notifications/example/unknown"}], None),
        ([{"jsonrpc": "2.0", "id": 5, "result": {}}], None),
        ([{"jsonrpc": "2.0", "id": 5, "method": "notifications/message"}], None),
    ],
    ids=[
        "another token",
        "the token of another type",
        "a call without a token",
        "a member replay would not write",
        "cancelled",
        "unknown",
        "a response to another request",
        "a request",
    ],
)
def test_what_a_hit_could_not_replay_faithfully_keeps_the_call_out(
    messages: list[dict[str, Any]], token: Any
) -> None:
    assert replayable([*seen(LOG), *seen(*messages)], token) is None


def test_progress_with_a_number_a_replay_would_not_write_exactly_keeps_the_call_out() -> None:
    raw = (
        b'{"jsonrpc":"2.0","method":"notifications/progress",'
        b'"params":{"progressToken":"t","progress":0.10000000000000000555}}'
    )
    assert replayable([(orjson.loads(raw), raw)], "t") is None
