"""`MUSTER_MANIFESTS_<c>`: the `submitted` of each live workload whose manifest is too large for
its `admitted`, kept by the binders for as long as the workload lives (docs/events.md,
"Manifests too large for their admission").

An `admitted` carries a copy of its workload's manifest (and of the Job it stands for) up to
`MANIFEST_COPY_LIMIT`; beyond, a binder restarted after the `submitted` left MUSTER_EVENTS
(7 days, or 10 GiB of later events) had nothing to start the workload from, and it held its
quota for ever. Every binder replica now stores such a `submitted` here as it follows it
(object `<workload key>`, header `Muster-Submitted-Id`), removes it at the workload's `finished`
or `deleted`, and reads it back when an admission finds no spec.

`ManifestChanges` is the pure part (what the bucket must hold, from the followed events);
`ManifestStore` writes and reads it. Every replica of every cluster makes the same changes: a
write is skipped when this replica listed or wrote that submission already, a removal of an
object not there does nothing, and each replica makes its changes in stream order, so the
bucket ends as the last event of each workload says.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from google.protobuf.message import DecodeError

from muster.bus.errors import BusError, NotFound
from muster.bus.objects import ObjectBucket
from muster.contracts.v1 import events_pb2
from muster.payloads import MANIFEST_COPY_LIMIT

log = logging.getLogger(__name__)

SUBMITTED_ID_HEADER: Final = "Muster-Submitted-Id"

# A workload's change: its `submitted` to keep, or None: keep nothing for it.
Change = tuple[str, events_pb2.Envelope | None]


def too_large_to_copy(submitted: events_pb2.WorkloadSubmitted) -> bool:
    """Whether an admission of this workload carries no copy of its manifest or of its owner's
    (admission copies each only up to MANIFEST_COPY_LIMIT)."""
    return (
        len(submitted.manifest_json) > MANIFEST_COPY_LIMIT
        or len(submitted.owner_manifest_json) > MANIFEST_COPY_LIMIT
    )


class ManifestChanges:
    """What MUSTER_MANIFESTS_<c> must hold, as the followed events say; the changes not yet
    taken (the last of each workload only: a workload submitted and ended between two takes,
    as within one replay, is neither written nor removed). Pure."""

    def __init__(self) -> None:
        self._pending: dict[str, events_pb2.Envelope | None] = {}
        self._stored: set[str] = set()  # whose object may be in the bucket, as of the takes

    def stored(self, workloads: Iterable[str]) -> None:
        """The workloads the bucket held when listed (before the replay)."""
        self._stored.update(workloads)

    def submitted(self, env: events_pb2.Envelope) -> None:
        key = env.workload
        if too_large_to_copy(env.submitted):
            kept = events_pb2.Envelope()
            kept.CopyFrom(env)
            kept.sequence = 0  # a reader's field: where it was read from, not what it says
            self._pending[key] = kept
        else:  # its name submitted again, small: an object of the old one goes
            self.ended(key)

    def ended(self, workload: str) -> None:
        if workload in self._stored:
            self._pending[workload] = None
        else:
            self._pending.pop(workload, None)  # never written: nothing to remove

    def take(self) -> list[Change]:
        """The changes to make, in the order they were first asked for; forgotten here."""
        out = list(self._pending.items())
        self._pending.clear()
        for key, env in out:
            if env is None:
                self._stored.discard(key)
            else:
                self._stored.add(key)
        return out

    def put_back(self, changes: Iterable[Change]) -> None:
        """Changes not made (NATS failed): made at the next `take`, unless a later one of the
        same workload replaced them meanwhile. Its object may be there either way."""
        for key, env in changes:
            self._pending.setdefault(key, env)
            self._stored.add(key)


class ManifestStore:
    """The MUSTER_MANIFESTS_<c> bucket as one binder replica of cluster <c> uses it."""

    def __init__(self, bucket: ObjectBucket) -> None:
        self._bucket = bucket
        self._written: dict[str, str] = {}  # workload -> the submitted id its object holds

    async def load(self) -> list[str]:
        """The workloads whose object is in the bucket (none when there is no bucket)."""
        for obj in await self._bucket.list():
            self._written[obj.name] = next(iter(obj.headers.get(SUBMITTED_ID_HEADER, [])), "")
        return sorted(self._written)

    async def make(self, changes: list[Change]) -> list[Change]:
        """Make `changes` in order; those not made when NATS failed (logged), from the first
        that failed, for `ManifestChanges.put_back`."""
        for i, (key, env) in enumerate(changes):
            try:
                if env is None:
                    await self._bucket.delete(key)
                    self._written.pop(key, None)
                elif self._written.get(key) != env.event_id:
                    headers = {SUBMITTED_ID_HEADER: [env.event_id]}
                    await self._bucket.put(key, env.SerializeToString(), headers=headers)
                    self._written[key] = env.event_id
            except BusError as err:  # NATS away, or a NATS user not allowed the bucket yet
                log.warning(
                    "cannot keep the manifests of %d workloads in %s yet: %s",
                    len(changes) - i, self._bucket.name, err, extra={"workload": key},
                )  # fmt: skip
                return changes[i:]
        return []

    async def read(self, workload: str, submitted_id: str) -> events_pb2.Envelope | None:
        """The kept `submitted` of `workload` (of `submitted_id`, when given); None when the
        bucket holds none, or another submission's. `Unavailable` when NATS fails."""
        try:
            data = await self._bucket.get(workload)
        except NotFound:
            return None
        env = events_pb2.Envelope()
        try:
            env.ParseFromString(data)
        except DecodeError as err:  # stored data is hostile too: for us, it is not there
            log.warning("unreadable kept manifest: %s", err, extra={"workload": workload})
            return None
        if env.type != "workload.submitted" or env.workload != workload:
            return None
        if submitted_id and env.event_id != submitted_id:
            return None  # an earlier life of the name (its removal not made yet)
        self._written[workload] = env.event_id
        return env
