"""Helpers for bus tests: event factories, a recording handler, a consume loop as a context."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from budget import wait_s
from workload_manifest import workload_manifest

from muster.bus import Bus, new_event, workload_subject
from muster.bus.publisher import Duplicated
from muster.bus.subjects import EVENT_TYPES, stream_configs
from muster.contracts.v1 import events_pb2
from muster.contracts.v1.events_pb2 import Envelope

SUBMITTED = workload_subject("local", "submitted")
PENDING = workload_subject("local", "pending")


def submitted(
    workload: str, *, queue: str = "main", manifest: str | None = None, **kw: Any
) -> Envelope:
    """A `workload.submitted` event for `workload` on cluster "local" (a valid manifest of it
    unless `manifest` is given)."""
    if manifest is None:
        manifest = workload_manifest(workload, queue=queue)
    payload = events_pb2.WorkloadSubmitted(queue_name=queue, manifest_json=manifest)
    return new_event("submitted", payload, cluster="local", workload=workload, source="test", **kw)


def pending(workload: str, message: str, **kw: Any) -> Envelope:
    """A `workload.pending` event whose message tells events of one workload apart."""
    payload = events_pb2.WorkloadPending(reason="WaitingForQuota", message=message)
    return new_event("pending", payload, cluster="local", workload=workload, source="test", **kw)


class Recorder:
    """A handler that records what it got (and can run a side effect), for tests to wait on."""

    def __init__(self, effect: Callable[[Envelope], Awaitable[None]] | None = None) -> None:
        self.got: list[Envelope] = []
        self.effect = effect
        self._changed = asyncio.Condition()

    async def __call__(self, env: Envelope) -> None:
        if self.effect is not None:
            await self.effect(env)
        async with self._changed:
            self.got.append(env)
            self._changed.notify_all()

    async def wait_for_count(self, n: int, *, timeout_s: float = 10.0) -> list[Envelope]:
        """What was recorded once there are at least `n`, waiting up to `timeout_s`."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.got) >= n), timeout_s)
            return list(self.got)


@contextlib.asynccontextmanager
async def consuming(
    bus: Bus,
    durable: str,
    subjects: Sequence[str],
    handler: Callable[[Envelope], Awaitable[None]],
    **settings: Any,
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `bus.consume(...)` for the body; cancel it after, re-raising if it died."""
    task = asyncio.create_task(bus.consume(durable, subjects, handler, **settings))
    try:
        yield task
    finally:
        if task.done() and not task.cancelled():
            task.result()  # it died: show why
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class EventLog:
    """Envelopes seen on muster's streams, for tests to wait on."""

    def __init__(self) -> None:
        self.seen: list[Envelope] = []
        self._changed = asyncio.Condition()

    async def add(self, env: Envelope) -> None:
        async with self._changed:
            self.seen.append(env)
            self._changed.notify_all()

    def matching(self, event_type: str, *, workload: str | None = None) -> list[Envelope]:
        """Envelopes of `event_type` ("workload.admitted" or the field name "admitted")."""
        wanted = EVENT_TYPES.get(event_type, event_type)
        return [e for e in self.seen if e.type == wanted and workload in (None, e.workload)]

    async def wait_for(
        self, event_type: str, *, workload: str | None = None, timeout_s: float | None = None
    ) -> Envelope:
        """The first envelope of `event_type` (about `workload`), waiting up to `timeout_s`
        (None: what is left of the test's time, `tests/budget.py`)."""
        bound = wait_s(timeout_s)
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.matching(event_type, workload=workload)),
                    bound,
                )
            except TimeoutError:
                seen = [f"{e.type} {e.workload}" for e in self.seen]
                pytest.fail(f"no {event_type} for {workload or 'any workload'} in {bound:.1f}s; "
                            f"seen: {seen}")  # fmt: skip
            return self.matching(event_type, workload=workload)[0]

    async def wait_until(
        self, found: Callable[[list[Envelope]], bool], *, timeout_s: float
    ) -> None:
        """Return once `found` holds of the envelopes seen so far, waiting up to `timeout_s`."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: found(self.seen)), timeout_s)
            except TimeoutError:
                pytest.fail(f"not seen in {timeout_s}s: {[e.type for e in self.seen]}")

    async def wait_for_next(
        self,
        event_type: str,
        *,
        after: Envelope,
        workload: str | None = None,
        timeout_s: float = 5.0,
    ) -> Envelope:
        """The first envelope of `event_type` stored after `after`, waiting up to `timeout_s`.
        Messages are told apart by stream sequence, not event id: an id stored twice (published
        again past the duplicate window) is two messages, and each is returned once by a chain
        of calls. An `after` without a sequence (as the test published it) is the first
        message stored with its id."""
        workload = after.workload if workload is None else workload
        wanted = EVENT_TYPES.get(event_type, event_type)

        def later() -> list[Envelope]:
            start = after.sequence or next(
                (e.sequence for e in self.seen if e.event_id == after.event_id), None
            )
            if start is None:  # `after` not seen yet
                return []
            return [
                e
                for e in self.seen
                if e.sequence > start and e.type == wanted and e.workload == workload
            ]

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(later), timeout_s)
            except TimeoutError:
                pytest.fail(f"no {event_type} for {workload} after {after.type} in {timeout_s}s")
            return later()[0]


async def short_duplicate_window(bus: Bus, window_s: float) -> None:
    """MUSTER_EVENTS' duplicate window set to `window_s` (2 min in production), so that a test
    can see what a publish stores once JetStream no longer drops it as a copy."""
    (events, *_) = stream_configs()
    await bus.js.update_stream(dataclasses.replace(events, duplicate_window=window_s))


async def outlive_the_window(bus: Bus, window_s: float) -> None:
    """Return once everything stored so far is past the duplicate window (`window_s`): a probe
    stored now is stored again (not dropped as a duplicate) only then."""
    probe = new_event(
        "deleted", events_pb2.WorkloadDeleted(), cluster="local", workload="x/probe", source="test"
    )
    await bus.publish(probe)
    for _ in range(200):  # within the test's timeout
        if not isinstance(await bus.publish(probe), Duplicated):
            return
        await asyncio.sleep(window_s / 4)  # a condition polled, not a duration assumed
    raise AssertionError("the duplicate window never passed")
