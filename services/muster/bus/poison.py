"""Poison outside the consume loop: an event a replay follower, or a cluster object a watch,
could not fold into a service's state.

The consume loop dead-letters what its handlers cannot handle (consumer.py). Followers of the
stream (a binder's spec view, gang-permit's events) and cluster watches fold what they read
into memory with pure code: what raises there raises the same way every time, so one object
must never stop the loop (a service that dies on stored data dies again on restart).
`Quarantine.event` and `Quarantine.object` copy what failed to `MUSTER_DLQ`
(`muster.v1.dlq.<consumer>`, with the reason in the headers; one too large to store, with
its headers only), log it once, and return: the caller goes on with the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from muster.bus.errors import BusError, Reject
from muster.bus.publisher import (
    DLQ_CONSUMER,
    DLQ_REASON,
    DLQ_SEQUENCE,
    DLQ_STREAM_HEADER,
    DLQ_SUBJECT,
    MSG_ID,
    RawWriter,
    header_value,
)
from muster.bus.subjects import EVENTS_STREAM, dlq_subject, subject_of
from muster.contracts.v1.events_pb2 import Envelope

log = logging.getLogger(__name__)

# Names the origin of a dead-lettered cluster object in DLQ_STREAM_HEADER: not a stream.
CLUSTER_ORIGIN: Final = "cluster"
# On a copy whose body was left out, being over the server's max_payload: the bytes it had.
DLQ_CUT: Final = "Muster-Dlq-Cut"
_REMEMBERED = 4096  # identities logged once each; then the oldest are forgotten


class Quarantine:
    """Dead letters of one loop, under DLQ subject `muster.v1.dlq.<consumer>`."""

    def __init__(self, publisher: RawWriter, *, consumer: str) -> None:
        self._publisher = publisher
        self.consumer = consumer
        self._told: dict[str, None] = {}  # identities already logged, oldest first
        self.count = 0  # dead letters so far (for tests and logs)

    async def event(
        self, env: Envelope, err: BaseException | str, *, stream: str = EVENTS_STREAM
    ) -> None:
        """`env` (read from `stream`) could not be applied, or is given up on (`err` says why):
        copy it, as encoded, with why."""
        identity = f"{stream}/{env.sequence}/{env.event_id}"
        headers = {
            MSG_ID: f"dlq/{self.consumer}/{identity}",
            DLQ_SUBJECT: subject_of(env),
            DLQ_STREAM_HEADER: stream,
            DLQ_SEQUENCE: str(env.sequence),
        }
        what = f"{env.type} #{env.sequence} about {env.workload or '-'}"
        await self._store(identity, env.SerializeToString(), headers, what=what, err=err)

    async def object(
        self, key: str, obj: Mapping[str, Any], err: BaseException | str, *, revision: int
    ) -> None:
        """Cluster object `key` at `revision` could not be taken in (`err` says why, an
        exception or the problems found): copy it (JSON) with why."""
        identity = f"{key}@{revision}"
        headers = {
            MSG_ID: f"dlq/{self.consumer}/{identity}",
            DLQ_SUBJECT: key,
            DLQ_STREAM_HEADER: CLUSTER_ORIGIN,
            DLQ_SEQUENCE: str(revision),
        }
        data = msgspec.json.encode(obj)
        await self._store(identity, data, headers, what=f"cluster object {key}", err=err)

    async def _store(
        self,
        identity: str,
        data: bytes,
        headers: dict[str, str],
        *,
        what: str,
        err: BaseException | str,
    ) -> None:
        reason = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        headers[DLQ_REASON] = header_value(reason)
        headers[DLQ_CONSUMER] = self.consumer
        if identity not in self._told:
            self._told[identity] = None
            if len(self._told) > _REMEMBERED:
                del self._told[next(iter(self._told))]
            trace = err if isinstance(err, BaseException) else None
            log.error("%s: dead-lettered %s: %s", self.consumer, what, reason, exc_info=trace)
        self.count += 1
        try:
            try:
                await self._publisher.publish_raw(dlq_subject(self.consumer), data, headers)
            except Reject:
                # Too large to copy (a 1 MiB annotation): the headers still say what it was,
                # where it came from and why, so the copy is cut rather than lost.
                headers[DLQ_CUT] = str(len(data))
                await self._publisher.publish_raw(dlq_subject(self.consumer), b"", headers)
        except BusError as exc:  # logged above; the loop must go on without it
            log.warning("%s: could not dead-letter %s: %s", self.consumer, what, exc)
