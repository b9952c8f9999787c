"""Gang-permit's permits the binder has not answered yet: each one's bindings, parts and answers,
and, read back at a restart, whether the binder handled it already (its consumer's ack floor).
Pure; `muster.gangpermit.state` keeps them by gang."""

from __future__ import annotations

import msgspec

from muster.contracts.v1 import events_pb2
from muster.core.placement.model import GangKey, NodeName, PodKey
from muster.gangpermit.parts import part_ids


class Permit(msgspec.Struct, kw_only=True):
    """A published `gang_permitted` (one event, or its parts) the binder has not answered yet."""

    event_id: str  # the whole permit's (a part's `permit_id`)
    bindings: dict[PodKey, NodeName]
    restored: bool  # read back from the stream at start, not decided by this process
    uids: dict[PodKey, str] = msgspec.field(default_factory=dict)  # of the pods permitted
    # The event ids of its parts (`event_id` alone when whole), and those the binder answered:
    # the permit is answered once every part is, as a whole permit was by its one answer.
    part_ids: tuple[str, ...] = ()
    answered: set[str] = msgspec.field(default_factory=set)
    bind_failed: bool = False  # a part was answered BindFailed
    # The pods before this one (in `bindings`' order) were seen bound: each bind seen looks on
    # from there, not at every pod again (a gang of n pods: n, not n², looks; `_seen_bound`).
    seen_bound: int = 0
    order: tuple[PodKey, ...] = ()  # the keys of `bindings`, to look on from `seen_bound`
    # Read back (`restored`): the parts' events read, and the highest of their sequences.
    read: set[str] = msgspec.field(default_factory=set)
    sequence: int = 0

    def __post_init__(self) -> None:
        self.order = tuple(self.bindings)
        self.part_ids = self.part_ids or (self.event_id,)


def read_back(permits: dict[GangKey, Permit], gang: GangKey, env: events_pb2.Envelope) -> None:
    """Fold in our own permit (or a part of it), read back while restoring. A permit's parts
    are joined; a part whose permit crashed before its later parts were stored holds what it
    names alone."""
    permitted = env.gang_permitted
    whole = permitted.permit_id or env.event_id
    permit = permits.get(gang)
    if permit is None or permit.event_id != whole:
        permit = permits[gang] = Permit(
            event_id=whole,
            bindings={},
            restored=True,
            part_ids=part_ids(whole, permitted.parts),
        )
    for b in permitted.bindings:
        key = PodKey(f"{b.pod.namespace}/{b.pod.name}")
        permit.bindings[key] = NodeName(b.node)
        permit.uids[key] = b.pod.uid
    permit.order = tuple(permit.bindings)
    permit.read.add(env.event_id)
    permit.sequence = max(permit.sequence, env.sequence)


def answer(
    permits: dict[GangKey, Permit], gang: GangKey, cause: str, *, failed: bool
) -> Permit | None:
    """The binder answered permit part `cause` (bound, or rejected); once it answered every
    part, the permit no longer holds: taken out of `permits` and returned then, None before
    (and for an older permit's answer)."""
    permit = permits.get(gang)
    if permit is None or cause not in permit.part_ids:
        return None  # an older permit's answer
    permit.answered.add(cause)
    permit.bind_failed |= failed
    if len(permit.answered) < len(permit.part_ids):
        return None  # parts not answered yet: they are being bound
    del permits[gang]
    return permit


def handled_before(permit: Permit, binder_acked: int) -> bool:
    """Whether the binder handled every part of read-back `permit`: each is stored, and at or
    below `binder_acked`, its consumer's ack floor."""
    return permit.read == set(permit.part_ids) and 0 < permit.sequence <= binder_acked
