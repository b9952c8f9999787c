"""Every copy of a placement eviction (`cmd.evict` listing pods: gang-permit's re-sends, a
redelivery) is answered, each with what it did (task evictfix): the first stops the pods and
says so, a later one finds them gone and says it stopped nothing (`gone`). Before, each answer
said it stopped every pod it named, so `muster events` showed the victim stopped once per copy.
An answer lost with a binder that died before publishing it is still recovered: the next copy
is answered."""

from __future__ import annotations

from test_binder_specs import _Backend, _context, _Published

from muster.binder.handlers import BinderContext, on_evict
from muster.binder.stopped import StoppedPods
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.eventtext import detail

VICTIM = "ns/low"


class _Pods(_Backend):
    """The victim's pods by name (uid), as the cluster holds them."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.pods = {name: f"uid-{name}" for name in names}

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        if self.pods.get(name) != uid:
            return False
        del self.pods[name]
        return True


def binder(names: list[str]) -> tuple[BinderContext, _Pods, _Published]:
    cluster, published = _Pods(names), _Published()
    ctx = _context(cluster)
    ctx.publisher = published
    return ctx, cluster, published


def evict(names: list[str], *, attempt: int) -> pb.Envelope:
    refs = [pb.PodRef(namespace="ns", name=n, uid=f"uid-{n}") for n in names]
    payload = pb.EvictRequested(reason="PlacementPreempted", attempt=attempt, pods=refs)
    return new_event("evict_requested", payload, cluster="local", workload=VICTIM, source="gp")


def said(published: _Published) -> list[tuple[str, int, int, str]]:
    """Each answer: the command it answers, pods named, pods gone already, the event line."""
    return [
        (a.cause, a.eviction_completed.pods, a.eviction_completed.gone, detail(a))
        for a in published.seen
    ]


async def test_a_re_send_is_answered_as_having_stopped_nothing() -> None:
    ctx, cluster, published = binder(["low-0", "low-1"])
    first, again = evict(["low-0", "low-1"], attempt=1), evict(["low-0", "low-1"], attempt=2)

    await on_evict(first, ctx)
    await on_evict(again, ctx)

    assert cluster.pods == {}
    assert said(published) == [
        (first.event_id, 2, 0, "2 pods stopped"),
        (again.event_id, 2, 2, "nothing stopped: 2 pods gone already"),
    ]


async def test_a_command_some_of_whose_pods_are_gone_counts_only_those_it_stopped() -> None:
    ctx, _, published = binder(["low-0", "low-1"])
    await on_evict(evict(["low-0"], attempt=1), ctx)

    await on_evict(evict(["low-0", "low-1"], attempt=2), ctx)

    assert [s[1:] for s in said(published)] == [
        (1, 0, "1 pod stopped"),
        (2, 1, "1 pod stopped, 1 gone already"),
    ]


async def test_a_command_redelivered_after_its_answer_was_lost_is_answered() -> None:
    ctx, cluster, published = binder(["low-0"])
    command = evict(["low-0"], attempt=1)
    del cluster.pods["low-0"]  # stopped by a binder that died before it published the answer

    await on_evict(command, ctx)

    assert said(published) == [(command.event_id, 1, 1, "nothing stopped: 1 pod gone already")]


class _Terminating(_Pods):
    """Kubernetes' graceful stop: a deleted pod stays until its grace period ends, and a
    second delete of it is answered 200 like the first."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.terminating: set[str] = set()

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        if self.pods.get(name) != uid:
            return False
        self.terminating.add(name)
        return True


async def test_a_copy_arriving_while_the_pods_terminate_counts_them_once() -> None:
    cluster, published = _Terminating(["low-0", "low-1"]), _Published()
    ctx = _context(cluster)
    ctx.publisher = published
    first, again = evict(["low-0", "low-1"], attempt=1), evict(["low-0", "low-1"], attempt=2)

    await on_evict(first, ctx)
    await on_evict(again, ctx)
    await on_evict(first, ctx)  # redelivered after its answer

    assert cluster.terminating == {"low-0", "low-1"}  # each deleted again: harmless
    assert [s[1:] for s in said(published)] == [
        (2, 0, "2 pods stopped"),
        (2, 2, "nothing stopped: 2 pods gone already"),
        (2, 2, "nothing stopped: 2 pods gone already"),
    ]


def test_the_pods_remembered_are_bounded_oldest_forgotten_first() -> None:
    stopped = StoppedPods(kept=2)
    assert [stopped.first_stop(uid, "c1") for uid in ("a", "b", "c")] == [True, True, True]
    assert stopped.first_stop("c", "c2") is False  # remembered: stopped by c1
    assert stopped.first_stop("a", "c2") is True  # forgotten, the oldest: counted once more
