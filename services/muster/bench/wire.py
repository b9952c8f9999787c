"""What JetStream handled during a bench case: messages stored and delivered, per stream.

Read from the server's own stream and consumer state (no monitoring port needed) before and
after the workloads go through. Stored messages are events, key-value writes (the simulated
cluster's objects, the watcher's marks, visibility keys) and commands, each also a PubAck;
deliveries are what every consumer of the stream was handed, ordered key-value watches
included. A consumer made and gone between the two readings (a replay) is not counted, nor
are pull requests, acks and direct reads: what is counted is exact, and most of the traffic.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from nats.js import JetStreamContext


class WireCount(msgspec.Struct, frozen=True, kw_only=True):
    stored: dict[str, int]  # stream -> its last sequence
    delivered: dict[str, int]  # stream -> per consumer name, its deliveries so far, summed


async def wire_count(js: JetStreamContext) -> WireCount:
    """Every stream's last sequence and its consumers' deliveries, now."""
    stored: dict[str, int] = {}
    delivered: dict[str, int] = {}
    for stream in await js.streams_info():
        name = stream.config.name or ""
        stored[name] = stream.state.last_seq
        consumers = await js.consumers_info(name)
        delivered[name] = sum(c.delivered.consumer_seq or 0 for c in consumers if c.delivered)
    return WireCount(stored=stored, delivered=delivered)


def per_workload(
    before: WireCount, after: WireCount, workloads: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(stored, delivered) per workload between two readings, per stream with any, and "total"."""
    return (
        _spread(before.stored, after.stored, workloads),
        _spread(before.delivered, after.delivered, workloads),
    )


def _spread(
    before: Mapping[str, int], after: Mapping[str, int], workloads: int
) -> dict[str, float]:
    # A consumer started over (an ordered watch after a reset) counts from 0 again: a stream's
    # sum may fall, which is left out rather than counted negative.
    moved = {k: max(0, v - before.get(k, 0)) for k, v in after.items()}
    spread = {k: round(v / max(workloads, 1), 2) for k, v in sorted(moved.items()) if v}
    spread["total"] = round(sum(moved.values()) / max(workloads, 1), 2)
    return spread
