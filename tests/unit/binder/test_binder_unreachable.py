"""A binder handler waiting for its cluster to answer again is waiting, not stalled: each probe
it makes moves the message it holds on for the progress watchdog (bus/progress.py); so does
each batch of a large gang's binds."""

from __future__ import annotations

import pytest

from muster.binder import handlers
from muster.binder.handlers import BinderContext, WorkloadSpecs
from muster.binder.pacing import BindPacer
from muster.bus.progress import Progress
from muster.cluster.batches import BATCH_SIZE
from muster.cluster.errors import ClusterError
from muster.contracts.v1 import events_pb2


class AwayThenBack:
    """A cluster that does not answer `away` probes, then does (the part of a backend
    `until_reachable` uses)."""

    def __init__(self, away: int) -> None:
        self.away = away

    async def probe(self) -> ClusterError | None:
        if self.away:
            self.away -= 1
            return ClusterError("", "Unavailable", "the API server does not answer", temporary=True)
        return None


class Published:
    async def publish(self, env: events_pb2.Envelope) -> int:
        return 1


async def test_each_probe_of_an_unreachable_cluster_moves_the_message_in_hand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handlers, "_PROBE_FIRST_S", 0.001)  # the back-off is not under test
    ctx = BinderContext(
        cluster="local",
        backend=AwayThenBack(away=3),  # type: ignore[arg-type]  # until_reachable probes only
        publisher=Published(),
        specs=WorkloadSpecs(),
        pacer=BindPacer(max_concurrent=1, per_second=0),
    )
    tracker = Progress().track("binder", stream="MUSTER", consumer="binder", max_ack_pending=8)
    tracker.began(42)
    with tracker.handling(42):
        assert await ctx.until_reachable("the bind of team-a/w")
    assert tracker.oldest == (42, 3)  # one move per failed probe: not stuck


class Binds:
    """A cluster that binds every pod (the part of a backend `_bind_gang` uses)."""

    def __init__(self) -> None:
        self.bound: list[str] = []

    async def bind(self, namespace: str, name: str, node: str, *, uid: str = "") -> None:
        self.bound.append(name)


async def test_a_large_gang_moves_the_message_in_hand_with_each_batch_bound() -> None:
    # Binding thousands of pods takes seconds under load: the watchdog must see it move.
    backend = Binds()
    ctx = BinderContext(
        cluster="local",
        backend=backend,  # type: ignore[arg-type]  # _bind_gang binds only
        publisher=Published(),
        specs=WorkloadSpecs(),
        pacer=BindPacer(max_concurrent=64, per_second=0),
    )
    bindings = [
        events_pb2.PodBinding(pod=events_pb2.PodRef(namespace="team-a", name=f"w-{i}"), node="n1")
        for i in range(600)
    ]
    env = events_pb2.Envelope(
        workload="team-a/w", gang_permitted=events_pb2.GangPermitted(bindings=bindings)
    )
    tracker = Progress().track("binder", stream="MUSTER", consumer="binder", max_ack_pending=8)
    tracker.began(42)
    with tracker.handling(42):
        await handlers._bind_gang(env, ctx)
    assert len(backend.bound) == 600
    batches = -(-600 // BATCH_SIZE)
    assert batches > 1
    assert tracker.oldest == (42, batches)  # one move per batch bound: not stuck
