"""Recorded decisions are reproduced exactly; a change shows as the first differing event."""

from __future__ import annotations

import pytest
from golden_cases import CASES, recorded, replay


@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_reproduces_recorded_decisions(case: str) -> None:
    expected = recorded(case)
    actual = replay(case)
    for i, (want, got) in enumerate(zip(expected, actual, strict=False)):
        assert got == want, f"event {i} differs (run `make golden` if intended)"
    assert len(actual) == len(expected)
