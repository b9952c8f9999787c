"""The MUSTER_PARTITIONS values a replica owes: written after a configuration change moves a
LocalQueue's home, not at every views write (they compare every LocalQueue of every shard)."""

from __future__ import annotations

from admission_stream import (
    Stream,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    submitted,
    workload,
)

from muster.admission.homes import HomesOut
from muster.admission.state import AdmissionState


def owning() -> AdmissionState:
    state = AdmissionState()
    state.take_ownership(now_s=0.0)
    return state


def test_homes_are_owed_after_a_configuration_change_only_until_written() -> None:
    stream, state, out = Stream(), owning(), HomesOut()
    for manifest in (flavor(), cluster_queue(), local_queue("a")):
        stream.run(state, applied(manifest))
    first = out.owed(state.homes)
    assert first is not None
    assert list(first) == ["lq.ns.a"]
    out.written(state.homes.version)
    assert out.owed(state.homes) is None

    stream.run(state, submitted(workload("w", queue="a")))
    stream.run(state, applied(cluster_queue(cpu="8")))  # quota only: no LocalQueue moved
    assert out.owed(state.homes) is None

    stream.run(state, applied(local_queue("b")))
    owed = out.owed(state.homes)
    assert owed is not None
    assert sorted(owed) == ["lq.ns.a", "lq.ns.b"]


def test_homes_whose_write_failed_stay_owed() -> None:
    stream, state, out = Stream(), owning(), HomesOut()
    for manifest in (flavor(), cluster_queue(), local_queue("a")):
        stream.run(state, applied(manifest))
    version = state.homes.version
    assert out.owed(state.homes) is not None
    # The write failed: `written` is not called, so the next views write tries again.
    assert out.owed(state.homes) is not None
    out.written(version)
    assert out.owed(state.homes) is None
