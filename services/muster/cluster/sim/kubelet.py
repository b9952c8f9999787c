"""The sim kubelet: runs the bound pods of a simulated cluster (`muster service sim-cluster`).

A bound Pending pod becomes Running at once (startTime); its Ready condition turns True at
once too, or after its `muster.dev/pods-ready-after` divided by `speed` (a readiness probe
that passes late; `never`: one that never passes), as waitForPodsReady reads readiness from
it; `muster.dev/pods-unready-after` and `-for` turn it False later, then True again (a probe
that fails for a while: waitForPodsReady's recovery). After its `muster.dev/run-seconds`
divided by `speed` it becomes Succeeded. A pod without run-seconds runs until it is deleted; a
deleted pod simply stops. A pod bound to a node that does not exist is marked Failed. Resource
accounting is not the kubelet's job: gang-permit checks fit first.

Nothing is kept but timers and the names of the nodes: a restarted kubelet lists every pod
again and computes what is left of a Running pod's run time from its startTime, so pods finish
on time across restarts. Nodes come through the same watch as pods (in revision order), so
starting a pod is one write, made from the revision the watch brought.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from muster.api.times import readiness_changes_of, ready_after_seconds_of
from muster.cluster.errors import ClusterError, ConflictError
from muster.cluster.keys import NODE_PREFIX, POD_PREFIX, describe, node_key
from muster.cluster.objects import format_time, is_ready, parse_time, run_seconds_of
from muster.cluster.sim.clock import Clock
from muster.cluster.sim.store import SimStore, StoreChange

log = logging.getLogger(__name__)
T = TypeVar("T")

# Pods started at once: a start is one write, made beside the watch (which then reads on)
# rather than in its way; at most this many are in flight before the watch waits.
_STARTS_IN_FLIGHT = 64
STARTED, CREATED = "started", "created"  # what a pod's run time counts from
RUN_FROM = (STARTED, CREATED)


class Kubelet:
    """Runs every bound pod of one simulated cluster; `run` until cancelled.

    `run_from="created"` counts a pod's run time from its creationTimestamp rather than its
    startTime: the Job controller created it when its workload was admitted, so work finishes
    its run time after admission, as Kueue's perf runner finishes Workloads, and the time
    spent binding and starting the pod is not added to the time quota is held.
    """

    def __init__(
        self,
        store: SimStore,
        *,
        clock: Clock,
        speed: float = 1.0,
        run_from: str = STARTED,
        on_pod: Callable[[StoreChange], None] | None = None,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        if run_from not in RUN_FROM:
            raise ValueError(f"run_from must be one of {', '.join(RUN_FROM)}, got {run_from!r}")
        self._since = "startTime" if run_from == STARTED else "creationTimestamp"
        self._store = store
        self._clock = clock
        self._speed = speed
        self._timers: dict[str, tuple[str, asyncio.Task[None]]] = {}  # pod key -> (uid, timer)
        self._readies: dict[str, tuple[str, asyncio.Task[None]]] = {}  # the same, to turn Ready
        self._nodes: set[str] = set()  # keys of the nodes the watch has shown, not deleted
        self._starts = asyncio.Semaphore(_STARTS_IN_FLIGHT)
        self._on_pod = on_pod  # shown every pod change too (the garbage collector)

    async def run(self) -> None:
        """Watch pods and drive each through its phases; returns only by cancellation or error.

        A write that loses a race is dropped: the watch brings the newer state, which is
        looked at afresh, so every decision is made on the pod as it is now. That is also why
        starts may run side by side, with one another and with the watch.
        """
        try:
            changes = self._store.watch(POD_PREFIX, NODE_PREFIX)
            async with asyncio.TaskGroup() as tasks, contextlib.aclosing(changes):
                async for change in changes:
                    if change.key.startswith(NODE_PREFIX):
                        self._on_node(change)
                        continue
                    try:
                        if self._on_pod is not None:
                            self._on_pod(change)
                        await self._on_change(change, tasks)
                    except Exception:  # a pod it cannot read: skipped, the others still run
                        log.exception("skipping pod %s at revision %d", change.key, change.revision)
        finally:
            for timers in (self._timers, self._readies):
                for _, task in timers.values():
                    task.cancel()
                timers.clear()

    def _on_node(self, change: StoreChange) -> None:
        if change.type == "DELETED":
            self._nodes.discard(change.key)
        else:
            self._nodes.add(change.key)

    async def _on_change(self, change: StoreChange, tasks: asyncio.TaskGroup) -> None:
        pod = change.obj
        uid = _meta(pod).get("uid", "")
        phase = pod.get("status", {}).get("phase", "Pending")
        node = pod.get("spec", {}).get("nodeName") or ""
        if change.type == "DELETED" or phase in ("Succeeded", "Failed"):
            self._cancel(change.key)
        elif phase == "Pending" and node:
            await self._starts.acquire()
            tasks.create_task(self._start(change, node))
        elif phase == "Running":
            self._schedule_finish(change, uid, tasks)
            self._schedule_ready(change, uid, tasks)

    async def _start(self, change: StoreChange, node: str) -> None:
        """Move a bound Pending pod to Running, or to Failed when its node does not exist;
        releases a start slot."""
        try:
            await self._write_start(change, node)
        except Exception:  # a pod it cannot start: skipped, the others still run
            log.exception("cannot start pod %s", change.key)
        finally:
            self._starts.release()

    async def _write_start(self, change: StoreChange, node: str) -> None:
        pod = change.obj
        status = dict(pod.get("status", {}))
        now = format_time(self._clock.now_s())
        if not await self._node_exists(node):
            status.update(
                phase="Failed",
                reason="NodeNotFound",
                message=f'node "{node}" does not exist',
                conditions=_with_condition(status, "Ready", "False", now=now),
            )
        else:
            ready = ready_after_seconds_of(_meta(pod).get("annotations", {})) == 0
            status.update(
                phase="Running",
                startTime=now,
                conditions=_with_condition(status, "Ready", str(ready), now=now),
            )
        await self._write(change.key, {**pod, "status": status}, revision=change.revision)

    async def _node_exists(self, node: str) -> bool:
        """Whether `node` exists: known from the watch, else read (a node written after the pod,
        which a restarted kubelet's list shows later)."""
        key = node_key(node)
        return (
            key in self._nodes or await waiting_out_nats(lambda: self._store.get(key)) is not None
        )

    def _schedule_finish(self, change: StoreChange, uid: str, timers: asyncio.TaskGroup) -> None:
        """Arrange for a Running pod with a run time to succeed when that time is up."""
        meta = _meta(change.obj)
        run_s = run_seconds_of(meta.get("annotations", {}))
        since = change.obj.get("status", {}) if self._since == "startTime" else meta
        start = since.get(self._since)
        if run_s is None or not isinstance(start, str):
            return  # runs until deleted
        known = self._timers.get(change.key)
        if known is not None and known[0] == uid and not known[1].done():
            return
        self._cancel(change.key)
        finish_at = parse_time(start) + run_s / self._speed
        task = timers.create_task(self._finish_at(change.key, uid, finish_at))
        self._timers[change.key] = (uid, task)

    def _schedule_ready(self, change: StoreChange, uid: str, timers: asyncio.TaskGroup) -> None:
        """Arrange the next change of a Running pod's Ready condition that its annotations
        script (`readiness_changes_of`: late readiness, readiness lost and regained), counted
        from its startTime, so a restart keeps the times."""
        status = change.obj.get("status", {})
        start = status.get("startTime")
        if not isinstance(start, str):
            return
        due = _next_readiness(
            readiness_changes_of(_meta(change.obj).get("annotations", {})),
            started_s=parse_time(start),
            now_s=self._clock.now_s(),
            speed=self._speed,
            ready=is_ready(status),
        )
        if due is None:
            return
        tag = f"{uid}@{due[0]}"  # one timer per pod and change: the next replaces a done one
        known = self._readies.get(change.key)
        if known is not None and known[0] == tag and not known[1].done():
            return
        if known is not None:
            known[1].cancel()
        task = timers.create_task(self._ready_at(change.key, uid, *due))
        self._readies[change.key] = (tag, task)

    async def _ready_at(self, key: str, uid: str, at_s: float, ready: bool) -> None:
        await self._clock.sleep(at_s - self._clock.now_s())

        def turn(status: dict[str, Any], now: str) -> bool:
            if is_ready(status) == ready:
                return False
            status["conditions"] = _with_condition(status, "Ready", str(ready), now=now)
            return True

        if await self._update_running(key, uid, turn):
            log.info("pod ready" if ready else "pod not ready", extra={"pod": describe(key)})

    async def _finish_at(self, key: str, uid: str, finish_at_s: float) -> None:
        await self._clock.sleep(finish_at_s - self._clock.now_s())

        def succeed(status: dict[str, Any], now: str) -> bool:
            status.update(
                phase="Succeeded",
                reason="Completed",
                conditions=_with_condition(status, "Ready", "False", now=now),
            )
            return True

        if await self._update_running(key, uid, succeed):
            log.info("pod succeeded", extra={"pod": describe(key)})

    async def _update_running(
        self, key: str, uid: str, change: Callable[[dict[str, Any], str], bool]
    ) -> bool:
        """Apply `change` (status, now → whether it changed anything) to pod `key` while it is
        still that Running pod; whether it was written."""
        while True:
            current = await waiting_out_nats(lambda: self._store.get(key))
            if current is None or _meta(current.obj).get("uid", "") != uid:
                return False  # deleted (or deleted and started again: a new pod, a new timer)
            status = dict(current.obj.get("status", {}))
            if status.get("phase") != "Running":
                return False
            if not change(status, format_time(self._clock.now_s())):
                return False
            update = functools.partial(
                self._store.update,
                key,
                {**current.obj, "status": status},
                revision=current.revision,
            )
            try:
                await waiting_out_nats(update)
            except ConflictError:
                continue  # someone wrote in between: look again
            return True

    async def _write(self, key: str, pod: dict[str, Any], *, revision: int) -> None:
        """Write `pod` over `revision`; a lost race is dropped, NATS away is waited out."""
        try:
            await waiting_out_nats(lambda: self._store.update(key, pod, revision=revision))
        except ConflictError:
            log.debug(
                "pod changed under the kubelet; the watch brings it back",
                extra={"pod": describe(key)},
            )

    def _cancel(self, key: str) -> None:
        for timers in (self._timers, self._readies):
            known = timers.pop(key, None)
            if known is not None:
                known[1].cancel()


async def waiting_out_nats(op: Callable[[], Awaitable[T]]) -> T:
    """`op()`, tried again while it fails for a temporary reason (NATS restarting): a pod's
    start or end is never dropped because NATS was away, and the kubelet does not stop."""
    delay_s = 0.1
    while True:
        try:
            return await op()
        except ClusterError as err:
            if not err.temporary or isinstance(err, ConflictError):
                raise
        await asyncio.sleep(delay_s)
        delay_s = min(2.0, delay_s * 2)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    return meta if isinstance(meta, dict) else {}


def _with_condition(
    status: dict[str, Any], condition: str, value: str, *, now: str
) -> list[dict[str, Any]]:
    """Return status.conditions with `condition` set to `value` (others kept)."""
    kept = [c for c in status.get("conditions", []) if c.get("type") != condition]
    return [*kept, {"type": condition, "status": value, "lastTransitionTime": now}]


def _next_readiness(
    changes: list[tuple[float, bool]], *, started_s: float, now_s: float, speed: float, ready: bool
) -> tuple[float, bool] | None:
    """The next change of a pod's Ready condition as (when, Ready), or None: at once when the
    script says it should differ by now (a restart, a late watch), else its next change."""
    due = [(started_s + after_s / speed, to) for after_s, to in changes]
    now_ready = [to for at_s, to in due if at_s <= now_s]
    if now_ready and now_ready[-1] != ready:
        return now_s, now_ready[-1]
    return next(((at_s, to) for at_s, to in due if at_s > now_s and to != ready), None)
