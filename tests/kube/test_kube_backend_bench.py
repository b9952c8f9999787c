"""`muster bench kube` runs end to end at a tiny size: its rows, table and JSON lines."""

from __future__ import annotations

import msgspec
import pytest

from muster.bench.kube import render, run_kube_bench
from muster.bench.table import render_json_line

pytestmark = pytest.mark.timeout(60)


def test_the_kube_bench_measures_the_watch_and_rate_limited_status_writes() -> None:
    rows = run_kube_bench(scale=0.02, status_qps=(100.0,))
    assert [r.measure for r in rows] == [
        "watch-list",
        "watch-stream",
        "status-writes",
        "event-writes",
    ]
    listed, streamed, status, events = rows
    assert (listed.objects, listed.events) == (100, 200)  # every pod, from both selections
    assert streamed.shown == 100
    assert streamed.events >= 100
    assert status.objects == 20
    assert status.events <= status.shown  # desires coalesce into fewer writes
    assert status.qps_limit == 100.0
    assert (events.objects, events.shown) == (20, 400)
    assert events.events <= 2 * events.objects  # an Event and its series each, not 20
    table = render(rows)
    assert table.splitlines()[0].split()[:3] == ["MEASURE", "OBJECTS", "QPS"]
    decoded = msgspec.json.decode(render_json_line(status))
    assert (decoded["section"], decoded["objects"]) == ("kube", 20)
