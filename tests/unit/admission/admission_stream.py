"""Helpers for admission's pure tests: Kueue manifests as envelopes, and a stream in a list."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from typing import Any

from muster.admission.decision_reads import own_records
from muster.admission.decisions import envelopes_of
from muster.admission.fact_reader import fact_of
from muster.admission.facts import Recorded
from muster.admission.state import AdmissionState
from muster.bus import BusError, decode, new_event
from muster.bus.publisher import Fence
from muster.contracts.v1 import events_pb2 as pb

KUEUE = "kueue.x-k8s.io/v1beta2"


def flavor(name: str = "default", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": labels} if labels else {}
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str = "cq", *, cpu: str = "4", cohort: str | None = None, preempt: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": "default", "resources": [{"name": "cpu", "nominalQuota": cpu}]}
                ],
            }
        ],
    }
    if cohort:
        spec["cohort"] = cohort
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str = "lq", *, namespace: str = "ns", cq: str = "cq") -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def workload(name: str, *, cpu: str = "1", queue: str = "lq", priority: int = 0) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


def applied(manifest: dict[str, Any], *, at_ns: int = 1) -> pb.Envelope:
    meta = manifest["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    payload = pb.ConfigApplied(kind=manifest["kind"], name=name, manifest_json=json.dumps(manifest))
    return new_event("config_applied", payload, cluster="local", source="test", now_ns=at_ns)


def submitted(
    manifest: dict[str, Any], *, at_s: float = 1.0, cluster: str = "local"
) -> pb.Envelope:
    meta = manifest["metadata"]
    queue = str(manifest["spec"].get("queueName") or "")  # as the gateway copies it
    payload = pb.WorkloadSubmitted(manifest_json=json.dumps(manifest), queue_name=queue)
    return new_event(
        "submitted",
        payload,
        cluster=cluster,
        workload=f"{meta['namespace']}/{meta['name']}",
        generation=1,
        source="test",
        now_ns=int(at_s * 1e9),
    )


def reported(field: str, key: str, payload: Any = None, *, at_s: float = 1.0) -> pb.Envelope:
    message = payload if payload is not None else getattr(pb.Envelope(), field).__class__()
    return new_event(
        field, message, cluster="local", workload=key, source="test", now_ns=int(at_s * 1e9)
    )


def stored_records(envs: Sequence[pb.Envelope]) -> list[Recorded]:
    """The decisions among `envs` as a replay or a standby reads them: from the bytes stored."""
    facts = [fact_of(decode(e.SerializeToString())) for e in envs]
    return [f for f in facts if isinstance(f, Recorded)]


class Stream:
    """MUSTER_EVENTS in a list; `run` is one live round of a replica on one event."""

    def __init__(self) -> None:
        self.log: list[pb.Envelope] = []

    def append(self, env: pb.Envelope) -> pb.Envelope:
        env.sequence = len(self.log) + 1
        self.log.append(env)
        return env

    def run(
        self,
        state: AdmissionState,
        env: pb.Envelope,
        *,
        now_s: float = 10.0,
        publish: bool = True,
    ) -> list[pb.Envelope]:
        """Store `env` (once: every replica reads it), apply it, decide, and store what was
        decided (unless `publish` is off: a replica that died before publishing)."""
        if not env.sequence:
            self.append(env)
        fact = fact_of(env)
        events = state.apply(fact, now_s=now_s) if fact is not None else []
        events += state.decide(now_s=now_s)
        decisions = state.decisions(events)
        out = envelopes_of(decisions, cause=env, source=state.source)
        if publish:
            for e in out:
                self.append(e)
            records = own_records(decisions, out)
            assert list(records.values()) == stored_records(out)  # as the service records them
            state.record_published(list(records.values()))
        return out

    def rebuild(self, **settings: Any) -> AdmissionState:
        """A new replica that replayed the whole stream (not yet owning)."""
        state = AdmissionState(**settings)
        for env in self.log:
            state.replay(fact_of(env), sequence=env.sequence)
        return state

    def of(self, field: str, key: str | None = None) -> list[pb.Envelope]:
        return [
            e for e in self.log if e.WhichOneof("payload") == field and key in (None, e.workload)
        ]


class SideBySide:
    """`publish_together` over the fake's own `publish` (which a fake overrides to fail or
    wait): each envelope's publish side by side, a failure as its result."""

    async def publish(
        self,
        env: pb.Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
        fenced_on: str | None = None,
    ) -> int:
        raise NotImplementedError

    async def publish_together(
        self, envs: Sequence[pb.Envelope], fences: Sequence[Fence | None]
    ) -> list[int | BusError]:
        async def one(env: pb.Envelope, fence: Fence | None) -> int | BusError:
            try:
                if fence is None:
                    return await self.publish(env)
                return await self.publish(
                    env, expected_last_subject_sequence=fence[0], fenced_on=fence[1]
                )
            except BusError as exc:
                return exc

        return list(await asyncio.gather(*map(one, envs, fences)))


class StoringPublisher(SideBySide):
    """What rounds publish through, storing each envelope in order; its stream sequences are
    drawn from `sequences` when given (shared with the events consumed), else 1, 2, ..."""

    def __init__(self, sequences: Iterator[int] | None = None) -> None:
        self.stored: list[pb.Envelope] = []
        self.sequences = sequences

    async def publish(self, env: pb.Envelope, **_: object) -> int:
        self.stored.append(env)
        return len(self.stored) if self.sequences is None else next(self.sequences)

    async def dead_letter_unstored(self, env: pb.Envelope, *, consumer: str, reason: str) -> int:
        raise AssertionError(f"{env.type} for {env.workload} refused: {reason}")
