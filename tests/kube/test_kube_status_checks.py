"""StatusWriter and a Workload's `status.admissionChecks` against the API-server stand-in: muster
adds the entries a reservation requires and resets them after an eviction, and never
overwrites what a check controller wrote, even when the controller writes in between."""

from __future__ import annotations

from typing import Any

import pytest
from kube_backend_helpers import job

from muster.api.check_states import ChecksWanted, format_time, parse_time
from muster.cluster.kube import Backoff, KubeBackend, ObjectRef, StatusWriter, StatusWriterSettings
from muster.cluster.kube.transport import Transport
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(30)

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MERGE = "application/merge-patch+json"
RESERVED = {
    "conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"}
    ]
}
EVICTED = {
    "conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "evicted"},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "by team-b"},
    ]
}


async def workload_of_job(server: ApiServer, backend: KubeBackend) -> ObjectRef:
    await backend.apply(job("train"))
    jobs = server.registry.by_key(("batch", "jobs"))
    assert jobs is not None
    made = StatusWriter(backend.transport)
    name = await made.create_workload_for_job(server.api.get(jobs, "default", "train"))
    await made.close()
    return ObjectRef(kind="Workload", name=name, namespace="default")


def stored_checks(server: ApiServer, ref: ObjectRef) -> list[dict[str, Any]]:
    rt = server.registry.by_key(("kueue.x-k8s.io", "workloads"))
    assert rt is not None
    status = server.api.get(rt, ref.namespace, ref.name).get("status") or {}
    found: list[dict[str, Any]] = status.get("admissionChecks") or []
    return found


def controller_sets(
    server: ApiServer, ref: ObjectRef, state: str, message: str, *, at_s: float = NOW + 5
) -> None:
    """What a check controller writes: its own entry, under the resourceVersion it read."""
    rt = server.registry.by_key(("kueue.x-k8s.io", "workloads"))
    assert rt is not None
    stored = server.api.get(rt, ref.namespace, ref.name)
    checks = [dict(c) for c in stored["status"]["admissionChecks"]]
    for check in checks:
        if check["name"] == "prov":
            check.update(state=state, message=message, lastTransitionTime=format_time(at_s))
    body = {
        "metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]},
        "status": {"admissionChecks": checks},
    }
    server.api.patch(rt, "v1beta1", ref.namespace, ref.name, MERGE, body, subresource="status")


async def reserved(statuses: StatusWriter, ref: ObjectRef, *checks: str) -> None:
    """What muster writes when quota is reserved with `checks` to pass."""
    statuses.desire(ref, RESERVED, checks=ChecksWanted(names=checks))
    await statuses.flush()


def writer(transport: Transport, now: list[float]) -> StatusWriter:
    settings = StatusWriterSettings(backoff=Backoff(initial_s=0.01, max_s=0.05))
    return StatusWriter(transport, settings=settings, clock=lambda: now[0])


async def test_checks_are_added_pending_and_a_controllers_state_is_never_overwritten(
    server: ApiServer, backend: KubeBackend
) -> None:
    ref = await workload_of_job(server, backend)
    now = [NOW]
    statuses = writer(backend.transport, now)
    wanted = ChecksWanted(names=("prov", "budget"))
    statuses.desire(ref, RESERVED, checks=wanted)
    await statuses.flush()
    assert [(c["name"], c["state"]) for c in stored_checks(server, ref)] == [
        ("budget", "Pending"),
        ("prov", "Pending"),
    ]
    controller_sets(server, ref, "Ready", "capacity is there")
    now[0] += 10
    admitted = {**RESERVED, "admission": {"clusterQueue": "cq", "podSetAssignments": []}}
    statuses.desire(ref, admitted, checks=wanted)  # the same checks: no read, no list written
    await statuses.flush()
    await statuses.close()
    prov = next(c for c in stored_checks(server, ref) if c["name"] == "prov")
    assert (prov["state"], prov["message"]) == ("Ready", "capacity is there")
    reads = server.requests.count(verb="get", path="/status$")
    assert reads == 1


async def test_an_eviction_resets_what_was_set_before_it_and_counts_a_retry(
    server: ApiServer, backend: KubeBackend
) -> None:
    ref = await workload_of_job(server, backend)
    now = [NOW]
    statuses = writer(backend.transport, now)
    await reserved(statuses, ref, "prov")
    controller_sets(server, ref, "Retry", "no capacity")
    now[0] += 60
    evicted = ChecksWanted(names=("prov",), evicted_at_s=NOW + 30)
    statuses.desire(ref, EVICTED, checks=evicted)
    await statuses.flush()
    (prov,) = stored_checks(server, ref)
    assert prov["state"] == "Pending"
    assert prov["message"] == "Reset to Pending after eviction. Previously: Retry"
    assert prov["retryCount"] == 1
    assert parse_time(prov["lastTransitionTime"]) == NOW + 60
    # The next reservation's Ready (set after the eviction) survives the same desire again,
    # from a writer that restarted and knows nothing it wrote.
    controller_sets(server, ref, "Ready", "provisioned", at_s=NOW + 90)
    restarted = writer(backend.transport, now)
    statuses.desire(ref, RESERVED, checks=evicted)
    restarted.desire(ref, RESERVED, checks=evicted)
    await restarted.flush()
    await statuses.flush()
    await restarted.close()
    await statuses.close()
    (prov,) = stored_checks(server, ref)
    assert (prov["state"], prov["message"]) == ("Ready", "provisioned")


class InterleavingTransport(Transport):
    """The backend's transport, with a check controller writing once right after muster has
    read the Workload (between its read and its write)."""

    def __init__(self, inner: Transport, server: ApiServer, ref: ObjectRef) -> None:
        super().__init__(inner.api, writes=inner.writes, owns_client=False)
        self.server, self.ref, self.done = server, ref, False

    async def checked(self, method: str, path: str, **kw: Any) -> Any:
        answer = await super().checked(method, path, **kw)
        if method == "GET" and path.endswith("/status") and not self.done:
            self.done = True
            controller_sets(self.server, self.ref, "Ready", "written meanwhile")
        return answer


async def test_a_controller_writing_between_musters_read_and_write_is_kept(
    server: ApiServer, backend: KubeBackend
) -> None:
    ref = await workload_of_job(server, backend)
    now = [NOW]
    first = writer(backend.transport, now)
    await reserved(first, ref, "prov")
    await first.close()
    racing = writer(InterleavingTransport(backend.transport, server, ref), now)
    await reserved(racing, ref, "prov", "budget")
    await racing.close()
    assert racing.stats.retries == 1  # 409: read again, then written
    checks = {c["name"]: (c["state"], c["message"]) for c in stored_checks(server, ref)}
    assert checks == {"budget": ("Pending", ""), "prov": ("Ready", "written meanwhile")}
