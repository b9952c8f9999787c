"""A gateway started with another cluster id than its watcher's says so at start, naming both.

Its Submits are its own cluster's workloads: admission reads that cluster's Namespaces and
that cluster's watcher runs them, so a gateway at `--cluster prod` beside a watcher at `local`
takes every Submit and each workload waits for ever. A real nats-server and gateway; the
watcher's configuration goes in as its events.
"""

from __future__ import annotations

import logging

import pytest
from admission_world import config_applied, publish
from gateway_helpers import running_gateway
from test_hostile_config_owner import namespace

from muster.bus import Bus

pytestmark = pytest.mark.timeout(60)

WARNING = (
    "the gateway runs with --cluster prod, but the watchers publish configuration (Namespaces, "
    "queues) as east, local only: a workload submitted here is prod's, whose Namespaces "
    "admission never gets and which no watcher runs, so it waits for ever; give the gateway "
    "its watcher's --cluster (MUSTER_CLUSTER)"
)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("cluster", "warned"), [("prod", [WARNING]), ("local", [])], ids=["other-id", "same-id"]
)
async def test_a_gateway_whose_cluster_no_watcher_publishes_as_warns_at_start(
    bus: Bus, caplog: pytest.LogCaptureFixture, cluster: str, warned: list[str]
) -> None:
    # Before: nothing said; every workload submitted through it waited for ever.
    await publish(
        bus,
        config_applied(namespace("team-a")),
        config_applied(namespace("team-a"), cluster="east"),
    )
    caplog.set_level(logging.WARNING, logger="muster.gateway")
    async with running_gateway(bus, cluster=cluster):
        assert warnings(caplog) == warned


async def test_a_gateway_started_before_any_watcher_says_nothing(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="muster.gateway")
    async with running_gateway(bus, cluster="prod"):
        assert warnings(caplog) == []
