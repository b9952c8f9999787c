"""The dashboard's listening socket, bounded: slow clients hold neither a connection nor a file
descriptor for long, and never keep others from being answered.

aiohttp closes a connection whose request is not read within its keep-alive time, counted
from the connection (`READ_S`; its default is an hour: a client sending a header byte a second
held its connection that long). It has no bound on open connections: past the process's
file descriptors, accept fails and nobody is answered. Here a connection past
`max_connections` is closed as soon as it is accepted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from aiohttp import web

READ_S: Final = 10.0  # to read a request, from its connection or the last answer
MAX_CONNECTIONS: Final = 256  # a few browsers' pages and event streams


class _Counted(asyncio.Protocol):
    """One connection: served by aiohttp's protocol when under the bound, else closed unread.
    Counted when made, not when accepted: the loop accepts a burst before making any."""

    def __init__(self, bound: _Bound) -> None:
        self.bound = bound
        self.inner: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.bound.open >= self.bound.most:
            transport.close()
            return
        self.bound.open += 1
        self.inner = self.bound.serve()
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.bound.open -= 1
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.inner is None else self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


class _Bound:
    def __init__(self, serve: Callable[[], asyncio.Protocol], most: int) -> None:
        self.serve = serve
        self.most = most
        self.open = 0


async def listen(
    runner: web.AppRunner, host: str, port: int, *, max_connections: int = MAX_CONNECTIONS
) -> asyncio.Server:
    """Serve `runner` (set up, with keepalive_timeout=READ_S) on host:port, at most
    `max_connections` connections at once."""
    server = runner.server
    if server is None:
        raise RuntimeError("the dashboard's runner is not set up")
    bound = _Bound(server, max_connections)
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Counted(bound), host, port, reuse_address=True)
