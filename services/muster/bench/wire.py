"""What JetStream handled during a bench case: messages stored and delivered, per stream.

Read from the server's own stream and consumer state (no monitoring port needed) before and
after the workloads go through. Stored messages are events, key-value writes (the simulated
cluster's objects, the watcher's marks, visibility keys) and commands, each also a PubAck;
deliveries are what every consumer of the stream was handed, ordered key-value watches
included. A consumer made and gone between the two readings (a replay) is not counted, nor
are pull requests, acks and direct reads: what is counted is exact, and most of the traffic.

Deliveries are also kept per consumer (`by_consumer`), so a table can say who receives what:
a durable consumer under its name, an ephemeral one (an ordered watch, a replay that follows)
under its filter subjects, as every replica's watch of the same subjects sums into one row.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from nats.js import JetStreamContext, api


class WireCount(msgspec.Struct, frozen=True, kw_only=True):
    stored: dict[str, int]  # stream -> its last sequence
    delivered: dict[str, int]  # stream -> per consumer name, its deliveries so far, summed
    by_consumer: dict[str, int] = msgspec.field(default_factory=dict)  # `consumer_label` -> so far


def consumer_label(stream: str, info: api.ConsumerInfo) -> str:
    """`<stream> <durable name>`, or `<stream> [<filters>]` for an ephemeral consumer, its
    filters shortened: without `muster.v1.` or a bucket's `$KV.<bucket>.`, and a workload
    event's filter with the partition token (`<event>.*`) folded into the one without."""
    config = info.config
    if config.durable_name:
        return f"{stream} {config.durable_name}"
    filters = config.filter_subjects or ([config.filter_subject] if config.filter_subject else [])
    kv = f"$KV.{stream.removeprefix('KV_')}."
    short = {f.removeprefix("muster.v1.").removeprefix(kv) for f in filters}
    kept = sorted(f for f in short if not (f.endswith(".*") and f[:-2] in short))
    return f"{stream} [{' '.join(kept) or '>'}]"


async def wire_count(js: JetStreamContext) -> WireCount:
    """Every stream's last sequence and its consumers' deliveries, now."""
    stored: dict[str, int] = {}
    delivered: dict[str, int] = {}
    by_consumer: dict[str, int] = {}
    for stream in await js.streams_info():
        name = stream.config.name or ""
        stored[name] = stream.state.last_seq
        consumers = await js.consumers_info(name)
        delivered[name] = sum(c.delivered.consumer_seq or 0 for c in consumers if c.delivered)
        for c in consumers:
            label = consumer_label(name, c)
            seen = c.delivered.consumer_seq or 0 if c.delivered else 0
            by_consumer[label] = by_consumer.get(label, 0) + seen
    return WireCount(stored=stored, delivered=delivered, by_consumer=by_consumer)


def per_workload(
    before: WireCount, after: WireCount, workloads: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(stored, delivered) per workload between two readings, per stream with any, and "total"."""
    return (
        _spread(before.stored, after.stored, workloads),
        _spread(before.delivered, after.delivered, workloads),
    )


def per_consumer(before: WireCount, after: WireCount, workloads: int) -> dict[str, float]:
    """Deliveries per workload between two readings, per consumer label with any, and "total"."""
    return _spread(before.by_consumer, after.by_consumer, workloads)


def _spread(
    before: Mapping[str, int], after: Mapping[str, int], workloads: int
) -> dict[str, float]:
    # A consumer started over (an ordered watch after a reset) counts from 0 again: a stream's
    # sum may fall, which is left out rather than counted negative.
    moved = {k: max(0, v - before.get(k, 0)) for k, v in after.items()}
    spread = {k: round(v / max(workloads, 1), 2) for k, v in sorted(moved.items()) if v}
    spread["total"] = round(sum(moved.values()) / max(workloads, 1), 2)
    return spread
