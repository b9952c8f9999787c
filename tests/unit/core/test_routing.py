"""The routing model's pure parts: a workload's options, list-scheduled completion, hysteresis.

The engine's use of them (moves, events, natives first) is in tests/scenarios/routing.
"""

from __future__ import annotations

from typing import Any

import pytest

from muster.api.model import Alternative, ObjectMeta, PodSet, Workload, WorkloadKey
from muster.core.routing.fastest import ahead_of, decide, expected_start
from muster.core.routing.model import (
    NEVER,
    Candidate,
    Demand,
    Hysteresis,
    QueueLoad,
    RouteOption,
    Running,
    Waiting,
)
from muster.core.routing.options import options_of

GPU = "nvidia.com/gpu"


def load(*, gpus: int = 2, reserved: int = 0, **fields: Any) -> QueueLoad:
    return QueueLoad(
        name=fields.pop("name", "gpu"),
        nominal={GPU: gpus * 1000},
        reserved={GPU: reserved * 1000},
        pending=0,
        reserving=0,
        running=fields.pop("running", ()),
        waiting=fields.pop("waiting", ()),
    )


def gpus(n: int) -> Demand:
    return {GPU: n * 1000}


def waiting(key: str, order: int, *, native: bool = True, run_s: float | None = 10.0) -> Waiting:
    return Waiting(
        key=WorkloadKey(key), order=(0, float(order), order), native=native, demand=gpus(1),
        run_s=run_s,
    )  # fmt: skip


def test_options_put_the_declared_queue_first_and_drop_resources_set_to_zero() -> None:
    wl = Workload(
        meta=ObjectMeta(name="w", namespace="ml", annotations={"muster.dev/run-seconds": "26"}),
        queue_name="gpu",
        pod_sets=(PodSet(name="main", count=2, requests={"cpu": 4000, GPU: 1000}),),
        alternatives=(
            Alternative(queue_name="l40"),
            Alternative(queue_name="cpu", requests={GPU: 0, "cpu": 8000}, run_seconds=90),
        ),
    )

    declared, l40, cpu = options_of(wl)

    assert (declared.queue_name, declared.demand, declared.run_s) == (
        "gpu",
        {"cpu": 8000, GPU: 2000},
        26.0,
    )
    assert (l40.index, l40.demand, l40.run_s) == (1, {"cpu": 8000, GPU: 2000}, 26.0)
    assert cpu.pod_sets[0].requests == {"cpu": 8000}
    assert (cpu.index, cpu.demand, cpu.run_s) == (2, {"cpu": 16000}, 90.0)


def test_starts_when_running_work_releases_and_the_work_ahead_has_started() -> None:
    running = (
        Running(demand=gpus(1), release_at_s=10.0),
        Running(demand=gpus(1), release_at_s=4.0),
    )
    ahead = [waiting("ml/a", 1, run_s=20.0), waiting("ml/b", 2, run_s=20.0)]

    start = expected_start(load(reserved=2, running=running), gpus(1), ahead, now_s=0.0)

    assert start == 24.0  # a at 4, b at 10, then the first free GPU: a's, at 24


def test_never_starts_behind_work_that_never_ends_or_when_larger_than_the_queue() -> None:
    forever = (Running(demand=gpus(2), release_at_s=NEVER),)

    assert expected_start(load(reserved=2, running=forever), gpus(1), [], now_s=0.0) == NEVER
    assert expected_start(load(), gpus(3), [], now_s=0.0) == NEVER


def test_work_ahead_that_can_never_fit_is_passed() -> None:
    too_big = Waiting(
        key=WorkloadKey("ml/big"), order=(0, 0.0, 0), native=True, demand=gpus(5), run_s=1.0
    )

    assert expected_start(load(), gpus(1), [too_big], now_s=3.0) == 3.0


def test_a_queues_own_workloads_come_before_those_routed_into_it() -> None:
    queue = load(
        waiting=(
            waiting("ml/routed-early", 1, native=False),
            waiting("ml/own-late", 5),
            waiting("ml/own-early", 2),
        )
    )

    own = ahead_of(queue, key=WorkloadKey("ml/x"), order=(0, 3.0, 3), native=True)
    routed = ahead_of(queue, key=WorkloadKey("ml/x"), order=(0, 3.0, 3), native=False)

    assert [w.key for w in own] == ["ml/own-early"]
    assert [w.key for w in routed] == ["ml/routed-early", "ml/own-late", "ml/own-early"]


def candidates(gpu_busy_until: float, cpu_run_s: float) -> list[Candidate]:
    gpu = RouteOption(index=0, queue_name="gpu", pod_sets=(), demand=gpus(1), run_s=26.0)
    cpu = RouteOption(index=1, queue_name="cpu", pod_sets=(), demand={"cpu": 4000}, run_s=cpu_run_s)
    busy = (Running(demand=gpus(1), release_at_s=gpu_busy_until),)
    cpu_load = QueueLoad(
        name="cpu", nominal={"cpu": 24000}, reserved={}, pending=0, reserving=0, running=(),
        waiting=(),
    )  # fmt: skip
    return [
        Candidate(option=gpu, cluster_queue="gpu", load=load(gpus=1, reserved=1, running=busy)),
        Candidate(option=cpu, cluster_queue="cpu", load=cpu_load),
    ]


@pytest.mark.parametrize(
    ("cpu_run_s", "moves"),
    [
        pytest.param(113.0, True, id="sooner-by-more-than-the-margin"),
        pytest.param(113.5, False, id="sooner-by-less-than-the-margin"),
    ],
)
def test_moves_only_when_sooner_by_the_margin(cpu_run_s: float, moves: bool) -> None:
    # On the GPU: start at 100, done at 126; margin: 10 % of the 126 s left = 12.6 s.
    choice = decide(
        candidates(100.0, cpu_run_s),
        current=0,
        key=WorkloadKey("ml/light"),
        order=(0, 0.0, 0),
        now_s=0.0,
        hysteresis=Hysteresis(),
    )

    assert choice.index == (1 if moves else 0)
    assert choice.message.startswith("routed from" if moves else "stays in ClusterQueue gpu")
