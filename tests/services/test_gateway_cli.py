"""`muster submit`, `queues`, `workloads` and `events` against an in-process gateway.

The commands are synchronous gRPC clients, so each runs in a thread while the gateway serves
on the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bus_helpers import EventLog, pending, submitted
from gateway_helpers import BAD, JOB, LOCAL_QUEUE, TOKEN, RunningGateway, running_gateway

from muster.bus import Bus, new_event
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.cli.main import main
from muster.contracts.v1 import events_pb2, services_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus, token=TOKEN) as running:
        yield running


async def muster(gw: RunningGateway, *argv: str) -> int:
    """Run `muster ARGV --gateway ADDRESS --token TOKEN` in a thread; its exit status."""
    return await asyncio.to_thread(main, [*argv, "--gateway", gw.address, "--token", TOKEN])


async def test_submit_prints_each_object_and_publishes(
    gw: RunningGateway, tmp_path: Path, events: EventLog, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(f"{LOCAL_QUEUE}---\n{JOB}")

    status = await muster(gw, "submit", str(manifest))

    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    assert lines[0].startswith("LocalQueue ml/team-a applied (event ")
    assert lines[1].startswith("Workload ml/job-train-")
    assert " submitted (event " in lines[1]
    await events.wait_for("workload.submitted", workload=lines[1].split()[1])


async def test_submit_of_a_bad_file_prints_every_problem_and_exits_2(
    gw: RunningGateway, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"{BAD}---\n- 1\n")

    status = await muster(gw, "submit", str(bad))

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"muster: {bad}: INVALID_ARGUMENT:",
        "  Workload/ns/w: spec.podSets[0].count: expected an integer, got a string",
        "  manifest document 2: (document): expected an object, got a list",
    ]


async def test_without_the_token_commands_fail_unauthenticated(
    gw: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    status = await asyncio.to_thread(main, ["queues", "--gateway", gw.address])

    assert status == 1
    assert capsys.readouterr().err == (
        "muster: UNAUTHENTICATED: missing or invalid credentials "
        "(a bearer token or a client certificate)\n"
    )


async def put_queues(bus: Bus) -> None:
    kv = await bus.kv(VISIBILITY_BUCKET)
    cpu = events_pb2.ResourceStatus(
        name="cpu", nominal="10", reserved="4", used="2", borrowed="0", available="6"
    )
    cq = events_pb2.ClusterQueueStatus(
        name="team-a",
        cohort="shared",
        active=True,
        pending_workloads=2,
        reserving_workloads=1,
        admitted_workloads=1,
        flavors=[events_pb2.FlavorStatus(name="default", resources=[cpu])],
    )
    await kv.put("cq.team-a", cq.SerializeToString())
    lq = events_pb2.LocalQueueStatus(
        namespace="ml", name="main", cluster_queue="team-a", pending_workloads=2
    )
    await kv.put("lq.ml.main", lq.SerializeToString())
    items = [
        services_pb2.PendingWorkload(
            namespace="ml",
            name=f"w{i}",
            local_queue="main",
            cluster_queue="team-a",
            priority=10 - i,
            position_in_cluster_queue=i,
            position_in_local_queue=i,
        )
        for i in range(2)
    ]
    waiting = services_pb2.PendingWorkloadsResponse(items=items, total=2)
    await kv.put("pending.team-a", waiting.SerializeToString())


async def test_queues_shows_the_quota_view(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    await put_queues(bus)

    status = await muster(gw, "queues")

    assert status == 0
    assert capsys.readouterr().out.splitlines() == [
        "CLUSTERQUEUE  COHORT  ACTIVE  PENDING  RESERVING  ADMITTED",
        "team-a        shared  yes     2        1          1",
        "",
        "CLUSTERQUEUE  FLAVOR   RESOURCE  NOMINAL  BORROWING-LIMIT  RESERVED  USED  BORROWED"
        "  AVAILABLE",
        "team-a        default  cpu       10       -                4         2     0         6",
        "",
        "NAMESPACE  LOCALQUEUE  CLUSTERQUEUE  PENDING  RESERVING  ADMITTED",
        "ml         main        team-a        2        0          0",
    ]


async def test_queues_as_json(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    await put_queues(bus)

    status = await muster(gw, "queues", "-o", "json")

    reply = json.loads(capsys.readouterr().out)
    assert status == 0
    assert reply["clusterQueues"][0]["flavors"][0]["resources"][0]["available"] == "6"
    assert reply["localQueues"][0]["name"] == "main"


async def test_workloads_lists_every_state_with_positions_of_the_pending_ones(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    await put_queues(bus)
    await bus.publish_all(
        [
            *(submitted("ml/w0"), pending("ml/w0", "1 more needed"), submitted("ml/w1")),
            *(submitted("other/done", queue="lq"), finished("other/done")),
        ]
    )

    status = await muster(gw, "workloads", "--local-queue", "ml/main")

    rows = [line.split()[:7] for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert rows == [
        ["NAMESPACE", "NAME", "JOB", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS", "POSITION"],
        ["ml", "w0", "-", "main", "-", "PENDING", "0"],
        ["ml", "w1", "-", "main", "-", "PENDING", "1"],
    ]


async def test_workloads_filter_by_status_and_print_json(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    await bus.publish_all([submitted("ml/w0"), submitted("ml/w1"), finished("ml/w1")])

    status = await muster(gw, "workloads", "--status", "finished", "-o", "json")

    reply = json.loads(capsys.readouterr().out)
    assert status == 0
    assert [(w["key"], w["status"]) for w in reply["items"]] == [("ml/w1", "FINISHED")]


async def test_workloads_with_an_unknown_status_exits_2(
    gw: RunningGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused by the command line before any call (realpath3), naming the flag.
    with pytest.raises(SystemExit) as refused:
        await muster(gw, "workloads", "--status", "running")

    assert refused.value.code == 2
    assert 'argument --status: unknown status "running": one of all, pending' in (
        capsys.readouterr().err
    )


def finished(workload: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadFinished(succeeded=True)
    return new_event("finished", payload, cluster="local", workload=workload, source="test")


async def test_events_prints_stored_events_and_exits(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    await bus.publish_all([submitted("ml/a"), pending("ml/a", "1 more needed"), submitted("x/b")])

    status = await muster(gw, "events", "--namespace", "ml")

    header, *lines = capsys.readouterr().out.splitlines()
    assert status == 0
    assert header.split() == ["SEQ", "TIME", "TYPE", "WORKLOAD"]
    assert [line.split()[0] for line in lines] == ["1", "2"]
    assert lines[0].split(maxsplit=4)[2:] == [
        "workload.submitted",
        "ml/a",
        "to LocalQueue main, priority 0",
    ]
    assert lines[1].split()[2:] == ["workload.pending", "ml/a", "WaitingForQuota:", "1", "more",
                                    "needed"]  # fmt: skip


async def test_events_follow_as_json_lines_resumes_from_a_sequence(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    await bus.publish_all([submitted("ml/a"), submitted("ml/b")])
    following = asyncio.create_task(
        muster(gw, "events", "--follow", "--from-sequence", "2", "--max-events", "2", "-o", "json")
    )
    await bus.publish(pending("ml/c", "new"))

    status = await asyncio.wait_for(following, timeout=20)

    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert [(e["sequence"], e["workload"]) for e in got] == [("2", "ml/b"), ("3", "ml/c")]


async def test_submit_to_a_cluster_and_read_back_one_type_of_one_workload(
    gw: RunningGateway,
    bus: Bus,
    tmp_path: Path,
    events: EventLog,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB)
    assert await muster(gw, "submit", str(manifest), "--cluster", "east") == 0
    key = capsys.readouterr().out.split()[1]
    assert (await events.wait_for("workload.submitted", workload=key)).cluster == "east"
    await bus.publish_all([pending(key, "waiting"), pending("other/w", "waiting")])

    status = await muster(
        gw, "events", "--workload", key, "--type", "workload.pending", "-o", "json"
    )

    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert [(e["type"], e["workload"]) for e in got] == [("workload.pending", key)]


async def test_events_print_a_routed_workload_from_where_to_where_and_why(
    gw: RunningGateway, bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    routed = events_pb2.WorkloadRouted(
        from_cluster_queue="gpu",
        to_cluster_queue="cpu",
        queue_name="cpu-lq",
        policy="fastest",
        reason="Fastest",
        message="routed from ClusterQueue gpu to cpu (LocalQueue cpu-lq): expected to complete "
        "gpu in 161 s, cpu in 90 s",
    )
    await bus.publish(new_event("routed", routed, cluster="local", workload="sd/l", source="t"))

    status = await muster(gw, "events", "--type", "workload.routed")

    _, line = capsys.readouterr().out.splitlines()
    assert status == 0
    assert line.split(maxsplit=4)[2:4] == ["workload.routed", "sd/l"]
    assert line.split(maxsplit=4)[4] == (
        "gpu → cpu (LocalQueue cpu-lq) fastest: routed from ClusterQueue gpu to cpu "
        "(LocalQueue cpu-lq): expected to complete gpu in 161 s, cpu in 90 s"
    )
