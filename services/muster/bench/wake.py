"""What the machine charges a process for waking up rarely: the yardstick beside `bench e2e`'s
per-replica comparison.

A fixed unit of Python work (decoding a workload-sized JSON document and walking it) is timed in
CPU, called at a paced rate with the process asleep in between, as a service replica sleeps
between its events. On a small VM the same unit costs more the less often it runs (caches and
branch predictors go cold while other processes and the hypervisor run; docs/benchmarks.md, "Per
replica at the same pace", has the figures). A replica of four at 200 workloads/s is woken
at a quarter of a lone replica's rate, so part of what it pays per workload is this, not work
the code does twice.
"""

from __future__ import annotations

import time
from typing import Final

import msgspec

SECTION: Final = "e2e"
MODE: Final = "wake"

_DOCUMENT: Final = msgspec.json.encode(
    [
        {
            "name": f"w-{i}",
            "queue": f"lq-{i % 8}",
            "podSets": [
                {"name": "main", "count": 1, "requests": {"cpu": "100m", "memory": "64Mi"}}
            ],
        }
        for i in range(64)
    ]
)


class WakeRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    mode: str = MODE
    rate_per_s: float  # calls per second, asleep in between
    calls: int
    cpu_us_per_call: float


def unit_of_work() -> int:
    """The fixed unit: decode the document and touch every field, as a consumer of an event."""
    total = 0
    for item in msgspec.json.decode(_DOCUMENT):
        total += len(item["name"]) + len(item["queue"])
        for pod_set in item["podSets"]:
            total += pod_set["count"] + len(pod_set["requests"])
    return total


def measure(rate_per_s: float, *, seconds: float) -> WakeRow:
    """CPU µs per call of `unit_of_work` called `rate_per_s` times a second for `seconds`.

    Blocking (it sleeps between calls): run it while nothing else of the bench runs.
    """
    if rate_per_s <= 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
    calls = max(10, round(rate_per_s * seconds))
    unit_of_work()  # the first call imports and allocates
    spent = 0.0
    due = time.monotonic()
    for _ in range(calls):
        due += 1 / rate_per_s
        time.sleep(max(0.0, due - time.monotonic()))
        start = time.process_time()
        unit_of_work()
        spent += time.process_time() - start
    return WakeRow(
        rate_per_s=rate_per_s, calls=calls, cpu_us_per_call=round(spent * 1e6 / calls, 1)
    )
