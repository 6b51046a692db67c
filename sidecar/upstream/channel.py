"""A bounded channel of byte chunks from one task to another (a flight's fetch to its
leader's response).

At most `bound` chunks wait: the sender waits for room, so memory stays bounded however
slowly the reader reads. Either side may end it: the sender by closing (the reader takes
what is queued, then stops), the reader by leaving (what is queued is dropped and a
waiting sender is released). Unlike a memory stream that yields to the event loop on
every send and every receive, a chunk that can pass at once passes at once: a stream's
first bytes reach the reader without extra turns of the loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator


class ChunkChannel:
    __slots__ = ("_bound", "_chunks", "_closed", "_left", "_readable", "_writable")

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise ValueError("a channel holds at least one chunk")
        self._bound = bound
        self._chunks: deque[bytes] = deque()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._closed = False
        """The sender is done."""
        self._left = False
        """The reader has gone."""

    async def send(self, chunk: bytes) -> bool:
        """Queue `chunk`, waiting while the channel is full; False when the reader has gone
        (or the channel was closed)."""
        while len(self._chunks) >= self._bound and not self._left:
            self._writable.clear()
            await self._writable.wait()
        if self._left or self._closed:
            return False
        self._chunks.append(chunk)
        self._readable.set()
        return True

    def close(self) -> None:
        """Nothing more will be sent."""
        self._closed = True
        self._readable.set()

    def leave(self) -> None:
        """The reader needs nothing more."""
        self._left = True
        self._chunks.clear()
        self._writable.set()
        self._readable.set()

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The chunks in the order sent, until the sender closes (or the reader leaves)."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._writable.set()
                yield chunk
            elif self._closed or self._left:
                return
            else:
                self._readable.clear()
                await self._readable.wait()
