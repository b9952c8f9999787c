"""`muster run`'s lines: a workload is said submitted before anything else happens to it."""

from __future__ import annotations

from muster.contracts.v1 import events_pb2
from muster.launcher.driver import Driver, Track


def driver(lines: list[str]) -> Driver:
    return Driver(gateway="127.0.0.1:1", speed=1.0, print_line=lines.append, apply_nodes=list)


def words(lines: list[str]) -> list[tuple[str, str]]:
    """(workload, what) of each line: the time column left out."""
    return [(line.split()[1], line.split()[2]) for line in lines]


def submitted(key: str, queue: str) -> events_pb2.Envelope:
    return events_pb2.Envelope(
        workload=key, submitted=events_pb2.WorkloadSubmitted(queue_name=queue)
    )


def admitted(key: str) -> events_pb2.Envelope:
    admission = events_pb2.Admission(cluster_queue="cluster-queue")
    return events_pb2.Envelope(
        workload=key, admitted=events_pb2.WorkloadAdmitted(admission=admission)
    )


def test_an_admission_seen_before_the_submits_reply_comes_after_its_submitted_line() -> None:
    # The demo printed "admitted" above "submitted" when the watch beat the Submit's reply.
    lines: list[str] = []
    d = driver(lines)

    d._apply(submitted("team-b/w", "lq-team-b"))
    d._apply(admitted("team-b/w"))
    d._submitted(d.tracks["team-b/w"])  # the reply, last

    assert words(lines) == [("team-b/w", "submitted"), ("team-b/w", "admitted")]
    assert lines[0].endswith("submitted  to lq-team-b")


def test_the_reply_first_prints_submitted_once() -> None:
    lines: list[str] = []
    d = driver(lines)
    d.tracks["team-a/w"] = track = Track(key="team-a/w", queue="lq-team-a")

    d._submitted(track)
    d._apply(submitted("team-a/w", "lq-team-a"))
    d._apply(admitted("team-a/w"))

    assert words(lines) == [("team-a/w", "submitted"), ("team-a/w", "admitted")]
