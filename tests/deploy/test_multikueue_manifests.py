"""What an operator installs for MultiKueue: `deploy/overlays/manager` (the manager's services,
and each worker's watcher, gang-permit and binder served from there with its kubeconfig) and
`deploy/overlays/worker` (what a worker needs: CRDs and the access the manager's services act
with), rendered with `kubectl kustomize` and checked as tests/deploy/test_manifests.py checks
the other overlays."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_manifests import (
    CLUSTER_SERVICES,
    REQUIRED,
    by_kind,
    container_env,
    granted,
    label_match,
    mounted_files,
    muster_containers,
    needs_kubectl,
    parse_with_service,
    pod_spec,
    rendered,
    service_args,
    workloads,
)

from muster.cli.main import main as muster_main
from muster.cluster.kube.settings import WorkerSource

WORKERS = ("east", "west")
EXAMPLE = Path(__file__).resolve().parents[2] / "k8s" / "examples" / "multikueue.yaml"


@needs_kubectl
def test_the_manager_runs_each_workers_services_against_that_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    objs = rendered("deploy/overlays/manager")
    served: dict[str, list[str]] = {}
    for obj, c in muster_containers(objs):
        service, flags = service_args(c)
        if service not in CLUSTER_SERVICES:
            continue
        files = mounted_files(objs, obj, c, tmp_path / obj["metadata"]["name"])
        flags = [files.get(a, a) for a in flags]
        parsed = parse_with_service(service, flags, container_env(objs, c), monkeypatch)
        assert parsed.config is not None
        cluster = parsed.config.cluster
        served.setdefault(cluster, []).append(service)
        if cluster == "local":
            continue
        assert obj["metadata"]["name"] == f"{service}-{cluster}"
        backend = parsed.main.keywords["backend"]
        # The manager through the pod's ServiceAccount; the worker through its kubeconfig.
        assert backend.kube.in_cluster
        assert backend.worker == WorkerSource(cluster=cluster, namespace="muster")
        assert pod_spec(obj)["serviceAccountName"] == "muster-multikueue"
        assert parsed.config.bus.user == "placeholder-secret"  # from its own Secret
        secrets = {v["secret"]["secretName"] for v in pod_spec(obj)["volumes"] if "secret" in v}
        assert secrets == {f"muster-nats-{service}-{cluster}"}
    for worker in WORKERS:
        assert sorted(served[worker]) == ["binder", "gangpermit", "watcher"]
    # Each Deployment selects its own pods only.
    for obj in workloads(objs):
        selector = obj["spec"]["selector"]["matchLabels"]
        selected = [
            o["metadata"]["name"]
            for o in workloads(objs)
            if label_match(selector, o["spec"]["template"]["metadata"]["labels"])
        ]
        assert selected == [obj["metadata"]["name"]]


@needs_kubectl
def test_the_managers_nats_knows_every_workers_users_and_their_passwords(tmp_path: Path) -> None:
    objs = rendered("deploy/overlays/manager")
    (conf,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "nats-config"]
    out = tmp_path / "users.conf"
    clusters = [a for w in ("local", *WORKERS) for a in ("--cluster", w)]
    assert muster_main(["nats-config", "--auth", "env", *clusters, "-o", str(out)]) == 0
    assert conf["data"]["users.conf"] == out.read_text(), "regenerate overlays/manager/users.conf"
    (nats,) = [o for o in workloads(objs) if o["metadata"]["name"] == "nats"]
    env = {e["name"]: e for e in pod_spec(nats)["containers"][0]["env"]}
    secrets = {o["metadata"]["name"]: o for o in by_kind(objs, "Secret")}
    for worker in WORKERS:
        for service in ("watcher", "gangpermit", "binder"):
            ref = env[f"NATS_PASSWORD_{service.upper()}_{worker.upper()}"]["valueFrom"]
            name = ref["secretKeyRef"]["name"]
            assert name == f"muster-nats-{service}-{worker}"
            assert "password" in secrets[name]["data"]


@needs_kubectl
def test_the_manager_side_reads_only_multikueueclusters_and_their_kubeconfig_secrets() -> None:
    objs = rendered("deploy/overlays/manager")
    assert granted(objs, "muster-multikueue") == {("kueue.x-k8s.io", "multikueueclusters", "get")}
    (role,) = by_kind(objs, "Role")
    (rule,) = role["rules"]
    assert (rule["resources"], rule["verbs"]) == (["secrets"], ["get"])
    named = {
        d["spec"]["kubeConfig"]["location"]
        for d in yaml.safe_load_all(EXAMPLE.read_text())
        if d["kind"] == "MultiKueueCluster"
    }
    assert set(rule["resourceNames"]) == named == {f"{w}-kubeconfig" for w in WORKERS}
    (binding,) = by_kind(objs, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "muster-multikueue", "namespace": "muster"}
    ]


@needs_kubectl
def test_a_worker_needs_only_crds_and_the_access_of_the_managers_services() -> None:
    objs = rendered("deploy/overlays/worker")
    assert workloads(objs) == []  # nothing of muster runs there
    assert len(by_kind(objs, "CustomResourceDefinition")) == len(rendered("k8s/crds"))
    assert granted(objs, "muster-manager") == set().union(*(REQUIRED[s] for s in CLUSTER_SERVICES))
    (token,) = by_kind(objs, "Secret")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "muster-manager"
    }
