"""The virtual clock: a heap of timed actions, applied in (time, order of scheduling) order.

Actions are facts the simulated world reports to the engine (an arrival, a finished run, an
admission check's answer, ready pods), to a check controller (look at a workload again) or,
with nodes, to gang placement (a Node, Pod or gang object appears, a pod's run ends). Facts
about one admission carry its `epoch`, facts about one pod its `serial`; the runner drops them
when the workload has lost that admission since (evicted, finished, deactivated) or the pod is
gone, which cancels them without searching the heap.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

import msgspec

from muster.api.model import WorkloadKey
from muster.sim.scenario import Arrival, ClusterArrival


class Arrive(msgspec.Struct, frozen=True, tag=True):
    arrival: Arrival


class Finish(msgspec.Struct, frozen=True, tag=True):
    key: WorkloadKey
    epoch: int


class SetCheck(msgspec.Struct, frozen=True, tag=True):
    key: WorkloadKey
    epoch: int
    check: str
    state: str
    requeue_after_s: int = 0  # a Retry's requeueAfterSeconds (0: none)


class RunChecks(msgspec.Struct, frozen=True, tag=True):
    """Reconcile the workload's controller-run checks again (sim/checks.py)."""

    key: WorkloadKey
    epoch: int


class PodsReady(msgspec.Struct, frozen=True, tag=True):
    key: WorkloadKey
    epoch: int
    regained: bool = False  # after readiness was lost (`muster.dev/pods-unready-for`)


class PodsUnready(msgspec.Struct, frozen=True, tag=True):
    """A pod of a workload whose pods were all ready stops being ready."""

    key: WorkloadKey
    epoch: int


class Stopped(msgspec.Struct, frozen=True, tag=True):
    """An evicted workload's pods are gone (`muster.dev/stop-after`)."""

    key: WorkloadKey


class Reclaim(msgspec.Struct, frozen=True, tag=True):
    """`count` pods of a running workload's podset have finished for good
    (`muster.dev/reclaimable-pods`)."""

    key: WorkloadKey
    epoch: int
    pod_set: str
    count: int


class ArriveObject(msgspec.Struct, frozen=True, tag=True):
    arrival: ClusterArrival


class PodFinish(msgspec.Struct, frozen=True, tag=True):
    key: str  # the pod, "<namespace>/<name>"
    serial: int


Action = (
    Arrive
    | Finish
    | SetCheck
    | RunChecks
    | PodsReady
    | PodsUnready
    | Stopped
    | Reclaim
    | ArriveObject
    | PodFinish
)


class Timeline:
    """Timed actions in a heap; equal times keep the order they were scheduled in."""

    def __init__(self, initial: list[tuple[float, Action]] | None = None) -> None:
        self._seq = itertools.count()
        self._heap: list[tuple[float, int, Action]] = [
            (at_s, next(self._seq), action) for at_s, action in initial or ()
        ]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, at_s: float, action: Action) -> None:
        heapq.heappush(self._heap, (at_s, next(self._seq), action))

    def next_time(self) -> float | None:
        """The time of the earliest action, or None when there is none."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_s: float) -> Iterator[Action]:
        """Yield every action due at or before `now_s`, including ones pushed while iterating."""
        heap = self._heap
        while heap and heap[0][0] <= now_s:
            yield heapq.heappop(heap)[2]
