"""Which workloads a Submit would find already there, by admission's duplicate rule.

Admission ignores a `submitted` of a workload it knows, live or finished (the last
FINISHED_KEPT finished; a deleted one is forgotten: `admission.ledger.Ledger.submit`). The
gateway keeps the same index (`KnownWorkloads`, pure) from the same events, so that Submit on
the NATS path answers "already exists; left as it is" for such a workload, as the API server
does on Kubernetes, and publishes nothing for it, instead of "submitted" for what admission
would drop (tests/unit/gateway/test_gateway_known.py holds the two rules together).

`KnownFollower` reads only `submitted`, `finished` and `deleted`, from the first Submit on (a
`kv` or `both` gateway nobody submits to reads nothing more than before; a `submitted` one
reads from its start, `start_check`). An index that may be behind is
trusted to say "new"; when it says "known", the stream is read up to its end first, so a
deletion stored just before is seen, as admission will see it.

Two gateways (or one behind) can both find a name new at the same instant. So a Submit claims
the name (`claims`, `--name-claims`): "kv", as gateways from before the one-write claims do,
in `MUSTER_NAMES` (`muster.gateway.claims`: one key per name, written only at the revision
read) before its `submitted`; "both", in `MUSTER_NAMES` and by storing its `submitted` on its
name's subject (`subjects.named_subject`), fenced on that name's filter in every cluster
(`subjects.name_filter`): at 0 for a name never stored so, or at the sequence of its last
life's `submitted` once the index has read that life's `deleted`; "submitted", by that fenced
write alone. Of two racing submissions one holds the name and the other's caller is told
"already exists" (or, when the holder is its own Submit, retried, "submitted"). A "kv"
gateway and a "submitted" one do not see each other's claims: "both" is the step between
(docs/events.md, "One-write claims"). The `submitted` is still stored under a message id per
name and life (`KnownWorkloads.claim`), which is what keeps gateways of before the claims
apart from these during an upgrade (docs/events.md, "Dedupe").

Nothing else keeps a `kv` gateway from running beside a `submitted` one (a rollback done wrong,
a stale replica), so each gateway says its mode in the `submitted` it stores
(`claims.claims_source`) and the follower watches the others': one stored by a mode this
gateway may not run beside (`claims.clash`) since this gateway started, or within
`CLASH_LOOKBACK_S` before, stops its Submits (`ClaimsClashError`, `on_clash`).
`start_check` reads the index at start (a `submitted` gateway) and refuses a start beside
such a gateway; a `kv` gateway reads it from its first Submit on, as before, and refuses that
Submit. Past that, the first `submitted` either gateway stores stops the other once read (the
follower's lag, milliseconds: the window in which both may still take a name).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, Protocol

import msgspec

from muster.bus.buckets import NAMES_BUCKET
from muster.bus.connection import Stored
from muster.bus.errors import BusError, Conflict, Retry, SetupError, Unavailable
from muster.bus.kv import Bucket
from muster.bus.publisher import Duplicated
from muster.bus.subjects import EVENTS_KEPT_S, EVENTS_STREAM, name_filter, workload_filters
from muster.bus.supervision import supervised
from muster.contracts.v1 import events_pb2
from muster.gateway.claims import (
    CLAIMANT_DEADLINE_S,
    CLASH_LOOKBACK_S,
    ORPHAN_AFTER_S,
    Claim,
    ClaimsClashError,
    NameClaims,
    Verdict,
    claims_source,
    clash,
    clash_message,
    decode_claim,
    encode_claim,
    name_key,
    verdict,
)
from muster.gateway.submit import PlannedEvent
from muster.gateway.watch import EventHistory
from muster.gateway.workloads import RETRY_S, follow_forever

log = logging.getLogger(__name__)

FINISHED_KEPT: Final = 100_000  # admission's (admission/ledger.py): the test holds them equal
CATCH_UP_S: Final = 10.0
SENT_KEPT: Final = 10_000  # own submissions awaiting read-back; beyond, admission decides
# Names whose last deletion is remembered, for `claim`; of one forgotten, a claim found in
# MUSTER_NAMES is taken for the name's current life (`claims.verdict`).
DELETED_KEPT: Final = 100_000
CLAIMS: Final = 4  # a name's claim replaced under a Submit this often: retry the Submit
# A claim held by a submission not stored yet: how long a Submit waits for that `submitted`
# (a racing call stores it within milliseconds) before answering UNAVAILABLE, and its steps.
HELD_WAIT_S: Final = 2.0
HELD_POLL_S: Final = (0.02, 0.05, 0.1, 0.2, 0.5)
SUBJECTS: Final = tuple(
    subject
    for event in ("submitted", "finished", "deleted")
    for subject in workload_filters("*", event)
)


class KnownWorkloads:
    """Workloads submitted and not deleted (the last `finished_kept` finished ones), with the
    event id of their `submitted`, as of stream sequence `sequence`."""

    def __init__(self, *, finished_kept: int = FINISHED_KEPT, sent_kept: int = SENT_KEPT) -> None:
        self.live: dict[str, str] = {}
        self.deleted: OrderedDict[str, int] = OrderedDict()  # key -> its last deletion's sequence
        # The sequence of the `submitted` holding each live or finished key, and of the last
        # one of each deleted key: what the name's next `submitted` is fenced at.
        self.held_at: dict[str, int] = {}
        self.freed_at: dict[str, int] = {}
        self.finished: OrderedDict[str, str] = OrderedDict()  # oldest first
        self.finished_kept = finished_kept
        self.sequence = 0
        # This gateway's own submissions not read back yet: a second call right after the
        # first must not find the name new only because the follower is behind.
        self.sent: dict[str, str] = {}  # oldest first
        self.sent_kept = sent_kept

    def apply(self, env: events_pb2.Envelope) -> None:
        """Learn what `env` says; one at or below `sequence` was read already."""
        if env.sequence and env.sequence <= self.sequence:
            return
        self.sequence = max(self.sequence, env.sequence)
        key = env.workload
        if self.sent.get(key) == env.event_id:
            del self.sent[key]
        match env.WhichOneof("payload"):
            case "submitted" if key not in self.live and key not in self.finished:
                self.live[key] = env.event_id
                self.held_at[key] = env.sequence
            case "finished" if key in self.live:
                self.finished[key] = self.live.pop(key)
                if len(self.finished) > self.finished_kept:
                    self.held_at.pop(self.finished.popitem(last=False)[0], None)
            case "deleted":
                self.live.pop(key, None)
                self.finished.pop(key, None)
                self.sent.pop(key, None)
                self.deleted[key] = env.sequence
                self.deleted.move_to_end(key)
                if held_at := self.held_at.pop(key, 0):
                    self.freed_at[key] = held_at
                if len(self.deleted) > DELETED_KEPT:
                    self.freed_at.pop(self.deleted.popitem(last=False)[0], None)

    def life(self, key: str) -> int:
        """The sequence of `key`'s last deletion read (0: none): which life of the name is next."""
        return self.deleted.get(key, 0)

    def fence(self, key: str) -> int:
        """The sequence `key`'s next `submitted` is fenced at: its last life's, once deleted
        (0: none known; a wrong guess is only a refused write, `KnownFollower._store`)."""
        return 0 if key in self.held_at else self.freed_at.get(key, 0)

    def claim(self, cluster: str, key: str, life: int | None = None) -> str:
        """The message id a `submitted` of `key` is stored under: one per name and life of
        the name (since its last deletion), the same in every gateway that read as far."""
        return f"submitted/{cluster}/{key}/{self.life(key) if life is None else life}"

    def holder(self, key: str) -> str | None:
        """The event id of `key`'s `submitted` in its current life (None: none known)."""
        return self.live.get(key) or self.finished.get(key) or self.sent.get(key)

    def published(self, key: str, event_id: str) -> None:
        """This gateway stored a `submitted` of `key`: known before the follower reads it."""
        if key not in self.live and key not in self.finished:
            self.sent[key] = event_id
            if len(self.sent) > self.sent_kept:  # a follower that stopped reading: stay bounded
                del self.sent[next(iter(self.sent))]

    def duplicate(self, key: str, event_id: str) -> bool:
        """Whether admission would ignore a `submitted` of `key` with id `event_id`: the key is
        known by another `submitted` (a Submit retried with its idempotency key publishes the
        same id again: the same submission, which JetStream drops)."""
        known = self.holder(key)
        return known is not None and known != event_id


def duplicates(known: KnownWorkloads, planned: Sequence[PlannedEvent]) -> list[PlannedEvent]:
    """The workloads of `planned` that `known` says admission would ignore."""
    return [
        p
        for p in planned
        if p.payload_field == "submitted" and known.duplicate(p.workload, p.event_id)
    ]


class Held(NamedTuple):
    """A name a Submit holds: its key in MUSTER_NAMES, the life held, and the revision of the
    claim this call wrote (0: one it found its own, written before: never its to release)."""

    key: str
    life: int
    revision: int


class SubmitPublisher(Protocol):
    """How Submit stores an event (`muster.bus.Bus.publish`)."""

    async def publish(
        self,
        env: events_pb2.Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
        fenced_on: str | None = None,
        dedupe_id: str | None = None,
        named: bool = False,
    ) -> int: ...


class KnownBus(EventHistory, Protocol):
    """What the index reads (MUSTER_EVENTS) and where names are claimed (`muster.bus.Bus`)."""

    async def kv(self, bucket: str, *, ttl_s: float | None = None) -> Bucket: ...

    async def last_stored(
        self, subject_filter: str, stream: str = EVENTS_STREAM
    ) -> Stored | None: ...


class KnownFollower:
    """Feeds a `KnownWorkloads` from MUSTER_EVENTS, from `start_check` or the first
    `duplicates` call on, and claims names in MUSTER_NAMES for Submit."""

    def __init__(
        self,
        history: KnownBus,
        *,
        catch_up_s: float = CATCH_UP_S,
        read_s: float = CATCH_UP_S,
        orphan_after_s: float = ORPHAN_AFTER_S,
        clock: Callable[[], float] = time.time,
        claims: NameClaims = "kv",
        clash_lookback_s: float = CLASH_LOOKBACK_S,
    ) -> None:
        self.history = history
        self.claims = claims  # where names are claimed: in MUSTER_NAMES, by the `submitted`
        # A gateway of a mode this one may not run beside (`claims.clash`): what it says, and
        # who is told (the server's health). Once set, no Submit is taken until a restart.
        self.clashed: str | None = None
        self.on_clash: Callable[[str], None] | None = None
        # What counts: a `submitted` stored after `_since_sequence` (the stream's end at
        # `start_check`), or written after `_since_s` less the lookback.
        self._since_sequence: int | None = None
        self._since_s = clock()
        self.clash_lookback_s = clash_lookback_s
        self.known = KnownWorkloads()
        self.catch_up_s = catch_up_s  # a Submit's wait for the index, then the claims decide
        self.read_s = read_s  # a claim's wait for the stream's end, then UNAVAILABLE
        self.held_wait_s = HELD_WAIT_S
        self.orphan_after_s = orphan_after_s
        self._clock = clock  # claims compare the claimants' wall clocks (`Claim.at_s`)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._names: Bucket | None = None
        # The follower's first reading and Submits' claims may all read to the end: one at a
        # time, so that the later ones start where the first stopped instead of reading it all.
        self._reading = asyncio.Lock()

    async def start_check(self) -> None:
        """For a `submitted` gateway: read the index now, and from now on watch for a `kv`
        gateway; `ClaimsClashError` when one stored a `submitted` within the lookback. An index
        not read within `catch_up_s` starts the gateway anyway: the follower goes on reading.
        A `kv` gateway (the default, often one nobody submits to) reads it from its first
        Submit on, as before, and refuses that Submit instead; a `both` one runs beside either.
        """
        self._since_s = self._clock()
        if self.claims != "submitted":
            return
        self._since_sequence = await self.history.last_sequence(EVENTS_STREAM)
        self._follow()
        try:
            async with asyncio.timeout(self.catch_up_s):
                await self._ready.wait()
        except TimeoutError:
            log.warning(
                "gateway start: events not read in %gs: gateways of other --name-claims modes"
                " are looked for as they are read",
                self.catch_up_s,
            )
        if self.clashed is not None:
            raise ClaimsClashError(self.clashed)

    def _follow(self) -> None:
        if self._task is None:
            self._task = supervised(self._run(), name="gateway-known-workloads")

    def _apply(self, env: events_pb2.Envelope) -> None:
        """`KnownWorkloads.apply`, and a look at which gateway stored a `submitted`."""
        self.known.apply(env)
        if self.clashed is not None or env.WhichOneof("payload") != "submitted":
            return
        theirs = clash(self.claims, env.source)
        if theirs is None:
            return
        if (self._since_sequence is None or env.sequence <= self._since_sequence) and (
            env.time_unix_nano < (self._since_s - self.clash_lookback_s) * 1e9
        ):
            return  # history: a rollout's past, or a gateway gone since
        self.clashed = clash_message(self.claims, theirs, env.workload)
        log.error("submit: taking no more Submits: %s", self.clashed)
        if self.on_clash is not None:
            self.on_clash(self.clashed)

    async def duplicates(self, planned: Sequence[PlannedEvent]) -> list[PlannedEvent]:
        """What of `planned` admission would ignore as duplicates; none when the index cannot
        be read in `catch_up_s` (then the claims alone decide)."""
        if not any(p.payload_field == "submitted" for p in planned):
            return []
        if self._ready.is_set() and not duplicates(self.known, planned):
            return []  # the common case: no timer to arm for a wait that cannot happen
        try:
            async with asyncio.timeout(self.catch_up_s):
                self._follow()
                await self._ready.wait()
                if not duplicates(self.known, planned):
                    return []
                await self._read_to_end()  # "known" may be stale: a deletion just stored
        except TimeoutError:
            log.warning(
                "submit: events not read in %gs: duplicates left to the claims", self.catch_up_s
            )
            return []
        except BusError as exc:
            log.warning("submit: events not read (%s): duplicates left to the claims", exc)
            return []
        return duplicates(self.known, planned)

    async def publish(self, bus: SubmitPublisher, envs: Sequence[events_pb2.Envelope]) -> set[str]:
        """Claim the names of the `submitted` among `envs` (all at once), then store `envs` in
        order but for those whose name another submission holds: their event ids (their
        callers: "already exists").

        When it fails before a `submitted` was sent, the claims this call wrote for it are
        released (`_release`): without an idempotency key its caller's retry is another
        submission, which must not wait for this one's claims to age out. Nothing is stored
        once a gateway of a mode this one may not run beside was read: `ClaimsClashError`.
        """
        if self.clashed is not None:
            raise ClaimsClashError(self.clashed)
        submitted = [env for env in envs if env.WhichOneof("payload") == "submitted"]
        for env in submitted:  # which claims this is, for the other gateways (`claims.clash`)
            env.source = claims_source(self.claims)
        claimed_at = time.monotonic()
        if self._one_write(submitted):
            held: dict[str, Held | None] = {
                env.event_id: Held(name_key(env.workload), self.known.life(env.workload), 0)
                for env in submitted
            }
        else:
            held = await self._claim_all(submitted)
        unsent = {event_id: h for event_id, h in held.items() if h is not None and h.revision}
        lost = {event_id for event_id, h in held.items() if h is None}
        try:
            if time.monotonic() - claimed_at > CLAIMANT_DEADLINE_S:
                # Stored later, a `submitted` could follow another gateway's takeover of the claim.
                raise Retry(1.0, f"names claimed, not stored within {CLAIMANT_DEADLINE_S:g}s")
            for env in envs:
                if env.event_id not in held:
                    await bus.publish(env)
                    continue
                holding = held[env.event_id]
                # From here on its `submitted` may be stored (a publish cut after it was sent).
                unsent.pop(env.event_id, None)
                if holding is not None and not await self._store(bus, env, holding.life):
                    lost.add(env.event_id)
        except BaseException:
            await self._release(unsent)
            raise
        return lost

    def _one_write(self, submitted: Sequence[events_pb2.Envelope]) -> bool:
        """Whether the fenced `submitted` alone claims these names: no gateway claims in
        MUSTER_NAMES alone ("submitted"), and the index was read to the stream's end, so it
        knows every name a `submitted` without a name holds (stored before)."""
        if self.claims != "submitted" or not self._ready.is_set():
            return False
        # A name the index says another submission holds, left to the claims by a Submit whose
        # read to the end timed out (`duplicates`): it may be held by a `submitted` without a
        # name, which the fence does not see; the KV claim and the index decide (`_judge`).
        return all(
            env.partition and self.known.holder(env.workload) in (None, env.event_id)
            for env in submitted
        )  # a named subject needs its partition

    async def _claim_all(self, submitted: Sequence[events_pb2.Envelope]) -> dict[str, Held | None]:
        """`_claim` for each of `submitted` (by event id), all at once; when one fails, the
        claims the others wrote are released and its error raised."""
        if len(submitted) == 1:  # one workload per Submit: no task to make for it
            return {submitted[0].event_id: await self._claim(submitted[0])}
        # Every claim runs to its end before one's failure is raised: a claim still in flight
        # then could be written after the release.
        results = await asyncio.gather(
            *(self._claim(env) for env in submitted), return_exceptions=True
        )
        held: dict[str, Held | None] = {}
        failed: BaseException | None = None
        for env, result in zip(submitted, results, strict=True):
            if isinstance(result, BaseException):
                failed = failed or result
            else:
                held[env.event_id] = result
        if failed is not None:
            await self._release({e: h for e, h in held.items() if h is not None and h.revision})
            raise failed
        return held

    async def _release(self, claims: dict[str, Held]) -> None:
        """Delete `claims` (this call wrote each, at `revision`, and sent none's `submitted`),
        each only while it is still that revision: a claim written since (another Submit's,
        after this one's was orphaned) is never released. Best effort: one not released ages
        out as an orphan's (`ORPHAN_AFTER_S`)."""
        if not claims:
            return
        names = await self._bucket()

        async def release(h: Held) -> None:
            try:
                await names.delete(h.key, last=h.revision)
            except Conflict:
                pass  # written since: not this Submit's any more
            except BusError as exc:
                log.warning("submit: claim of %s not released: %s", h.key, exc)

        # Shielded: a Submit cancelled by its caller still releases what it claimed.
        await asyncio.shield(asyncio.gather(*(release(h) for h in claims.values())))

    async def _store(self, bus: SubmitPublisher, env: events_pb2.Envelope, life: int) -> bool:
        """Store `submitted` `env` of life `life` of its name, on its name's subject fenced on
        the name's filter (unless "kv", or it names no partition); False when another
        submission holds that life: one stored so, or a `submitted` of that life stored without
        a claim (a gateway of before the claims, within the dedupe window: its caller was told
        "submitted" first)."""
        claim = self.known.claim(env.cluster, env.workload, life)
        if env.partition and self.claims != "kv":
            fenced = await self._store_fenced(bus, env, claim)
            if fenced is not None:
                return fenced
        # Without a name subject ("kv", or no partition): the KV claim alone holds the name.
        elif not isinstance(await bus.publish(env, dedupe_id=claim), Duplicated):
            return True
        await self._read_to_end_within()  # the submission stored under `claim`
        return not self.known.duplicate(env.workload, env.event_id)

    async def _store_fenced(
        self, bus: SubmitPublisher, env: events_pb2.Envelope, claim: str
    ) -> bool | None:
        """Store `env` on its name's subject, fenced where the index says the name's last
        `submitted` is: True when stored (or found stored: a retry), False when another
        submission holds the name's current life, None when the dedupe id says a gateway of
        before stored it (`_store` decides). A refused write reads the filter's last message:
        this submission's (stored already), an earlier life's (written again, fenced at it),
        or, once the index is read to the end and knows no deletion after it, another's."""
        fence = name_filter(env.workload)
        expected = self.known.fence(env.workload)
        for _ in range(CLAIMS):
            try:
                stored = await bus.publish(
                    env,
                    dedupe_id=claim,
                    named=True,
                    expected_last_subject_sequence=expected,
                    fenced_on=fence,
                )
                return None if isinstance(stored, Duplicated) else True
            except Conflict:
                pass  # the name's last `submitted` is not at `expected`
            last = await self.history.last_stored(fence)
            if last is None:
                expected = 0  # nothing stored on it any more (aged out)
                continue
            if last.envelope is not None and last.envelope.event_id == env.event_id:
                return True  # this submission's, stored before: a retry
            # A `submitted` that does not decode holds nothing: readers skip it too.
            if last.envelope is None or self.known.life(env.workload) > last.sequence:
                expected = last.sequence
                continue
            await self._read_to_end_within()
            if self.known.life(env.workload) <= last.sequence:
                return False  # the name's current life is another submission's
            expected = last.sequence
        raise Retry(1.0, f"{env.workload}: its name was claimed again and again while submitting")

    async def _claim(self, env: events_pb2.Envelope) -> Held | None:
        """Claim `submitted` `env`'s name in MUSTER_NAMES: the life of the name it holds now
        (written now, or by this Submit before: a retry), or None when another holds it."""
        names = await self._bucket()
        key = name_key(env.workload)
        mine = Claim(event_id=env.event_id, life=self.known.life(env.workload), at_s=self._clock())
        revision = 0  # the hot path: a name never claimed, one write
        for _ in range(CLAIMS):
            try:
                written = await names.write(key, encode_claim(mine), last=revision)
                return Held(key=key, life=mine.life, revision=written)
            except Conflict:
                pass  # held, or replaced since it was read
            judged, revision, mine = await self._judge(names, key, mine, env.workload)
            if judged is Verdict.OURS:
                return Held(key=key, life=mine.life, revision=0)
            if judged is Verdict.TAKEN:
                return None
        raise Retry(1.0, f"{env.workload}: its name was claimed again and again while submitting")

    async def _judge(
        self, names: Bucket, key: str, mine: Claim, workload: str
    ) -> tuple[Verdict, int, Claim]:
        """The verdict on the claim at `key` (the stream read to its end first when the index
        may be behind), the revision it was read at, and `mine` as of the index then (of the
        life held, when OURS)."""
        caught_up = False
        polls = iter(HELD_POLL_S)
        held_until: float | None = None
        while True:
            entry = await names.last_write(key)
            found = None if entry is None or entry.value is None else decode_claim(entry.value)
            revision = 0 if entry is None else entry.revision
            judged = verdict(
                found,
                mine,
                known=self.known.holder(workload),
                caught_up=caught_up,
                released=entry is not None and entry.value is None,
                orphan_after_s=self.orphan_after_s,
            )
            if judged is Verdict.OURS and found is not None:
                return (
                    judged,
                    revision,
                    msgspec.structs.replace(mine, life=max(found.life, mine.life)),
                )
            if judged is Verdict.HELD:
                now = time.monotonic()
                held_until = now + self.held_wait_s if held_until is None else held_until
                if now >= held_until:
                    age_s = 0.0 if found is None else max(0.0, mine.at_s - found.at_s)
                    raise Unavailable(
                        f"{workload}: another Submit claimed this name {age_s:.0f}s ago and"
                        f" has not stored it: retry (the name is free again"
                        f" {self.orphan_after_s:.0f}s after that claim if it never does)"
                    )
                await asyncio.sleep(min(next(polls, HELD_POLL_S[-1]), held_until - now))
            elif judged is not Verdict.READ:
                return judged, revision, mine
            await self._read_to_end_within()
            caught_up = True
            mine = msgspec.structs.replace(mine, life=self.known.life(workload))

    async def _bucket(self) -> Bucket:
        if self._names is None:
            try:
                # Made as `muster nats-setup` makes it, when a gateway is first (dev, one user).
                self._names = await self.history.kv(NAMES_BUCKET, ttl_s=EVENTS_KEPT_S)
            except SetupError as exc:  # not a BusError: Submit answers UNAVAILABLE for this
                raise Unavailable(str(exc)) from exc
        return self._names

    def published(self, planned: Sequence[PlannedEvent]) -> None:
        """`planned` was stored: its submissions are known from now on."""
        for p in planned:
            if p.payload_field == "submitted":
                self.known.published(p.workload, p.event_id)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _read_to_end_within(self) -> None:
        """`_read_to_end`, or `Unavailable` after `read_s`: a Submit that must know what is
        stored before it answers (a claim found) is answered UNAVAILABLE (retry) instead."""
        try:
            async with asyncio.timeout(self.read_s):
                await self._read_to_end()
        except TimeoutError as exc:
            raise Unavailable(f"events not read in {self.read_s:g}s: retry") from exc

    async def _read_to_end(self) -> None:
        """Read every event stored now into the index (the follower may be behind)."""
        async with self._reading:
            await self._read_stored()

    async def _read_stored(self) -> None:
        last = await self.history.last_sequence(EVENTS_STREAM)
        if last <= self.known.sequence:
            return
        replay = self.history.replay(
            list(SUBJECTS),
            stream=EVENTS_STREAM,
            from_sequence=self.known.sequence + 1,
            until_sequence=last,
        )
        async for env in replay:
            self._apply(env)
        self.known.sequence = max(self.known.sequence, last)

    async def _run(self) -> None:
        """Read the stream to its end, then follow it; a bus failure is retried."""
        while not self._ready.is_set():
            try:
                await self._read_to_end()
                self._ready.set()
            except BusError as exc:
                log.warning("known workloads: reading events failed, retrying: %s", exc)
                await asyncio.sleep(RETRY_S)
        await follow_forever(
            self.history,
            SUBJECTS,
            lambda: self.known.sequence + 1,
            self._apply,
            what="known workloads",
        )
