"""Opening a request to an upstream MCP server, whatever HTTP client carries it.

The rest of the sidecar sees an `UpstreamResponse` (status, headers, a chunk iterator,
close) and one exception, `UpstreamFailure`, with the kind of failure; the client
library's own types stop here. The library is aiohttp's client: on loopback a pooled
request costs about a quarter of what httpx's does (see benchmarks/).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Literal

import aiohttp
from yarl import URL

from ..rules.reading.headers import EVENT_STREAM, joined, media_type

FailureKind = Literal["timeout", "unreachable", "broken"]


class UpstreamFailure(Exception):
    """The upstream did not answer (`timeout`, `unreachable`) or broke mid-response."""

    def __init__(self, kind: FailureKind, cause: BaseException) -> None:
        super().__init__(f"{kind}: {type(cause).__name__}")
        self.kind: FailureKind = kind
        self.cause_name = type(cause).__name__


@functools.lru_cache(maxsize=256)
def _parsed_url(url: str) -> URL:
    """Servers are few; their URLs are parsed once."""
    return URL(url)


def upstream_url(url: str, query: str) -> URL:
    """The server's URL with the client's query string after its own query (if it has
    one), the client's exactly as it was sent: not decoded, not encoded again."""
    parsed = _parsed_url(url)
    if not query:
        return parsed
    return URL(f"{parsed}{'&' if parsed.raw_query_string else '?'}{query}", encoded=True)


@functools.lru_cache(maxsize=64)
def _timeout(connect: float, read: float | None) -> aiohttp.ClientTimeout:
    """Servers' timeouts are few too: one (immutable) timeout object for each."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)


def _close_delimited(headers: dict[str, str]) -> bool:
    """The body has no length of its own and ends when the connection does (RFC 9112,
    6.3): neither `Content-Length` nor a chunked `Transfer-Encoding`."""
    return "content-length" not in headers and "transfer-encoding" not in headers


def _retrieved(closed: asyncio.Future[None]) -> None:
    """A reset nobody asks about (the body left half-read) is not an unhandled error."""
    if not closed.cancelled():
        closed.exception()


class UpstreamResponse:
    """An upstream answer whose headers have arrived; the body is read as it comes."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._complete = False
        self.status: int = response.status
        self.headers: list[tuple[str, str]] = [
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
        ]
        self.header_map = joined(self.headers)
        self.event_stream = media_type(self.header_map) == EVENT_STREAM
        self._closed = self._connection_closed()

    def _connection_closed(self) -> asyncio.Future[None] | None:
        """For a body that ends with its connection, how the connection ended.

        aiohttp ends such a body as complete whether the connection was closed or reset
        (a reset has no other sign on the body's stream); its protocol's `closed` future
        (made on first use, so asked for here, before the body is read) fails with the
        reset instead."""
        connection = self._response.connection
        if connection is None or not _close_delimited(self.header_map):
            return None
        protocol = connection.protocol
        closed = protocol.closed if protocol is not None else None
        if closed is not None:
            closed.add_done_callback(_retrieved)
        return closed

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive; a failure mid-body is `UpstreamFailure`:
        `timeout` when no byte came within the read timeout, `broken` otherwise."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except TimeoutError as exc:  # aiohttp's read timeout is a ClientError as well
            raise UpstreamFailure("timeout", exc) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailure("broken", exc) from exc
        if (lost := self._connection_lost()) is not None:
            raise UpstreamFailure("broken", lost)
        self._complete = True

    def _connection_lost(self) -> BaseException | None:
        """The error a close-delimited body's connection ended with (its reset)."""
        closed = self._closed
        if closed is None or not closed.done() or closed.cancelled():
            return None
        lost = closed.exception()  # aiohttp's wrapper, the reset as its cause
        return None if lost is None else lost.__cause__ or lost

    def close(self) -> None:
        """Give the connection back to the pool after a whole body; otherwise close it
        (a body left half-read must not be read by the next request on that socket).
        Neither waits, so a reader being cancelled still releases its answer."""
        if self._complete:
            self._response.release()
        else:
            self._response.close()


class UpstreamClient:
    """One pooled client for all upstreams.

    It keeps no cookies (a cookie set in one caller's answer must never ride along on
    another caller's request), reads no proxy settings from the environment, follows no
    redirects and leaves bodies as the upstream encoded them.
    """

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        # Made on first use, inside the event loop that will use it.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trust_env=False,
            # Nothing the client did not send: no `User-Agent`, no `Content-Type` guessed.
            skip_auto_headers=("User-Agent", "Content-Type"),
        )
        return self._session

    async def open(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
        connect_timeout: float,
        read_timeout: float | None,
        query: str = "",
    ) -> UpstreamResponse:
        """Send the request; return once the response's headers have arrived.

        `read_timeout` bounds each wait for bytes (None: no bound, for the server's
        long-lived GET stream); `query` is the client's query string."""
        session = self._session or self._open_session()
        timeout = _timeout(connect_timeout, read_timeout)
        try:
            response = await session.request(
                method,
                upstream_url(url, query),
                headers=headers,
                data=body,
                timeout=timeout,
                allow_redirects=False,
            )
        except TimeoutError as exc:
            raise UpstreamFailure("timeout", exc) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailure("unreachable", exc) from exc
        return UpstreamResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
