"""Submit on Kubernetes, end to end: `muster submit` to a gateway with `--cluster-backend kube`
writes what it is given into the API-server stand-in as the caller, the watcher picks it up as
if kubectl had created it, and it runs (the stand-in's Job controller makes the pods). Nothing
is a NATS-only workload; the cluster's RBAC has the last word, and its refusals come back as
PERMISSION_DENIED naming the object."""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from kube_access_helpers import cluster_access, kubeconfig, own_credentials, submit, token
from kube_helpers import present
from kube_services_helpers import Stack, condition_when, eventually, job_when, running_stack

from muster.bus import Bus
from muster.cli.main import main
from muster.cluster.kube.settings import KubeConfig
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.auth_tokens import token_hash
from muster.gateway.config import GatewayConfig
from muster.gateway.service import GatewayServer

pytestmark = pytest.mark.timeout(90)

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"


@contextlib.asynccontextmanager
async def kube_gateway(bus: Bus, security: SecurityConfig) -> AsyncIterator[str]:
    """A gateway whose Submit writes into the API server of `security.kube`; its address."""
    config = GatewayConfig(
        listen="127.0.0.1:0", security=security, grace_s=1, cluster_backend="kube"
    )
    server = GatewayServer(bus, config)
    address = await server.start()
    try:
        yield address
    finally:
        await server.stop()


async def muster(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_muster_submit_writes_kueues_sample_into_the_api_server_and_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        stack.server.faults.fail_next(1, status=500, verb="create", path="/jobs$")
        # Kueue's single-ClusterQueue setup, then its sample Job (generateName).
        setup = EXAMPLES / "two-teams.yaml"
        sample = EXAMPLES / "kueue-sample-job.yaml"
        security = SecurityConfig(kube=KubeConfig(host=stack.server.url))
        async with kube_gateway(stack.bus, security) as address:
            for manifest in (setup, sample):
                assert await muster("submit", str(manifest), "--gateway", address) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[:2] == [
            "ResourceFlavor default-flavor applied",
            "ClusterQueue cluster-queue applied",
        ]
        assert lines[-2] == "LocalQueue default/user-queue applied"
        kind, key, outcome = lines[-1].split()
        assert (kind, outcome) == ("Job", "created")
        namespace, name = key.split("/")
        assert name.startswith("sample-job-")
        assert len(name) == len("sample-job-") + 5

        # In the API server as kubectl would have made it; admitted and run from there.
        await job_when(stack.kubectl, namespace, name, suspended=False)
        await run_pods_to_completion(stack, namespace, name, pods=3)
        workload = await eventually(lambda: workload_named(stack, name))
        finished = await condition_when(
            stack.kubectl, "Workload", workload, namespace, "Finished", "True"
        )
        assert finished["reason"] == "Succeeded"
        # Submitted by the watcher from the API server, never by the gateway on NATS alone.
        await stack.events.caught_up()
        sources = {e.source for e in stack.events.seen if e.type == "workload.submitted"}
        assert sources == {"watcher/local"}


async def test_kueues_sample_created_with_kubectl_is_named_by_the_api_server_and_runs(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        await stack.kubectl.apply((EXAMPLES / "two-teams.yaml").read_text())
        await stack.kubectl.apply((EXAMPLES / "kueue-sample-job.yaml").read_text())  # create

        async def named() -> str | None:
            jobs = await asyncio.to_thread(stack.kubectl.batch.list_namespaced_job, "default")
            return next((present(j.metadata).name for j in jobs.items), None)

        name = await eventually(named)
        assert name.startswith("sample-job-")
        await job_when(stack.kubectl, "default", name, suspended=False)
        await run_pods_to_completion(stack, "default", name, pods=3)
        workload = await eventually(lambda: workload_named(stack, name))
        await condition_when(stack.kubectl, "Workload", workload, "default", "Finished", "True")


async def workload_named(stack: Stack, job: str) -> str | None:
    for wl in await stack.kubectl.workloads("default"):
        if wl["metadata"]["name"].startswith(f"job-{job}-"):
            return str(wl["metadata"]["name"])
    return None


async def run_pods_to_completion(stack: Stack, namespace: str, job: str, *, pods: int) -> None:
    """kube-scheduler's and the kubelet's part for a Job whose pods name no muster scheduler:
    its pods run and succeed; the Job controller then completes the Job."""

    async def made() -> list[str]:
        names = [
            p["metadata"]["name"]
            for p in await stack.kubectl.list_pods(namespace)
            if p["metadata"]["name"].startswith(f"{job}-")
        ]
        return names if len(names) == pods else []

    for name in await eventually(made):
        await stack.kubectl.set_pod_phase(namespace, name, "Succeeded")


JOB = textwrap.dedent(
    """\
    apiVersion: batch/v1
    kind: Job
    metadata: {name: train, namespace: NS, labels: {kueue.x-k8s.io/queue-name: main}}
    spec:
      suspend: true
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]
    """
)


async def submit_to(address: str, text: str, account: str) -> tuple[str, str]:
    async with grpc.aio.insecure_channel(address) as channel:
        return await submit(channel, text, account)


async def test_the_cluster_judges_the_caller_and_its_refusal_names_the_object(
    tmp_path: Path,
) -> None:
    # A policy that (wrongly) lets alice submit anywhere: the API server still judges alice.
    (tmp_path / "tokens.yaml").write_text(
        "tokens:\n"
        f"- {{sha256: {token_hash(token('alice'))}, user: alice, groups: [team-a]}}\n"
        f"- {{sha256: {token_hash(token('admin'))}, user: root, groups: [system:masters]}}\n"
    )
    (tmp_path / "policy.yaml").write_text(
        'rules: [{groups: [team-a, system:masters], permissions: [submit], namespaces: ["*"]}]\n'
    )
    async with running_stack(
        tmp_path,
        access=cluster_access(),
        admin_token=token("admin"),
        service_flags=own_credentials(tmp_path),
    ) as stack:
        await stack.kubectl.apply(
            "".join(f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {n}}}\n"
                    for n in ("team-a", "team-b"))
        )  # fmt: skip
        security = SecurityConfig(
            tokens_file=str(tmp_path / "tokens.yaml"),
            policy_file=str(tmp_path / "policy.yaml"),
            kube=KubeConfig(
                host=stack.server.url,
                kubeconfig=str(kubeconfig(tmp_path, stack.server.url, "gateway")),
            ),
        )
        async with kube_gateway(stack.bus, security) as address:
            own = await submit_to(address, JOB.replace("NS", "team-a"), "alice")
            theirs = await submit_to(address, JOB.replace("NS", "team-b"), "alice")
            masters = await submit_to(address, JOB.replace("NS", "team-b"), "admin")
        creates = [
            (r.path, r.code, r.user)
            for r in stack.server.requests.entries()
            if r.verb == "create" and r.path.endswith("/jobs")
        ]

    assert own == ("OK", "")
    assert theirs[0] == "PERMISSION_DENIED"
    assert theirs[1].startswith("Job/team-b/train: ")
    assert 'User "alice" cannot create resource "jobs"' in theirs[1]
    assert theirs[1].endswith("(nothing was written)")
    assert masters[0] == "PERMISSION_DENIED"
    assert "never writes into the cluster with cluster-admin rights" in masters[1]
    assert creates == [
        ("/apis/batch/v1/namespaces/team-a/jobs", 201, "alice"),
        ("/apis/batch/v1/namespaces/team-b/jobs", 403, "alice"),
    ]
