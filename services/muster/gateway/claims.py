"""Who holds a workload name: the claim a Submit writes in `MUSTER_NAMES` before its `submitted`.

One key per name (`<namespace>.<name>`), written only with the revision it was read
at (0: never written), so of two Submits racing for a name JetStream stores one claim however
old the name's previous life is (the stream's dedupe window, 2 min, bounds nothing here). The
value says which submission (`event_id`) claimed which life of the name (`life`: the stream
sequence of the name's last `deleted` then, 0 if none) and when (`at_s`, the claimant's clock).
`verdict` is the pure rule a gateway applies to a claim it finds (docs/events.md, "Dedupe");
`muster.gateway.known` does the reads and writes. Used by the gateway only.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

import msgspec

from muster.bus.subjects import name_key

__all__ = [
    "NAME_CLAIMS",
    "Claim",
    "NameClaims",
    "Verdict",
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
