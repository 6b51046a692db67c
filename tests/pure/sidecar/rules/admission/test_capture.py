"""Following one upstream response as it streams past: what it counts, what it notices,
and the verdict `admission` reaches from what it saw, for JSON bodies and event streams,
chunk by chunk."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from mcpcache.sidecar.rules.admission.capture import MIN_EVENT_BOUND, ResponseCapture
from mcpcache.sidecar.rules.admission.judgement import (
    WRITE_DEPTH,
    answer_verdict,
    shareable_final,
    too_deep,
)
from mcpcache.sidecar.rules.admission.sharing import early_share
from mcpcache.sidecar.rules.invalidation.notices import Notice
from mcpcache.sidecar.rules.protocol.results import Verdict
from mcpcache.sidecar.upstream.client import UpstreamFailure


def answer(request_id: Any = 1, **result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def event(data: bytes, *lines: bytes) -> bytes:
    return b"".join((*lines, b"data: ", data, b"\n\n"))


INEXACT = b'{"jsonrpc":"2.0","id":1,"result":{"n":0.10000000000000000555}}'
PROGRESS = event(b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}')
ASK = event(b'{"jsonrpc":"2.0","id":"s1","method":"elicitation/create","params":{}}')


def fed(capture: ResponseCapture, *chunks: bytes) -> ResponseCapture:
    for chunk in chunks:
        capture.feed(chunk)
    return capture


def finished(capture: ResponseCapture, refused: Any = None) -> Verdict:
    """The verdict once the body has ended whole."""
    capture.finish()
    verdict = answer_verdict(capture, refused)
    assert verdict is not None, "an ended body is always judged"
    return verdict


def failed(capture: ResponseCapture, failure: Any = None, refused: Any = None) -> Verdict:
    """The verdict once the body has broken off."""
    capture.fail(failure)
    verdict = answer_verdict(capture, refused)
    assert verdict is not None, "a broken body is always judged"
    return verdict


def test_a_fresh_capture_has_seen_nothing() -> None:
    capture = ResponseCapture(1, event_stream=True, max_size=10)
    assert (capture.size, capture.final_seen, capture.resumable) == (0, False, False)
    assert (capture.skipped_event, capture.answered, capture.too_large) == (False, False, False)
    assert answer_verdict(capture) is None
    refused = ResponseCapture(1, event_stream=False, max_size=10)
    assert answer_verdict(refused, "no_store") == Verdict("no_store")


def test_a_json_body_in_pieces_is_judged_at_its_end() -> None:
    body = answer(content=[{"type": "text", "text": "hi"}])
    capture = fed(ResponseCapture(1, False, 1 << 10), body[:10], body[10:])
    assert capture.size == len(body)
    assert answer_verdict(capture) is None, "nothing is decided before the end"
    assert finished(capture) == Verdict(None, b'{"content":[{"type":"text","text":"hi"}]}')
    assert capture.final_seen


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"jsonrpc":"2.0","id":1,"result":', "incomplete"),
        (answer(2, v=1), "incomplete"),
        (b"[1]", "incomplete"),
        (INEXACT, "inexact_number"),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}', "error"),
    ],
)
def test_a_json_body_that_is_not_our_clean_answer_is_not_stored(body: bytes, reason: str) -> None:
    assert finished(fed(ResponseCapture(1, False, 1 << 10), body)) == Verdict(reason)  # type: ignore[arg-type]


def test_a_json_body_over_the_cap_is_too_large_however_it_ends() -> None:
    body = answer(text="x" * 100)
    capture = fed(ResponseCapture(1, False, len(body) - 1), body)
    assert capture.too_large
    assert finished(capture) == Verdict("too_large")
    exact = fed(ResponseCapture(1, False, len(body)), body)
    assert not exact.too_large
    assert finished(exact).reason is None
    broken = fed(ResponseCapture(1, False, 1 << 10), body[:5])
    assert failed(broken) == Verdict("incomplete")
    assert finished(broken) == Verdict("incomplete"), "decided once"


def test_a_refused_answer_is_followed_but_keeps_its_refusal() -> None:
    capture = ResponseCapture(1, True, 1 << 10)
    fed(capture, event(answer(1, v=1)))
    assert capture.final_seen
    assert finished(capture, "set_cookie") == Verdict("set_cookie")
    assert failed(capture, None, "set_cookie") == Verdict("set_cookie")


def test_an_event_stream_is_decided_when_its_answer_event_arrives() -> None:
    capture = fed(ResponseCapture(1, True, 1 << 10), PROGRESS, event(answer(1, v=1))[:7])
    assert not capture.final_seen
    fed(capture, event(answer(1, v=1))[7:])
    assert capture.final_seen
    assert capture.answered
    assert finished(capture) == Verdict(None, b'{"v":1}')
    fed(capture, ASK)  # after the answer: counted, not read
    assert capture.size == len(PROGRESS) + len(event(answer(1, v=1))) + len(ASK)
    assert finished(capture) == Verdict(None, b'{"v":1}')


@pytest.mark.parametrize(
    ("chunks", "reason"),
    [
        ((ASK, event(answer(1, v=1))), "server_request"),
        ((PROGRESS,), "incomplete"),
        ((event(answer(2, v=1)),), "incomplete"),
        ((event(b"[1,2]"), event(b"not json")), "incomplete"),
        ((event(b'{"jsonrpc":"2.0","id":1}'),), "incomplete"),
        ((event(b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}'),), "error"),
        ((event(INEXACT),), "inexact_number"),
        ((event(answer(1, v=1), b"event: other\n"),), "incomplete"),
        ((event(answer(1, v=1), b"event: message\n"),), None),
    ],
)
def test_what_an_event_stream_shows_decides_its_verdict(
    chunks: tuple[bytes, ...], reason: str | None
) -> None:
    capture = fed(ResponseCapture(1, True, 1 << 10), *chunks)
    assert finished(capture).reason == reason


def test_frames_before_the_answer_count_towards_the_cap() -> None:
    final = event(answer(1, v=1))
    capture = fed(ResponseCapture(1, True, len(PROGRESS) + len(final) - 1), PROGRESS, final)
    assert capture.final_seen
    assert finished(capture) == Verdict("too_large")
    fits = fed(ResponseCapture(1, True, len(PROGRESS) + len(final)), PROGRESS, final)
    assert finished(fits).reason is None
    cut = fed(ResponseCapture(1, True, 4), PROGRESS)
    assert finished(cut) == Verdict("too_large"), "too large, and unanswered"


def test_event_ids_make_a_stream_resumable() -> None:
    capture = fed(ResponseCapture(1, True, 1 << 10), event(b"{}", b"id: 7\n"))
    assert capture.resumable
    assert not fed(ResponseCapture(1, True, 1 << 10), PROGRESS).resumable


def test_an_event_too_large_to_read_may_have_been_the_answer() -> None:
    huge = event(answer(1, text="x" * MIN_EVENT_BOUND))
    capture = fed(ResponseCapture(1, True, 0), huge)
    assert capture.skipped_event
    assert capture.answered, "the client may have its answer: no error event is owed"
    assert not capture.final_seen
    small = fed(ResponseCapture(1, True, 0), event(answer(1, v=1)))
    assert small.final_seen, "events up to the minimum bound are read even when nothing is kept"
    assert finished(small) == Verdict("too_large")


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("message", "deep"),
    [
        ({"result": nested(WRITE_DEPTH)}, False),
        ({"result": nested(WRITE_DEPTH), "x": {}}, False),  # more brackets, none deeper
        ({"result": nested(WRITE_DEPTH + 1)}, True),
        ({"error": {"data": nested(WRITE_DEPTH)}}, True),
        ({"result": {"text": "[" * 1000}}, False),  # brackets in a string nest nothing
        ({"result": [nested(2)] * 200}, False),  # many brackets, none deep
    ],
)
def test_an_answer_orjson_cannot_write_again_is_too_deep(
    message: dict[str, Any], deep: bool
) -> None:
    raw = json.dumps(message, separators=(",", ":")).encode()  # the standard library's, any depth
    assert too_deep(orjson.loads(raw), raw) is deep


def test_an_answer_too_deep_to_write_again_is_judged_but_not_kept() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "d": nested(300)}}
    raw = json.dumps(message).encode()
    capture = fed(ResponseCapture(1, False, 1 << 20), raw)
    assert finished(capture) == Verdict("too_deep")
    kept = shareable_final(capture, Verdict("too_deep"))
    assert (capture.final_seen, kept) == (True, None), "followers forward on their own"
    error = json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "data": nested(300)}})
    capture = fed(ResponseCapture(1, False, 1 << 20), error.encode())
    assert finished(capture) == Verdict("error"), "what it is, though nobody else may have it"
    kept = shareable_final(capture, Verdict("error"))
    assert (capture.final_seen, kept) == (True, None), "followers forward on their own"


@pytest.mark.parametrize("member", ["d", "cacheScope", "_meta", "content"])
def test_a_result_whose_member_sits_at_the_deepest_level_is_too_deep_as_a_whole(
    member: str,
) -> None:
    """The result object is one level above its members: a member nested to the very
    limit makes the result too deep to write whole (to digest, or to hand to followers),
    so it is not stored either, whichever member it is."""
    message = {"jsonrpc": "2.0", "id": 1, "result": {"content": [], member: nested(WRITE_DEPTH)}}
    raw = json.dumps(message).encode()
    capture = fed(ResponseCapture(1, False, 1 << 20), raw)
    assert too_deep(orjson.loads(raw), raw)
    assert finished(capture) == Verdict("too_deep")
    assert shareable_final(capture, Verdict("too_deep")) is None


def test_the_final_answer_is_kept_with_its_bytes_and_notices_before_it_are_collected() -> None:
    changed = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'
    updated = b'{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a"}}'
    final = answer(1, content=[])
    capture = fed(ResponseCapture(1, True, 1 << 20), event(changed), event(updated), event(final))
    assert finished(capture) == Verdict(None, b'{"content":[]}', scope=None)
    assert (capture.final, capture.final_raw) == (orjson.loads(final), final)
    assert capture.notices == [Notice("tools"), Notice("resource", "a")]


def test_a_body_that_broke_off_keeps_how_it_broke() -> None:
    failure = UpstreamFailure("broken", ConnectionResetError())
    capture = ResponseCapture(1, False, 1 << 20)
    assert failed(capture, failure) == Verdict("incomplete")
    assert capture.failure is failure


def test_an_answer_of_exactly_max_size_is_kept_for_followers() -> None:
    final = answer(1, content=[])
    capture = fed(ResponseCapture(1, False, len(final)), final)
    assert finished(capture).reason is None
    assert capture.final == orjson.loads(final)
    larger = fed(ResponseCapture(1, False, len(final) - 1), final)
    assert finished(larger) == Verdict("too_large")
    assert larger.final is None


def test_a_server_request_in_the_stream_leaves_the_followers_alone_at_once() -> None:
    capture = fed(ResponseCapture(1, event_stream=True, max_size=1 << 16), b"data: {}\n\n")
    assert early_share(200, capture, None) is None, "nothing known yet: followers wait"
    fed(capture, b'data: {"jsonrpc":"2.0","id":9,"method":"sampling/createMessage"}\n\n')
    assert early_share(200, capture, None) == "alone"
    assert early_share(200, ResponseCapture(1, True, 1 << 16), "no_store") == "alone"
    assert early_share(503, ResponseCapture(1, True, 1 << 16), "upstream_status") == "failed"
