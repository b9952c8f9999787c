"""`muster bench book` at a tiny scale: rows of the sizes asked, every event folded."""

from __future__ import annotations

from muster.bench import book


def test_rows_fold_every_event_of_every_workload() -> None:
    rows = list(book.run(scale=0.001))
    assert [r.workloads for r in rows] == [10, 50]
    assert [r.events for r in rows] == [7 * 10 + 5, 7 * 50 + 25]  # half of them finished
    assert all(r.events_per_s > 0 and r.kib_per_workload > 0 for r in rows)
    assert book.render(rows).splitlines()[0].split() == [
        "workloads", "events", "fold", "s", "events/s", "list", "all", "ms", "KiB/workload"
    ]  # fmt: skip
