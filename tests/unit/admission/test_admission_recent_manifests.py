"""An `admitted` carries its workload's manifests as submitted: the latest submissions' kept in
the ledger, the others read back from the log that keeps every live workload's `submitted`."""

from __future__ import annotations

from itertools import count

from admission_stream import reported, submitted, workload

from muster.admission.fact_reader import fact_of
from muster.admission.facts import Submit
from muster.admission.ledger import RECENT_CHARS, Ledger
from muster.admission.snapshot import CompactLog
from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb


class Replica:
    """A ledger and its log, fed stored events in stream order, as a replica's state is."""

    def __init__(self, *, recent_kept: int) -> None:
        self.ledger = Ledger(recent_kept=recent_kept)
        self.log = CompactLog(self.ledger)
        self.sequences = count(1)

    def submit(self, name: str, *, cpu: str, owner: str = "", note: str = "") -> pb.Envelope:
        manifest = workload(name, cpu=cpu)
        if note:
            manifest["metadata"]["annotations"] = {"note": note}
        env = submitted(manifest)
        env.submitted.owner_manifest_json = owner
        env.sequence = next(self.sequences)
        fact = fact_of(env)
        assert isinstance(fact, Submit)
        self.ledger.submit(
            fact.workload,
            cluster=fact.cluster,
            generation=fact.generation,
            at_s=1.0,
            manifest_json=fact.manifest_json,
            owner_manifest_json=fact.owner_manifest_json,
        )
        self.log.add(env)
        return env

    def delete(self, name: str) -> None:
        key = WorkloadKey(f"ns/{name}")
        self.ledger.delete(key)
        env = reported("deleted", key)
        env.sequence = next(self.sequences)
        self.log.add(env)  # about a workload no longer live: the log drops its story

    def carried(self, name: str) -> tuple[str, str]:
        """What an `admitted` of workload `name` would carry of its submission."""
        manifests = self.ledger.manifests(WorkloadKey(f"ns/{name}"), default_cluster="local")
        return manifests.workload_json, manifests.owner_json


def as_submitted(env: pb.Envelope) -> tuple[str, str]:
    return env.submitted.manifest_json, env.submitted.owner_manifest_json


def test_recent_and_older_submissions_carry_their_manifests_as_submitted() -> None:
    replica = Replica(recent_kept=2)
    envs = {
        name: replica.submit(name, cpu=cpu, owner=f'{{"kind": "Job", "name": "{name}"}}')
        for name, cpu in (("a", "1"), ("b", "2"), ("c", "3"))
    }
    for name, env in envs.items():  # "a" is no longer among the latest two
        assert replica.carried(name) == as_submitted(env)
        assert replica.carried(name) == replica.log.submitted_manifests(f"ns/{name}")


def test_a_workload_deleted_and_submitted_again_carries_its_new_manifest() -> None:
    for recent_kept in (1, 4):  # its first submission long gone from the latest, or not
        replica = Replica(recent_kept=recent_kept)
        replica.submit("a", cpu="1")
        replica.submit("b", cpu="1")
        replica.delete("a")
        again = replica.submit("a", cpu="2")
        assert replica.carried("a") == as_submitted(again)
        assert '"2"' in replica.carried("a")[0]
        replica.submit("c", cpu="1")
        assert replica.carried("a") == as_submitted(again)
        replica.delete("a")
        large = replica.submit("a", cpu="3", note="x" * (RECENT_CHARS + 1))  # the log's alone
        assert replica.carried("a") == as_submitted(large)


def test_a_finished_or_deleted_workload_carries_nothing() -> None:
    replica = Replica(recent_kept=4)
    replica.submit("a", cpu="1")
    replica.submit("b", cpu="1")
    replica.ledger.finish(WorkloadKey("ns/a"))
    replica.delete("b")
    assert replica.carried("a") == ("", "")
    assert replica.carried("b") == ("", "")
