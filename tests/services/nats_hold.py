"""A TCP proxy in front of a test's nats-server that holds one client's writes at one exact step.

Making a service's write land late (after another service's) by timing is a race; the proxy
sees the bytes instead: once `arm(marker)` was called, the first client data holding `marker`
(a subject, e.g. `$KV.MUSTER_VISIBILITY.pending-index.cq`) is held, with everything that
client sends after it, until `release()`: as a message still on the wire. What the server
sends the client is passed on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

_CHUNK = 64 * 1024


class Hold:
    """`url`: where the held clients connect instead of `upstream_port`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.marker = b""
        self.holding = asyncio.Event()  # set once data was held
        self._released = asyncio.Event()
        self._listener: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def arm(self, marker: bytes) -> None:
        self.marker = marker

    def release(self) -> None:
        self._released.set()

    async def __aenter__(self) -> Hold:
        self._listener = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._listener.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._listener is not None
        self._listener.close()
        self.release()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        pipes = (
            self._spawn(self._pipe(reader, up_writer, watch=True)),
            self._spawn(self._pipe(up_reader, writer, watch=False)),
        )
        await asyncio.gather(*pipes, return_exceptions=True)
        for w in (writer, up_writer):
            w.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, watch: bool
    ) -> None:
        tail = b""
        while data := await source.read(_CHUNK):
            if watch and self.marker and not self.holding.is_set():
                if self.marker in tail + data:
                    self.holding.set()
                    await self._released.wait()
                tail = data[-len(self.marker) :]
            sink.write(data)
            with contextlib.suppress(ConnectionError):
                await sink.drain()
        sink.close()
