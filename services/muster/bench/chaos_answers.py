"""The admission check controller of `muster bench chaos --checks`: it answers check `prov` of
every reservation in a ClusterQueue requiring it, as the watcher reports what a controller wrote
into a Kueue Workload's `status.admissionChecks` on Kubernetes (`workload.admission_check`).

Each reservation read from the stream (`quota_reserved`) is answered after a random delay (up to
`MAX_DELAY_S`), so that a reservation waits while services are killed; a workload's first
reservation is answered Retry (requeue after a second) with `RETRY_SHARE`, the others Ready.
An answer is published until it is stored, under an id derived from the reservation, so one
retried across a nats-server restart is stored once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from typing import Final

from muster.bench.chaos_scenario import CHECK
from muster.bus import Bus
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2 as pb

MAX_DELAY_S: Final = 1.5
RETRY_SHARE: Final = 0.2
SOURCE: Final = "chaos-checks"
# The namespace of the answers' event ids. Fixed: a retried publish must carry the same id.
ANSWER_ID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "chaos-checks.muster.dev")
_PUBLISH_RETRY_S: Final = 0.2


class CheckAnswers:
    """Answers check `CHECK` for the reservations of `checked_queues`; feed it every event of
    the stream in order (`read`); `answered` counts the answers stored, by state."""

    def __init__(
        self, bus: Bus, *, cluster: str, checked_queues: frozenset[str], rng: random.Random
    ) -> None:
        self.bus = bus
        self.cluster = cluster
        self.checked_queues = checked_queues
        self.rng = rng
        self.answered: dict[str, int] = {}
        self._reserved: set[str] = set()  # workloads reserved at least once
        self._tasks: set[asyncio.Task[None]] = set()

    def read(self, env: pb.Envelope) -> None:
        if env.WhichOneof("payload") != "quota_reserved":
            return
        if env.quota_reserved.admission.cluster_queue not in self.checked_queues:
            return
        first = env.workload not in self._reserved
        self._reserved.add(env.workload)
        state = "Retry" if first and self.rng.random() < RETRY_SHARE else "Ready"
        answer = pb.AdmissionCheckUpdated(
            check=CHECK,
            state=state,
            message=f"answered by the chaos run for reservation #{env.sequence}",
            requeue_after_seconds=1 if state == "Retry" else 0,
        )
        event = new_event(
            "admission_check",
            answer,
            cluster=self.cluster,
            workload=env.workload,
            source=SOURCE,
            event_id=str(uuid.uuid5(ANSWER_ID_NAMESPACE, f"{env.event_id}/{state}")),
        )
        task = asyncio.create_task(self._publish(event, delay_s=self.rng.uniform(0, MAX_DELAY_S)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _publish(self, event: pb.Envelope, *, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        while True:
            with contextlib.suppress(Exception):  # NATS restarting: publish again, same id
                await self.bus.publish(event)
                state = event.admission_check.state
                self.answered[state] = self.answered.get(state, 0) + 1
                return
            await asyncio.sleep(_PUBLISH_RETRY_S)
