"""A NATS protocol parser for MusterClient: nats-py's `Parser`, cheaper per MSG/HMSG.

nats-py's parser tries a regular expression per message, fills a dict with its arguments,
copies the payload twice (a bytearray slice, then bytes), deletes it from the front of its
buffer (moving everything after it), and awaits a `_process_msg` coroutine for every message.
Here a read is walked with an offset and trimmed once; a control line is split, not matched;
a payload is sliced once from the bytes read; and a message for a direct subscription (see
bus/client.py) is handed over by a plain call (`DirectDelivery`), no coroutine. Every other
message, and every other operation (PING, PONG, INFO, -ERR, +OK), goes to the client's own
coroutines exactly as nats-py's parser sends it. tests/services/test_nats_parser.py drives both
parsers with the same bytes split at random points and pins the nats-py internals relied on.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from nats.errors import ProtocolError
from nats.protocol import parser as nats_parser

_CRLF = b"\r\n"
# nats-py's states and limit: `reset` (theirs) sets the state, so both must agree.
_CONTROL = nats_parser.AWAITING_CONTROL_LINE
_PAYLOAD = nats_parser.AWAITING_MSG_PAYLOAD
_MAX_CONTROL_LINE = nats_parser.MAX_CONTROL_LINE_SIZE


class DirectDelivery(Protocol):
    """Takes a parsed message if it is for a direct subscription and needs no coroutine
    (returns True); False leaves it to the client's `_process_msg`."""

    def __call__(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> bool: ...


class FastParser(nats_parser.Parser):
    """nats-py's `Parser` (its state, `reset` and errors), parsing MSG and HMSG itself.

    `nc` is the client whose `_process_*` coroutines get what `deliver` does not take.
    What is left of a read (a message split across reads) waits in `buf` as with nats-py.
    """

    def __init__(self, nc: Any, deliver: DirectDelivery) -> None:
        super().__init__(nc)
        self._deliver = deliver
        self._at = 0  # in what `parse` walks: where the operations not dispatched yet start

    async def parse(self, data: bytes = b"") -> None:
        """Parse `data` (what follows what was left), dispatching every complete operation."""
        left = self.buf
        if left:
            left.extend(data)
            if self.state == _PAYLOAD and len(left) < self.needed + 2:
                return  # a large payload arriving: no copy until it is whole
            view = bytes(left)
        else:
            view = data
        self._at = 0
        try:
            await self._walk(view, left)
        finally:
            if self.buf is left:  # else reset meanwhile (a reconnect): nothing is left
                if left:
                    del left[: self._at]
                else:
                    left.extend(view[self._at :])

    async def _walk(self, view: bytes, left: bytearray) -> None:
        """Dispatch the operations of `view` in order, `_at` following: where the unparsed
        rest starts (an operation not yet whole). Stops if the client resets the parser.

        One function for the whole per-message path: a call per message more was a
        measurable share of it."""
        pos = 0
        end = len(view)
        deliver = self._deliver
        while pos < end:
            if self.state == _PAYLOAD:  # a message whose payload the last read split
                arg = self.msg_arg
                sid, subject, reply = arg["sid"], arg["subject"], arg["reply"]
                split, size = self.header_needed, self.needed
                self.state = _CONTROL
            else:
                eol = view.find(_CRLF, pos)
                if eol < 0:
                    return
                args = view[pos:eol].split()
                count = len(args)
                op = args[0] if count else b""
                if op == b"MSG" and count in (4, 5) and args[-1].isdigit():
                    split = 0
                elif op == b"HMSG" and count in (5, 6) and args[-1].isdigit():
                    if not args[-2].isdigit():
                        raise ProtocolError("nats: malformed MSG")
                    split = int(args[-2])
                    count -= 1
                elif op in (b"MSG", b"HMSG"):
                    raise ProtocolError("nats: malformed MSG")
                else:
                    if not await self._other(view[pos : eol + 2]):
                        return  # nats-py waits for more here too
                    self._at = pos = eol + 2
                    if self.buf is not left:
                        return
                    continue
                try:
                    sid = int(args[2])
                except ValueError:  # nats-py's words for it too
                    raise ProtocolError("nats: malformed MSG") from None
                subject, reply, size = args[1], args[3] if count == 5 else b"", int(args[-1])
                pos = eol + 2
            stop = pos + size
            if stop + 2 > end:  # the payload is still on its way: wait as nats-py does
                self.state, self.needed, self.header_needed = _PAYLOAD, size, split
                self.msg_arg.update(sid=sid, subject=subject, reply=reply)
                self._at = pos
                return
            headers = view[pos : pos + split] if split else None
            payload = view[pos + split : stop]
            self._at = pos = stop + 2
            if not deliver(sid, subject, reply, payload, headers):
                await self.nc._process_msg(sid, subject, reply, payload, headers)
                if self.buf is not left:
                    return

    async def _other(self, line: bytes) -> bool:
        """Dispatch a control line that is neither MSG nor HMSG, as nats-py does; False if it
        is no operation nats-py knows and may be the start of a longer one."""
        if nats_parser.OK_RE.match(line):
            return True
        err = nats_parser.ERR_RE.match(line)
        if err:
            await self.nc._process_err(err.groups()[0].decode().lower())
            return True
        if nats_parser.PING_RE.match(line):
            await self.nc._process_ping()
            return True
        if nats_parser.PONG_RE.match(line):
            await self.nc._process_pong()
            return True
        info = nats_parser.INFO_RE.match(line)
        if info:
            await self.nc._process_info(json.loads(info.group(1).decode()))
            return True
        if len(line) < _MAX_CONTROL_LINE:
            raise ProtocolError("nats: unknown protocol")
        return False
