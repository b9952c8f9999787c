"""A TCP proxy in front of a test's nats-server that restarts the server at one exact step.

A service's start is a handful of NATS requests; stopping nats-server "during" one of them
from outside is a race the service usually wins. The proxy sees the requests instead: when a
client sends a message to a subject starting with `cut_at` (e.g.
`$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.admission-0`), that request is not forwarded, every
proxied connection is closed and nats-server is restarted (stopped, then started on its port
and store), as if it had gone down at that very moment. Connections made meanwhile are closed
at once, as a refused connection would be. With `start_again=False` the server stays down.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from nats_process import NatsServer

_CHUNK = 64 * 1024


class StepCut:
    """`url`: where clients connect instead of `server.url`; `cut` is set once it happened."""

    def __init__(
        self, server: NatsServer, *, cut_at: bytes, occurrence: int = 1, start_again: bool = True
    ) -> None:
        """`start_again`: False leaves nats-server stopped after the cut."""
        self.server = server
        self.start_again = start_again
        self.cut_at = cut_at
        self.occurrence = occurrence  # the n-th request to `cut_at` is the one cut
        self.seen = 0
        self.cut = asyncio.Event()
        self._restarting = False
        self._listener: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def __aenter__(self) -> StepCut:
        self._listener = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._listener.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._listener is not None
        self._listener.close()
        self._close_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._restarting:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        except OSError:
            writer.close()
            return
        self._links.update((writer, up_writer))
        pipes = (
            self._spawn(self._pipe(reader, up_writer, watch=True)),
            self._spawn(self._pipe(up_reader, writer, watch=False)),
        )
        await asyncio.gather(*pipes, return_exceptions=True)
        for w in (writer, up_writer):
            self._links.discard(w)
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
            if watch and not self.cut.is_set():
                seen = tail + data
                self.seen += seen.count(self.cut_at) - tail.count(self.cut_at)
                tail = seen[-len(self.cut_at) :]
                if self.seen >= self.occurrence:
                    await self._restart()
                    return
            sink.write(data)
            with contextlib.suppress(ConnectionError):
                await sink.drain()
        sink.close()

    async def _restart(self) -> None:
        """Drop every connection and restart nats-server (the request that matched is lost).

        Once: two connections can send the matching request at the same moment, and two
        restarts side by side would start a second nats-server on the first one's ports."""
        if self._restarting or self.cut.is_set():
            return
        self._restarting = True
        self._close_all()
        await asyncio.to_thread(self.server.stop)
        self.cut.set()
        if self.start_again:
            await asyncio.to_thread(self.server.start)
            self._restarting = False

    def _close_all(self) -> None:
        for w in list(self._links):
            w.close()
        self._links.clear()
