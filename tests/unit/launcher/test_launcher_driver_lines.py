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


KEY = "team-a/w"


def permitted_on(key: str, *nodes: str) -> events_pb2.Envelope:
    """A whole permit to make one pod on each of `nodes` (docs/events.md, "Pods created on
    their nodes")."""
    bindings = [
        events_pb2.PodBinding(pod=events_pb2.PodRef(namespace="team-a", name=f"p{i}"), node=n)
        for i, n in enumerate(nodes)
    ]
    return events_pb2.Envelope(
        workload=key, gang_permitted=events_pb2.GangPermitted(bindings=bindings, create=True)
    )


def bound_on(key: str, *nodes: str) -> events_pb2.Envelope:
    bindings = [events_pb2.PodBinding(node=n) for n in nodes]
    return events_pb2.Envelope(workload=key, bound=events_pb2.PodsBound(bindings=bindings))


def running(key: str) -> events_pb2.Envelope:
    return events_pb2.Envelope(workload=key, running=events_pb2.WorkloadRunning())


def finished(key: str) -> events_pb2.Envelope:
    return events_pb2.Envelope(workload=key, finished=events_pb2.WorkloadFinished(succeeded=True))


def permitted_run(lines: list[str], *nodes: str) -> Driver:
    """A run that saw team-a/w submitted, admitted and permitted on `nodes`, pods to make."""
    d = driver(lines)
    for env in (submitted(KEY, "lq-team-a"), admitted(KEY), permitted_on(KEY, *nodes)):
        d._apply(env)
    return d


def test_pods_made_on_their_nodes_with_no_bound_say_where_they_run() -> None:
    """A binder with `--bound-events binds` (as `muster run` starts it) tells no `bound` for
    them: the run says where they run once they do, and its table has their nodes."""
    lines: list[str] = []
    d = permitted_run(lines, "n2", "n1")
    d._apply(running(KEY))
    d._apply(finished(KEY))

    assert words(lines) == [(KEY, w) for w in ("submitted", "admitted", "running", "finished")]
    assert lines[2].endswith("running    n1,n2")
    assert d.tracks[KEY].nodes == {"n1", "n2"}


def test_a_binder_that_tells_bound_is_heard_once() -> None:
    lines: list[str] = []
    d = permitted_run(lines, "n1")
    d._apply(bound_on(KEY, "n1"))
    d._apply(running(KEY))

    assert words(lines) == [(KEY, w) for w in ("submitted", "admitted", "bound")]
    assert lines[2].endswith("bound      n1")


def test_a_permit_evicted_before_its_pods_ran_shows_no_nodes() -> None:
    lines: list[str] = []
    d = permitted_run(lines, "n1")
    d._apply(events_pb2.Envelope(workload=KEY, evicted=events_pb2.WorkloadEvicted(reason="x")))
    d._apply(finished(KEY))

    assert d.tracks[KEY].nodes == set()
