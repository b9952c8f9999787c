"""A TCP proxy in front of a test's nats-server that holds one client's writes at one exact step.

Making a service's write land late (after another service's) by timing is a race; the proxy
sees the bytes instead: once `arm(marker)` was called, the first client data holding `marker`
(a subject, e.g. `$KV.MUSTER_VISIBILITY.pending-index.cq`) is held, with everything that
client sends after it, until `release()`: as a message still on the wire. What the server
sends the client is passed on meanwhile. The proxying is `StepCut`'s, which never cuts here.
"""

from __future__ import annotations

import asyncio
import contextlib

from nats_cut import StepCut
from nats_process import NatsServer

_CHUNK = 64 * 1024


class Hold(StepCut):
    """`url`: where the held clients connect instead of `server.url`."""

    def __init__(self, server: NatsServer) -> None:
        super().__init__(server, cut_at=b"")
        self.marker = b""
        self.holding = asyncio.Event()  # set once data was held
        self._released = asyncio.Event()

    def arm(self, marker: bytes) -> None:
        self.marker = marker

    def release(self) -> None:
        self._released.set()

    async def __aenter__(self) -> Hold:
        await super().__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
        await super().__aexit__(*exc)

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
