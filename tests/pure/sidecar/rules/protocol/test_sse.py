"""The event-stream decoder: line ends, chunk boundaries anywhere, bounded memory."""

from __future__ import annotations

import pytest

from mcpcache.sidecar.rules.admission.capture import ResponseCapture
from mcpcache.sidecar.rules.admission.judgement import answer_verdict
from mcpcache.sidecar.rules.protocol.events import Event, EventDecoder

STREAM = b'id: 1\nevent: message\ndata: {"a":1}\n\n: comment\ndata: x\ndata: y\n\n'


def decode(chunks: list[bytes], max_event: int = 1 << 16) -> list[Event]:
    decoder = EventDecoder(max_event)
    return [event for chunk in chunks for event in decoder.feed(chunk)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_events_are_the_same_whatever_the_chunking(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert decode(chunks) == [Event(b'{"a":1}', True, name=b"message"), Event(b"x\ny", False)]


@pytest.mark.parametrize("end", [b"\r\n", b"\r", b"\n"])
def test_every_line_end_is_a_line_end(end: bytes) -> None:
    stream = end.join([b"data: a", b"", b"data: b", b"", b""])
    halves = [stream[: len(stream) // 2], stream[len(stream) // 2 :]]
    assert decode(halves) == [Event(b"a", False), Event(b"b", False)]


def test_a_crlf_split_across_chunks_is_one_line_end() -> None:
    assert decode([b"data: a\r", b"\n\r", b"\n"]) == [Event(b"a", False)]


def test_an_overlong_line_is_reported_truncated_and_not_kept() -> None:
    decoder = EventDecoder(max_event=100)
    events = decoder.feed(b"data: " + b"x" * 60)
    events += decoder.feed(b"x" * 60)
    assert decoder._pending_size == 0  # nothing of the overlong line is held
    events += decoder.feed(b"x" * 1000 + b"\n\ndata: next\n\n")
    assert events == [Event(b"", False, truncated=True), Event(b"next", False)]


def test_an_event_of_many_lines_is_bounded_as_a_whole() -> None:
    decoder = EventDecoder(max_event=100)
    events = [e for _ in range(50) for e in decoder.feed(b"data: " + b"x" * 40 + b"\n")]
    assert decoder._data == []  # nothing of the overlong event is held
    events += decoder.feed(b"\ndata: next\n\n")
    assert events == [Event(b"", False, truncated=True), Event(b"next", False)]


def test_an_event_cut_off_by_the_end_of_the_body_is_not_dispatched() -> None:
    assert decode([b"data: last\n"]) == []


def test_the_event_name_is_reported() -> None:
    assert decode([b"event: other\ndata: x\n\n"]) == [Event(b"x", False, name=b"other")]


def test_an_id_without_data_still_marks_the_stream_resumable() -> None:
    assert decode([b"id: 7\n\n"]) == [Event(b"", True)]


def test_a_capture_judges_only_message_events() -> None:
    """An upstream can put a fake final answer in an event clients never dispatch."""
    capture = ResponseCapture(1, event_stream=True, max_size=1 << 16)
    capture.feed(b'event: other\ndata: {"jsonrpc":"2.0","id":1,"result":{"v":"fake"}}\n\n')
    capture.feed(b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{"v":"real"}}\n\n')
    capture.finish()
    verdict = answer_verdict(capture)
    assert verdict is not None
    assert verdict.result == b'{"v":"real"}'
