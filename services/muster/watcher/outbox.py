"""The watcher's outbox: the events one batch of cluster changes caused, published together.

Handlers add events as they decide them; the watch loop flushes the outbox once per batch,
before it remembers anything (marks, revision). One workload's events are published one after
the other, in the order added; different workloads' side by side. A config event (no workload)
is a barrier: everything added before it is stored before it, everything after, after it (a
LocalQueue's config before the workloads that name it).

Every event id is deterministic (`WatcherContext.envelope`), so a publish is retried with the
same id until JetStream has it, and a batch handled again after a crash publishes copies that
JetStream drops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Protocol

from muster.bus.errors import Reject, Retry, Unavailable
from muster.contracts.v1 import events_pb2

log = logging.getLogger(__name__)

_RETRY_FIRST_S = 0.1
_RETRY_MAX_S = 5.0


class Publisher(Protocol):
    async def publish(self, env: events_pb2.Envelope) -> int: ...


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
        (`Reject`: oversized) is logged and dropped, as is one whose publish hits a bug.
        """
        waiting, self._waiting = self._waiting, []
        for segment in _segments(waiting):
            lanes: dict[str, list[events_pb2.Envelope]] = {}
            for env in segment:
                lanes.setdefault(env.workload, []).append(env)
            if len(lanes) == 1:
                await self._publish_in_order(segment)
            else:
                await asyncio.gather(*(self._publish_in_order(lane) for lane in lanes.values()))

    async def _publish_in_order(self, envs: Sequence[events_pb2.Envelope]) -> None:
        for env in envs:
            await self._publish_until_done(env)

    async def _publish_until_done(self, env: events_pb2.Envelope) -> None:
        delay_s = _RETRY_FIRST_S
        while True:
            try:
                await self._publisher.publish(env)
                return
            except (Retry, Unavailable, TimeoutError) as err:
                log.warning(
                    "retrying %s: %s", env.type, err, extra={"workload": env.workload or "-"}
                )
            except Reject as err:
                log.error("event refused: %s", err, extra={"workload": env.workload or "-"})
                return
            except Exception:
                log.exception("publishing %s failed; dropping it", env.type)
                return
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, _RETRY_MAX_S)


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
