"""A cluster id is checked wherever a subject is made: the ids found valid are remembered (a
Submit checks its id four times), and a bad id is refused however often it is asked."""

from __future__ import annotations

import pytest

from muster.bus import subjects
from muster.bus.subjects import check_cluster


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [
        ("dlq", "is reserved"),
        ("a.b", r"must match \[A-Za-z0-9_-\]\+"),
        ("", r"must match"),
        ("x" * 254, "at most 253 characters"),
    ],
)
def test_a_bad_id_is_refused_every_time(cluster: str, problem: str) -> None:
    for _ in range(3):
        with pytest.raises(ValueError, match=problem):
            check_cluster(cluster)
    assert cluster not in subjects._VALID_CLUSTERS


def test_a_good_id_is_answered_from_memory_and_memory_stays_bounded() -> None:
    assert check_cluster("east-1") == "east-1"
    assert "east-1" in subjects._VALID_CLUSTERS
    for i in range(3 * subjects._VALID_CLUSTERS_MAX):  # ids from hostile requests
        check_cluster(f"c{i}")
    assert len(subjects._VALID_CLUSTERS) <= subjects._VALID_CLUSTERS_MAX
    assert check_cluster("east-1") == "east-1"  # forgotten or not, still valid
    with pytest.raises(ValueError, match="is reserved"):
        check_cluster("dlq")
