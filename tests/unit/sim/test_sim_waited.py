"""The WAITED column of `muster simulate`'s workload table: every wait in the queue summed, so a
workload preempted and requeued shows the time it waited again, not only its first wait."""

from __future__ import annotations

from sim_yaml import cluster, run, workload

from muster.sim.report import render_table


def waited_and_ran(table: str) -> dict[str, tuple[str, str]]:
    """WORKLOAD → (WAITED, RAN) of the workload table (QUEUE's "lq → main" has spaces)."""
    header, *rows = table.split("\n\n")[0].splitlines()
    at = header.index("WAITED")
    cells = {row.split()[0]: row[at:].split() for row in rows}
    return {key: (waited, ran) for key, (waited, ran, *_) in cells.items()}


def test_a_preempted_workload_counts_its_wait_after_the_requeue_too() -> None:
    # t=0 low admitted; t=2 urgent preempts it (requeued at once); t=7 urgent ends and low is
    # admitted again, to run its 12 s from the start: it waited 0 + 5 s and ran 2 + 12 s.
    result = run(
        cluster(preemption="LowerPriority"),
        workload("low", cpu="4", runs=12),
        workload("urgent", cpu="4", priority=1000, after=2, runs=5),
    )

    columns = waited_and_ran(render_table(result))

    assert columns["team-a/low"] == ("5", "14")
    assert columns["team-a/urgent"] == ("0", "5")


def test_a_workload_never_admitted_shows_how_long_it_has_waited() -> None:
    result = run(cluster(), workload("big", cpu="5", runs=30), until_s=40)

    assert waited_and_ran(render_table(result))["team-a/big"] == ("40", "0")
