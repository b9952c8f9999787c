"""The dashboard's cluster page over a worker that claims room no node has: in headless
Chromium (as test_dashboard_clusters), the cluster shows Refused with the reason that names the
cluster and the node, and none of the room it claimed; an honest cluster beside it is Ready."""

from __future__ import annotations

import pytest
from cluster_rooms import report, room
from test_dashboard_clusters import chromium, nodes_page
from test_hostile_rooms import lying_node

from muster.bus import Bus

pytestmark = pytest.mark.timeout(60)
__all__ = ["chromium"]  # the fixture, used by name


async def test_in_a_browser_a_lying_cluster_shows_refused_and_why(bus: Bus, chromium: str) -> None:
    from playwright.async_api import expect

    # Shown as reported (as before): "west Ready, 1 nodes, free cpu 1000000000000/8".
    await report(bus, "west", [lying_node()])
    await report(bus, "east", [room(0, prefix="east")])
    async with nodes_page(bus, chromium) as (page, url):
        await page.goto(url)

        await expect(page.locator('[data-cluster="west"]')).to_contain_text(
            "Refused (HeartbeatRefused)"
        )
        await expect(page.locator('[data-refused="west"]')).to_have_text(
            "bad heartbeat west: node 'west-00000' of cluster 'west': free cpu 1000000000000000 "
            "is more than its allocatable 8000 (a room no node has: the heartbeat is refused)"
        )
        await expect(page.locator('[data-totals="west"]')).to_have_text("0 nodes, free ")
        await expect(page.locator('[data-cluster="east"]')).to_contain_text("Ready")
        await expect(page.locator('[data-refused="east"]')).to_have_count(0)
