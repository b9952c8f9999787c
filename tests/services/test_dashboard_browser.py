"""The dashboard in a real browser: Debian's headless Chromium, driven by Playwright, against a
stack `muster up` started.

The page loads, shows the demo's queues (k8s/examples/two-teams.yaml), and updates without a
reload when a workload is admitted: its admission reaches the timeline and the ClusterQueue's
card through the server-sent events. Chromium is the system's (`.ci/run` installs Debian's
package); Playwright never downloads one. MUSTER_DASHBOARD_SCREENSHOT=PATH saves the page
(how docs/dashboard.png is made).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from up_stack import ROOT, Up, down, muster, start

pytestmark = pytest.mark.timeout(180)

CHROMIUM = "/usr/bin/chromium"
# What works here: no sandbox as root, nothing that reaches out to the network by itself.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing: .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} missing (apt-get install chromium)")
    stack = start(tmp_path_factory.mktemp("up"), "--speed", "20")
    try:
        yield stack
    finally:
        down(stack)


@pytest.fixture
def page(up: Up) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="muster-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=FLAGS,
                viewport={"width": 1280, "height": 900},
            )
            try:
                yield context.new_page()
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_the_page_shows_the_queues_and_follows_an_admission_without_reloading(
    up: Up, page: object
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    muster(up, "submit", str(ROOT / "k8s/examples/two-teams.yaml"))
    page.goto(up.state.dashboard)

    card = page.locator('[data-cq="cluster-queue"]')
    expect(card).to_be_visible()
    expect(card.locator('[data-resource="default-flavor/cpu"]')).to_contain_text("0 / 16")
    expect(page.locator('[data-lq="team-a/lq-team-a"]')).to_be_visible()
    expect(page.locator('[data-lq="team-b/lq-team-b"]')).to_be_visible()
    expect(page.locator("#live")).to_have_text("live")

    muster(up, "submit", str(ROOT / "k8s/examples/jobs.yaml"))  # the page is not reloaded

    admitted = page.locator('li[data-event-type="workload.admitted"]')
    expect(admitted.filter(has_text="team-a/job-sample-job-team-a-")).to_be_visible()
    expect(card).to_contain_text("admitted")
    expect(card.locator('[data-resource="default-flavor/cpu"]')).not_to_contain_text("0 / 16")
    if os.environ.get("MUSTER_DASHBOARD_SCREENSHOT"):
        page.screenshot(path=os.environ["MUSTER_DASHBOARD_SCREENSHOT"], full_page=True)

    page.locator('a[href="#/workloads"]').click()
    row = page.locator('tr[data-workload^="team-b/job-sample-job-team-b-"]')
    expect(row).to_be_visible()
    row.locator("a").click()
    expect(page.locator("[data-detail]")).to_contain_text("team-b/job-sample-job-team-b-")
    expect(page.locator("main")).to_contain_text("workload.submitted")


def test_the_nodes_page_shows_the_clusters_nodes_with_their_room(up: Up, page: object) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    page.goto(up.state.dashboard + "/#/nodes")

    expect(page.locator('[data-cluster="local"]')).to_contain_text("Ready")
    expect(page.locator("[data-node]")).to_have_count(4)
    expect(page.locator('[data-node="node-3"]')).to_contain_text("nvidia.com/gpu 2/2")


def test_a_workload_whose_local_queue_does_not_exist_waits_on_the_front_page(
    up: Up, page: object, tmp_path: Path
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    muster(up, "submit", str(ROOT / "k8s/examples/two-teams.yaml"))
    job = (ROOT / "k8s/examples/jobs.yaml").read_text().split("\n---\n")[0]
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        job.replace("name: sample-job-team-a", "name: typo-job").replace(
            "queue-name: lq-team-a", "queue-name: lq-tema-a"
        )
    )
    muster(up, "submit", str(typo))
    page.goto(up.state.dashboard)

    card = page.locator('[data-lq="team-a/lq-tema-a"]')
    expect(card).to_contain_text("no such LocalQueue")
    row = card.locator('tr[data-workload^="team-a/job-typo-job-"]')
    expect(row).to_contain_text("PENDING")
    expect(row).to_contain_text("LocalQueue lq-tema-a doesn't exist")
