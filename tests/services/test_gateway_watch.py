"""Events.Watch against a real nats-server: streaming, filters (a routed workload's LocalQueue
too), resuming, ending (`history_only`, and the deprecated `muster-follow` metadata)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import grpc.aio
import pytest
from bus_helpers import pending, submitted
from gateway_helpers import RunningGateway, consumer_count, running_gateway
from grpc_health.v1 import health_pb2, health_pb2_grpc

from muster.bus import Bus, new_event
from muster.contracts.v1 import events_pb2, services_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running:
        yield running


async def read(call: grpc.aio.UnaryStreamCall, n: int) -> list[events_pb2.Envelope]:
    """The next `n` envelopes of a Watch, failing after 10 s without one."""
    got: list[events_pb2.Envelope] = []
    for _ in range(n):
        env = await asyncio.wait_for(call.read(), timeout=10)
        assert env is not grpc.aio.EOF, f"stream ended after {len(got)} of {n}"
        got.append(env)
    return got


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout_s: float = 10.0) -> None:
    """Wait until `check()` is true, looking again whenever the event loop is idle."""
    async with asyncio.timeout(timeout_s):
        while not await check():  # noqa: ASYNC110  # nats-server state: no event to wait on
            await asyncio.sleep(0.05)


def summary(envs: list[events_pb2.Envelope]) -> list[tuple[str, str]]:
    return [(e.type, e.workload) for e in envs]


async def test_watch_streams_stored_and_new_events_with_their_sequences(
    gw: RunningGateway, bus: Bus
) -> None:
    await bus.publish_all([submitted("ml/a"), pending("ml/a", "1")])
    call = gw.events.Watch(services_pb2.WatchRequest(from_sequence=1))

    old = await read(call, 2)
    await bus.publish(pending("ml/b", "2"))
    new = await read(call, 1)
    call.cancel()

    assert [e.sequence for e in old + new] == [1, 2, 3]
    assert summary(old + new) == [
        ("workload.submitted", "ml/a"),
        ("workload.pending", "ml/a"),
        ("workload.pending", "ml/b"),
    ]


async def test_from_sequence_zero_streams_only_new_events(gw: RunningGateway, bus: Bus) -> None:
    await bus.publish(submitted("ml/old"))
    call = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
    await eventually(lambda: consumer_count_is(bus, 1))

    await bus.publish(submitted("ml/new"))
    (env,) = await read(call, 1)
    call.cancel()

    assert (env.workload, env.sequence) == ("ml/new", 2)


async def consumer_count_is(bus: Bus, n: int) -> bool:
    return await consumer_count(bus) == n


async def test_resuming_from_a_sequence_has_no_gap_and_no_duplicate(
    gw: RunningGateway, bus: Bus
) -> None:
    await bus.publish_all([submitted(f"ml/w{i}") for i in range(5)])
    first = gw.events.Watch(services_pb2.WatchRequest(from_sequence=1))
    seen = await read(first, 3)
    first.cancel()  # a disconnect after the third
    await bus.publish_all([submitted(f"ml/w{i}") for i in range(5, 7)])

    resumed = gw.events.Watch(services_pb2.WatchRequest(from_sequence=seen[-1].sequence + 1))
    rest = await read(resumed, 4)
    resumed.cancel()

    assert [e.sequence for e in seen + rest] == list(range(1, 8))
    assert [e.workload for e in seen + rest] == [f"ml/w{i}" for i in range(7)]


async def test_filters_by_workload_namespace_type_and_local_queue(
    gw: RunningGateway, bus: Bus
) -> None:
    await bus.publish_all(
        [
            submitted("ml/a", queue="main"),  # 1
            submitted("web/b", queue="main"),  # 2
            submitted("ml/c", queue="other"),  # 3
            pending("ml/a", "a"),  # 4
            pending("web/b", "b"),  # 5
            pending("ml/c", "c"),  # 6
        ]
    )
    requests = {
        "workload": services_pb2.WatchRequest(workload="ml/c", from_sequence=1),
        "namespace": services_pb2.WatchRequest(namespace="web", from_sequence=1),
        "types": services_pb2.WatchRequest(types=["workload.pending"], from_sequence=1),
        "local queue": services_pb2.WatchRequest(
            namespace="ml", local_queue="main", from_sequence=1
        ),
        "local queue, resumed": services_pb2.WatchRequest(local_queue="other", from_sequence=4),
    }
    expected = {
        "workload": [3, 6],
        "namespace": [2, 5],
        "types": [4, 5, 6],
        "local queue": [1, 4],
        "local queue, resumed": [6],
    }

    got = {}
    for name, request in requests.items():
        request.history_only = True
        got[name] = [env.sequence async for env in gw.events.Watch(request)]

    assert got == expected


async def test_history_only_ends_after_the_stored_events_and_a_plain_watch_follows(
    gw: RunningGateway, bus: Bus
) -> None:
    await bus.publish_all([submitted("ml/a"), submitted("ml/b")])
    history = gw.events.Watch(services_pb2.WatchRequest(from_sequence=1, history_only=True))
    following = gw.events.Watch(services_pb2.WatchRequest(from_sequence=1))

    stored = [env.workload async for env in history]
    assert (stored, await history.code()) == (["ml/a", "ml/b"], grpc.StatusCode.OK)
    assert [env.workload for env in await read(following, 2)] == ["ml/a", "ml/b"]
    await bus.publish(submitted("ml/c"))
    (new,) = await read(following, 1)  # not ended at the stored events: it gets the new one
    following.cancel()

    assert new.workload == "ml/c"


async def test_history_only_from_sequence_zero_ends_at_once(gw: RunningGateway, bus: Bus) -> None:
    await bus.publish(submitted("ml/a"))
    call = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0, history_only=True))

    got = [env async for env in call]

    assert (got, await call.code()) == ([], grpc.StatusCode.OK)


async def test_the_deprecated_follow_metadata_still_ends_the_stream(
    gw: RunningGateway, bus: Bus
) -> None:
    await bus.publish_all([submitted("ml/a"), submitted("ml/b")])
    call = gw.events.Watch(
        services_pb2.WatchRequest(from_sequence=1), metadata=(("muster-follow", "false"),)
    )

    got = [env.workload async for env in call]

    assert got == ["ml/a", "ml/b"]
    assert await call.code() == grpc.StatusCode.OK


def routed(workload: str, *, from_cq: str, to_cq: str, queue: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadRouted(
        from_cluster_queue=from_cq,
        to_cluster_queue=to_cq,
        queue_name=queue,
        policy="fastest",
        reason="Fastest",
        message=f"routed from ClusterQueue {from_cq} to {to_cq} (LocalQueue {queue})",
    )
    return new_event("routed", payload, cluster="local", workload=workload, source="test")


def admitted(workload: str, cq: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadAdmitted(admission=events_pb2.Admission(cluster_queue=cq))
    return new_event("admitted", payload, cluster="local", workload=workload, source="test")


def bound(workload: str) -> events_pb2.Envelope:
    return new_event(
        "bound", events_pb2.PodsBound(), cluster="local", workload=workload, source="test"
    )


def finished(workload: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadFinished(succeeded=True)
    return new_event("finished", payload, cluster="local", workload=workload, source="test")


async def test_a_routed_workloads_later_events_reach_a_watch_on_the_queue_it_was_routed_to(
    gw: RunningGateway, bus: Bus
) -> None:
    await bus.publish_all(
        [submitted("sd/light", queue="gpu"), submitted("sd/native", queue="cpu")]  # 1, 2
    )
    on_cpu = gw.events.Watch(services_pb2.WatchRequest(local_queue="cpu", from_sequence=1))
    on_gpu = gw.events.Watch(services_pb2.WatchRequest(local_queue="gpu", from_sequence=1))
    assert summary(await read(on_cpu, 1)) == [("workload.submitted", "sd/native")]
    assert summary(await read(on_gpu, 1)) == [("workload.submitted", "sd/light")]

    await bus.publish_all(
        [
            routed("sd/light", from_cq="gpu", to_cq="cpu", queue="cpu"),  # 3
            pending("sd/light", "waits behind the queue's own"),  # 4
            pending("sd/elsewhere", "on no queue watched here"),  # 5
            admitted("sd/light", "cpu"),  # 6
            bound("sd/light"),  # 7
            finished("sd/light"),  # 8
            pending("sd/native", "the last one"),  # 9
        ]
    )
    on_cpu_events = await read(on_cpu, 6)
    on_gpu_events = await read(on_gpu, 5)
    on_cpu.cancel()
    on_gpu.cancel()
    resumed = services_pb2.WatchRequest(local_queue="cpu", from_sequence=4, history_only=True)
    on_cpu_resumed = [env.sequence async for env in gw.events.Watch(resumed)]

    light = [
        ("workload.routed", "sd/light"),
        ("workload.pending", "sd/light"),
        ("workload.admitted", "sd/light"),
        ("workload.bound", "sd/light"),
        ("workload.finished", "sd/light"),
    ]
    assert summary(on_cpu_events) == [*light, ("workload.pending", "sd/native")]
    assert summary(on_gpu_events) == light  # its declared queue keeps it
    assert on_cpu_resumed == [4, 6, 7, 8, 9]  # learnt the route from before its start


async def test_a_bad_filter_is_invalid_argument(gw: RunningGateway) -> None:
    call = gw.events.Watch(services_pb2.WatchRequest(types=["workload.nope"]))

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == 'types: unknown event type "workload.nope"'


async def test_a_cancelled_watch_ends_and_removes_its_reader(gw: RunningGateway, bus: Bus) -> None:
    await bus.publish(submitted("ml/a"))
    call = gw.events.Watch(services_pb2.WatchRequest(from_sequence=1))
    await read(call, 1)
    assert await consumer_count(bus) == 1

    call.cancel()

    await eventually(lambda: consumer_count_is(bus, 0))


async def test_stopping_the_gateway_ends_watches_with_unavailable(bus: Bus) -> None:
    async with running_gateway(bus, grace_s=30.0) as gw:
        call = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
        await eventually(lambda: consumer_count_is(bus, 1))
        async with asyncio.timeout(5):  # far below the grace period: watches do not wait it out
            await gw.server.stop()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()  # before the channel closes, which would cancel the call here

    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (caught.value.details() or "")


async def test_watches_take_half_the_calls_and_a_cancelled_watch_frees_its_place(
    bus: Bus,
) -> None:
    # Watches may hold half of max_calls (watch_slots): the other half stays for short calls.
    async with running_gateway(bus, max_calls=2) as gw:
        first = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
        await eventually(lambda: consumer_count_is(bus, 1))
        second = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await second.read()
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await answers(gw)

        first.cancel()
        await eventually(lambda: consumer_count_is(bus, 0))
        third = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
        await eventually(lambda: consumer_count_is(bus, 1))
        third.cancel()


async def test_a_call_past_the_limit_is_told_the_limit_and_health_still_answers(bus: Bus) -> None:
    # One following Watch holds the one call in flight that --max-calls 1 allows.
    async with running_gateway(bus, max_calls=1) as gw:
        watch = gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
        await eventually(lambda: consumer_count_is(bus, 1))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest())
        health = health_pb2_grpc.HealthStub(gw.channel)
        checked = await health.Check(health_pb2.HealthCheckRequest())
        watch.cancel()
        await eventually(lambda: consumer_count_is(bus, 0))
        assert await answers(gw)  # the place is free again

    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = caught.value.details() or ""
    assert "limit of 1 calls at once (--max-calls" in details
    assert "retry it after a backoff" in details
    assert checked.status == health_pb2.HealthCheckResponse.SERVING


async def answers(gw: RunningGateway) -> bool:
    """Whether a QueueStatus call is answered (not refused for want of a free call)."""
    try:
        await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest())
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return False
        raise
    return True


async def test_more_watches_than_hot_threads_hold_up_no_other_call(bus: Bus) -> None:
    from muster.gateway.loop_server import HOT_THREADS

    async with running_gateway(bus) as gw:
        watches = [
            gw.events.Watch(services_pb2.WatchRequest(from_sequence=0))
            for _ in range(HOT_THREADS + 2)
        ]
        await eventually(lambda: consumer_count_is(bus, HOT_THREADS + 2))
        async with asyncio.timeout(10):
            assert await answers(gw)
        for watch in watches:
            watch.cancel()


WORKLOAD_W = "\n".join(
    [
        "apiVersion: kueue.x-k8s.io/v1beta1",
        "kind: Workload",
        "metadata: {name: w, namespace: ns}",
        "spec:",
        "  queueName: main",
        "  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]",
    ]
)


async def test_slow_calls_beyond_the_hot_threads_hold_up_no_quick_one(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    from muster.gateway.loop_server import HOT_THREADS

    async with running_gateway(bus) as gw:
        # Submits that wait on the event stream (its catch-up may take up to 10 s).
        stream_answers = asyncio.Event()
        waiting: list[object] = []

        async def slow_duplicates(planned: object) -> list[object]:
            waiting.append(planned)
            await stream_answers.wait()
            return []

        monkeypatch.setattr(gw.server.known, "duplicates", slow_duplicates)
        manifest = WORKLOAD_W
        submits = [
            asyncio.ensure_future(
                gw.gateway.Submit(
                    services_pb2.SubmitRequest(manifest=manifest.replace("name: w", f"name: w{i}")),
                    timeout=30,
                )
            )
            for i in range(HOT_THREADS + 2)
        ]

        async def all_waiting() -> bool:  # quick calls queued behind slow ones would not be
            return len(waiting) == HOT_THREADS + 2

        await eventually(all_waiting)
        async with asyncio.timeout(10):
            assert await answers(gw)
        stream_answers.set()
        done = await asyncio.gather(*submits)
    assert all(o.event_id for r in done for o in r.objects)  # each published
    assert len({o.key for r in done for o in r.objects}) == HOT_THREADS + 2


async def test_a_submit_its_client_cancels_stops_its_handler_and_the_next_call_is_served(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(bus) as gw:
        entered, stopped = asyncio.Event(), asyncio.Event()

        async def stuck_duplicates(planned: object) -> list[object]:
            entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                stopped.set()
                raise
            return []

        monkeypatch.setattr(gw.server.known, "duplicates", stuck_duplicates)
        manifest = WORKLOAD_W
        call = gw.gateway.Submit(services_pb2.SubmitRequest(manifest=manifest), timeout=30)
        async with asyncio.timeout(10):
            await entered.wait()
        call.cancel()
        async with asyncio.timeout(10):  # the handler's task is cancelled, not left waiting
            await stopped.wait()
        with pytest.raises(asyncio.CancelledError):
            await call
        async with asyncio.timeout(10):
            assert await answers(gw)
