"""The dashboard's cluster view over a cluster larger than one page: each cluster's totals,
then its nodes a page at a time, each answer small whatever the cluster's size; in Debian's
headless Chromium (as test_dashboard_browser), the page shows one page and follows "next", and
asks again for a cluster only when it changed (its totals, or an event naming it)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cluster_rooms import report, room
from gateway_helpers import running_gateway
from test_dashboard_browser import CHROMIUM, FLAGS

from muster.bus import Bus, new_event
from muster.contracts.v1 import events_pb2
from muster.dashboard.server import NODES_PAGE, build_app

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.timeout(60)
Http = TestClient[web.Request, web.Application]
NODES = 2 * NODES_PAGE + 30


@pytest.fixture
async def client(bus: Bus) -> AsyncIterator[Http]:
    async with (
        running_gateway(bus) as gw,
        TestClient(TestServer(build_app(gw.channel))) as http,
    ):
        yield http


async def test_a_large_cluster_shows_its_totals_and_pages_its_nodes(client: Http, bus: Bus) -> None:
    await report(bus, "big", [room(i, prefix="big") for i in range(NODES)])
    await report(bus, "small", [room(0, prefix="small")])

    summary = await (await client.get("/api/clusters?summary=1")).json()
    assert [(c["name"], c["nodeCount"], c["nodes"]) for c in summary["clusters"]] == [
        ("big", NODES, []),
        ("small", 1, []),
    ]
    assert summary["clusters"][0]["allocatableTotal"]["cpu"] == str(8 * NODES)

    seen: list[str] = []
    query = "/api/clusters?cluster=big"
    while True:
        reply = await client.get(query)
        assert reply.status == 200
        assert len(await reply.read()) < 64 * 1024  # a page, not the cluster
        page = await reply.json()
        (big,) = page["clusters"]
        assert len(big["nodes"]) <= NODES_PAGE
        seen += [n["name"] for n in big["nodes"]]
        if not page["continueToken"]:
            break
        query = f"/api/clusters?cluster=big&continue={page['continueToken']}"
    assert seen == [f"big-{i:05d}" for i in range(NODES)]


async def test_a_bad_page_request_is_a_400_naming_the_field(client: Http, bus: Bus) -> None:
    await report(bus, "big", [room(i, prefix="big") for i in range(3)])
    for query, field in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=1e3", "limit"),
        ("limit=" + "9" * 400, "limit"),
        ("continue=%00garbage", "continue_token"),
    ]:
        reply = await client.get(f"/api/clusters?cluster=big&{query}")
        assert reply.status == 400, query
        assert (await reply.json())["error"].startswith(f"{field}:"), query
    unknown = await client.get("/api/clusters?cluster=north")
    assert unknown.status == 404


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing: .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} missing (apt-get install chromium)")
    return CHROMIUM


@contextlib.asynccontextmanager
async def nodes_page(
    bus: Bus, chromium: str, *, poll_s: float | None = None
) -> AsyncIterator[tuple[Page, str]]:
    """A page in headless Chromium, and the dashboard's nodes page address (not yet opened),
    over a gateway on `bus`; `poll_s`: the poll of each cluster's totals (default 5 s)."""
    from playwright.async_api import async_playwright

    async with (
        running_gateway(bus) as gw,
        TestServer(build_app(gw.channel)) as server,
        async_playwright() as p,
    ):
        browser = await p.chromium.launch(executable_path=chromium, args=FLAGS)
        try:
            query = "" if poll_s is None else f"?nodesPoll={poll_s}"
            yield await browser.new_page(), f"{server.make_url('/')}{query}#/nodes"
        finally:
            await browser.close()


async def test_in_a_browser_the_nodes_page_shows_a_page_of_a_large_cluster_and_the_next(
    bus: Bus, chromium: str
) -> None:
    from playwright.async_api import expect

    await report(bus, "big", [room(i, prefix="big") for i in range(NODES)])
    async with nodes_page(bus, chromium) as (page, url):
        await page.goto(url)
        totals = page.locator('[data-totals="big"]')
        free_cpu = sum(8 - i % 8 for i in range(NODES))
        free = f"free cpu {free_cpu}/{8 * NODES}, memory {32 * NODES}Gi/{32 * NODES}Gi, pods"
        await expect(totals).to_contain_text(f"{NODES} nodes, {free}")
        await expect(page.locator("[data-node]")).to_have_count(NODES_PAGE)
        await expect(page.locator('[data-node="big-00000"]')).to_be_visible()

        await page.locator('[data-next="big"]').click()
        await expect(page.locator(f'[data-node="big-{NODES_PAGE:05d}"]')).to_be_visible()
        await expect(page.locator("[data-node]")).to_have_count(NODES_PAGE)
        await expect(page.locator('[data-node="big-00000"]')).to_have_count(0)


async def test_in_a_browser_the_nodes_page_asks_again_for_a_cluster_only_when_it_changed(
    bus: Bus, chromium: str
) -> None:
    from playwright.async_api import Request, expect

    nodes = [room(i, prefix="big") for i in range(3)]
    await report(bus, "big", nodes)
    # Heartbeats are no events: the totals are polled, here every 0.2 s (5 s by default).
    async with nodes_page(bus, chromium, poll_s=0.2) as (page, url):
        asked: list[str] = []

        def on_request(request: Request) -> None:
            if "/api/" in request.url and "/api/events" not in request.url:
                asked.append(request.url.split("/api/", 1)[1])

        page.on("request", on_request)
        await page.goto(url)
        await expect(page.locator('[data-node="big-00002"]')).to_contain_text("cpu 6/8")
        pages = [a for a in asked if a.startswith("clusters?cluster=big")]

        # A heartbeat (no event) shows at the next look at the totals, with a page asked.
        await report(bus, "big", [*nodes[:2], room(3, prefix="big")])
        await expect(page.locator('[data-totals="big"]')).to_contain_text("free cpu 20/24")
        # Events of another cluster: read from the stream; the next look at the totals
        # (after they came) asks for no page.
        sequences = await bus.publish_all([finished(f"ml/w{i}", "local") for i in range(5)])
        await page.wait_for_function(f"state.lastSequence >= {max(sequences)}")
        async with page.expect_response(lambda r: "summary=1" in r.url):
            pass
        # An event naming the cluster (pods bound there) asks for its page again.
        async with page.expect_request(lambda r: "clusters?cluster=big" in r.url):
            await bus.publish_all([finished("ml/w9", "big")])
        assert pages_of(asked) == len(pages) + 2

        assert not [a for a in asked if not a.startswith("clusters?")]  # no queues, workloads


def pages_of(asked: list[str]) -> int:
    return sum(a.startswith("clusters?cluster=big") for a in asked)


def finished(workload: str, cluster: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadFinished(succeeded=True)
    return new_event("finished", payload, cluster=cluster, workload=workload, source="test")
