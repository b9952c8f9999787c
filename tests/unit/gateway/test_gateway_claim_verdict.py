"""`claims.verdict`: which claim of a workload name a Submit may replace, and when it must read."""

from __future__ import annotations

import pytest

from muster.gateway.claims import (
    ORPHAN_AFTER_S,
    Claim,
    Verdict,
    decode_claim,
    encode_claim,
    name_key,
    verdict,
)

MINE = Claim(event_id="mine", life=7, at_s=1_000.0)


def found(event_id: str = "theirs", *, life: int = 7, age_s: float = 1.0) -> Claim:
    return Claim(event_id=event_id, life=life, at_s=MINE.at_s - age_s)


@pytest.mark.parametrize(
    ("claim", "known", "caught_up", "expected"),
    [
        pytest.param(None, None, False, Verdict.TAKE, id="no claim, or a deleted one"),
        pytest.param(found(life=3), "theirs", False, Verdict.TAKE, id="of a life since deleted"),
        pytest.param(found("mine"), None, False, Verdict.OURS, id="this submission, retried"),
        pytest.param(found(), "mine", True, Verdict.OURS, id="this submission stored first"),
        pytest.param(found(), None, False, Verdict.READ, id="held: the index may be behind"),
        pytest.param(found(life=9), None, False, Verdict.READ, id="of a deletion not read yet"),
        pytest.param(found(), "theirs", True, Verdict.TAKEN, id="held, its submitted read"),
        pytest.param(found(), None, True, Verdict.HELD, id="held, its submitted not stored"),
        pytest.param(
            found(age_s=ORPHAN_AFTER_S), None, True, Verdict.HELD, id="just not an orphan yet"
        ),
        pytest.param(found(age_s=ORPHAN_AFTER_S + 1), None, True, Verdict.TAKE, id="an orphan's"),
        pytest.param(
            found(age_s=ORPHAN_AFTER_S + 1), "theirs", True, Verdict.TAKEN, id="old, still held"
        ),
    ],
)
def test_verdict(
    claim: Claim | None, known: str | None, caught_up: bool, expected: Verdict
) -> None:
    assert verdict(claim, MINE, known=known, caught_up=caught_up) == expected


def test_a_claim_reads_back_as_written_and_anything_else_as_no_claim() -> None:
    assert decode_claim(encode_claim(MINE)) == MINE
    assert decode_claim(b"written by hand") is None


def test_a_name_is_its_key_readably_and_anything_unkeyable_hashed() -> None:
    assert name_key("ml/train.v2") == "ml.train.v2"
    hashed = name_key("ml/a..b")
    assert hashed.startswith("=sha256.")
    assert hashed != name_key("ml/a...b")
