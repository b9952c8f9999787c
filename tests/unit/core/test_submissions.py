"""EndedSubmissions: which `submitted` ids ended, the newest kept."""

from __future__ import annotations

from muster.core.submissions import EndedSubmissions


def test_a_submission_ends_with_its_workload_and_the_oldest_are_forgotten_first() -> None:
    ended = EndedSubmissions(kept=2)
    for workload, submitted in (("a", "a-1"), ("a", "a-2"), ("b", "b-1")):
        ended.submitted(workload, submitted)
    assert "a-1" not in ended
    ended.ended("a")  # both of its submissions since it last ended
    assert ("a-1" in ended, "a-2" in ended, "b-1" in ended) == (True, True, False)
    assert not ended.replaced("a", "a-1")  # ended, and not submitted again (yet)
    ended.submitted("a", "a-3")  # its name used again: the new one has not ended
    assert "a-3" not in ended
    assert ended.replaced("a", "a-1")
    assert not ended.replaced("a", "a-3")
    ended.ended("b")
    assert ("a-1" in ended, "a-2" in ended, "b-1" in ended, len(ended)) == (False, True, True, 2)
    assert "" not in ended  # a decision written before submitted ids
