"""Admission fair sharing's usage: decay (A1), entry penalty (A2), the compared number (A3)."""

from __future__ import annotations

import math
import random
from functools import partial

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


def test_usage_of_runs_is_the_stepwise_decay() -> None:
    # Two 2-cpu runs from 0 and 50 s; the first stops at 400 s, the second at 600 s.
    book = AdmissionUsage()
    book.start("a/1", "a/lq", CPU_2, at_s=0.0, config=TEN_MINUTES)
    book.start("a/2", "a/lq", CPU_2, at_s=50.0, config=TEN_MINUTES)
    book.stop("a/1", at_s=400.0, config=TEN_MINUTES)
    book.stop("a/2", at_s=600.0, config=TEN_MINUTES)
    book.retire("a/1", config=TEN_MINUTES)  # finished: folded into what ended

    penalty = entry_penalty({"cpu": 2.0}, TEN_MINUTES)["cpu"]
    step = decayed({"cpu": penalty}, {"cpu": 2.0}, 50.0, 600.0)
    step = decayed({"cpu": step["cpu"] + penalty}, {"cpu": 4.0}, 350.0, 600.0)
    step = decayed(step, {"cpu": 2.0}, 200.0, 600.0)
    step = decayed(step, {}, 600.0, 600.0)
    got = book.consumed("a/lq", now_s=1200.0, config=TEN_MINUTES)
    assert got == {"cpu": pytest.approx(step["cpu"], rel=1e-12)}
    assert list(book.queues["a/lq"].runs) == ["a/2"]  # stopped, not gone: kept as its runs


runs = st.lists(
    st.tuples(seconds, st.floats(min_value=0.0, max_value=1e4), st.sampled_from(["a", "b"])),
    max_size=8,
)


@given(told=runs, order=st.randoms(use_true_random=False))
def test_the_same_runs_told_in_any_order_give_the_same_usage(
    told: list[tuple[float, float, str]], order: random.Random
) -> None:
    # What a live replica and one rebuilt from the stream do: learn the same starts and stops
    # (with the same times), not in the same order.
    facts = [
        fact
        for i, (start_s, ran_s, queue) in enumerate(told)
        for fact in ((f"w{i}", queue, start_s, True), (f"w{i}", queue, start_s + ran_s, False))
    ]

    def replay(facts: list[tuple[str, str, float, bool]]) -> list[float]:
        book = AdmissionUsage()
        for key, queue, at_s, started in facts:
            if started:
                book.start(key, queue, CPU_2, at_s=at_s, config=TEN_MINUTES)
            else:
                book.stop(key, at_s=at_s, config=TEN_MINUTES)
                if int(key[1:]) % 2:  # some finish (retired), the others wait to run again
                    book.retire(key, config=TEN_MINUTES)
        return [book.usage(q, now_s=2e5, config=TEN_MINUTES, queue_weight=1.0) for q in ("a", "b")]

    shuffled = list(facts)
    order.shuffle(shuffled)
    # a stop told before its start is a stop of nothing: keep each start before its stop
    shuffled.sort(key=lambda fact: not fact[3])
    assert replay(facts) == replay(shuffled)


def test_a_queue_that_ran_more_recently_weighs_more() -> None:
    book = AdmissionUsage()
    book.start("old/1", "old/lq", CPU_2, at_s=0.0, config=TEN_MINUTES)
    book.stop("old/1", at_s=600.0, config=TEN_MINUTES)
    book.start("new/1", "new/lq", CPU_2, at_s=1200.0, config=TEN_MINUTES)
    book.stop("new/1", at_s=1800.0, config=TEN_MINUTES)

    def usage(name: str) -> float:
        return book.usage(name, now_s=1800.0, config=TEN_MINUTES, queue_weight=1.0)

    assert 0.0 < usage("old/lq") < usage("new/lq")
    assert usage("none/lq") == 0.0


def test_what_ended_runs_left_carries_over_to_another_book() -> None:
    book = AdmissionUsage()
    book.start("a/1", "a/lq", CPU_2, at_s=0.0, config=TEN_MINUTES)
    book.stop("a/1", at_s=600.0, config=TEN_MINUTES)
    book.retire("a/1", config=TEN_MINUTES)
    book.start("a/2", "a/lq", CPU_2, at_s=700.0, config=TEN_MINUTES)
    ended = book.ended("a/lq")
    assert ended is not None

    carried = AdmissionUsage()  # a snapshot holds what ended; the live run comes back itself
    carried.restore_ended("a/lq", *ended, config=TEN_MINUTES)
    carried.start("a/2", "a/lq", CPU_2, at_s=700.0, config=TEN_MINUTES)
    assert carried.consumed("a/lq", now_s=900.0, config=TEN_MINUTES) == book.consumed(
        "a/lq", now_s=900.0, config=TEN_MINUTES
    )


def test_forget_drops_deleted_queues_that_run_nothing() -> None:
    book = AdmissionUsage()
    book.start("gone/1", "gone/lq", CPU_2, at_s=0.0, config=TEN_MINUTES)
    book.start("done/1", "done/lq", CPU_2, at_s=0.0, config=TEN_MINUTES)
    book.stop("done/1", at_s=10.0, config=TEN_MINUTES)
    book.retire("done/1", config=TEN_MINUTES)
    book.forget(["kept/lq"])
    assert sorted(book.queues) == ["gone/lq"]  # still runs: its stop must find it


class KueueLedger:
    """Kueue's usage of one LocalQueue, as its ledger keeps it (pkg/cache/queue/afs): decayed
    in steps over the time since the last (the LocalQueue controller's samples,
    reconcileConsumedUsage; the workload controller's settlement of an entry penalty as the
    workload is admitted, updateAfsConsumedUsage), each toward what is admitted at the step."""

    def __init__(self, at_s: float) -> None:
        self.consumed: dict[str, float] = {}
        self.at_s = at_s

    def step(self, now_s: float, admitted: dict[str, float], settled: float = 0.0) -> float:
        self.consumed = decayed(self.consumed, admitted, now_s - self.at_s, 600.0)
        self.consumed["cpu"] = self.consumed.get("cpu", 0.0) + settled
        self.at_s = now_s
        return self.consumed["cpu"]


PENALTY_2 = entry_penalty({"cpu": 2.0}, TEN_MINUTES)["cpu"]


def muster_cpu(book: AdmissionUsage, now_s: float) -> float:
    return book.consumed("a/lq", now_s=now_s, config=TEN_MINUTES).get("cpu", 0.0)


def test_at_kueues_samples_the_usage_is_kueues_while_what_runs_changes_only_at_them() -> None:
    # Admitted as its LocalQueue is sampled (settled at once), finished at a later sample.
    kueue, book = KueueLedger(at_s=0.0), AdmissionUsage()
    kueue.step(0.0, {"cpu": 2.0}, settled=PENALTY_2)
    book.start("a/1", "a/lq", CPU_2, at_s=0.0, config=TEN_MINUTES)
    for tick in (300.0, 600.0, 900.0):
        assert muster_cpu(book, tick) == pytest.approx(kueue.step(tick, {"cpu": 2.0}), rel=1e-12)
    book.stop("a/1", at_s=900.0, config=TEN_MINUTES)
    for tick in (1200.0, 1500.0):
        assert muster_cpu(book, tick) == pytest.approx(kueue.step(tick, {}), rel=1e-12)


def test_between_kueues_samples_a_start_or_a_stop_counts_from_its_time_in_muster() -> None:
    """Differs from Kueue (docs/kueue-compatibility.md): a step credits what is admitted at
    it for the whole time since the last one, so Kueue counts a workload admitted 200 s after
    a sample as if it ran those 200 s, and forgets the 150 s one ran after a sample before it
    finished; muster counts each run from its start to its stop."""
    a = partial(decay_alpha, half_life_s=600.0)
    kueue, book = KueueLedger(at_s=0.0), AdmissionUsage()
    kueue.step(200.0, {"cpu": 2.0}, settled=PENALTY_2)
    book.start("a/1", "a/lq", CPU_2, at_s=200.0, config=TEN_MINUTES)
    credited = 2.0 * a(200.0) * (1.0 - a(300.0))  # 200 s not run, faded over 300 s
    assert kueue.step(500.0, {"cpu": 2.0}) == pytest.approx(muster_cpu(book, 500.0) + credited)
    book.stop("a/1", at_s=650.0, config=TEN_MINUTES)
    forgotten = 2.0 * a(150.0) * (1.0 - a(150.0))  # run 500 s to 650 s, faded over 150 s
    assert kueue.step(800.0, {}) == pytest.approx(
        muster_cpu(book, 800.0) + credited * (1.0 - a(300.0)) - forgotten
    )


def test_a_run_not_penalized_adds_only_what_it_runs() -> None:
    # Kueue prices an entry penalty only in a ClusterQueue that orders by usage.
    book = AdmissionUsage()
    book.start("a/1", "a/lq", CPU_2, at_s=0.0, config=TEN_MINUTES, penalized=False)
    assert muster_cpu(book, 0.0) == 0.0
    assert muster_cpu(book, 600.0) == pytest.approx(1.0)  # half of 2 cpu after a half-life
