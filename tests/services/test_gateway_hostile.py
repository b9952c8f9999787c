"""Gateway.Submit with hostile or careless input, against a real nats-server (and admission where
the outcome is a decision): clear INVALID_ARGUMENT answers, status never taken, no lost update."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
import yaml
from admission_world import cluster_queue, flavor, local_queue, start_admission, workload
from bus_helpers import EventLog
from gateway_helpers import JOB, RunningGateway, running_gateway, stored_count
from hostile import alias_bomb

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running:
        yield running


async def submit(gw: RunningGateway, *docs: dict[str, Any] | str, **kw: Any) -> Any:
    manifest = "---\n".join(d if isinstance(d, str) else yaml.safe_dump(d) for d in docs)
    return await gw.gateway.Submit(services_pb2.SubmitRequest(manifest=manifest, **kw), timeout=10)


async def refused(gw: RunningGateway, *docs: dict[str, Any] | str, **kw: Any) -> str:
    """The details of the INVALID_ARGUMENT that submitting `docs` answers."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await submit(gw, *docs, **kw)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value.details() or ""


async def test_a_submitted_status_admission_is_not_taken_as_admitted(
    gw: RunningGateway, bus_config: BusConfig, events: EventLog
) -> None:
    pre_admitted = workload("greedy", cpu="1000")
    pre_admitted["status"] = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1000"}}
            ],
        }
    }
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await submit(gw, flavor(), cluster_queue(cpu="4"), local_queue())
        await submit(gw, pre_admitted)

        pending = await events.wait_for("pending", workload="ns/greedy")
    finally:
        await admission.stop()

    assert "status" not in json.loads(
        (await events.wait_for("submitted", workload="ns/greedy")).submitted.manifest_json
    )
    assert pending.pending.reason == "ExceedsMaxQuota" or "1000" in pending.pending.message
    assert events.matching("admitted", workload="ns/greedy") == []


async def test_quota_set_4_then_0_then_4_ends_at_4(
    gw: RunningGateway, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await submit(gw, flavor(), local_queue())
        for cpu in ("4", "0", "4"):
            await submit(gw, cluster_queue(cpu=cpu))
        await submit(gw, workload("fits", cpu="4"))

        await events.wait_for("admitted", workload="ns/fits")
    finally:
        await admission.stop()

    applied = [
        json.loads(e.config_applied.manifest_json) for e in events.matching("config_applied")
    ]
    quotas = [
        doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
        for doc in applied
        if doc["kind"] == "ClusterQueue"
    ]
    assert quotas == ["4", "0", "4"]


async def test_a_retry_with_the_same_key_names_generated_objects_alike(
    gw: RunningGateway, bus: Bus, events: EventLog
) -> None:
    sample = JOB.replace("  name: train\n", "  generateName: sample-job-\n")

    first = await submit(gw, sample, idempotency_key="call-1")
    await events.wait_for("workload.submitted")
    again = await submit(gw, sample, idempotency_key="call-1")
    other = await submit(gw, sample, idempotency_key="call-2")

    (wl,) = first.objects
    job_name = (await events.wait_for("workload.submitted", workload=wl.key)).submitted.owner.name
    assert job_name.startswith("sample-job-")
    assert len(job_name) == len("sample-job-") + 5
    assert [o.key for o in again.objects] == [wl.key]
    assert [o.key for o in other.objects] != [wl.key]
    await events.wait_for("workload.submitted", workload=other.objects[0].key)
    assert await stored_count(bus) == 2  # the retry published nothing


async def test_priority_beyond_int32_is_invalid_argument_naming_the_field(
    gw: RunningGateway, bus: Bus
) -> None:
    details = await refused(gw, workload("w", priority=2**31))

    assert details == "Workload/ns/w: spec.priority: expected an integer <= 2147483647"
    assert await stored_count(bus) == 0


async def test_unknown_fields_refused_warned_or_ignored_as_asked(
    gw: RunningGateway, bus: Bus
) -> None:
    typo = JOB.replace("  parallelism: 2", "  parallelism: 2\n  suspnd: true")

    strict = await refused(gw, typo)
    warned = await submit(gw, typo, validation="warn")
    # Another Job: the same one again would be a duplicate, with a warning saying so.
    ignored = await submit(gw, typo.replace("name: train", "name: other"), validation="ignore")
    bad_mode = await refused(gw, JOB, validation="lenient")

    assert strict == "Job/ml/train: spec.suspnd: unknown field"
    assert list(warned.warnings) == ["Job/ml/train: spec.suspnd: unknown field"]
    assert list(ignored.warnings) == []
    assert bad_mode == 'validation: must be one of strict, warn, ignore, got "lenient"'


async def test_an_alias_bomb_is_refused_at_once_and_the_gateway_keeps_serving(
    gw: RunningGateway, bus: Bus, events: EventLog
) -> None:
    details = await refused(gw, alias_bomb())

    assert details == (
        "manifest: line 11: aliases expand to more than the input's own values + 10000"
        " (an alias bomb?)"
    )
    (wl,) = (await submit(gw, JOB)).objects
    await events.wait_for("workload.submitted", workload=wl.key)


async def test_names_that_are_paths_are_refused(gw: RunningGateway, bus: Bus) -> None:
    bad = local_queue("../x", cq="cq a")

    details = await refused(gw, bad)

    assert [line.split(": ")[:2] for line in details.splitlines()] == [
        ["LocalQueue/ns/../x", "metadata.name"],
        ["LocalQueue/ns/../x", "spec.clusterQueue"],
    ]
    assert await stored_count(bus) == 0


async def test_a_workload_submitted_twice_in_two_calls_runs_once(
    gw: RunningGateway, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        await submit(gw, flavor(), cluster_queue(cpu="4"), local_queue())
        await submit(gw, workload("once", cpu="1"))
        await events.wait_for("admitted", workload="ns/once")
        second = await submit(gw, workload("once", cpu="1"))  # another call, same workload
        await submit(gw, workload("after", cpu="1"))

        await events.wait_for("admitted", workload="ns/after")  # handled in stream order
        listed = await gw.visibility.ListWorkloads(
            services_pb2.ListWorkloadsRequest(namespace="ns", name="once"), timeout=10
        )
    finally:
        await admission.stop()

    # The gateway answered what admission would do with it: a duplicate, not published.
    assert [(o.key, o.outcome) for o in second.objects] == [("ns/once", "exists")]
    assert list(second.warnings) == ["Workload/ns/once: already exists; left as it is"]
    assert len(events.matching("submitted", workload="ns/once")) == 1
    assert len(events.matching("admitted", workload="ns/once")) == 1
    assert [(w.key, w.status) for w in listed.items] == [("ns/once", "ADMITTED")]


async def test_thousands_of_problems_answer_the_first_ones_and_a_count(
    gw: RunningGateway, bus: Bus
) -> None:
    bad = [local_queue(f"q{i}", cq="bad name") for i in range(3000)]

    details = await refused(gw, *bad)

    lines = details.splitlines()
    assert lines[0].startswith("LocalQueue/ns/q0: spec.clusterQueue: must be a DNS-1123")
    assert lines[-1] == f"... and {3000 - (len(lines) - 1)} more problems (3000 in all)"
    assert len(lines) > 20
    assert await stored_count(bus) == 0


async def test_a_cluster_id_too_long_for_a_subject_is_refused_and_the_gateway_keeps_serving(
    gw: RunningGateway, bus: Bus, events: EventLog
) -> None:
    # In a subject, a 5 000-character token passes nats-server's 4 KiB protocol line: the
    # server ended the gateway's connection, and every later call failed "connection closed".
    details = await refused(gw, JOB, cluster="c" * 5000)

    assert details == "cluster: cluster id must be at most 253 characters, got 5000"
    (wl,) = (await submit(gw, JOB, cluster="c" * 253)).objects
    await events.wait_for("workload.submitted", workload=wl.key)
    assert await stored_count(bus) == 1


async def test_a_key_written_twice_is_refused_under_strict_and_warned_under_warn(
    gw: RunningGateway, bus: Bus
) -> None:
    # `suspend: true` then `suspend: false`: the later one wins. muster simulate refused it
    # under strict, as kubectl does; Submit took it silently.
    twice = JOB.replace("  parallelism: 2", "  parallelism: 2\n  parallelism: 3")
    line = next(i for i, text in enumerate(twice.splitlines(), 1) if "parallelism: 3" in text)
    problem = (
        f"manifest: line {line}: duplicate key 'parallelism': the later value replaces the earlier"
    )

    strict = await refused(gw, twice)
    assert await stored_count(bus) == 0
    warned = await submit(gw, twice, validation="warn")

    assert strict == problem
    assert list(warned.warnings) == [problem]
