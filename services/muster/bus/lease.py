"""A lease: one key of a key-value bucket with a TTL, owned by whoever created it last.

Admission's shard lease is key `admission.<shard>` in `MUSTER_SHARDS` (docs/services.md).
The bucket's TTL (5 s by default) makes a lease expire when its owner stops renewing it.
`acquire` creates the key if absent and otherwise waits (through NATS outages too, but not
past a refusal: `LeaseRefusedError`); `hold` renews it every `renew_s` with a compare-and-set
on its revision, and raises `LeaseLostError` when that fails (someone else owns it now) or
when no renewal succeeded for a whole TTL (NATS unreachable: assume it expired). A key whose
value is this owner's is this owner's lease, whatever revision it is at: a write whose answer
was lost, or a lease an earlier start of the same process could not give up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Final, Protocol

from muster.bus.cancel import raise_if_cancelling
from muster.bus.errors import BusError, Conflict, Unavailable, refused
from muster.bus.kv import Entry
from muster.bus.pulse import Pulse

log = logging.getLogger(__name__)


# Why a lease was lost (LeaseLostError.cause, the label of admission's step-down counter).
EXPIRED: Final = "expired"  # not renewed within its TTL: the key expired
TAKEN_OVER: Final = "taken_over"  # another owner holds the key
UNREACHABLE: Final = "unreachable"  # NATS did not answer for a TTL: assumed expired
SUPERSEDED: Final = "superseded"  # a later term's takeover record was read (admission)
CAUSES: Final = (EXPIRED, TAKEN_OVER, UNREACHABLE, SUPERSEDED)


class LeaseLostError(RuntimeError):
    """The lease is no longer this owner's: what it guards must stop at once. `cause` is one
    of CAUSES."""

    def __init__(self, message: str, *, cause: str = EXPIRED) -> None:
        super().__init__(message)
        self.cause = cause


class LeaseRefusedError(RuntimeError):
    """NATS refuses the lease's key for good (a permission, an error answer): waiting for it
    would wait forever, so the service stops and says why."""


class LeaseStore(Protocol):
    """The compare-and-set operations of a key-value bucket (`Bucket`) that a lease needs:
    `Conflict` when the revision is not the one expected, `Unavailable` when NATS fails."""

    async def get(self, key: str) -> Entry | None: ...

    async def create(self, key: str, value: bytes) -> int: ...

    async def update(self, key: str, value: bytes, last: int) -> int: ...

    async def delete(self, key: str, last: int | None = None) -> None: ...


class Lease:
    """Ownership of `key` by `owner`, renewed every `renew_s` while `hold` runs."""

    def __init__(
        self,
        kv: LeaseStore,
        *,
        key: str,
        owner: str,
        ttl_s: float = 5.0,
        renew_s: float = 1.0,
        poll_s: float = 0.5,
        denied: Sequence[Exception] = (),
    ) -> None:
        """`denied`: the permissions violations NATS reported on the connection (`Bus.denied`),
        which grows when a request of the lease's was refused (it then goes unanswered)."""
        if not 0 < renew_s < ttl_s:
            raise ValueError(f"lease renewal ({renew_s:g}s) must be shorter than its TTL")
        self.kv = kv
        self.key = key
        self.owner = owner
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.poll_s = poll_s
        self.denied = denied
        self.revision: int | None = None
        # The key's revision when this owner last acquired it: revisions only grow, so a later
        # holder's term is larger (admission's takeover records are ordered by it).
        self.term = 0
        # When the write the key's TTL now runs from was sent (monotonic): the server stored it
        # no sooner, so the lease lasts at least until this plus the TTL (`fresh`).
        self.renewed_at = 0.0

    @property
    def held(self) -> bool:
        return self.revision is not None

    async def acquire(self) -> None:
        """Wait until this replica owns the shard (the previous owner's lease expired)."""
        waiting = False
        refusals = len(self.denied)
        while True:
            raise_if_cancelling()  # nats-py may swallow a cancellation (3.11)
            sent = time.monotonic()
            try:
                self.revision = await self.kv.create(self.key, self.owner.encode())
            except Conflict:
                entry = await self._entry()
                self.revision = self._own(entry)
                if self.revision is not None:  # written no later than now: as good as renewed
                    self.renewed_at = sent
                    self.term = self.revision
                    log.info("lease %s was created by this owner already", self.key)
                    return
                if not waiting:
                    log.info("lease %s is held by another owner; waiting", self.key)
                    waiting = True
            except Unavailable as exc:
                self._raise_if_refused(exc, refusals)
                log.warning("cannot reach the lease %s: %r", self.key, exc)
            else:
                self.renewed_at = sent
                self.term = self.revision
                log.info("acquired lease %s as %s", self.key, self.owner)
                return
            await asyncio.sleep(self.poll_s)

    async def _entry(self) -> Entry | None:
        """The key as stored (None: absent, or not read)."""
        try:
            return await self.kv.get(self.key)
        except BusError as exc:
            log.warning("lease %s not read: %r", self.key, exc)
            return None

    def _own(self, entry: Entry | None) -> int | None:
        """The key's revision if its value is this owner's, else None. A write of ours whose
        answer was lost with the connection (the bus fails it then, and nats-py may still send
        it once reconnected) makes the next one conflict with ourselves: the owner, unique to
        this process, tells it from a takeover."""
        if entry is None or entry.value != self.owner.encode():
            return None
        return entry.revision

    def _raise_if_refused(self, exc: Unavailable, refusals: int) -> None:
        """LeaseRefusedError when `exc` is a refusal rather than an outage: NATS reported a
        permissions violation since `refusals` were told, or JetStream answered an error."""
        if len(self.denied) > refusals:
            why = f"NATS refused a permission ({self.denied[-1]})"
        elif refused(exc):
            why = f"JetStream refused it ({exc})"
        else:
            return
        raise LeaseRefusedError(f"lease {self.key}: {why}; not waiting for it") from exc

    async def hold(self, pulse: Pulse | None = None) -> None:
        """Renew the lease until cancelled; raise LeaseLostError when it cannot be renewed,
        naming why: taken over (by whom), expired (how late the renewal ran: a renewal that
        wakes seconds late was starved by a busy host or a long stretch of work on the event
        loop), or NATS not answering for a TTL. `pulse` beats at each renewal (a renewal
        that hangs is a stall: bus/pulse.py)."""
        renewed_at = time.monotonic()
        while True:
            raise_if_cancelling()  # nats-py may swallow a cancellation (3.11)
            if pulse is not None:
                pulse.beat(self.renew_s)
            due = time.monotonic() + self.renew_s
            await asyncio.sleep(self.renew_s)
            sent = time.monotonic()
            late_s = sent - due
            assert self.revision is not None, "hold() before acquire()"
            try:
                self.revision = await self.kv.update(
                    self.key, self.owner.encode(), last=self.revision
                )
            except Conflict as exc:
                entry = await self._entry()
                self.revision = self._own(entry)
                if entry is None or self.revision is None:
                    raise self._lost(
                        entry, since_s=time.monotonic() - renewed_at, late_s=late_s
                    ) from exc
                renewed_at = time.monotonic()  # `renewed_at` stays: when, is not known
            except Unavailable as exc:
                if time.monotonic() - renewed_at >= self.ttl_s - self.renew_s:
                    self.revision = None
                    raise LeaseLostError(
                        f"lease {self.key} not renewed for a TTL: NATS does not answer ({exc})",
                        cause=UNREACHABLE,
                    ) from exc
                log.warning("lease %s not renewed: %r", self.key, exc)
            else:
                self.renewed_at = sent
                renewed_at = time.monotonic()
            if late_s > self.renew_s:
                log.warning(
                    "lease %s renewal ran %.1fs late (TTL %gs): the event loop was busy",
                    self.key,
                    late_s,
                    self.ttl_s,
                )

    async def confirm(self) -> None:
        """Return at once while the lease surely lasts a renewal interval more; otherwise
        renew it now, and raise LeaseLostError when that fails. A holder whose loop was starved
        may resume in the middle of its work, before the renewal that would tell it the lease
        is gone, and must not act on it meanwhile; a renewal that succeeds at the revision it
        last wrote proves nobody held the key since (an expiry or a takeover changes it)."""
        age_s = time.monotonic() - self.renewed_at
        if self.revision is not None and age_s < self.ttl_s - self.renew_s:
            return
        if self.revision is None:
            raise LeaseLostError(f"lease {self.key} is not held")
        sent = time.monotonic()
        try:
            self.revision = await self.kv.update(self.key, self.owner.encode(), last=self.revision)
        except Conflict as exc:
            entry = await self._entry()
            own = self._own(entry)
            if own is None:
                raise self._lost(entry, since_s=age_s, late_s=age_s - self.renew_s) from exc
            self.revision = own  # `hold` renewed it meanwhile
            return
        except Unavailable as exc:
            raise LeaseLostError(
                f"lease {self.key} may have expired: last renewed {age_s:.1f}s ago (TTL "
                f"{self.ttl_s:g}s) and NATS does not answer: {exc}",
                cause=UNREACHABLE,
            ) from exc
        self.renewed_at = sent

    def _lost(self, entry: Entry | None, *, since_s: float, late_s: float) -> LeaseLostError:
        """Why the key is no longer ours, as the renewal that failed saw it."""
        if entry is None:
            return LeaseLostError(
                f"lease {self.key} expired: last renewed {since_s:.1f}s ago (TTL "
                f"{self.ttl_s:g}s), this renewal ran {late_s:.1f}s late (the event loop "
                "was busy: a long round, a profiler, a loaded host)"
            )
        holder = (entry.value or b"").decode(errors="replace")
        return LeaseLostError(
            f"lease {self.key} was taken over by {holder!r}, last renewed {since_s:.1f}s ago",
            cause=TAKEN_OVER,
        )

    async def release(self) -> None:
        """Give the lease up (clean shutdown), so that a successor need not wait for the TTL."""
        if self.revision is None:
            return
        revision, self.revision = self.revision, None
        with contextlib.suppress(BusError):  # not released: it expires after its TTL
            await self.kv.delete(self.key, last=revision)
