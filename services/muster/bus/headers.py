"""NATS header blocks: written as nats-py writes them (`header_block`), read as it reads them
(`parse_header_lines`), and read only when asked for on a direct subscription's messages
(`DirectMsg`, whose inline status `status_of` tells). Used by bus/client.py and the pull feeds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

_CRLF = b"\r\n"
# A header name as nats-py accepts it (its `_HEADER_KEY_RE`: an HTTP token).
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})
_NAMES_CHECKED: dict[str, str] = {}  # name as given -> as written; muster uses a handful
_NAMES_KEPT = 64


def header_block(headers: Mapping[str, str]) -> bytes:
    """The header block nats-py writes for `headers`, byte for byte: names stripped and
    checked (BadHeaderError), empty ones left out; values stripped, line breaks made spaces."""
    lines = ["NATS/1.0\r\n"]
    for name, value in headers.items():
        key = _NAMES_CHECKED.get(name)
        if key is None:
            key = name.strip()
            if key and not _HEADER_NAME.fullmatch(key):
                raise nats.errors.BadHeaderError(key)
            if len(_NAMES_CHECKED) < _NAMES_KEPT:
                _NAMES_CHECKED[name] = key
        if not key:
            continue
        value = value.strip()
        if "\r" in value or "\n" in value:
            value = value.translate(_LINE_BREAKS)
        lines.append(f"{key}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode()


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """The `Name: Value` lines of a NATS header block, as nats-py reads them.

    What nats-py's parser returns (a name must be one ASCII token, else the line is skipped;
    values are stripped and decoded as UTF-8 with replacement), checking names with
    `bytes.split` rather than character by character.
    """
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        words = name.split()
        if len(words) != 1 or not words[0].isascii():
            continue
        out[words[0].decode("ascii")] = value.strip().decode("utf-8", "replace")
    return out


STATUS = "Status"  # nats-py's name for an inline status (`nats.js.api.Header.STATUS`)
_VERSION_LINE = len(b"NATS/1.0")  # a space after it: an inline status ("NATS/1.0 408 ...")


def is_status(block: bytes) -> bool:
    """Whether header block `block` opens with an inline status ("NATS/1.0 408 ...")."""
    return block[_VERSION_LINE : _VERSION_LINE + 1] == b" "


class DirectMsg(Msg):
    """A message as a direct subscription (`subscribe_direct`) hands it over: its header
    block is read the first time `headers` is asked for. Most readers never ask (a consume
    loop takes the trace context from the envelope, a replay reads the reply subject only),
    and reading every delivery's block was about 6 % of a binder's CPU. An inline status (a
    pull request's end, a heartbeat, "no responders") is read at once: `status` is its code.
    """

    status: str | None = None
    _unread: bytes = b""  # the header block, until `headers` reads it
    _read: dict[str, str] | None = None

    @property  # Msg's dataclass field, read lazily here
    def headers(self) -> dict[str, str] | None:
        unread = self._unread
        if unread:
            self._unread = b""
            self._read = parse_header_lines(unread[_VERSION_LINE + len(_CRLF) :]) or None
        return self._read

    @headers.setter
    def headers(self, value: dict[str, str] | None) -> None:
        self._unread = b""
        self._read = value

    @classmethod
    def of(
        cls,
        nc: NatsClient,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        *,
        unread: bytes | None,
    ) -> DirectMsg:
        """A message of subscription `sid` on `nc`, with header block `unread` (not a status)
        left to read if `headers` is asked for.

        Made without Msg's dataclass `__init__` (a call, and the `headers` setter's, for every
        delivery): the fields not set here keep their class defaults, as nats-py's own.
        """
        msg = object.__new__(cls)
        msg._client = nc
        msg.subject = subject.decode()
        msg.reply = reply.decode()
        msg.data = data
        msg._sid = sid
        if unread:
            msg._unread = unread
        return msg


def status_of(msg: Msg) -> str | None:
    """The inline status code `msg` carries ("408", "100", ...), None for a message."""
    if isinstance(msg, DirectMsg):
        return msg.status
    headers = msg.headers
    return headers.get(STATUS) if headers else None
