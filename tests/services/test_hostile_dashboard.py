"""Hostile names in the dashboard, in Debian's headless Chromium (as test_dashboard_browser).

Names are escaped wherever the page writes them; what broke was names used as keys: the page
kept cohorts, clusters and resources in plain objects, where "constructor" (a valid cohort,
cluster and resource name) is found before anything is put. A cohort of that name stopped the
queues page from rendering, for every user; a resource of that name reported free by a worker
but not allocatable showed JavaScript's source for its allocatable.
"""

from __future__ import annotations

import msgspec
import pytest
from admission_world import eventually, start_admission
from cluster_rooms import report, room
from gateway_helpers import running_gateway
from test_dashboard_clusters import chromium, nodes_page

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2, services_pb2_grpc

pytestmark = pytest.mark.timeout(90)
__all__ = ["chromium"]  # the fixture, shared with test_dashboard_clusters

# A ClusterQueue in cohort "constructor", and one in an ordinary cohort beside it.
QUEUES = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: proto}
spec:
  cohort: constructor
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: plain}
spec:
  cohort: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 2}]}]
"""


async def test_a_cohort_named_constructor_is_shown_with_the_others(
    bus: Bus, bus_config: BusConfig, chromium: str
) -> None:
    from playwright.async_api import expect

    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        async with running_gateway(bus) as gw:
            await gw.gateway.Submit(services_pb2.SubmitRequest(manifest=QUEUES))
            visibility = services_pb2_grpc.VisibilityStub(gw.channel)

            async def both_shown() -> bool:
                status = await visibility.QueueStatus(services_pb2.QueueStatusRequest())
                return {cq.name for cq in status.cluster_queues} == {"plain", "proto"}

            await eventually(both_shown)
        async with nodes_page(bus, chromium) as (page, url):
            await page.goto(url.removesuffix("#/nodes"))
            await expect(page.locator('[data-cq="plain"]')).to_be_visible()
            await expect(page.locator('[data-cq="proto"]')).to_be_visible()
            await expect(page.locator("h3", has_text="Cohort constructor")).to_be_visible()
    finally:
        await admission.stop()


async def test_a_resource_named_constructor_is_shown_as_reported(bus: Bus, chromium: str) -> None:
    from playwright.async_api import expect

    # A worker's node has a resource named like an Object.prototype property (free room of a
    # resource its allocatable lacks is refused now, mctrust2, so it is in both).
    odd = room(0, prefix="c")
    odd = msgspec.structs.replace(
        odd,
        allocatable={**odd.allocatable, "constructor": 2000},
        free={**odd.free, "constructor": 1000},
    )
    await report(bus, "constructor", [odd, room(1, prefix="c")])
    async with nodes_page(bus, chromium) as (page, url):
        await page.goto(url)
        await expect(page.locator('[data-totals="constructor"]')).to_contain_text("2 nodes")
        shown = page.locator('[data-node="c-00000"]')
        await expect(shown).to_contain_text("constructor 1/2, cpu 8/8")
        await expect(page.locator('[data-node="c-00001"]')).to_contain_text("cpu 7/8")
