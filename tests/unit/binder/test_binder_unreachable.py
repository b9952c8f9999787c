"""A binder handler waiting for its cluster to answer again is waiting, not stalled: each probe
it makes moves the message it holds on for the progress watchdog (bus/progress.py)."""

from __future__ import annotations

import pytest

from muster.binder import handlers
from muster.binder.handlers import BinderContext, WorkloadSpecs
from muster.binder.pacing import BindPacer
from muster.bus.progress import Progress
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
