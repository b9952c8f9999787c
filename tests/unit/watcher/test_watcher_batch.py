"""watcher.service: a batch's run of pod changes is folded, and each workload it touched decided
once (`FoldedPods`): what is published is what the pods are at the end of the run, in order
with the other changes of the batch."""

from __future__ import annotations

from typing import Any, cast

import pytest
from watcher_pods import Stream, changed, looks_counted, pod

from muster.bus.poison import Quarantine
from muster.cluster import ClusterChange
from muster.contracts.v1 import events_pb2
from muster.watcher.handlers import WatcherContext
from muster.watcher.outbox import Outbox
from muster.watcher.pods import Sent
from muster.watcher.service import _handle_batch

pytestmark = pytest.mark.timeout(10)


class Marks:
    def __init__(self) -> None:
        self.sent: dict[str, Sent] = {}

    def load(self, workload: str) -> Sent:
        return self.sent.setdefault(workload, Sent())

    def save(self, workload: str, sent: Sent) -> None:
        self.sent[workload] = sent

    note = save  # what the events tell and what they cannot: one place here


class Poison:
    def __init__(self) -> None:
        self.objects: list[str] = []

    async def object(self, key: str, obj: Any, why: object, *, revision: int) -> None:
        self.objects.append(f"{key}: {why}")


async def handled(*batches: list[ClusterChange]) -> tuple[list[events_pb2.Envelope], Poison]:
    stream, poison = Stream(), Poison()
    outbox = Outbox(stream)
    ctx = WatcherContext(cluster="east", outbox=outbox, marks=Marks())
    for batch in batches:
        await _handle_batch(batch, ctx, cast(Quarantine, poison), groups=None, events=None)
        await outbox.flush()
    return stream.stored, poison


async def test_a_run_of_pod_changes_tells_the_pending_set_it_ends_with_once() -> None:
    # Deciding after each change would tell pods_pending four times, a pod more each time.
    envs, _ = await handled([changed(pod(i, of="g", node="")) for i in range(4)])
    assert [e.type for e in envs] == ["workload.pods_pending"]
    assert [p.name for p in envs[0].pods_pending.pods] == ["g-0", "g-1", "g-2", "g-3"]


async def test_each_workload_of_a_run_is_decided_on_its_own_pods() -> None:
    batch = [
        changed(pod(0, of="a", node="")),
        changed(pod(0, of="b", node="")),
        changed(pod(0, "Running", of="a", node="n1")),
        changed(pod(1, "Running", of="a", node="n1")),
    ]
    envs, _ = await handled(batch)
    told = [(e.workload, e.type) for e in envs]
    assert told == [("ns/a", "workload.running"), ("ns/b", "workload.pods_pending")]
    assert list(envs[0].running.pod_uids) == ["uid-a-0", "uid-a-1"]


async def test_a_run_that_skips_running_still_tells_it_before_finished() -> None:
    batch = [changed(pod(i, of="f", node="")) for i in range(2)]
    batch += [changed(pod(i, "Succeeded", of="f", node="n1")) for i in range(2)]
    envs, _ = await handled(batch)
    assert [e.type for e in envs] == ["workload.running", "workload.finished"]
    assert envs[1].finished.message == "2 of 2 pods succeeded"


async def test_a_workload_whose_pods_all_went_in_the_run_is_forgotten() -> None:
    envs, poison = await handled(
        [changed(pod(0, of="d", node=""))],
        [
            changed(pod(0, of="d", node=""), deleted=True),
            changed(pod(1, of="d", node="")),
            changed(pod(1, of="d", node=""), deleted=True),
        ],
    )
    assert [e.type for e in envs] == ["workload.pods_pending"]
    assert poison.objects == []


async def test_a_large_workload_is_looked_at_whole_only_when_a_fact_can_be_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its pods bound, then started, 50 at a time: nothing is due until the last starts, and
    only then are all its pods looked at (before, every batch looked at every pod so far:
    5 000 pod looks here, n² / 50; a 50 000-pod Job spent most of the watcher's time so)."""
    looked = looks_counted(monkeypatch)
    pods, run = 400, 50
    made = [[changed(pod(i, of="j")) for i in range(k, k + run)] for k in range(0, pods, run)]
    started = [
        [changed(pod(i, "Running", of="j")) for i in range(k, k + run)] for k in range(0, pods, run)
    ]

    envs, _ = await handled(*made, *started)

    assert [e.type for e in envs] == ["workload.running"]
    assert len(envs[0].running.pod_uids) == pods
    assert looked == [pods]


async def test_a_running_workload_is_looked_at_whole_again_only_when_a_fact_can_be_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After `running`, 50 pods at a time lose readiness and regain it, then succeed: each
    batch that can make a fact due (one not ready, the last to succeed, a pod replaced) looks
    at every pod, and one that cannot (pods ready again after `pods_ready` regained said so,
    pods succeeding while others run) does not. Before, every batch looked at every pod until
    the workload finished (a 100 000-pod Job: 400 looks at every pod)."""
    looked = looks_counted(monkeypatch)
    pods, run = 400, 50
    started = [changed(pod(i, "Running", of="s")) for i in range(pods)]
    # One batch more after `running`, with nothing due: the look that settles the workload.
    again = [changed(pod(i, "Running", of="s")) for i in range(run)]
    succeeding = [
        [changed(pod(i, "Succeeded", of="s")) for i in range(k, k + run)]
        for k in range(0, pods - run, run)
    ]
    unready = [changed(pod(pods - 1, "Running", of="s", ready=False))]
    ready = [changed(pod(pods - 1, "Running", of="s"))]
    last = [changed(pod(i, "Succeeded", of="s")) for i in range(pods - run, pods)]

    envs, _ = await handled(started, again, *succeeding, unready, ready, last)

    assert [e.type for e in envs] == [
        "workload.running",
        "workload.pods_ready",  # lost
        "workload.pods_ready",  # regained
        "workload.finished",
    ]
    assert [e.pods_ready.lost for e in envs[1:3]] == [True, False]
    assert envs[-1].finished.message == f"{pods} of {pods} pods succeeded"
    # running; settled; (the 7 batches of pods succeeding skipped); lost; regained; finished
    assert looked == [pods] * 5
