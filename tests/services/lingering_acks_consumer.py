"""A consumer whose acks linger, run as a subprocess by test_bus_ack_linger.py, to be killed.

It consumes durable `lingering` on `workload.submitted` with acks that wait up to
`--ack-linger-seconds` for a write (`ConsumerSettings.ack_linger_s`) and pull requests that
live long enough that none is made meanwhile: a handled message's ack stays in the process
until then. It prints `handled <event id>` once each handler has returned.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from muster.bus import BusConfig, ConsumerSettings, connect
from muster.contracts.v1.events_pb2 import Envelope

DURABLE = "lingering"


def told(event_id: str) -> None:
    print("handled", event_id, flush=True)


async def consume(url: str, subject: str, settings: ConsumerSettings) -> None:
    bus = await connect(BusConfig(url=url, name="muster-lingering", connect_timeout_s=5.0))

    async def handle(env: Envelope) -> None:
        # Told once the loop has it back: the ack is queued right after this returns.
        asyncio.get_running_loop().call_soon(told, env.event_id)

    print("consuming", flush=True)
    await bus.consume_with(DURABLE, [subject], handle, settings)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lingering")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--ack-wait-seconds", type=float, required=True)
    parser.add_argument("--ack-linger-seconds", type=float, required=True)
    args = parser.parse_args(argv)
    settings = ConsumerSettings(
        ack_wait_s=args.ack_wait_seconds,
        ack_linger_s=args.ack_linger_seconds,
        request_expiry_s=4 * args.ack_wait_seconds,  # no pull request while the acks wait
    )
    asyncio.run(consume(args.nats, args.subject, settings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
