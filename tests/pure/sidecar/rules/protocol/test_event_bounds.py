"""The event-stream decoder at its edges: line ends split across chunks, an event exactly
at its bound, comments, fields it ignores, and events with nothing to dispatch."""

from __future__ import annotations

from mcpcache.sidecar.rules.protocol.events import Event, EventDecoder


def decode(chunks: list[bytes], max_event: int = 1 << 16) -> list[Event]:
    decoder = EventDecoder(max_event)
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_a_cr_then_lf_in_the_next_chunk_is_one_line_end() -> None:
    assert decode([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [Event(b"a\nb", False)]
    assert decode([b"data: a\r", b"\n", b"data: b\n\n"]) == [Event(b"a\nb", False)]


def test_an_event_exactly_at_the_bound_is_kept_whole_however_it_arrives() -> None:
    line = b"data: 1234"  # ten bytes
    assert decode([line + b"\n\n"], max_event=10) == [Event(b"1234", False)]
    assert decode([b"data: 12", b"34", b"\n\n"] * 2, max_event=10) == [Event(b"1234", False)] * 2
    over = decode([b"data: 12345", b"\n\n"], max_event=10)
    assert over == [Event(b"", False, truncated=True)]


def test_comments_do_not_count_towards_the_bound() -> None:
    assert decode([b": a long comment line\ndata: 12\n\n"], max_event=10) == [Event(b"12", False)]


def test_values_keep_their_trailing_characters() -> None:
    assert decode([b"data: aX  \r\n\n"]) == [Event(b"aX  ", False)]


def test_only_an_id_field_without_nul_makes_a_stream_resumable() -> None:
    assert decode([b"retry: 5\ndata: x\n\n"]) == [Event(b"x", False)]
    assert decode([b"id: a\0b\ndata: x\n\n"]) == [Event(b"x", False)]
    assert decode([b"id: 7\ndata: x\n\n"]) == [Event(b"x", True)]


def test_a_truncated_event_keeps_its_name() -> None:
    big = b"event: big\ndata: " + b"x" * 20 + b"\n\n"
    assert decode([big], max_event=10) == [Event(b"", False, truncated=True, name=b"big")]


def test_a_blank_line_with_nothing_before_it_dispatches_nothing() -> None:
    assert decode([b"\n\n", b"event: x\n\n", b": c\n\n"]) == []
