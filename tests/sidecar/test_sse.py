"""The event-stream decoder: line ends, chunk boundaries anywhere, bounded memory."""

from __future__ import annotations

import pytest

from mcpcache.sidecar.sse import Event, EventDecoder

STREAM = b'id: 1\nevent: message\ndata: {"a":1}\n\n: comment\ndata: x\ndata: y\n\n'


def decode(chunks: list[bytes], max_line: int = 1 << 16) -> list[Event]:
    decoder = EventDecoder(max_line)
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_events_are_the_same_whatever_the_chunking(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert decode(chunks) == [Event(b'{"a":1}', True), Event(b"x\ny", False)]


@pytest.mark.parametrize("end", [b"\r\n", b"\r", b"\n"])
def test_every_line_end_is_a_line_end(end: bytes) -> None:
    stream = end.join([b"data: a", b"", b"data: b", b"", b""])
    halves = [stream[: len(stream) // 2], stream[len(stream) // 2 :]]
    assert decode(halves) == [Event(b"a", False), Event(b"b", False)]


def test_a_crlf_split_across_chunks_is_one_line_end() -> None:
    assert decode([b"data: a\r", b"\n\r", b"\n"]) == [Event(b"a", False)]


def test_an_overlong_event_is_reported_truncated_and_not_kept() -> None:
    decoder = EventDecoder(max_line=100)
    events = decoder.feed(b"data: " + b"x" * 60)
    events += decoder.feed(b"x" * 60)
    assert decoder._pending_size == 0  # nothing of the overlong line is held
    events += decoder.feed(b"x" * 1000 + b"\n\ndata: next\n\n")
    assert events == [Event(b"", False, truncated=True), Event(b"next", False)]


def test_an_unterminated_last_event_is_delivered_at_the_end() -> None:
    assert decode([b"data: last"]) == [Event(b"last", False)]


def test_an_id_without_data_still_marks_the_stream_resumable() -> None:
    assert decode([b"id: 7\n\n"]) == [Event(b"", True)]
