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
_MSG = b"MSG "
_HMSG = b"HMSG "
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
        rest starts (an operation not yet whole). Stops if the client resets the parser."""
        pos = 0
        end = len(view)
        deliver = self._deliver
        while pos < end:
            if self.state == _PAYLOAD:
                stop = pos + self.needed
                if stop + 2 > end:
                    return
                args = self.msg_arg
                sid, subject, reply = args["sid"], args["subject"], args["reply"]
                split = self.header_needed
                headers = view[pos : pos + split] if split else None
                payload = view[pos + split : stop]
                self.header_needed = 0
                self.state = _CONTROL
                self._at = pos = stop + 2
                if not deliver(sid, subject, reply, payload, headers):
                    await self.nc._process_msg(sid, subject, reply, payload, headers)
                    if self.buf is not left:
                        return
                continue
            eol = view.find(_CRLF, pos)
            if eol < 0:
                return
            if view.startswith(_MSG, pos):
                self._msg_args(view[pos + 4 : eol].split(), headers=False)
            elif view.startswith(_HMSG, pos):
                self._msg_args(view[pos + 5 : eol].split(), headers=True)
            elif not await self._other(view[pos : eol + 2]):
                return  # nats-py waits for more here too
            self._at = pos = eol + 2
            if self.buf is not left:
                return

    def _msg_args(self, args: list[bytes], *, headers: bool) -> None:
        """Take a MSG's (subject sid [reply] size) or an HMSG's (subject sid [reply]
        header-size size) arguments, as nats-py's MSG_RE and HMSG_RE read them."""
        sizes = 2 if headers else 1
        if len(args) - sizes not in (2, 3) or not all(n.isdigit() for n in args[-sizes:]):
            raise ProtocolError("nats: malformed MSG")
        try:
            sid = int(args[1])
        except ValueError:
            raise ProtocolError("nats: malformed MSG") from None
        arg = self.msg_arg
        arg["subject"] = args[0]
        arg["sid"] = sid
        arg["reply"] = args[2] if len(args) - sizes == 3 else b""
        self.needed = int(args[-1])
        self.header_needed = int(args[-2]) if headers else 0
        self.state = _PAYLOAD

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
