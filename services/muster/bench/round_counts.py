"""What the admission replicas did during a case: rounds, facts per round, view writes.

Read from each replica's /metrics (so only when the case runs with metrics on, `--observe on`
or `otlp`): the round-size histogram's count (rounds that decided) and its `facts` sum (the
events they applied), and `muster_admission_views_written_total` (passes of the visibility
loop that wrote). Read at the window's start and end, the difference per replica tells what
a replica of N pays beyond its share: more rounds of fewer events, views written as often.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec
from prometheus_client.parser import text_string_to_metric_families

_TIMEOUT_S: Final = 10.0
_ROUND_SIZE: Final = "muster_admission_round_size"
_VIEWS: Final = "muster_admission_views_written"


class RoundCounts(msgspec.Struct, frozen=True):
    """Totals over the replicas read: rounds that decided, the facts they applied, view
    writes."""

    rounds: float = 0.0
    events: float = 0.0
    views: float = 0.0

    def __add__(self, other: RoundCounts) -> RoundCounts:
        return RoundCounts(
            self.rounds + other.rounds, self.events + other.events, self.views + other.views
        )

    def __sub__(self, other: RoundCounts) -> RoundCounts:
        return self + RoundCounts(-other.rounds, -other.events, -other.views)


class PerReplica(msgspec.Struct, frozen=True, kw_only=True):
    """A case's counts per replica, over its window of `seconds`."""

    rounds_per_replica: float
    events_per_round: float
    views_per_s: float


def parse(text: str) -> RoundCounts:
    """The counts one replica's /metrics `text` holds (zero for a series it lacks)."""
    rounds = events = views = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{_ROUND_SIZE}_count" and sample.labels.get("kind") == "facts":
                rounds += sample.value
            elif sample.name == f"{_ROUND_SIZE}_sum" and sample.labels.get("kind") == "facts":
                events += sample.value
            elif sample.name == f"{_VIEWS}_total":
                views += sample.value
    return RoundCounts(rounds, events, views)


async def read(addresses: Iterable[str]) -> RoundCounts:
    """The counts summed over the replicas serving /metrics at `addresses` (host:port)."""

    def fetch(address: str) -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=_TIMEOUT_S) as answer:
            text: bytes = answer.read()
            return text.decode()

    total = RoundCounts()
    for address in addresses:
        total += parse(await asyncio.to_thread(fetch, address))
    return total


def per_replica(spent: RoundCounts, *, replicas: int, seconds: float) -> PerReplica:
    """`spent` (a window's difference, summed over `replicas`) per replica; events per round
    over every replica's rounds."""
    n = max(replicas, 1)
    return PerReplica(
        rounds_per_replica=round(spent.rounds / n, 1),
        events_per_round=round(spent.events / spent.rounds, 2) if spent.rounds else 0.0,
        views_per_s=round(spent.views / n / max(seconds, 1e-9), 2),
    )


def metrics_addresses(addresses: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The /metrics addresses of the admission replicas among services' announced
    `addresses` (service name -> kind -> host:port); none when metrics are off."""
    return [
        a["metrics"]
        for name, a in addresses.items()
        if name.startswith("admission") and "metrics" in a
    ]
