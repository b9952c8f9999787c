"""Who holds a workload name: the claim a Submit writes in `MUSTER_NAMES` before its `submitted`.

One key per name (`<namespace>.<name>`), written only with the revision it was read
at (0: never written), so of two Submits racing for a name JetStream stores one claim however
old the name's previous life is (the stream's dedupe window, 2 min, bounds nothing here). The
value says which submission (`event_id`) claimed which life of the name (`life`: the stream
sequence of the name's last `deleted` then, 0 if none) and when (`at_s`, the claimant's clock).
`verdict` is the pure rule a gateway applies to a claim it finds (docs/events.md, "Dedupe");
`muster.gateway.known` does the reads and writes. Used by the gateway only.

Each gateway also says its mode in the `Envelope.source` of the `submitted` it stores
(`claims_source`), so that a gateway reading another's can tell a mode it may not run beside
(`clash`: a `kv` and a `submitted` gateway do not see each other's claims).
"""

from __future__ import annotations

import enum
from typing import Final, Literal

import msgspec

from muster.bus.subjects import name_key

__all__ = [
    "CLASH_LOOKBACK_S",
    "NAME_CLAIMS",
    "Claim",
    "ClaimsClashError",
    "NameClaims",
    "Verdict",
    "claims_of_source",
    "claims_source",
    "clash",
    "clash_message",
    "decode_claim",
    "encode_claim",
    "name_claims",
    "name_key",
    "verdict",
]

# A claim whose submission is nowhere to be read this long after it was written is taken to be
# a gateway's that stopped between the claim and its `submitted` (restarted mid-claim). Large
# against clock skew between gateways and the claimant's own deadline (CLAIMANT_DEADLINE_S).
ORPHAN_AFTER_S: Final = 120.0
# A claimant that could not send its `submitted` this soon after its claim sends nothing (the
# caller retries): what it sends is always stored well within ORPHAN_AFTER_S of its claim.
CLAIMANT_DEADLINE_S: Final = 30.0


# Where a gateway claims names (`--name-claims`, docs/events.md "One-write claims"): in
# MUSTER_NAMES, as before ("kv"); there and by its fenced `submitted` ("both"); by the latter
# alone ("submitted", one write). Each mode runs beside the next one only.
NameClaims = Literal["kv", "both", "submitted"]
NAME_CLAIMS: Final[tuple[NameClaims, ...]] = ("kv", "both", "submitted")


def name_claims(value: str) -> NameClaims:
    """`--name-claims`: one of NAME_CLAIMS; ValueError for anything else."""
    for mode in NAME_CLAIMS:
        if value == mode:
            return mode
    raise ValueError(f"name claims must be one of {', '.join(NAME_CLAIMS)}, got {value!r}")


# A gateway starting refuses when a gateway of a mode it may not run beside stored a
# `submitted` this recently (its wall clock against the writer's `time_unix_nano`): such a
# gateway may still run. Older history is a rollout's past; a gateway still running that stores
# again is seen then (`clash`). Large against clock skew; a rollout step waits it out.
CLASH_LOOKBACK_S: Final = 120.0
_SOURCE: Final = "gateway"  # `Envelope.source` of every gateway's events: `submit.SOURCE`


def claims_source(mode: NameClaims) -> str:
    """The `Envelope.source` of a `submitted` a gateway claiming names as `mode` stores:
    "gateway" for `kv`, as gateways of before wrote it; `gateway/<mode>` for the others."""
    return _SOURCE if mode == "kv" else f"{_SOURCE}/{mode}"


def claims_of_source(source: str) -> NameClaims | None:
    """The mode of the gateway that stored a `submitted` of `source` ("gateway": `kv`, as
    every gateway of before the one-write claims); None when no gateway stored it (the
    watcher's, which claims nothing) or it names no mode this gateway knows."""
    return _MODE_OF_SOURCE.get(source)  # read for every `submitted` the index follows


_MODE_OF_SOURCE: Final[dict[str, NameClaims]] = {claims_source(m): m for m in NAME_CLAIMS}


class ClaimsClashError(Exception):
    """A gateway claiming names in a mode this one may not run beside stored a `submitted`:
    this gateway takes no Submit (FAILED_PRECONDITION), or does not start."""


def clash(mine: NameClaims, source: str) -> NameClaims | None:
    """The mode of the gateway that stored a `submitted` of `source`, when a gateway claiming
    as `mine` may not run beside it (their modes are not next to each other in NAME_CLAIMS:
    each claims where the other does not look); None when it may, or no gateway stored it."""
    theirs = claims_of_source(source)
    if theirs is None or abs(NAME_CLAIMS.index(theirs) - NAME_CLAIMS.index(mine)) <= 1:
        return None
    return theirs


def clash_message(mine: NameClaims, theirs: NameClaims, workload: str) -> str:
    """What a gateway that found `theirs` beside it says (Submit's answer, health, log)."""
    return (
        f"a gateway with --name-claims {theirs} stored a workload ({workload}) beside this one"
        f" (--name-claims {mine}): a {theirs} and a {mine} gateway do not see each other's"
        " claims, so one name could be taken twice; each mode runs beside the next one only"
        ' (kv beside both, both beside submitted: docs/events.md, "One-write claims"): run'
        " every gateway in one mode or two next to each other, then restart this one"
    )


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """A name's holder: the `submitted` `event_id` of life `life`, written at `at_s`."""

    event_id: str
    life: int
    at_s: float


class Verdict(enum.Enum):
    OURS = "ours"  # this submission holds it already (a retry, or a restart mid-claim)
    TAKE = "take"  # an earlier life's, or an orphan's: replace it at the revision read
    TAKEN = "taken"  # another submission holds this life of the name: "already exists"
    # Another submission holds it, and its `submitted` is not stored: it may be in flight, or
    # never come (a claimant cancelled, killed or past its deadline). Not "already exists":
    # nothing exists yet. Wait a moment for it, else the caller retries.
    HELD = "held"
    READ = "read"  # the index may be behind: read the stream to its end, then ask again


_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(Claim)


def encode_claim(claim: Claim) -> bytes:
    return _ENCODER.encode(claim)


def decode_claim(data: bytes) -> Claim | None:
    """The claim in `data`; None when it is not one (written by hand: anyone may replace it)."""
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError:
        return None


def verdict(
    found: Claim | None,
    mine: Claim,
    *,
    known: str | None,
    caught_up: bool,
    released: bool = False,
    orphan_after_s: float = ORPHAN_AFTER_S,
) -> Verdict:
    """What to do with the claim `found` on a name this gateway would claim as `mine`.

    `mine.life` is the name's last deletion as this gateway's index has read it, `known` the
    event id of the name's `submitted` in that index (None: none since that deletion), and
    `caught_up` whether the index was read to the stream's end after `found` was read. A found
    claim of an earlier life is replaced; one of this life (or of a deletion the index no
    longer remembers) holds, unless nothing anywhere knows its submission long after it was
    written. Never TAKE on an index that may be behind, and never answer TAKEN ("already
    exists") for a submission not stored: HELD. `released`: the name's last write is a
    claim deleted by a Submit that sent nothing (`KnownFollower._release`); it may have
    replaced a claim of the name's current life, so an index that may be behind reads first.
    """
    if found is None:
        return Verdict.READ if released and not caught_up else Verdict.TAKE
    if found.life < mine.life:
        return Verdict.TAKE
    if mine.event_id in (found.event_id, known):
        return Verdict.OURS
    if not caught_up:
        return Verdict.READ
    if known is not None:
        return Verdict.TAKEN
    if mine.at_s - found.at_s > orphan_after_s:
        return Verdict.TAKE
    return Verdict.HELD
