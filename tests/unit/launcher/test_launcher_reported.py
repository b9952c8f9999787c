"""`muster run` over several clusters waits until each heartbeat lists the cluster's nodes for
as long as that progresses, not a fixed 30 s, and says which nodes are missing when it stalls.
The clock is a fake one that each reading moves on: minutes pass in no time."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest

from muster.launcher.progress import Progress
from muster.launcher.reported import not_reported_warning, reported_when_up, until_reported

EAST = {f"east-{i}" for i in range(6)}
WEST = {"west-0", "west-1"}


class Clock:
    """Moves on `step_s` at each reading."""

    def __init__(self, step_s: float) -> None:
        self.step_s, self.s = step_s, 0.0

    def __call__(self) -> float:
        self.s += self.step_s
        return self.s


def wait(
    listed: dict[str, list[set[str]]], *, cpu_s: list[float] | None = None, step_s: float = 10.0
) -> tuple[dict[str, set[str]], float]:
    """`until_reported` of EAST and WEST, each cluster's heartbeat listing the next of its
    `listed` sets at each reading (the last one from then on); with `cpu_s`, the gang-permits'
    CPU at each reading likewise. What was missing, and the fake time the wait took."""
    readings = {cluster: iter(sets) for cluster, sets in listed.items()}
    last: dict[str, set[str]] = {}
    cpu = iter(cpu_s or [0.0])
    cpu_now = [0.0]

    async def heartbeat(cluster: str) -> set[str]:
        last[cluster] = next(readings[cluster], last.get(cluster, set()))
        return last[cluster]

    def used(clusters: Collection[str]) -> float:
        cpu_now[0] = next(cpu, cpu_now[0])
        return cpu_now[0]

    clock = Clock(step_s)
    missing = asyncio.run(
        until_reported(
            heartbeat,
            {"east": EAST, "west": WEST},
            cpu_s=used,
            progress=Progress(stall_s=30.0, moving_cpu_s=0.2),
            now_s=clock,
            poll_s=0,
        )
    )
    return missing, clock.s


def test_heartbeats_listing_nodes_slowly_keep_the_wait_going_past_any_fixed_bound() -> None:
    # One more east node every reading, 20 s apart: 120 s, where 30 s ended the wait before.
    east = [set(sorted(EAST)[:n]) for n in range(1, 7)]

    missing, waited_s = wait({"east": east, "west": [WEST]}, step_s=20.0)

    assert missing == {}
    assert waited_s > 30.0


def test_a_busy_gangpermit_keeps_the_wait_going_before_its_first_heartbeat() -> None:
    # Nothing listed for 100 s while the gang-permits read the nodes (0.3 s of CPU per 10 s).
    nothing = [set[str]()] * 10

    missing, waited_s = wait(
        {"east": [*nothing, EAST], "west": [*nothing, WEST]},
        cpu_s=[0.3 * n for n in range(11)],
    )

    assert missing == {}
    assert waited_s >= 100.0


def test_a_heartbeat_that_never_lists_a_node_ends_the_wait_naming_what_is_missing() -> None:
    missing, _ = wait({"east": [EAST], "west": [{"west-1"}]}, cpu_s=[1.0, 1.01, 1.02, 1.03])

    assert missing == {"west": {"west-0"}}
    assert not_reported_warning(missing, Progress(stall_s=30.0)) == (
        "muster run: warning: heartbeats do not list every Node after 30s without progress: "
        "west (west-0); workloads are routed by what was reported"
    )


def test_the_warning_names_three_nodes_per_cluster_and_counts_the_rest() -> None:
    text = not_reported_warning({"west": WEST, "east": EAST}, Progress(stall_s=30.0))

    assert "east (east-0, east-1, east-2 and 3 more); west (west-0, west-1);" in text


def node(*, ready: str | None = None, cordoned: bool = False) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": "n"}, "spec": {"unschedulable": cordoned},
            "status": {"conditions": conditions}}  # fmt: skip


@pytest.mark.parametrize(
    ("written", "reported"),
    [
        (node(), True),  # the simulated kubelet makes it Ready
        (node(ready="True"), True),
        (node(ready="False"), False),  # a NotReady Node's room is never reported: no wait for it
        (node(ready="Unknown"), False),
        (node(ready="True", cordoned=True), False),
        ({"metadata": {"name": "bare"}}, True),
    ],
)
def test_a_run_waits_only_for_the_nodes_a_heartbeat_will_list(
    written: dict[str, Any], reported: bool
) -> None:
    assert reported_when_up(written) is reported
