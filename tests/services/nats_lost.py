"""A TCP proxy in front of a test's nats-server that restarts it before a reader got anything.

A consumer the server made and then lost with a restart, before a single delivery reached its
reader, is a race a test cannot win from outside: deliveries follow the consumer's creation at
once. The proxy makes it happen on purpose. Once `arm`ed, it passes the first `keep` messages
the server sends on a subject starting with `deliveries` and drops the others; when it has
dropped one, and the server's answer holding `answer` (the consumer's creation) has reached the
client, it closes every connection and restarts nats-server (`StepCut`), so the consumer is
gone and its reader had only the first `keep`.
"""

from __future__ import annotations

import asyncio
import contextlib

from nats_cut import StepCut
from nats_process import NatsServer

_CHUNK = 64 * 1024
_CRLF = b"\r\n"


class LostFirst(StepCut):
    """`url`: where the client connects instead of `server.url`; `cut`: set once restarted."""

    def __init__(self, server: NatsServer) -> None:
        super().__init__(server, cut_at=b"")
        self.deliveries = self.answer = b""
        self.keep = self.passed = self.dropped = 0
        self._answered = False

    async def __aenter__(self) -> LostFirst:
        await super().__aenter__()
        return self

    def arm(self, deliveries: bytes, *, answer: bytes, keep: int = 0) -> None:
        self.deliveries, self.answer, self.keep = deliveries, answer, keep

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, watch: bool
    ) -> None:
        pending = b""
        while data := await source.read(_CHUNK):
            if watch or not self.deliveries or self.cut.is_set():
                sink.write(data)
            else:  # from the server, armed
                frames, pending = split_frames(pending + data)
                for frame in frames:
                    if _subject(frame).startswith(self.deliveries):
                        if self.passed >= self.keep:
                            self.dropped += 1
                            continue
                        self.passed += 1
                    sink.write(frame)
                    self._answered = self._answered or self.answer in frame
                if self.dropped and self._answered:
                    with contextlib.suppress(ConnectionError):
                        await sink.drain()  # the answer reaches the client first
                    await self._restart()
                    return
            with contextlib.suppress(ConnectionError):
                await sink.drain()
        sink.close()


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
