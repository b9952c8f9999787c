"""The watcher's outbox: the events one batch of cluster changes caused, published together.

Handlers add events as they decide them; the watch loop flushes the outbox once per batch,
before it remembers anything (marks, revision). One workload's events are stored in the order
added (`Publisher.publish_many`: each sent once the one before it is stored); different
workloads' side by side, all in flight together, their PubAcks awaited as one. A config event
(no workload) is a barrier: everything added before it is stored before it, everything after,
after it (a LocalQueue's config before the workloads that name it).

Every event id is deterministic (`WatcherContext.envelope`), so a publish is retried with the
same id until JetStream has it, and a batch handled again after a crash publishes copies that
JetStream drops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Protocol

from muster.bus.errors import BusError, Reject
from muster.contracts.v1 import events_pb2

log = logging.getLogger(__name__)

_RETRY_FIRST_S = 0.1
_RETRY_MAX_S = 5.0


class Publisher(Protocol):
    async def publish_many(self, envs: Sequence[events_pb2.Envelope]) -> list[int | BusError]: ...


class Outbox:
    """Events waiting for the end of their batch; `flush` publishes them."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._waiting: list[events_pb2.Envelope] = []

    def add(self, env: events_pb2.Envelope) -> None:
        self._waiting.append(env)

    def __len__(self) -> int:
        return len(self._waiting)

    async def flush(self) -> None:
        """Publish every waiting event (see the module docstring); return once all are stored.

        A temporary failure is retried until it succeeds; an event JetStream refuses for good
        (`Reject`: oversized) is logged and dropped, as are events whose publish hits a bug.
        """
        waiting, self._waiting = self._waiting, []
        for segment in _segments(waiting):
            await self._publish_until_done(segment)

    async def _publish_until_done(self, envs: list[events_pb2.Envelope]) -> None:
        delay_s = _RETRY_FIRST_S
        while envs:
            try:
                results = await self._publisher.publish_many(envs)
            except Exception:
                log.exception("publishing %d events failed; dropping them", len(envs))
                return
            left, why = [], ""
            for env, result in zip(envs, results, strict=True):
                if isinstance(result, Reject):
                    log.error("event refused: %s", result, extra={"workload": env.workload or "-"})
                elif isinstance(result, BusError):
                    left.append(env)  # it failed, or an earlier one of its workload's did
                    why = why or str(result)
            if left:
                log.warning("retrying %d of %d events: %s", len(left), len(envs), why)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, _RETRY_MAX_S)
            envs = left


def _segments(envs: Sequence[events_pb2.Envelope]) -> Iterator[list[events_pb2.Envelope]]:
    """`envs` cut before and after each event of no workload (a config event)."""
    run: list[events_pb2.Envelope] = []
    for env in envs:
        if env.workload:
            run.append(env)
            continue
        if run:
            yield run
            run = []
        yield [env]
    if run:
        yield run
