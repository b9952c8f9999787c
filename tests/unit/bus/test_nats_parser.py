"""FastParser against nats-py's own Parser: the same server bytes, split anywhere, dispatch the
same calls in the same order; and the nats-py internals FastParser and DirectMsg rely on."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import ProtocolError
from nats.protocol import parser as nats_parser

from muster.bus.client import MusterClient
from muster.bus.headers import DirectMsg, is_status
from muster.bus.nats_parser import FastParser

pytestmark = pytest.mark.timeout(60)

DIRECT_SIDS = frozenset({1, 2})  # what the fast parser hands over without a coroutine
MAX_PAYLOAD = 1024 * 1024  # nats-server's default max_payload
READ_SIZE = 32768  # nats-py's read size


class Recorder:
    """A client's side of the parser: every call it gets, in order, as plain values."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.parser: nats_parser.Parser | None = None
        self.reset_on_err = False
        self.coroutines = 0  # messages passed to `_process_msg`

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.coroutines += 1
        self.calls.append(("msg", sid, subject, reply, data, headers))

    def deliver(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> bool:
        if sid not in DIRECT_SIDS or (headers and is_status(headers)):
            return False
        self.calls.append(("msg", sid, subject, reply, data, headers))
        return True

    async def _process_err(self, err: str) -> None:
        self.calls.append(("err", err))
        if self.reset_on_err and self.parser is not None:
            self.parser.reset()  # as a reconnect does

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_info(self, info: dict[str, object]) -> None:
        self.calls.append(("info", info))


async def feed(chunks: list[bytes], *, fast: bool, reset_on_err: bool = False) -> Recorder:
    recorder = Recorder()
    recorder.reset_on_err = reset_on_err
    parser = FastParser(recorder, recorder.deliver) if fast else nats_parser.Parser(recorder)
    recorder.parser = parser
    for chunk in chunks:
        await parser.parse(chunk)
    assert not parser.buf  # every stream here ends with a whole operation
    return recorder


async def both(chunks: list[bytes], *, reset_on_err: bool = False) -> list[tuple[object, ...]]:
    """The calls nats-py's parser makes for `chunks`, checked to be FastParser's too."""
    theirs = await feed(chunks, fast=False, reset_on_err=reset_on_err)
    ours = await feed(chunks, fast=True, reset_on_err=reset_on_err)
    assert ours.calls == theirs.calls
    return ours.calls


def msg(subject: bytes, sid: int, payload: bytes, reply: bytes = b"") -> bytes:
    middle = b" " + reply if reply else b""
    return b"MSG %s %d%s %d\r\n%s\r\n" % (subject, sid, middle, len(payload), payload)


def hmsg(subject: bytes, sid: int, block: bytes, payload: bytes, reply: bytes = b"") -> bytes:
    middle = b" " + reply if reply else b""
    size = len(block) + len(payload)
    return b"HMSG %s %d%s %d %d\r\n%s%s\r\n" % (
        subject,
        sid,
        middle,
        len(block),
        size,
        block,
        payload,
    )


ACK = b"$JS.ACK.MUSTER_EVENTS.binder.1.42.40.1732700000000000000.3"
STATUSES = [
    b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 0\r\n\r\n",
    b"NATS/1.0 404 No Messages\r\n\r\n",
    b"NATS/1.0 409 Consumer Deleted\r\n\r\n",
    b"NATS/1.0 409 Leadership Change\r\n\r\n",
    b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 7\r\nNats-Last-Stream: 9\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
]
BLOCKS = [b"NATS/1.0\r\nNats-Msg-Id: a/b\r\ntraceparent: 00-ab-cd-01\r\n\r\n", *STATUSES]

_SUBJECT = st.from_regex(rb"\A[A-Za-z0-9_$.>*-]{1,24}\Z")
_REPLY = st.sampled_from([b"", ACK, b"_INBOX.abc.7"])
_PAYLOAD = st.binary(max_size=200) | st.sampled_from([b"", b"\r\n", b"MSG x 1 0\r\n"])
_SID = st.integers(1, 4)
_OP = st.one_of(
    st.builds(msg, _SUBJECT, _SID, _PAYLOAD, _REPLY),
    st.builds(hmsg, _SUBJECT, _SID, st.sampled_from(BLOCKS), _PAYLOAD, _REPLY),
    st.sampled_from(
        [
            b"PING\r\n",
            b"PONG\r\n",
            b"+OK\r\n",
            b'INFO {"server_id":"x","max_payload":1048576}\r\n',
            b"-ERR 'Permissions Violation for Subscription to \"x\"'\r\n",
        ]
    ),
)


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


@given(ops=st.lists(_OP, min_size=1, max_size=12), cuts=st.lists(st.integers(0, 10**6)))
async def test_any_split_of_a_server_stream_dispatches_what_nats_py_dispatches(
    ops: list[bytes], cuts: list[int]
) -> None:
    calls = await both(split(b"".join(ops), cuts))
    assert len(calls) == sum(op != b"+OK\r\n" for op in ops)  # +OK calls nothing


async def test_a_message_split_in_its_payload_waits_for_the_rest() -> None:
    stream = msg(b"a.b", 1, b"0123456789", ACK) + msg(b"a.c", 3, b"xy")
    for cut in range(1, len(stream)):
        calls = await both([stream[:cut], stream[cut:]])
        assert [c[4] for c in calls] == [b"0123456789", b"xy"]


@pytest.mark.parametrize("block", STATUSES, ids=lambda b: b.split(b"\r\n")[0].decode())
async def test_a_pull_request_status_goes_to_the_client_to_be_read(block: bytes) -> None:
    calls = await both([hmsg(b"_INBOX.x", 1, block, b"")])
    assert calls == [("msg", 1, b"_INBOX.x", b"", b"", block)]


@pytest.mark.parametrize("size", [0, 1, MAX_PAYLOAD])
async def test_payloads_of_zero_to_the_max_pass_whole(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + b"\r\n"[: size % 256]
    stream = msg(b"big", 1, payload, ACK) + hmsg(b"big", 3, BLOCKS[0], payload) + b"PING\r\n"
    chunks = [stream[i : i + READ_SIZE] for i in range(0, len(stream), READ_SIZE)]
    calls = await both(chunks)
    assert [c[4] for c in calls[:2]] == [payload, payload]
    assert calls[2] == ("ping",)


@pytest.mark.parametrize(
    "line",
    [b"MSG a 1 x\r\n", b"MSG a\r\n", b"HMSG a 1 5\r\n", b"MSG a b 1 2 3 4\r\n", b"WHAT\r\n"],
)
async def test_a_malformed_line_is_a_protocol_error(line: bytes) -> None:
    for fast in (False, True):
        with pytest.raises(ProtocolError):
            await feed([line], fast=fast)


async def test_nothing_more_is_dispatched_from_a_read_once_the_client_resets_the_parser() -> None:
    stream = b"-ERR 'Stale Connection'\r\n" + msg(b"a", 1, b"x") + b"PING\r\n"
    calls = await both([stream], reset_on_err=True)
    assert calls == [("err", "'stale connection'")]


async def test_direct_messages_skip_the_client_coroutine_and_others_do_not() -> None:
    stream = [msg(b"a", 1, b"x") + hmsg(b"b", 2, BLOCKS[0], b"y") + msg(b"c", 3, b"z")]
    ours = await feed(stream, fast=True)
    theirs = await feed(stream, fast=False)
    assert [c[1] for c in ours.calls] == [1, 2, 3]
    assert (ours.coroutines, theirs.coroutines) == (1, 3)


# What muster relies on in nats-py's internals: if one of these fails after an upgrade, read
# the new version's parser and client before changing the test (bus/nats_parser.py).


def test_nats_py_is_the_version_these_internals_were_read_from() -> None:
    installed = importlib.metadata.version("nats-py")
    assert installed.startswith("2.16."), installed


def test_nats_py_reads_through_the_parser_the_client_holds() -> None:
    assert "self._ps.parse(" in inspect.getsource(NatsClient._read_loop)
    assert isinstance(NatsClient()._ps, nats_parser.Parser)
    assert isinstance(MusterClient()._ps, FastParser)


def test_nats_py_parser_state_is_what_fast_parser_keeps() -> None:
    parser = nats_parser.Parser()
    assert parser.buf == bytearray()
    assert parser.state == nats_parser.AWAITING_CONTROL_LINE
    assert (parser.needed, parser.header_needed, parser.msg_arg) == (0, 0, {})
    assert nats_parser.AWAITING_MSG_PAYLOAD != nats_parser.AWAITING_CONTROL_LINE


def test_nats_py_client_coroutines_take_what_fast_parser_passes() -> None:
    takes = {
        "_process_msg": ["self", "sid", "subject", "reply", "data", "headers"],
        "_process_err": ["self", "err_msg"],
        "_process_ping": ["self"],
        "_process_pong": ["self"],
        "_process_info": ["self", "info", "initial_connection"],
    }
    for name, params in takes.items():
        assert list(inspect.signature(getattr(NatsClient, name)).parameters) == params, name


def test_msg_fields_default_as_direct_msg_expects() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(Msg)}
    assert defaults.pop("_client") is dataclasses.MISSING
    assert defaults == {
        "subject": "",
        "reply": "",
        "data": b"",
        "headers": None,
        "_metadata": None,
        "_ackd": False,
        "_sid": None,
    }
    made = DirectMsg.of(MusterClient(), 5, b"s", b"r", b"d", unread=None)
    assert (made.subject, made.reply, made.data, made._sid) == ("s", "r", b"d", 5)
    assert (made.headers, made._metadata, made._ackd, made.status) == (None, None, False, None)
    assert json.dumps(made.data.decode()) == '"d"'
