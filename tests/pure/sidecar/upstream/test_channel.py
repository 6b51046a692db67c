"""The leader's chunk channel: order, a bound the sender waits on, and either side ending
it without leaving the other waiting."""

from __future__ import annotations

import asyncio

import pytest

from mcpcache.sidecar.upstream.channel import ChunkChannel


async def read_all(channel: ChunkChannel) -> list[bytes]:
    return [chunk async for chunk in channel.chunks()]


async def test_chunks_arrive_in_order_and_the_reader_stops_after_a_close() -> None:
    channel = ChunkChannel(4)
    for chunk in (b"a", b"b", b"c"):
        assert await channel.send(chunk)
    channel.close()
    assert await asyncio.wait_for(read_all(channel), 5) == [b"a", b"b", b"c"]


async def test_a_full_channel_makes_the_sender_wait_until_the_reader_takes_one() -> None:
    channel = ChunkChannel(2)
    assert await channel.send(b"1")
    assert await channel.send(b"2")
    third = asyncio.ensure_future(channel.send(b"3"))
    await asyncio.sleep(0)  # one turn of the loop: the sender is now waiting for room
    assert not third.done()
    reader = channel.chunks()
    assert await asyncio.wait_for(anext(reader), 5) == b"1"
    assert await asyncio.wait_for(third, 5) is True
    channel.close()
    assert [chunk async for chunk in reader] == [b"2", b"3"]


async def test_a_reader_that_leaves_releases_a_waiting_sender_and_drops_the_queue() -> None:
    channel = ChunkChannel(1)
    assert await channel.send(b"1")
    waiting = asyncio.ensure_future(channel.send(b"2"))
    await asyncio.sleep(0)
    channel.leave()
    assert await asyncio.wait_for(waiting, 5) is False
    assert await channel.send(b"3") is False
    assert await asyncio.wait_for(read_all(channel), 5) == []


async def test_a_reader_waiting_on_an_empty_channel_wakes_for_a_chunk_and_a_close() -> None:
    channel = ChunkChannel(4)
    reading = asyncio.ensure_future(read_all(channel))
    await asyncio.sleep(0)
    assert await channel.send(b"x")
    channel.close()
    assert await asyncio.wait_for(reading, 5) == [b"x"]


async def test_leaving_wakes_a_waiting_reader_and_a_closed_channel_takes_nothing() -> None:
    channel = ChunkChannel(4)
    reading = asyncio.ensure_future(read_all(channel))
    await asyncio.sleep(0)
    channel.leave()
    assert await asyncio.wait_for(reading, 5) == []
    closed = ChunkChannel(4)
    closed.close()
    assert await closed.send(b"late") is False
    with pytest.raises(ValueError, match="at least one chunk"):
        ChunkChannel(0)
