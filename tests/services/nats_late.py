"""A TCP proxy in front of a test's nats-server that hands a client deliveries after an answer
the server gave later.

A loaded nats-server may make deliveries, then answer a request that counts them, and yet send
the answer first: a JetStream consumer's messages leave through its own queue, the API's replies
through another. Waiting for a loaded machine to do that is a race; the proxy does it on purpose.
Once `arm`ed it holds the first `count` messages the server sends on subjects starting with
`deliveries`, and the client's command holding `request` (e.g. `$JS.API.CONSUMER.INFO.`), with
what it sends after, until those were all made; the answer (a message holding `answer`) is
passed on, and the held messages follow it `LATE_S` later (one read apart), in their order.
Everything else goes through as it is.
"""

from __future__ import annotations

import asyncio
import contextlib

from nats_cut import StepCut
from nats_process import NatsServer

_CHUNK = 64 * 1024
_CRLF = b"\r\n"
LATE_S = 0.2  # between the answer and the held messages: the client reads them apart


class Late(StepCut):
    """`url`: where the client connects instead of `server.url`; `held`: what came late."""

    def __init__(self, server: NatsServer) -> None:
        super().__init__(server, cut_at=b"")
        self.deliveries = self.request = self.answer = b""
        self.count = 0
        self.held: list[bytes] = []
        self._all_held = asyncio.Event()
        self._asked = False
        self._answered = False  # the answer was passed on; the held ones go `LATE_S` after
        self._after: list[bytes] = []
        self._released = False

    async def __aenter__(self) -> Late:
        await super().__aenter__()
        return self

    def arm(self, deliveries: bytes, *, count: int, request: bytes, answer: bytes) -> None:
        self.deliveries, self.count, self.request, self.answer = deliveries, count, request, answer

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, watch: bool
    ) -> None:
        pending = b""
        while data := await source.read(_CHUNK):
            if watch:  # from the client
                at = data.find(self.request) if self.request and not self._asked else -1
                if at >= 0:
                    line = data.rfind(_CRLF, 0, at) + 2  # 0 when it is the first
                    sink.write(data[:line])  # a subscription sent with it is made now
                    await sink.drain()
                    await self._all_held.wait()  # the server counts them all as delivered
                    self._asked, data = True, data[line:]
                sink.write(data)
            else:
                frames, pending = split_frames(pending + data)
                for frame in frames:
                    self._pass(frame, sink)
            with contextlib.suppress(ConnectionError):
                await sink.drain()
        sink.close()

    def _pass(self, frame: bytes, sink: asyncio.StreamWriter) -> None:
        if not self.deliveries or self._released:
            sink.write(frame)
        elif self._answered:  # what follows the answer waits for the held ones
            self._after.append(frame)
        elif _subject(frame).startswith(self.deliveries) and not self._all_held.is_set():
            self.held.append(frame)
            if len(self.held) >= self.count:
                self._all_held.set()
        else:
            sink.write(frame)
            if self._asked and self.answer in frame:
                # Sent with the answer, they would be parsed before the client looks at it.
                self._answered = True
                asyncio.get_running_loop().call_later(LATE_S, self._release, sink)

    def _release(self, sink: asyncio.StreamWriter) -> None:
        self._released = True
        if not sink.is_closing():
            sink.write(b"".join(self.held + self._after))


def _subject(frame: bytes) -> bytes:
    """The subject of a MSG or HMSG frame; b"" for any other."""
    words = frame.split(b" ", 2)
    return words[1] if words[0] in (b"MSG", b"HMSG") and len(words) > 1 else b""


def split_frames(data: bytes) -> tuple[list[bytes], bytes]:
    """The whole protocol frames at the start of `data` (what a server sends a client), and
    what is left of an unfinished one."""
    frames: list[bytes] = []
    at = 0
    while (end := data.find(_CRLF, at)) >= 0:
        line = data[at:end]
        size = end + 2 - at
        if line.startswith((b"MSG ", b"HMSG ")):
            size += int(line.rsplit(b" ", 1)[1]) + 2  # the payload (headers in it) and its CRLF
            if at + size > len(data):
                break
        frames.append(data[at : at + size])
        at += size
    return frames, data[at:]
