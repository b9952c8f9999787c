"""MusterClient's parser (bus/nats_parser.py) against a real nats-server: the largest payload
the server allows and an empty one reach a direct subscription whole, and a slow nats-py
subscription beside it is still told it is slow (its messages keep nats-py's path)."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.aio.msg import Msg

from muster.bus.client import connect

pytestmark = pytest.mark.timeout(30)


async def test_the_largest_and_an_empty_payload_reach_a_direct_subscription_whole(
    nats_server: str,
) -> None:
    nc = await connect(nats_server)
    got: asyncio.Queue[Msg] = asyncio.Queue()
    try:
        await nc.subscribe_direct("t.sizes", got.put_nowait)
        largest = bytes(range(256)) * (nc.max_payload // 256) + b"\r\n"[: nc.max_payload % 256]
        await nc.publish("t.sizes", largest)  # a header block would count against the limit
        await nc.publish("t.sizes", b"", headers={"Nats-Msg-Id": "empty"})
        await nc.publish("t.sizes", b"")
        big, empty, bare = [await asyncio.wait_for(got.get(), 10) for _ in range(3)]
        assert (len(big.data), big.data == largest, big.headers) == (
            nc.max_payload,
            True,
            None,
        )
        assert (empty.data, empty.headers) == (b"", {"Nats-Msg-Id": "empty"})
        assert (bare.data, bare.headers) == (b"", None)
    finally:
        await nc.close()


async def test_a_slow_nats_py_subscription_is_told_while_a_direct_one_gets_everything(
    nats_server: str,
) -> None:
    slow: asyncio.Queue[nats.errors.SlowConsumerError] = asyncio.Queue()

    async def on_error(exc: Exception) -> None:
        if isinstance(exc, nats.errors.SlowConsumerError):
            slow.put_nowait(exc)

    nc = await connect(nats_server, error_cb=on_error)
    release = asyncio.Event()
    direct: list[bytes] = []

    async def stuck(msg: Msg) -> None:
        await release.wait()

    try:
        await nc.subscribe("t.slow", cb=stuck, pending_msgs_limit=3)
        await nc.subscribe_direct("t.fast", lambda m: direct.append(m.data))
        for i in range(20):
            await nc.publish("t.slow", b"%d" % i)
            await nc.publish("t.fast", b"%d" % i)
        told = await asyncio.wait_for(slow.get(), 10)
        assert told.subject == "t.slow"
        await nc.flush()
        assert direct == [b"%d" % i for i in range(20)]
    finally:
        release.set()
        await nc.close()
