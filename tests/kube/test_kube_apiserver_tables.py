"""What kubectl reads from the stand-in besides objects: the OpenAPI documents it checks
before a write (so `kubectl apply` needs no `--validate=false`) and the Table answers of
`kubectl get` (the columns a real API server prints: Pods, Jobs, Nodes, Kueue's CRDs, a CRD's
own). Requests are made as kubectl 1.32 makes them (its Accept headers and query, read from
`kubectl -v=8`); where kubectl is installed, kubectl itself is run too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import as_model, job, namespace, node, pod
from kubernetes import client

from muster.devtools.apiserver import ThreadedApiServer

KUEUE = "kueue.x-k8s.io"
KUBECTL = shutil.which("kubectl")
TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
ROOT = Path(__file__).resolve().parents[2]
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def get(url: str, *, accept: str = "application/json") -> tuple[str, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as answer:  # a loopback stand-in
        return answer.headers["Content-Type"], answer.read()


def table(url: str) -> dict[str, Any]:
    """`kubectl get`'s request: its Accept, and limit=500 on a list."""
    kind, body = get(url, accept=TABLE)
    assert kind.startswith("application/json")
    found: dict[str, Any] = json.loads(body)
    assert (found["kind"], found["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    return found


def columns(found: dict[str, Any], *, wide: bool = False) -> list[str]:
    return [c["name"] for c in found["columnDefinitions"] if wide or c["priority"] == 0]


def cells(found: dict[str, Any], name: str) -> dict[str, Any]:
    """The row of `name`, cell by column name."""
    names = [c["name"] for c in found["columnDefinitions"]]
    (row,) = [r for r in found["rows"] if r["cells"][0] == name]
    return dict(zip(names, row["cells"], strict=True))


def test_openapi_v3_says_every_served_kind_takes_field_validation(
    apiserver: ThreadedApiServer,
) -> None:
    """kubectl validates on the server when the kind's PATCH takes fieldValidation (else it
    downloads /openapi/v2 to check itself, and refuses to apply when that fails)."""
    _, body = get(f"{apiserver.url}/openapi/v3")
    paths = json.loads(body)["paths"]
    assert {"api/v1", "apis/batch/v1", f"apis/{KUEUE}/v1beta1", f"apis/{KUEUE}/v1beta2"} <= set(
        paths
    )
    checked: set[tuple[str, str, str]] = set()
    for entry in paths.values():
        assert re.fullmatch(r"/openapi/v3/.+\?hash=[0-9A-F]{128}", entry["serverRelativeURL"])
        _, doc = get(apiserver.url + entry["serverRelativeURL"])
        for item in json.loads(doc)["paths"].values():
            patch = item.get("patch")
            if patch and any(
                p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"]
            ):
                gvk = patch["x-kubernetes-group-version-kind"]
                checked.add((gvk["group"], gvk["version"], gvk["kind"]))
    for expected in [
        ("", "v1", "Pod"),
        ("", "v1", "Node"),
        ("", "v1", "Namespace"),
        ("batch", "v1", "Job"),
        (KUEUE, "v1beta1", "ClusterQueue"),
        (KUEUE, "v1beta2", "Workload"),
    ]:
        assert expected in checked


def test_openapi_v2_as_kubectl_asks_is_an_empty_protobuf_document(
    apiserver: ThreadedApiServer,
) -> None:
    """kubectl checks a Namespace itself against /openapi/v2: no definition, nothing refused."""
    kind, body = get(f"{apiserver.url}/openapi/v2?timeout=32s", accept=OPENAPI_V2_PROTOBUF)
    assert (kind, body) == (OPENAPI_V2_PROTOBUF, b"")


def test_get_pods_jobs_and_nodes_print_the_built_in_columns(
    apiserver: ThreadedApiServer, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    core.create_node(
        as_model(client.V1Node, node("node-1", labels={"node-role.kubernetes.io/worker": ""}))
    )
    core.create_namespace(as_model(client.V1Namespace, namespace("team-a")))
    core.create_namespaced_pod("team-a", as_model(client.V1Pod, pod("p-1", node="node-1")))
    batch.create_namespaced_job("team-a", as_model(client.V1Job, job("train", queue="lq")))

    pods = table(f"{apiserver.url}/api/v1/pods?limit=500")
    assert columns(pods) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert columns(pods, wide=True)[5:] == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    row = cells(pods, "p-1")
    assert (row["Ready"], row["Status"], row["Restarts"], row["Node"]) == (
        "0/1",
        "Pending",
        "0",
        "node-1",
    )
    assert re.fullmatch(r"\d+s", row["Age"])
    # -A's NAMESPACE column comes from each row's object metadata.
    (listed,) = pods["rows"]
    assert listed["object"]["kind"] == "PartialObjectMetadata"
    assert listed["object"]["metadata"]["namespace"] == "team-a"

    jobs = table(f"{apiserver.url}/apis/batch/v1/namespaces/team-a/jobs?limit=500")
    assert columns(jobs) == ["Name", "Status", "Completions", "Duration", "Age"]
    assert columns(jobs, wide=True)[5:] == ["Containers", "Images", "Selector"]
    row = cells(jobs, "train")
    # STATUS reads the conditions, and no Job controller runs here to say Suspended.
    assert (row["Status"], row["Completions"], row["Duration"], row["Images"]) == (
        "Running",
        "0/3",
        "",
        "busybox:1.36",
    )

    nodes = table(f"{apiserver.url}/api/v1/nodes/node-1")  # a get is a table of one row
    assert columns(nodes) == ["Name", "Status", "Roles", "Age", "Version"]
    assert cells(nodes, "node-1")["Roles"] == "worker"


def test_kueue_kinds_print_kueues_printer_columns_in_both_versions(
    apiserver: ThreadedApiServer, custom: client.CustomObjectsApi
) -> None:
    queue = {"namespaceSelector": {}, "resourceGroups": [], "cohort": "all"}
    custom.create_cluster_custom_object(
        KUEUE,
        "v1beta1",
        "clusterqueues",
        {"apiVersion": f"{KUEUE}/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": queue},
    )  # fmt: skip
    v1beta1 = table(f"{apiserver.url}/apis/{KUEUE}/v1beta1/clusterqueues?limit=500")
    assert columns(v1beta1) == ["Name", "Cohort", "Pending Workloads"]
    assert columns(v1beta1, wide=True) == [
        "Name",
        "Cohort",
        "Strategy",
        "Pending Workloads",
        "Admitted Workloads",
    ]
    assert cells(v1beta1, "cq")["Cohort"] == "all"
    v1beta2 = table(f"{apiserver.url}/apis/{KUEUE}/v1beta2/clusterqueues/cq")
    assert cells(v1beta2, "cq")["Cohort"] is None  # v1beta2 names it cohortName
    for plural, expected in [
        ("localqueues", ["Name", "ClusterQueue", "Pending Workloads", "Admitted Workloads"]),
        ("workloads", ["Name", "Queue", "Reserved in", "Admitted", "Finished", "Age"]),
        ("resourceflavors", ["Name", "Age"]),
        ("workloadpriorityclasses", ["Name", "Value"]),
    ]:
        assert columns(table(f"{apiserver.url}/apis/{KUEUE}/v1beta2/{plural}")) == expected


def test_a_crd_prints_its_additional_printer_columns(
    apiserver: ThreadedApiServer, kube: client.ApiClient
) -> None:
    version = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": OPEN},
        "additionalPrinterColumns": [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Ready", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
        ],
    }  # fmt: skip
    client.ApiextensionsV1Api(kube).create_custom_resource_definition(
        as_model(
            client.V1CustomResourceDefinition,
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {
                    "group": "example.com",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "scope": "Cluster",
                    "versions": [version],
                },
            },
        )
    )
    client.CustomObjectsApi(kube).create_cluster_custom_object(
        "example.com",
        "v1",
        "widgets",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
         "spec": {"size": 3}},
    )  # fmt: skip
    found = table(f"{apiserver.url}/apis/example.com/v1/widgets?limit=500")
    assert columns(found) == ["Name", "Size", "Ready"]
    assert cells(found, "w") == {"Name": "w", "Size": 3, "Ready": None}


def test_include_object_and_a_plain_json_get(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    core.create_node(as_model(client.V1Node, node("node-1")))
    whole = table(f"{apiserver.url}/api/v1/nodes?includeObject=Object")
    assert whole["rows"][0]["object"]["kind"] == "Node"
    assert "object" not in table(f"{apiserver.url}/api/v1/nodes?includeObject=None")["rows"][0]
    _, plain = get(f"{apiserver.url}/api/v1/nodes")
    assert json.loads(plain)["kind"] == "NodeList"
    with pytest.raises(urllib.error.HTTPError) as refused:
        table(f"{apiserver.url}/api/v1/nodes?includeObject=All")
    assert refused.value.code == 400


def test_a_watch_asked_for_tables_sends_rows_the_columns_once(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    """`kubectl get nodes -w`: its list, then a watch from the list's resourceVersion."""
    listed = table(f"{apiserver.url}/api/v1/nodes?limit=500")
    rv = listed["metadata"]["resourceVersion"]
    for name in ("node-1", "node-2"):
        core.create_node(as_model(client.V1Node, node(name)))
    request = urllib.request.Request(
        f"{apiserver.url}/api/v1/nodes?resourceVersion={rv}&watch=true&timeoutSeconds=1",
        headers={"Accept": TABLE},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # ends at its timeout
        events = [json.loads(line) for line in answer.read().splitlines() if line]
    tables = [e["object"] for e in events if e["type"] == "ADDED"]
    assert [t["rows"][0]["cells"][0] for t in tables] == ["node-1", "node-2"]
    assert [t["kind"] for t in tables] == ["Table", "Table"]
    assert columns(tables[0]) == ["Name", "Status", "Roles", "Age", "Version"]
    assert tables[1]["columnDefinitions"] == []


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_applies_with_validation_and_gets_columns(
    apiserver: ThreadedApiServer, tmp_path: Path
) -> None:
    def kubectl(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        return subprocess.run(
            [KUBECTL, "--cache-dir", str(tmp_path / "cache"), "-s", apiserver.url, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )

    for example in ("stand-in-nodes", "two-teams", "jobs"):
        kubectl("apply", "-f", str(ROOT / "k8s" / "examples" / f"{example}.yaml"))
    typo = (ROOT / "k8s/examples/jobs.yaml").read_text().replace("parallelism:", "parallelismm:")
    (tmp_path / "typo.yaml").write_text(typo.replace("sample-job-", "typo-"))
    refused = kubectl("apply", "-f", str(tmp_path / "typo.yaml"), check=False)
    assert refused.returncode != 0
    assert 'unknown field "spec.parallelismm"' in refused.stderr
    jobs = kubectl("get", "jobs", "-A").stdout.splitlines()
    assert jobs[0].split() == ["NAMESPACE", "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert jobs[1].split()[:4] == ["team-a", "sample-job-team-a", "Running", "0/3"]
    queues = kubectl("get", "localqueues", "-A").stdout.splitlines()
    assert re.split(r"\s{2,}", queues[0].strip()) == [
        "NAMESPACE",
        "NAME",
        "CLUSTERQUEUE",
        "PENDING WORKLOADS",
        "ADMITTED WORKLOADS",
    ]
