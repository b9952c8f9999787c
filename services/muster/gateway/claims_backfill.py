"""The claims of names live from before `MUSTER_NAMES`, written once (`muster nats-setup`).

A name submitted before the gateways claimed names has no claim. A gateway that cannot read
MUSTER_EVENTS within its catch-up time (10 s) trusts its empty index and would claim such a
name as new, and store a second `submitted` that admission ignores while its caller is told
"submitted". The backfill reads MUSTER_EVENTS' `submitted`, `finished` and `deleted` into the
gateway's own index (`known.KnownWorkloads`: live and finished names by admission's duplicate
rule, and each name's life), and writes each such name's claim as its gateway would have
written it at its Submit: its `submitted`'s event id, the life, its time.

Each claim is written at revision 0 only: a claim a gateway wrote meanwhile (or an earlier
backfill) is left as it is, so running it again changes nothing (docs/events.md, "Dedupe").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final, NamedTuple

from muster.bus.buckets import NAMES_BUCKET
from muster.bus.errors import Conflict
from muster.bus.subjects import EVENTS_KEPT_S, EVENTS_STREAM
from muster.gateway.claims import Claim, encode_claim, name_key
from muster.gateway.known import SUBJECTS, KnownBus, KnownWorkloads

IN_FLIGHT: Final = 256  # claims written at once


class Backfilled(NamedTuple):
    written: int  # names claimed now
    held: int  # names claimed already (by a gateway, or a backfill before)
    sequence: int  # MUSTER_EVENTS read up to this sequence


def live_claims(
    known: KnownWorkloads, submitted_at_s: Mapping[str, float], *, now_s: float
) -> Iterator[tuple[str, Claim]]:
    """(key in MUSTER_NAMES, claim) of every name `known` says admission holds, live or
    finished, as its gateway would have claimed it: at its `submitted`'s time (by name in
    `submitted_at_s`; `now_s` when the envelope says none)."""
    for workload, event_id in [*known.live.items(), *known.finished.items()]:
        at_s = submitted_at_s.get(workload) or now_s
        claim = Claim(event_id=event_id, life=known.life(workload), at_s=at_s)
        yield name_key(workload), claim


async def backfill_claims(bus: KnownBus, *, clock: Callable[[], float] = time.time) -> Backfilled:
    """Claim in MUSTER_NAMES every name MUSTER_EVENTS holds for a workload now, where no
    claim was ever written."""
    known = KnownWorkloads()
    submitted_at_s: dict[str, float] = {}  # name -> its holder's time: bounded by the names
    last = await bus.last_sequence(EVENTS_STREAM)
    if last:
        replay = bus.replay(list(SUBJECTS), stream=EVENTS_STREAM, until_sequence=last)
        async for env in replay:
            known.apply(env)
            if known.live.get(env.workload) == env.event_id:  # its holder's `submitted`
                submitted_at_s[env.workload] = env.time_unix_nano / 1e9
            elif env.WhichOneof("payload") == "deleted":
                submitted_at_s.pop(env.workload, None)
    names = await bus.kv(NAMES_BUCKET, ttl_s=EVENTS_KEPT_S)
    claims = list(live_claims(known, submitted_at_s, now_s=clock()))
    written = 0
    for start in range(0, len(claims), IN_FLIGHT):
        batch = claims[start : start + IN_FLIGHT]
        results = await asyncio.gather(
            *(names.write(key, encode_claim(claim), last=0) for key, claim in batch),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Conflict):
                raise result
        written += sum(not isinstance(r, BaseException) for r in results)
    return Backfilled(written=written, held=len(claims) - written, sequence=last)
