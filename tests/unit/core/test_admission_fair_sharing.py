"""Admission fair sharing's usage: decay (A1), entry penalty (A2), the compared number (A3)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.api.model import AdmissionFairSharingConfig
from muster.core.admission_fair_sharing import (
    AdmissionUsage,
    decay_alpha,
    decayed,
    entry_penalty,
    requests_of,
    weighted_usage,
)

TEN_MINUTES = AdmissionFairSharingConfig(usage_half_life_s=600.0, usage_sampling_interval_s=300.0)
CPU_2 = {("default", "cpu"): 2000}

seconds = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)
amounts = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
)


def test_consumed_halves_over_one_half_life_with_nothing_running() -> None:
    assert decayed({"cpu": 8.0}, {}, 600.0, 600.0) == {"cpu": 4.0}


def test_consumed_moves_toward_what_runs() -> None:
    assert decayed({}, {"cpu": 4.0}, 600.0, 600.0) == {"cpu": 2.0}
    assert decayed({}, {"cpu": 4.0}, 6000.0, 600.0)["cpu"] == pytest.approx(4.0, rel=1e-3)


def test_a_half_life_of_zero_forgets_at_once() -> None:
    assert decayed({"cpu": 8.0}, {"cpu": 1.0}, 1.0, 0.0) == {}
    assert decay_alpha(300.0, 0.0) == 0.0


@given(consumed=amounts, running=amounts, first=seconds, second=seconds)
def test_decay_in_two_steps_is_decay_in_one(
    consumed: dict[str, float], running: dict[str, float], first: float, second: float
) -> None:
    """What running stays the same, sampling more often changes nothing: the order does not
    depend on how often usage is looked at (Kueue samples every interval, muster at decisions)."""
    stepwise = decayed(decayed(consumed, running, first, 600.0), running, second, 600.0)
    at_once = decayed(consumed, running, first + second, 600.0)
    for name in at_once.keys() | stepwise.keys():
        assert stepwise.get(name, 0.0) == pytest.approx(at_once.get(name, 0.0), rel=1e-9, abs=1e-9)


@given(consumed=amounts, running=amounts, elapsed=seconds)
def test_decayed_usage_lies_between_consumed_and_running(
    consumed: dict[str, float], running: dict[str, float], elapsed: float
) -> None:
    out = decayed(consumed, running, elapsed, 600.0)
    for name in consumed.keys() | running.keys():
        low, high = sorted((consumed.get(name, 0.0), running.get(name, 0.0)))
        assert low - 1e-6 <= out.get(name, 0.0) <= high + 1e-6


def test_entry_penalty_is_what_one_sampling_interval_would_add() -> None:
    # 300 s of a 600 s half-life: 1 - 0.5**0.5 of the requests
    assert entry_penalty({"cpu": 2.0}, TEN_MINUTES) == {"cpu": pytest.approx(0.5858, abs=1e-4)}


def test_requests_sum_flavors_in_units() -> None:
    assert requests_of({("a", "cpu"): 500, ("b", "cpu"): 1500, ("a", "memory"): 2000}) == {
        "cpu": 2.0,
        "memory": 2.0,
    }


def test_weights_per_resource_and_per_local_queue() -> None:
    config = AdmissionFairSharingConfig(resource_weights=(("memory", 0.0),))
    assert weighted_usage({"cpu": 3.0, "memory": 1e9}, config, 1.0) == 3.0
    assert weighted_usage({"cpu": 3.0}, config, 2.0) == 1.5
    assert math.isinf(weighted_usage({"cpu": 3.0}, config, 0.0))


def test_usage_is_the_same_replayed_and_does_not_go_back_in_time() -> None:
    def run() -> AdmissionUsage:
        book = AdmissionUsage()
        book.record("a/lq", CPU_2, started=True, at_s=0.0, config=TEN_MINUTES)
        book.record("a/lq", CPU_2, started=True, at_s=50.0, config=TEN_MINUTES)
        book.record("a/lq", CPU_2, started=False, at_s=600.0, config=TEN_MINUTES)
        book.record(
            "a/lq", CPU_2, started=False, at_s=400.0, config=TEN_MINUTES
        )  # told late: decays 0
        return book

    first, second = run(), run()
    assert first.consumed("a/lq", now_s=1200.0, config=TEN_MINUTES) == second.consumed(
        "a/lq", now_s=1200.0, config=TEN_MINUTES
    )
    assert first.queues["a/lq"].running == {}
    assert first.queues["a/lq"].since_s == 600.0


def test_a_queue_that_ran_more_recently_weighs_more() -> None:
    book = AdmissionUsage()
    book.record("old/lq", CPU_2, started=True, at_s=0.0, config=TEN_MINUTES)
    book.record("old/lq", CPU_2, started=False, at_s=600.0, config=TEN_MINUTES)
    book.record("new/lq", CPU_2, started=True, at_s=1200.0, config=TEN_MINUTES)
    book.record("new/lq", CPU_2, started=False, at_s=1800.0, config=TEN_MINUTES)

    def usage(name: str) -> float:
        return book.usage(name, now_s=1800.0, config=TEN_MINUTES, queue_weight=1.0)

    assert 0.0 < usage("old/lq") < usage("new/lq")
    assert usage("none/lq") == 0.0


def test_forget_drops_deleted_queues_that_run_nothing() -> None:
    book = AdmissionUsage()
    book.record("gone/lq", CPU_2, started=True, at_s=0.0, config=TEN_MINUTES)
    book.record("done/lq", CPU_2, started=True, at_s=0.0, config=TEN_MINUTES)
    book.record("done/lq", CPU_2, started=False, at_s=10.0, config=TEN_MINUTES)
    book.forget(["kept/lq"])
    assert sorted(book.queues) == ["gone/lq"]  # still runs: its stop must find it
