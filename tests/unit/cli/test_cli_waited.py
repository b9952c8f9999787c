"""The WAITED column of `muster run`: every wait in the queue summed, so a workload preempted and
requeued shows the time it waited again, not only its first wait (`muster simulate`'s:
tests/unit/sim/test_sim_waited.py); and both commands' help say what it counts."""

from __future__ import annotations

import pytest

from muster.cli.main import main
from muster.contracts.v1 import events_pb2
from muster.launcher.driver import Driver, render_tracks


def waited(header: str, row: str) -> str:
    """The WAITED cell of an aligned row (QUEUE's "lq → main" has spaces)."""
    return row[header.index("WAITED") :].split()[0]


def envelope(key: str, **payload: object) -> events_pb2.Envelope:
    return events_pb2.Envelope(workload=key, **payload)  # type: ignore[arg-type]


def test_run_counts_every_wait_of_a_requeued_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    d = Driver(gateway="127.0.0.1:1", speed=1.0, print_line=lines.append, apply_nodes=list)
    clock = [0.0]
    monkeypatch.setattr(d, "now_s", lambda: clock[0])
    admitted = events_pb2.WorkloadAdmitted(admission=events_pb2.Admission(cluster_queue="main"))
    story: list[tuple[float, events_pb2.Envelope]] = [
        (0.0, envelope("ns/w", submitted=events_pb2.WorkloadSubmitted(queue_name="lq"))),
        (3.0, envelope("ns/w", admitted=admitted)),
        (10.0, envelope("ns/w", evicted=events_pb2.WorkloadEvicted(reason="Preempted"))),
        (11.0, envelope("ns/w", eviction_completed=events_pb2.EvictionCompleted())),
        (11.0, envelope("ns/w", requeued=events_pb2.WorkloadRequeued())),
        (18.0, envelope("ns/w", admitted=admitted)),
        (20.0, envelope("ns/w", finished=events_pb2.WorkloadFinished(succeeded=True))),
    ]
    for at, env in story:
        clock[0] = at
        d._apply(env)

    header, row = render_tracks(list(d.tracks.values()), now_s=30.0).splitlines()

    assert waited(header, row) == "10"  # 3 s before the first admission, 7 s after the requeue


def test_run_counts_a_wait_still_open_up_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    d = Driver(gateway="127.0.0.1:1", speed=1.0, print_line=lambda _: None, apply_nodes=list)
    monkeypatch.setattr(d, "now_s", lambda: 2.0)
    d._apply(envelope("ns/w", submitted=events_pb2.WorkloadSubmitted(queue_name="lq")))

    header, row = render_tracks(list(d.tracks.values()), now_s=9.0).splitlines()

    assert waited(header, row) == "7"


@pytest.mark.parametrize("command", ["simulate", "run"])
def test_the_help_says_what_waited_counts(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])

    assert "WAITED is the seconds a workload was queued, summed over" in " ".join(
        capsys.readouterr().out.split()
    )
