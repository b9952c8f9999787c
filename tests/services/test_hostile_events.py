"""Events a compromised service could publish (its NATS user may publish them: a watcher's
`workload.submitted`, `config.applied`), read by admission on a real nats-server: each is
dead-lettered with a reason naming what is wrong, nothing is taken under another name, and
admission goes on."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

import nats.js.errors
import pytest
from admission_world import (
    basic_config,
    cluster_queue,
    config_applied,
    publish,
    running,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog
from gateway_helpers import running_gateway

from muster.bus import DLQ_STREAM, Bus, BusConfig
from muster.bus.logfmt import LogfmtFormatter
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)


async def dead_letter_reasons(bus: Bus) -> dict[str, str]:
    """Each dead-lettered event's id → the reason it was dead-lettered for."""
    try:
        count = (await bus.js.stream_info(DLQ_STREAM)).state.messages
    except nats.js.errors.NotFoundError:
        return {}
    letters = [await bus.js.get_msg(DLQ_STREAM, seq) for seq in range(1, count + 1)]
    return {
        pb.Envelope.FromString(m.data or b"").event_id: (m.headers or {})["Muster-Dlq-Reason"]
        for m in letters
    }


async def admitted_after(bus: Bus, bus_config: BusConfig, events: EventLog, *forged: Any) -> None:
    """Run admission on the basic config, the `forged` events, then a good workload, until
    the good one is admitted (events are handled in stream order: the forged ones were)."""
    admission = await start_admission(bus_config)
    async with running(admission):
        await admission.wait_serving()
        await basic_config(bus)
        await publish(bus, *forged, submitted(workload("after")))
        await events.wait_for("admitted", workload="ns/after")


async def test_a_submitted_whose_manifest_names_another_workload_is_dead_lettered(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    forged = submitted(workload("hidden"))
    forged.workload = "ns/shown"  # what the binder, the gateway and the dashboard key it by

    await admitted_after(bus, bus_config, events, forged)

    reasons = await dead_letter_reasons(bus)
    assert reasons[forged.event_id] == "submitted ns/shown: manifest is the Workload ns/hidden"
    assert events.matching("quota_reserved", workload="ns/hidden") == []
    assert events.matching("pending", workload="ns/hidden") == []


async def test_a_cluster_queue_of_65_flavors_in_a_group_is_dead_lettered(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    wide = cluster_queue("wide")
    group = wide["spec"]["resourceGroups"][0]
    group["flavors"] = [{**group["flavors"][0], "name": f"f{i}"} for i in range(65)]
    forged = config_applied(wide)

    await admitted_after(bus, bus_config, events, forged)

    reasons = await dead_letter_reasons(bus)
    assert reasons[forged.event_id] == (
        "ClusterQueue/wide: spec.resourceGroups[0].flavors: must list at most 64, got 65"
    )


async def test_control_characters_in_a_forged_key_reach_the_log_escaped(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # A NUL in one line made grep take the whole log for binary (and skip what followed); an
    # ESC drives the reader's terminal; U+202E shows text reversed.
    key = "ns/a\x00\x1b[2J\u202eb"
    forged = submitted(workload("x"))
    forged.workload = key
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(LogfmtFormatter("admission"))
    logging.getLogger("muster").addHandler(handler)
    try:
        await admitted_after(bus, bus_config, events, forged)
    finally:
        logging.getLogger("muster").removeHandler(handler)

    (rejected,) = [line for line in lines.getvalue().split("\n") if "rejected" in line]
    assert rejected.isprintable()
    assert r'workload="ns/a\x00\x1b[2J\u202eb"' in rejected


async def test_a_forged_key_that_is_no_workload_name_is_not_listed(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    forged = submitted(workload("x"))
    forged.workload = "../../x"
    await publish(bus, forged, submitted(workload("listed")))
    await events.wait_for("submitted", workload="ns/listed")

    async with running_gateway(bus) as gw:
        listed = await gw.visibility.ListWorkloads(services_pb2.ListWorkloadsRequest(), timeout=10)

    # Before: namespace "..", name "../x", PENDING for ever (admission dead-letters it).
    assert [w.key for w in listed.items] == ["ns/listed"]


def _negative_count(manifest: dict[str, Any]) -> str:
    manifest["spec"]["podSets"][0]["count"] = -1
    return json.dumps(manifest)


@pytest.mark.parametrize(
    "forge",
    [
        lambda m: "{not json",
        _negative_count,
        lambda m: json.dumps({**m, "kind": "LocalQueue"}),
        lambda m: json.dumps({**m, "metadata": {"namespace": "ns", "name": "other"}}),
    ],
    ids=["not-json", "invalid-workload", "not-a-workload", "another-workload"],
)
async def test_a_valid_key_with_a_manifest_admission_rejects_is_not_listed(
    bus: Bus, forge: Callable[[dict[str, Any]], str], events: EventLog
) -> None:
    forged = submitted(workload("forged"))
    forged.submitted.manifest_json = forge(workload("forged"))
    await publish(bus, forged, submitted(workload("listed")))
    await events.wait_for("submitted", workload="ns/listed")

    async with running_gateway(bus) as gw:
        listed = await gw.visibility.ListWorkloads(services_pb2.ListWorkloadsRequest(), timeout=10)

    # Before: ns/forged listed PENDING for ever (admission dead-letters it).
    assert [w.key for w in listed.items] == ["ns/listed"]
