"""Kueue's visibility API through the Kubernetes API (`visibility.kueue.x-k8s.io`), end to end:
Jobs queued on the API-server stand-in are admitted or left pending by the services, and the
gateway's visibility server answers what the aggregation layer forwards
(`kubectl get --raw /apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/NAME/pendingworkloads`):
the request over TLS with the front proxy's client certificate and the user in its headers,
authorized as Kueue authorizes it (SubjectAccessReview)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kube_access_helpers import cluster_access, kubeconfig, own_credentials, token
from kube_services_helpers import Stack, eventually, running_stack
from tls_certs import Authority

from muster.cluster.kube.settings import KubeConfig
from muster.contracts.v1 import services_pb2
from muster.devtools.apiserver.access import Access, Grant
from muster.gateway.auth_config import SecurityConfig
from muster.gateway.config import GatewayConfig
from muster.gateway.kube_visibility_server import VisibilityServing
from muster.gateway.service import GatewayServer

pytestmark = pytest.mark.timeout(90)

GROUP = "visibility.kueue.x-k8s.io"
MANY = 140  # Jobs: one runs, the others wait in two pages (of 32 to 128 each)
SETUP = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: team-a}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: other, namespace: team-a}
spec: {clusterQueue: cq}
"""


def job(name: str, queue: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: {queue}}}}}
spec:
  suspend: true
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def access() -> Access:
    """The cluster's RBAC, and who may read pending workloads: carol every ClusterQueue's,
    alice the LocalQueues of team-a."""
    base = cluster_access()
    pending = f"{{}}.{GROUP}/pendingworkloads"
    grants = [
        Grant(users=frozenset({"carol"}), verbs=frozenset({"get"}),
              resources=frozenset({pending.format("clusterqueues")})),
        Grant(groups=frozenset({"team-a"}), verbs=frozenset({"get"}),
              resources=frozenset({pending.format("localqueues")}),
              namespaces=frozenset({"team-a"})),
    ]  # fmt: skip
    return Access(tokens=base.tokens, grants=[*base.grants, *grants])


class Aggregator:
    """The API server's aggregation layer: TLS to the extension server, its front-proxy client
    certificate, and the authenticated user in X-Remote-User / X-Remote-Group."""

    def __init__(self, address: str, tls: ssl.SSLContext, bare: ssl.SSLContext) -> None:
        self.base = f"https://{address}"
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls))
        self._bare = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=bare))

    async def get(
        self, path: str, *, user: str = "", groups: tuple[str, ...] = (), bearer: str = ""
    ) -> tuple[int, dict[str, Any]]:
        headers = [("X-Remote-User", user), *(("X-Remote-Group", g) for g in groups)]
        session = self._session
        if bearer:  # straight to the server, not through the aggregator
            session, headers = self._bare, [("Authorization", f"Bearer {bearer}")]
        async with session.get(self.base + path, headers=headers) as response:
            body: dict[str, Any] = await response.json()
            return response.status, body

    async def close(self) -> None:
        await self._session.close()
        await self._bare.close()


@contextlib.asynccontextmanager
async def aggregated(stack: Stack, tmp_path: Path) -> AsyncIterator[Aggregator]:
    """The gateway serving the visibility API, and an aggregator that reaches it."""
    server_ca, proxy_ca = Authority("serving CA"), Authority("front-proxy CA")
    key, cert = server_ca.server("visibility").write(tmp_path, "visibility")
    (tmp_path / "front-proxy-ca.crt").write_bytes(proxy_ca.pem)
    serving = VisibilityServing(
        listen="127.0.0.1:0",
        tls_cert=str(cert),
        tls_key=str(key),
        client_ca=str(tmp_path / "front-proxy-ca.crt"),
        allowed_names=("front-proxy-client",),
    )
    kube = KubeConfig(
        host=stack.server.url, kubeconfig=str(kubeconfig(tmp_path, stack.server.url, "gateway"))
    )
    config = GatewayConfig(
        listen="127.0.0.1:0", security=SecurityConfig(kube=kube), grace_s=1, visibility=serving
    )
    gateway = GatewayServer(stack.bus, config)
    await gateway.start()
    tls = ssl.create_default_context(cadata=server_ca.pem.decode())
    client_key, client_cert = proxy_ca.client("front-proxy-client").write(tmp_path, "proxy")
    tls.load_cert_chain(client_cert, client_key)
    aggregator = Aggregator(
        gateway.visibility_address, tls, ssl.create_default_context(cadata=server_ca.pem.decode())
    )
    try:
        yield aggregator
    finally:
        await aggregator.close()
        await gateway.stop()


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[Stack]:
    """The services on a stand-in with RBAC, each with its own credentials."""
    async with running_stack(
        tmp_path, access=access(), admin_token=token("admin"),
        service_flags=own_credentials(tmp_path),
    ) as stack:  # fmt: skip
        yield stack


async def queue_up(stack: Stack) -> None:
    """j1 runs; j2 (lq), j3 (other), j4 (lq) wait, in that order."""
    await stack.kubectl.apply(SETUP)
    for name, queue in (("j1", "lq"), ("j2", "lq"), ("j3", "other"), ("j4", "lq")):
        await stack.kubectl.apply(job(name, queue))
        decided = "workload.admitted" if name == "j1" else "workload.pending"

        async def seen(name: str = name, decided: str = decided) -> bool:
            prefix = f"team-a/job-{name}-"
            return any(e.workload.startswith(prefix) and e.type == decided
                       for e in stack.events.seen)  # fmt: skip

        await eventually(seen)


def listed(body: dict[str, Any]) -> list[tuple[str, str, int, int]]:
    return [
        (
            i["metadata"]["name"].split("-")[1],
            i["localQueueName"],
            i["positionInClusterQueue"],
            i["positionInLocalQueue"],
        )
        for i in body["items"]
    ]


async def test_pending_workloads_are_listed_with_their_positions_through_the_aggregator(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as stack:
        await queue_up(stack)
        async with aggregated(stack, tmp_path) as api:
            root = f"/apis/{GROUP}/v1beta2"

            async def all_three() -> dict[str, Any] | None:
                # Admission writes the bucket coalesced (within 1 s under a stream of rounds):
                # soon, not at once; until its first write the queue is not found there.
                code, body = await api.get(
                    f"{root}/clusterqueues/cq/pendingworkloads", user="carol"
                )
                assert code in (200, 404), body
                return body if code == 200 and len(body["items"]) == 3 else None

            cq = await eventually(all_three)
            assert (cq["kind"], cq["apiVersion"]) == ("PendingWorkloadsSummary", f"{GROUP}/v1beta2")
            assert listed(cq) == [("j2", "lq", 0, 0), ("j3", "other", 1, 0), ("j4", "lq", 2, 1)]
            assert cq["items"][0]["metadata"]["namespace"] == "team-a"
            page = f"{root}/clusterqueues/cq/pendingworkloads?limit=1&offset=1"
            assert listed((await api.get(page, user="carol"))[1]) == [("j3", "other", 1, 0)]

            lq = f"/apis/{GROUP}/v1beta1/namespaces/team-a/localqueues/lq/pendingworkloads"
            code, mine = await api.get(lq, user="alice", groups=("team-a",))
            assert code == 200
            assert mine["apiVersion"] == f"{GROUP}/v1beta1"
            assert listed(mine) == [("j2", "lq", 0, 0), ("j4", "lq", 2, 1)]

            # A bearer token straight to the server: TokenReview, then the same RBAC.
            code, direct = await api.get(lq, bearer=token("alice"))
            assert (code, listed(direct)) == (200, listed(mine))


async def test_a_local_queue_of_many_pages_is_listed_with_kueues_positions(
    tmp_path: Path,
) -> None:
    """Enough Jobs that the pending list spans pages: a LocalQueue's page from an offset
    holds its own workloads with their positions in the ClusterQueue and in the LocalQueue."""
    jobs = [(f"m{i:03}", "other" if i % 3 == 0 else "lq") for i in range(MANY)]
    async with cluster(tmp_path) as stack:
        await stack.kubectl.apply("---".join([SETUP, *(job(n, q) for n, q in jobs)]))
        async with aggregated(stack, tmp_path) as api:
            root = f"/apis/{GROUP}/v1beta2"

            async def all_pending() -> dict[str, Any] | None:
                path = f"{root}/clusterqueues/cq/pendingworkloads"
                code, body = await api.get(path, user="carol")
                assert code in (200, 404), body
                return body if code == 200 and len(body["items"]) == MANY - 1 else None

            order = listed(await eventually(all_pending))
            index = await (await stack.bus.kv("MUSTER_VISIBILITY")).get("pending-index.cq")
            assert index is not None
            assert len(services_pb2.PendingPageIndex.FromString(index.value or b"").pages) >= 2
            assert [row[2] for row in order] == list(range(MANY - 1))
            mine = [row for row in order if row[1] == "lq"]
            assert [row[3] for row in mine] == list(range(len(mine)))
            lq = f"{root}/namespaces/team-a/localqueues/lq/pendingworkloads?offset=40&limit=40"
            code, body = await api.get(lq, user="alice", groups=("team-a",))
            assert (code, listed(body)) == (200, mine[40:80])


async def test_the_visibility_api_authenticates_authorizes_and_answers_as_kueue_does(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as stack:
        await stack.kubectl.apply(SETUP)
        async with aggregated(stack, tmp_path) as api:
            cq = f"/apis/{GROUP}/v1beta2/clusterqueues/cq/pendingworkloads"
            code, denied = await api.get(cq, user="alice", groups=("team-a",))
            assert code == 403
            assert denied["message"] == (
                f'clusterqueues.{GROUP} "cq" is forbidden: User "alice" cannot get resource '
                f'"clusterqueues/pendingworkloads" in API group "{GROUP}" at the cluster scope'
            )
            assert (await api.get(cq))[0] == 401  # no user in the headers
            assert (await api.get(cq, bearer="not-a-token"))[0] == 401

            async def empty() -> bool:
                code, body = await api.get(cq, user="carol")
                return code == 200 and body["items"] == []

            assert await eventually(empty)  # the ClusterQueue is known, nothing waits
            code, missing = await api.get(cq.replace("/cq/", "/nope/"), user="carol")
            assert (code, missing["reason"]) == (404, "NotFound")
            assert missing["message"] == f'clusterqueue.{GROUP} "nope" not found'
            # A name no queue can have is 400 naming the field, for those who may read and not.
            for user in ("carol", "alice"):
                code, bad = await api.get(cq.replace("/cq/", "/Team_A/"), user=user)
                assert (code, bad["reason"]) == (400, "BadRequest")
                assert bad["details"]["causes"][0]["field"] == "metadata.name"

            code, resources = await api.get(f"/apis/{GROUP}/v1beta2", user="carol")
            assert code == 200
            assert {r["name"] for r in resources["resources"]} >= {
                "clusterqueues/pendingworkloads",
                "localqueues/pendingworkloads",
            }
            code, group = await api.get(f"/apis/{GROUP}", user="carol")
            assert [v["version"] for v in group["versions"]] == ["v1beta2", "v1beta1"]
