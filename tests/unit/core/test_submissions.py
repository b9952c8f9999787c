"""EndedSubmissions: which `submitted` ids ended, kept for a time in the stream's own clock."""

from __future__ import annotations

import math

import pytest

from muster.core.submissions import EndedSubmissions

KEPT_S = 60.0


def test_a_submission_ends_with_its_workload_and_a_resubmission_replaces_it() -> None:
    ended = EndedSubmissions(kept_s=KEPT_S)
    for workload, submitted in (("a", "a-1"), ("a", "a-2"), ("b", "b-1")):
        ended.submitted(workload, submitted, at_s=1.0)
    assert "a-1" not in ended
    ended.ended("a", at_s=2.0)  # both of its submissions since it last ended
    assert ("a-1" in ended, "a-2" in ended, "b-1" in ended) == (True, True, False)
    assert not ended.replaced("a", "a-1")  # ended, and not submitted again (yet)
    ended.submitted("a", "a-3", at_s=3.0)  # its name used again: the new one has not ended
    assert "a-3" not in ended
    assert ended.replaced("a", "a-1")
    assert not ended.replaced("a", "a-3")
    assert "" not in ended  # a decision written before submitted ids


def test_an_end_is_kept_for_its_time_however_many_end_after_it() -> None:
    # Before, the newest 200 000 were kept: a burst of ends pushed out one a late decision
    # could still name, and a quiet day kept 200 000 for good.
    ended = EndedSubmissions(kept_s=KEPT_S)
    ended.submitted("ns/late", "late-1", at_s=0.0)
    ended.ended("ns/late", at_s=10.0)
    for i in range(20_000):
        ended.submitted(f"ns/w-{i}", f"w-{i}")  # no time: the stream's latest
        ended.ended(f"ns/w-{i}", at_s=10.0 + i * KEPT_S / 40_000)
    assert "late-1" in ended

    ended.submitted("ns/next", "next-1", at_s=10.0 + KEPT_S)
    assert "late-1" in ended  # exactly its time: still kept

    ended.submitted("ns/next", "next-2", at_s=10.0 + KEPT_S + 0.001)
    assert "late-1" not in ended
    assert ("w-0" in ended, "w-100" in ended) == (False, True)

    ended.ended("ns/next", at_s=10.0 + 3 * KEPT_S)
    assert len(ended) == 2  # the ends of the last minute only: both of ns/next's
    assert ("next-1" in ended, "next-2" in ended) == (True, True)


def test_an_end_without_a_time_takes_the_latest_seen_and_time_never_runs_back() -> None:
    ended = EndedSubmissions(kept_s=KEPT_S)
    ended.submitted("ns/a", "a-1", at_s=100.0)
    ended.submitted("ns/b", "b-1")
    ended.ended("ns/b")  # an older writer's event: no time
    ended.ended("ns/a", at_s=50.0)  # written a moment earlier, stored later
    ended.submitted("ns/c", "c-1", at_s=100.0 + KEPT_S)
    assert ("a-1" in ended, "b-1" in ended) == (True, True)
    ended.submitted("ns/c", "c-2", at_s=101.0 + KEPT_S)
    assert len(ended) == 0


@pytest.mark.parametrize("kept_s", [0.0, -1.0, math.inf, math.nan])
def test_a_time_not_finite_and_above_zero_is_refused(kept_s: float) -> None:
    with pytest.raises(ValueError, match=r"--ended-kept-seconds: .* a finite number > 0"):
        EndedSubmissions(kept_s=kept_s)
