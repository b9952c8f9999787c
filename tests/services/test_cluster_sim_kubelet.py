"""The sim kubelet against a real nats-server: phases, run time, speed, restarts, deletes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from muster.bus import Bus
from muster.bus.service import Health
from muster.cluster import PodSetStart
from muster.cluster.objects import parse_time
from muster.cluster.sim import Kubelet, ManualClock, SimBackend, SimStore, WallClock, pod_key
from muster.cluster.sim.__main__ import main, serve

pytestmark = pytest.mark.timeout(30)

Pod = dict[str, Any]


@pytest.fixture
async def store(bus: Bus) -> SimStore:
    return await SimStore.open(bus.kv, cluster="local")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def sim(store: SimStore, clock: ManualClock) -> SimBackend:
    backend = SimBackend(store, clock=clock)
    await backend.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    return backend


@contextlib.asynccontextmanager
async def running(kubelet: Kubelet) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(kubelet.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def bound_pod(
    sim: SimBackend,
    name: str,
    *,
    run_seconds: str | None,
    node: str = "n1",
    ready_after: str | None = None,
    more: dict[str, str] | None = None,
) -> str:
    """Start workload ml/<name> with one pod, bind it to `node`; return the pod's key."""
    annotations = {"muster.dev/run-seconds": run_seconds} if run_seconds is not None else {}
    annotations.update(more or {})
    if ready_after is not None:
        annotations["muster.dev/pods-ready-after"] = ready_after
    start = PodSetStart(name="main", count=1, requests={"cpu": 100}, annotations=annotations)
    await sim.start_workload(f"ml/{name}", pod_sets=[start])
    await sim.bind("ml", f"{name}-main-0", node)
    return pod_key("ml", f"{name}-main-0")


async def phases_until(
    store: SimStore, key: str, done: Callable[[Pod], bool]
) -> tuple[list[str], Pod]:
    """The phases pod `key` goes through until `done(pod)`; and the pod then."""
    phases: list[str] = []
    async with contextlib.aclosing(store.watch("pod.")) as changes:
        async for change in changes:
            if change.key != key or change.type == "DELETED":
                continue
            phases.append(change.obj["status"]["phase"])
            if done(change.obj):
                return phases, change.obj
    raise AssertionError("the watch ended")


def phase_is(*wanted: str) -> Callable[[Pod], bool]:
    return lambda pod: pod["status"]["phase"] in wanted


async def test_runs_a_bound_pod_for_its_run_time_at_speed(store: SimStore, sim: SimBackend) -> None:
    key = await bound_pod(sim, "w", run_seconds="2")
    async with running(Kubelet(store, clock=WallClock(), speed=1000)):
        phases, pod = await phases_until(store, key, phase_is("Succeeded"))

    assert phases[-2:] == ["Running", "Succeeded"]
    assert pod["status"]["startTime"]
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "False"


async def test_speed_divides_the_run_time(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    key = await bound_pod(sim, "w", run_seconds="30")
    async with running(Kubelet(store, clock=clock, speed=10)):
        _, pod = await phases_until(store, key, phase_is("Running"))
        (deadline,) = await clock.wait_for_sleepers(1)
        assert deadline == pytest.approx(parse_time(pod["status"]["startTime"]) + 3.0)
        clock.advance(3.0)
        await phases_until(store, key, phase_is("Succeeded"))


async def test_run_from_created_counts_the_run_time_from_the_pods_creation(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    key = await bound_pod(sim, "w", run_seconds="30")
    created = await store.get(key)
    assert created is not None
    clock.advance(7.0)  # bound and started 7 s after the Job controller created it
    async with running(Kubelet(store, clock=clock, speed=10, run_from="created")):
        # Its 3 s (30 at speed 10) were up before it started: it succeeds with no time passing.
        async with asyncio.timeout(10):
            phases, pod = await phases_until(store, key, phase_is("Succeeded"))

    assert phases[-2:] == ["Running", "Succeeded"]
    born = parse_time(created.obj["metadata"]["creationTimestamp"])
    assert parse_time(pod["status"]["startTime"]) == pytest.approx(born + 7.0)


async def test_leaves_unbound_pods_pending(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    start = PodSetStart(name="main", count=1, requests={"cpu": 100})
    await sim.start_workload("ml/idle", pod_sets=[start])
    key = await bound_pod(sim, "w", run_seconds="5")
    async with running(Kubelet(store, clock=clock)):
        await phases_until(store, key, phase_is("Running"))
    idle = await store.get(pod_key("ml", "idle-main-0"))
    assert idle is not None
    assert idle.obj["status"]["phase"] == "Pending"


async def test_fails_a_pod_bound_to_a_missing_node(store: SimStore, sim: SimBackend) -> None:
    key = await bound_pod(sim, "w", run_seconds="1", node="ghost")
    async with running(Kubelet(store, clock=WallClock(), speed=1000)):
        _, pod = await phases_until(store, key, phase_is("Failed", "Running", "Succeeded"))

    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "NodeNotFound"
    assert pod["status"]["message"] == 'node "ghost" does not exist'


async def test_runs_a_pod_bound_to_a_node_written_after_it(
    store: SimStore, sim: SimBackend
) -> None:
    key = await bound_pod(sim, "w", run_seconds="1", node="late")
    await sim.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "late"}})
    # The kubelet's list shows the pod before the node (revision order): it reads the node.
    async with running(Kubelet(store, clock=WallClock(), speed=1000)):
        phases, _ = await phases_until(store, key, phase_is("Failed", "Running", "Succeeded"))

    assert phases[-1] in ("Running", "Succeeded")


async def test_restarted_kubelet_finishes_a_running_pod_on_time(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    key = await bound_pod(sim, "w", run_seconds="10")
    async with running(Kubelet(store, clock=clock)):
        _, pod = await phases_until(store, key, phase_is("Running"))
        await clock.wait_for_sleepers(1)
    finish_at = parse_time(pod["status"]["startTime"]) + 10

    clock.advance(6)  # the kubelet is down for 6 of the pod's 10 seconds
    async with running(Kubelet(store, clock=clock)):
        (deadline,) = await clock.wait_for_sleepers(1)
        assert deadline == pytest.approx(finish_at)
        clock.advance(3.9)
        assert clock.deadlines() == [deadline]
        current = await store.get(key)
        assert current is not None
        assert current.obj["status"]["phase"] == "Running"
        clock.advance(0.1)
        await phases_until(store, key, phase_is("Succeeded"))


def ready_of(pod: Pod) -> str:
    return str({c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"])


async def test_a_running_pod_is_ready_at_once_without_a_readiness_delay(
    store: SimStore, sim: SimBackend
) -> None:
    key = await bound_pod(sim, "w", run_seconds=None)
    async with running(Kubelet(store, clock=WallClock())):
        _, pod = await phases_until(store, key, phase_is("Running"))
    assert ready_of(pod) == "True"


async def test_a_pod_turns_ready_after_its_readiness_delay_at_speed_across_restarts(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    key = await bound_pod(sim, "w", run_seconds=None, ready_after="20")
    async with running(Kubelet(store, clock=clock, speed=2)):
        _, pod = await phases_until(store, key, phase_is("Running"))
        assert ready_of(pod) == "False"  # running, its readiness probe not passed yet
        await clock.wait_for_sleepers(1)
    ready_at = parse_time(pod["status"]["startTime"]) + 10

    clock.advance(4)  # the kubelet is down for 4 of the 10 seconds
    async with running(Kubelet(store, clock=clock, speed=2)):
        (deadline,) = await clock.wait_for_sleepers(1)
        assert deadline == pytest.approx(ready_at)
        clock.advance(6)
        _, pod = await phases_until(store, key, lambda p: ready_of(p) == "True")
    assert pod["status"]["phase"] == "Running"


async def test_a_pod_never_ready_runs_without_turning_ready(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    key = await bound_pod(sim, "w", run_seconds="5", ready_after="never")
    async with running(Kubelet(store, clock=clock)):
        _, pod = await phases_until(store, key, phase_is("Running"))
        assert ready_of(pod) == "False"
        (finish,) = await clock.wait_for_sleepers(1)  # no timer to turn it Ready
        assert finish == pytest.approx(parse_time(pod["status"]["startTime"]) + 5)
        clock.advance(5)
        _, pod = await phases_until(store, key, phase_is("Succeeded"))
    assert ready_of(pod) == "False"


async def test_a_pod_loses_readiness_then_regains_it_at_speed_across_restarts(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    lost = {"muster.dev/pods-unready-after": "10", "muster.dev/pods-unready-for": "5"}
    key = await bound_pod(sim, "w", run_seconds=None, more=lost)
    async with running(Kubelet(store, clock=clock, speed=2)):
        _, pod = await phases_until(store, key, phase_is("Running"))
        assert ready_of(pod) == "True"
        started = parse_time(pod["status"]["startTime"])
        (deadline,) = await clock.wait_for_sleepers(1)
        assert deadline == pytest.approx(started + 5)
        clock.advance(5)
        _, pod = await phases_until(store, key, lambda p: ready_of(p) == "False")
        (deadline,) = await clock.wait_for_sleepers(1)
        assert deadline == pytest.approx(started + 7.5)
    clock.advance(3)  # the kubelet is down past the time readiness comes back
    async with running(Kubelet(store, clock=clock, speed=2)):
        _, pod = await phases_until(store, key, lambda p: ready_of(p) == "True")
    assert pod["status"]["phase"] == "Running"


async def test_restarted_kubelet_finishes_an_overdue_pod_at_once(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    key = await bound_pod(sim, "w", run_seconds="10")
    async with running(Kubelet(store, clock=clock)):
        await phases_until(store, key, phase_is("Running"))
    clock.advance(60)
    async with running(Kubelet(store, clock=clock)):
        await phases_until(store, key, phase_is("Succeeded"))


async def test_pod_without_run_time_runs_until_deleted(
    store: SimStore, sim: SimBackend, clock: ManualClock
) -> None:
    forever = await bound_pod(sim, "forever", run_seconds=None)
    timed = await bound_pod(sim, "timed", run_seconds="5")
    async with running(Kubelet(store, clock=clock)):
        await phases_until(store, forever, phase_is("Running"))
        # The kubelet saw `forever` Running before `timed`: one sleeper means none for `forever`.
        assert len(await clock.wait_for_sleepers(1)) == 1
        await sim.stop_workload("ml/timed")  # a deleted pod stops: its timer goes
        await clock.wait_for_sleepers(0, exactly=True)
        clock.advance(3600)
        current = await store.get(forever)
        assert current is not None
        assert current.obj["status"]["phase"] == "Running"
    assert await store.get(timed) is None


# --- the service -----------------------------------------------------------------------------


async def test_serve_runs_pods_and_reports_ready(bus: Bus, sim: SimBackend) -> None:
    health = Health("sim-cluster")
    key = await bound_pod(sim, "w", run_seconds="1")
    task = asyncio.create_task(serve(bus, health, cluster="local", speed=1000))
    try:
        await phases_until(sim.store, key, phase_is("Succeeded"))
        assert health.serving
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_refuses_a_speed_that_is_not_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--speed", "0"])
    assert exited.value.code == 2
    assert "--speed must be > 0, got 0" in capsys.readouterr().err


def test_refuses_an_unknown_run_clock(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--run-from", "bound"])
    assert exited.value.code == 2
    assert "--run-from must be one of started, created, got 'bound'" in capsys.readouterr().err


@pytest.mark.timeout(60)
async def test_service_process_runs_pods_and_stops_on_sigterm(
    nats_server: str, sim: SimBackend
) -> None:
    key = await bound_pod(sim, "w", run_seconds="3")
    env = {**os.environ, "MUSTER_NATS_URL": nats_server, "MUSTER_SIM_SPEED": "100"}
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "muster.cluster.sim", "--health-port", "0"],
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await phases_until(sim.store, key, phase_is("Succeeded"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]
