"""The gang scheduler of one cluster: pure state, fed facts, asked for decisions.

Callers report nodes, gangs and pods as they appear, change and go, then call `schedule`;
it returns what to do now (permit, wait, time out, preempt). The same object runs inside the
gangpermit service (facts from the cluster watch and the event stream) and inside the
simulator (facts from the virtual clock). No I/O, no clock: `now_s` is always passed in.

Semantics (issue 4):
- A gang is ready when its spec is known and at least `min_count` of its pods are pending.
  Pods of a gang whose spec is unknown wait ("waiting for its Workload/PodGroup").
- Ready gangs and pods placed on their own are taken in order: priority (highest first),
  then `created_s`, then key; never interleaved pod by pod.
- A ready gang is placed whole against one view of the nodes (bound pods, permitted-not-bound
  pods and nominations of higher-priority preemptors all count as used): every pending pod if
  they all fit, else its first `min_count` pods by key, else nothing. Pods that join a gang
  already permitted are placed on their own.
- The deadline (`timeout_s` or the default) starts at the gang's first attempt; when it passes
  the gang times out, every pending pod is rejected together, and the gang waits untouched
  until one of its pods or its spec changes, which starts a new attempt with a new deadline.
- With preemption on, a ready gang that does not fit evicts the smallest set of whole
  lower-priority workloads that makes it fit (`PlacementPreempted`) and keeps their room
  nominated until it is placed.
"""

from __future__ import annotations

from collections.abc import Iterable

from muster.core.placement.model import (
    Decision,
    GangKey,
    GangSpec,
    GangStatus,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    Scoring,
)

DEFAULT_TIMEOUT_S = 300.0


class GangScheduler:
    def __init__(
        self,
        *,
        scoring: Scoring = "binpack",
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        preemption: bool = True,
    ) -> None:
        raise NotImplementedError

    # --- facts ---------------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        """Add or replace a node (labels, taints, allocatable, readiness)."""
        raise NotImplementedError

    def remove_node(self, name: NodeName) -> None:
        """Forget a node; pods recorded on it keep their records until removed."""
        raise NotImplementedError

    def upsert_gang(self, spec: GangSpec) -> None:
        """Add or replace a gang's spec (a changed spec restarts a timed-out gang)."""
        raise NotImplementedError

    def remove_gang(self, key: GangKey) -> None:
        """Forget a gang; its pending pods wait again for a spec."""
        raise NotImplementedError

    def upsert_pod(self, pod: PodInfo) -> None:
        """Add or replace a pod: pending (`node == ""`) or bound to `pod.node`.

        Binding a permitted pod to the node it was permitted on turns its reservation into use.
        """
        raise NotImplementedError

    def remove_pod(self, key: PodKey) -> None:
        """A pod finished or was deleted: its room is free again."""
        raise NotImplementedError

    def bind_failed(self, gang: GangKey) -> None:
        """Binding a permitted gang failed: its unbound pods go back to pending, reservations are
        released, and the gang is retried as a whole on the next pass."""
        raise NotImplementedError

    # --- decisions -----------------------------------------------------------------------------

    def schedule(self, *, now_s: float) -> list[Decision]:
        """One pass: place what can be placed, time out what is overdue, preempt what must be."""
        raise NotImplementedError

    def next_deadline_s(self) -> float | None:
        """The earliest deadline of a waiting gang, for the caller's timer; None if none."""
        raise NotImplementedError

    # --- views ---------------------------------------------------------------------------------

    def gang_status(self, key: GangKey) -> GangStatus | None:
        raise NotImplementedError

    def gangs(self) -> Iterable[GangStatus]:
        raise NotImplementedError

    def node_of(self, pod: PodKey) -> NodeName | None:
        """The node a pod is bound or permitted to, if any."""
        raise NotImplementedError

    def free(self, node: NodeName) -> dict[str, int]:
        """Allocatable minus used, reserved and nominated room, `pods` included."""
        raise NotImplementedError
