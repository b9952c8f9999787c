"""What an operator installs: `deploy/` overlays rendered with `kubectl kustomize`, the CRDs and
RBAC of `k8s/`, and the examples of `k8s/examples`.

Rendered output is checked for what `kubectl apply` would not catch until too late: every
reference resolves (ServiceAccounts, ConfigMaps, Secrets, volumes, ports, selectors, RBAC
subjects), each muster container runs a real `muster service <name>` whose own argument parser
accepts its flags and environment, the CRDs are structural with one storage version, and each
service's ClusterRole grants exactly what the kube backend calls.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.api import decode_files
from muster.bus.service import ServiceConfig
from muster.cli.main import main as muster_main
from muster.cli.service import SERVICES
from muster.gateway.__main__ import cluster_backend, visibility_serving

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = ROOT / "k8s"
OVERLAYS = ("dev", "prod")
IMAGE_NAMES = {"dev": "muster", "prod": "ghcr.io/muster-dev/muster"}
KUBECTL = shutil.which("kubectl")

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed: `kubectl kustomize` renders the manifests"
)

Obj = dict[str, Any]
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
CLUSTER_SERVICES = ("watcher", "binder", "gangpermit")  # they open the cluster's backend
# They talk to the API server: the cluster's backend, and the gateway's Submit and reviews.
API_CLIENTS = (*CLUSTER_SERVICES, "gateway")
# Read outside the flags (muster.bus.service, muster.bus.tracing).
OTHER_ENV = frozenset({"MUSTER_PROFILE_DIR", "MUSTER_TRACE_CONSOLE"})


@functools.cache
def rendered(path: str) -> tuple[Obj, ...]:
    """The objects `kubectl kustomize <path>` renders (path relative to the repository)."""
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc is not None)


def overlay(name: str) -> tuple[Obj, ...]:
    return rendered(f"deploy/overlays/{name}")


def by_kind(objs: tuple[Obj, ...], kind: str) -> list[Obj]:
    return [o for o in objs if o.get("kind") == kind]


def names(objs: tuple[Obj, ...], kind: str) -> set[str]:
    return {o["metadata"]["name"] for o in by_kind(objs, kind)}


def workloads(objs: tuple[Obj, ...]) -> list[Obj]:
    return [o for o in objs if o.get("kind") in WORKLOAD_KINDS]


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


def containers(obj: Obj) -> list[Obj]:
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec["containers"]]


def muster_containers(objs: tuple[Obj, ...]) -> Iterator[tuple[Obj, Obj]]:
    for obj in workloads(objs):
        for c in containers(obj):
            if c["image"].split(":")[0].split("@")[0].endswith("muster"):
                yield obj, c


def required_secrets(name: str) -> dict[str, set[str]]:
    listed = yaml.safe_load((DEPLOY / "required-secrets.yaml").read_text())[name] or []
    return {s["name"]: set(s["keys"]) for s in listed}


def label_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- rendering and references -----------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_every_object_parses(name: str) -> None:
    objs = overlay(name)
    assert objs
    for obj in objs:
        assert isinstance(obj, dict)
        assert obj.get("apiVersion"), obj
        assert obj.get("kind"), obj
        assert obj.get("metadata", {}).get("name"), obj
    keys = [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), "duplicate objects"
    namespaced = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet", "ConfigMap")]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"muster"}


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_service_accounts_and_config_maps_resolve(name: str) -> None:
    objs = overlay(name)
    accounts, maps = names(objs, "ServiceAccount"), names(objs, "ConfigMap")
    config_data = {o["metadata"]["name"]: o.get("data", {}) for o in by_kind(objs, "ConfigMap")}
    for obj in workloads(objs):
        spec, who = pod_spec(obj), obj["metadata"]["name"]
        if obj["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "muster":
            assert spec.get("serviceAccountName") in accounts, who
        for vol in spec.get("volumes", []):
            if "configMap" in vol:
                cm = vol["configMap"]["name"]
                assert cm in maps, (who, cm)
                for item in vol["configMap"].get("items", []):
                    assert item["key"] in config_data[cm], (who, cm, item)
        for c in containers(obj):
            for source in c.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in maps, (who, source)
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("configMapKeyRef")
                if ref:
                    assert ref["key"] in config_data.get(ref["name"], {}), (who, ref)


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_secrets_are_rendered_or_documented_inputs(name: str) -> None:
    objs = overlay(name)
    rendered_keys = {
        o["metadata"]["name"]: set(o.get("data", {})) | set(o.get("stringData", {}))
        for o in by_kind(objs, "Secret")
    }
    inputs = required_secrets(name)
    assert not set(inputs) & set(rendered_keys), "a required input is also rendered"
    known = {**rendered_keys, **inputs}
    used: set[str] = set()
    for obj in [*workloads(objs), *by_kind(objs, "Job")]:
        who = obj["metadata"]["name"]
        for c in containers(obj):
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is None:
                    continue
                used.add(ref["name"])
                if ref.get("optional"):  # absent Secret or key: the variable stays unset
                    continue
                assert ref["key"] in known.get(ref["name"], set()), (who, env["name"], ref)
            for source in c.get("envFrom", []):
                assert "secretRef" not in source, "name the keys: env with secretKeyRef"
        for vol in pod_spec(obj).get("volumes", []):
            if "secret" in vol:
                secret = vol["secret"]["secretName"]
                used.add(secret)
                assert secret in known, (who, secret)
                for item in vol["secret"].get("items", []):
                    assert item["key"] in known[secret], (who, secret, item)
    assert set(inputs) <= used, "required-secrets.yaml lists a Secret nothing uses"


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_volumes_and_ports_resolve(name: str) -> None:
    for obj in workloads(overlay(name)):
        spec, who = pod_spec(obj), obj["metadata"]["name"]
        volumes = {v["name"] for v in spec.get("volumes", [])}
        claims = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        assert not volumes & claims, who
        for c in containers(obj):
            for mount in c.get("volumeMounts", []):
                assert mount["name"] in volumes | claims, (who, mount)
            ports = c.get("ports", [])
            port_names = {p["name"] for p in ports if "name" in p}
            numbers = {p["containerPort"] for p in ports}
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = c.get(kind)
                if probe is None:
                    continue
                (handler,) = [
                    probe[h] for h in ("grpc", "httpGet", "tcpSocket", "exec") if h in probe
                ]
                port = handler.get("port")
                if port is not None:
                    assert port in numbers | port_names, (who, kind, port)


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_services_and_budgets_select_pods(name: str) -> None:
    objs = overlay(name)
    pods = [
        (o["spec"]["template"]["metadata"]["labels"], containers(o), o) for o in workloads(objs)
    ]
    for svc in by_kind(objs, "Service"):
        selector = svc["spec"]["selector"]
        matched = [(cs, o) for labels, cs, o in pods if label_match(selector, labels)]
        assert matched, f"Service {svc['metadata']['name']} selects no pod"
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for cs, o in matched:
                declared = {p.get("name") for c in cs for p in c.get("ports", [])}
                declared |= {p["containerPort"] for c in cs for p in c.get("ports", [])}
                assert target in declared, (svc["metadata"]["name"], o["metadata"]["name"], port)
    for pdb in by_kind(objs, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert any(label_match(selector, labels) for labels, _, _ in pods), pdb
    for obj in by_kind(objs, "StatefulSet"):
        assert obj["spec"]["serviceName"] in names(objs, "Service"), obj["metadata"]["name"]
    for obj in workloads(objs):
        selector = obj["spec"]["selector"]["matchLabels"]
        assert label_match(selector, obj["spec"]["template"]["metadata"]["labels"])


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_role_bindings_name_rendered_accounts_and_roles(name: str) -> None:
    objs = overlay(name)
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in by_kind(objs, "ServiceAccount")
    }
    roles = names(objs, "ClusterRole")
    bindings = by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding")
    assert bindings
    for binding in bindings:
        assert binding["roleRef"]["name"] in roles, binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert (subject["namespace"], subject["name"]) in accounts, subject


@needs_kubectl
def test_prod_overlay_is_production_shaped() -> None:
    objs = overlay("prod")
    (nats,) = [o for o in by_kind(objs, "StatefulSet") if o["metadata"]["name"] == "nats"]
    assert nats["spec"]["replicas"] == 3
    assert nats["spec"]["volumeClaimTemplates"]
    conf = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "nats-config")
    text = conf["data"]["nats.conf"]
    for needed in ("jetstream", "cluster {", "routes", "tls {", "verify_and_map: true"):
        assert needed in text
    assert 'include "users.conf"' in text
    for i in range(3):
        assert f"nats-{i}.{nats['spec']['serviceName']}." in text
    env = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "muster-env")
    assert env["data"]["MUSTER_NATS_URL"].startswith("tls://")
    assert env["data"]["MUSTER_NATS_TLS_CA"]
    assert env["data"]["MUSTER_NATS_TLS_CERT"]
    budgets = {o["metadata"]["name"] for o in by_kind(objs, "PodDisruptionBudget")}
    assert {"nats", "admission", "binder", "gateway", "preemption"} <= budgets
    for obj, _ in muster_containers(objs):
        assert "podAntiAffinity" in pod_spec(obj).get("affinity", {}), obj["metadata"]["name"]
    (admission,) = [o for o in workloads(objs) if o["metadata"]["name"] == "admission"]
    assert admission["spec"]["replicas"] > 1


@needs_kubectl
def test_dev_overlay_is_one_of_each() -> None:
    objs = overlay("dev")
    assert all(o["spec"].get("replicas", 1) == 1 for o in workloads(objs))
    assert len(by_kind(objs, "CustomResourceDefinition")) == len(EXPECTED_CRDS)


# --- NATS: one user per service, its credential in that service only, monitoring, network ---

NATS_AUTH = {"dev": ["--auth", "env"], "prod": ["--auth", "tls", "--admission-shards", "3"]}


def nats_conf(objs: tuple[Obj, ...]) -> dict[str, str]:
    (conf,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "nats-config"]
    data: dict[str, str] = conf["data"]
    return data


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_nats_users_are_the_generated_ones(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objs = overlay(name)
    conf = nats_conf(objs)
    assert 'include "users.conf"' in conf["nats.conf"]
    assert "authorization" not in conf["nats.conf"]  # every user comes from users.conf
    out = tmp_path / "users.conf"
    assert muster_main(["nats-config", "--cluster", "local", *NATS_AUTH[name], "-o", str(out)]) == 0
    assert conf["users.conf"] == out.read_text(), f"regenerate deploy/overlays/{name}/users.conf"
    (admission,) = [o for o in workloads(objs) if o["metadata"]["name"] == "admission"]
    shards = re.findall(
        r'"\$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.admission-(\d+)"', out.read_text()
    )
    assert len(shards) == admission["spec"].get("replicas", 1)


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_each_nats_credential_is_mounted_into_its_service_only(name: str) -> None:
    objs = overlay(name)
    for obj in [*workloads(objs), *by_kind(objs, "Job")]:
        labels = obj["spec"]["template"]["metadata"]["labels"]
        if labels.get("app.kubernetes.io/name") != "muster":
            continue
        component = labels["app.kubernetes.io/component"]
        own = "muster-nats-admin" if component == "nats-setup" else f"muster-nats-{component}"
        referenced = {
            ref["name"]
            for c in containers(obj)
            for env in c.get("env", [])
            if (ref := env.get("valueFrom", {}).get("secretKeyRef"))
        } | {v["secret"]["secretName"] for v in pod_spec(obj).get("volumes", []) if "secret" in v}
        nats_secrets = {s for s in referenced if s.startswith("muster-nats")}
        assert nats_secrets == {own}, (obj["metadata"]["name"], nats_secrets)
    (job,) = by_kind(objs, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["nats-setup"]


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_nats_monitoring_listens_on_loopback_only(name: str) -> None:
    objs = overlay(name)
    assert re.search(r"^http: 127\.0\.0\.1:8222$", nats_conf(objs)["nats.conf"], re.M)
    for obj in workloads(objs):
        for c in containers(obj):
            assert 8222 not in {p["containerPort"] for p in c.get("ports", [])}
    for svc in by_kind(objs, "Service"):
        assert 8222 not in {p["port"] for p in svc["spec"]["ports"]}, svc["metadata"]["name"]


def policies_selecting(objs: tuple[Obj, ...], labels: dict[str, str], kind: str) -> list[Obj]:
    out = []
    for policy in by_kind(objs, "NetworkPolicy"):
        spec = policy["spec"]
        if kind not in spec["policyTypes"]:
            continue
        selector = spec["podSelector"]
        matched = label_match(selector.get("matchLabels", {}), labels) and all(
            (labels.get(e["key"]) in e["values"]) == (e["operator"] == "In")
            for e in selector.get("matchExpressions", [])
        )
        if matched:
            out.append(policy)
    return out


def allowed_ports(policies: list[Obj], direction: str) -> set[int]:
    return {
        p["port"]
        for pol in policies
        for rule in pol["spec"].get(direction, [])
        for p in rule["ports"]
    }


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_network_policies_let_clients_reach_only_the_gateway(name: str) -> None:
    objs = overlay(name)
    assert any(
        p["spec"]["podSelector"] == {}
        and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and "ingress" not in p["spec"]
        and "egress" not in p["spec"]
        for p in by_kind(objs, "NetworkPolicy")
    ), "everything denied unless allowed"
    for obj in workloads(objs):
        labels = obj["spec"]["template"]["metadata"]["labels"]
        component = labels.get("app.kubernetes.io/component", "nats")
        ingress = policies_selecting(objs, labels, "Ingress")
        egress = policies_selecting(objs, labels, "Egress")
        if labels["app.kubernetes.io/name"] == "nats":
            assert allowed_ports(ingress, "ingress") == {4222, 6222}
            for rule in (r for pol in ingress for r in pol["spec"].get("ingress", [])):
                assert rule["from"], "NATS: from muster's pods and its own servers only"
            assert allowed_ports(egress, "egress") == {53, 6222}
            continue
        expected_in = {8080, 8081, 50051} if component == "gateway" else {8080, 8081}
        if component == "gateway" and name == "prod":  # + Kueue's visibility API
            expected_in |= {8443}
        assert allowed_ports(ingress, "ingress") == expected_in, component
        api = {443, 6443} if component in API_CLIENTS else set()
        assert allowed_ports(egress, "egress") == {53, 4222} | api, component


# --- muster containers: image, command, flags ------------------------------------------------


def container_env(objs: tuple[Obj, ...], c: Obj) -> dict[str, str]:
    """The container's environment as the process would see it; Secrets and the pod index
    read as placeholders."""
    maps = {o["metadata"]["name"]: o.get("data", {}) for o in by_kind(objs, "ConfigMap")}
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]])
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        source = var["valueFrom"]
        if "secretKeyRef" in source:
            env[var["name"]] = "placeholder-secret"
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            env[var["name"]] = maps[ref["name"]][ref["key"]]
        elif (
            source.get("fieldRef", {})
            .get("fieldPath", "")
            .endswith("['apps.kubernetes.io/pod-index']")
        ):
            env[var["name"]] = "0"
        else:
            env[var["name"]] = "placeholder-field"
    return env


def mounted_files(objs: tuple[Obj, ...], obj: Obj, c: Obj, tmp: Path) -> dict[str, str]:
    """Container paths of files from ConfigMap volumes → copies of their content under tmp."""
    maps = {o["metadata"]["name"]: o.get("data", {}) for o in by_kind(objs, "ConfigMap")}
    volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
    out: dict[str, str] = {}
    for mount in c.get("volumeMounts", []):
        vol = volumes.get(mount["name"], {})
        if "configMap" not in vol:
            continue
        for key, text in maps[vol["configMap"]["name"]].items():
            local = tmp / mount["name"] / key
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(text)
            out[f"{mount['mountPath'].rstrip('/')}/{key}"] = str(local)
    return out


class Parsed:
    def __init__(self) -> None:
        self.config: ServiceConfig | None = None
        self.main: Any = None


def parse_with_service(
    name: str, args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Parsed:
    """Run `muster service <name> ARGS` up to the point it would start, with `env` as the
    environment; what it would run. Bad flags fail the test with the parser's message."""
    module = importlib.import_module(SERVICES[name])
    parsed = Parsed()

    def fake_run(config: ServiceConfig, main: Any) -> int:
        parsed.config, parsed.main = config, main
        return 0

    import muster.bus.service as bus_service

    monkeypatch.setattr(bus_service, "run_service", fake_run)
    if hasattr(module, "run_service"):
        monkeypatch.setattr(module, "run_service", fake_run)
    for key in list(os.environ):
        if key.startswith("MUSTER_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            status = module.main(args)
    except SystemExit as exc:
        pytest.fail(f"muster service {name} {' '.join(args)}: exit {exc.code}: {stderr.getvalue()}")
    assert status == 0
    assert parsed.config is not None
    return parsed


def service_env_names(name: str) -> set[str]:
    """The MUSTER_* variables service `name` reads, from its own --help."""
    module = importlib.import_module(SERVICES[name])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main(["--help"])
    words = out.getvalue().replace("(", " ").replace(")", " ").replace(",", " ").split()
    return {w for w in words if w.startswith("MUSTER_")}


def service_args(c: Obj) -> tuple[str, list[str]]:
    """(service name, its flags) of a muster container; asserts the image's ENTRYPOINT is kept."""
    assert "command" not in c or c["command"] == ["muster"], c["name"]
    args = list(c["args"])
    assert args[:1] == ["service"], c["name"]
    assert len(args) >= 2, c["name"]
    assert args[1] in SERVICES, c["name"]
    return args[1], args[2:]


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_every_service_runs_once_with_its_real_flags(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = overlay(name)
    seen: list[str] = []
    for obj, c in muster_containers(objs):
        service, flags = service_args(c)
        seen.append(service)
        assert c["image"].rsplit(":", 1)[0] == IMAGE_NAMES[name]
        assert c["name"] == service == obj["metadata"]["name"]
        files = mounted_files(objs, obj, c, tmp_path / service)
        flags = [files.get(a, a) for a in flags]
        env = container_env(objs, c)
        env = {k: files.get(v, v) for k, v in env.items()}
        parsed = parse_with_service(service, flags, env, monkeypatch)
        config = parsed.config
        assert config is not None
        assert config.name == service
        ports = {p.get("name"): p["containerPort"] for p in c["ports"]}
        assert config.health_port == ports["health"] != 0
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert c[kind]["grpc"]["port"] in (ports["health"], "health"), (service, kind)
        # Liveness is the progress watchdog's, apart from readiness (bus/watchdog.py).
        assert c["livenessProbe"]["grpc"].get("service") == "liveness", service
        assert config.stall_s > 0, "a stalled consumer is restarted"
        assert config.bus.stream_replicas == (3 if name == "prod" else 1), "one per NATS server"
        if name == "dev":
            assert config.bus.user, "its NATS user from its Secret"
            assert config.bus.password, "its NATS password from its Secret"
        else:  # its client certificate names its user; the CA checks the server's
            tls = (config.bus.tls_ca_file, config.bus.tls_cert_file, config.bus.tls_key_file)
            mounts = tuple(m["mountPath"] for m in c["volumeMounts"])
            assert all(f and f.startswith(mounts) for f in tls), tls
        if service == "gateway":
            listen = parsed_gateway_listen(flags, env)
            assert int(listen.rsplit(":", 1)[1]) == ports["grpc"]
            assert not listen.startswith("127.")
            # Kubernetes identities and RBAC, as the pod's ServiceAccount; TLS in prod.
            security = gateway_security(flags, env)
            assert (security.authentication, security.authorization) == ("kube", "kube")
            assert security.kube.in_cluster
            assert (security.tls is not None) == (name == "prod")
            # Submit writes into this cluster, at the Kueue version the watcher reads.
            args = gateway_args(flags, env)
            assert cluster_backend(args) == "kube"
            assert args.kueue_version == env["MUSTER_KUEUE_VERSION"]
            serving = visibility_serving(args)
            assert (serving is not None) == (name == "prod")  # deploy/components/visibility
            if serving is not None:
                assert int(serving.listen.rsplit(":", 1)[1]) == ports["visibility"]
        if service == "admission":
            shards = int(env["MUSTER_ADMISSION_SHARDS"])
            assert shards == obj["spec"]["replicas"], "one pod per shard"
            assert obj["kind"] == "StatefulSet"
        keywords = getattr(parsed.main, "keywords", {})
        if service in CLUSTER_SERVICES:
            # This cluster, through the API server, as the pod's ServiceAccount.
            backend = keywords["backend"]
            assert (backend.kind, backend.kube.in_cluster) == ("kube", True), service
            assert (backend.kube.host, backend.kube.kubeconfig) == ("", ""), service
            assert backend.kube.scheduler_name == "muster"
            assert obj["spec"]["template"]["spec"]["serviceAccountName"] == f"muster-{service}"
        else:
            assert "MUSTER_CLUSTER_BACKEND" not in env, service
        if service == "gangpermit":
            assert keywords["config"].scheduler_name == "muster"
        if service == "watcher":
            assert (keywords["backend"].status.qps, keywords["backend"].status.burst) == (20, 40)
            assert keywords["config"].kueue_version == keywords["backend"].kube.kueue_version
    # Not deployed: the simulated cluster, and the dashboard (a gateway client without NATS,
    # run by `muster up`; deploy/ does not run it yet).
    assert sorted(seen) == sorted(s for s in SERVICES if s not in ("sim-cluster", "dashboard"))


def gateway_args(flags: list[str], env: dict[str, str]) -> argparse.Namespace:
    from muster.gateway.__main__ import build_parser

    old = dict(os.environ)
    try:
        os.environ.update(env)
        return build_parser().parse_args(flags)
    finally:
        os.environ.clear()
        os.environ.update(old)


def gateway_security(flags: list[str], env: dict[str, str]) -> Any:
    from muster.gateway.__main__ import build_parser, security_config

    old = dict(os.environ)
    try:
        os.environ.update(env)
        return security_config(build_parser().parse_args(flags))
    finally:
        os.environ.clear()
        os.environ.update(old)


def parsed_gateway_listen(flags: list[str], env: dict[str, str]) -> str:
    from muster.gateway.__main__ import build_parser

    old = dict(os.environ)
    try:
        os.environ.update(env)
        args: argparse.Namespace = build_parser().parse_args(flags)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return str(args.listen)


@needs_kubectl
@pytest.mark.parametrize("name", OVERLAYS)
def test_every_environment_variable_is_read_by_its_service(name: str) -> None:
    objs = overlay(name)
    for _, c in muster_containers(objs):
        service, _ = service_args(c)
        unknown = (
            {k for k in container_env(objs, c) if k.startswith("MUSTER_")}
            - service_env_names(service)
            - OTHER_ENV
        )
        assert not unknown, f"{service}: nothing reads {sorted(unknown)}"


def test_health_host_is_configurable() -> None:
    assert "MUSTER_HEALTH_HOST" in service_env_names("binder")


# --- CRDs -------------------------------------------------------------------------------------

EXPECTED_CRDS = {
    "resourceflavors.kueue.x-k8s.io": False,
    "clusterqueues.kueue.x-k8s.io": True,
    "cohorts.kueue.x-k8s.io": True,
    "localqueues.kueue.x-k8s.io": True,
    "workloads.kueue.x-k8s.io": True,
    "workloadpriorityclasses.kueue.x-k8s.io": False,
    "admissionchecks.kueue.x-k8s.io": True,
    "multikueueconfigs.kueue.x-k8s.io": False,
    "multikueueclusters.kueue.x-k8s.io": True,
    "provisioningrequestconfigs.kueue.x-k8s.io": False,
    "provisioningrequests.autoscaling.x-k8s.io": True,
    "podgroups.scheduling.x-k8s.io": True,
}  # name → has the status subresource


def structural_problems(schema: Obj, path: str = "") -> Iterator[str]:
    """Where a schema is not structural: every node has a type, except int-or-string and
    preserve-unknown-fields nodes; anyOf only for int-or-string."""
    if schema.get("x-kubernetes-int-or-string"):
        if "type" in schema:
            yield f"{path}: int-or-string with a type"
        return
    if "anyOf" in schema or "oneOf" in schema:
        yield f"{path}: anyOf/oneOf outside int-or-string"
    if "type" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        yield f"{path}: no type"
    if "properties" in schema and "additionalProperties" in schema:
        yield f"{path}: properties and additionalProperties"
    for key, sub in schema.get("properties", {}).items():
        yield from structural_problems(sub, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from structural_problems(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from structural_problems(schema["items"], f"{path}[]")
    if schema.get("type") == "array" and "items" not in schema:
        yield f"{path}: array without items"


@needs_kubectl
def test_crds_are_structural_with_one_storage_version() -> None:
    crds = {o["metadata"]["name"]: o for o in rendered("k8s/crds")}
    assert set(crds) == set(EXPECTED_CRDS)
    for name, crd in crds.items():
        spec = crd["spec"]
        assert name == f"{spec['names']['plural']}.{spec['group']}"
        versions = {v["name"]: v for v in spec["versions"]}
        storage = [v for v in versions.values() if v["storage"]]
        assert len(storage) == 1, name
        if spec["group"] == "kueue.x-k8s.io":
            assert set(versions) == {"v1beta1", "v1beta2"}, name
            assert storage[0]["name"] == "v1beta2", name
        for version in versions.values():
            assert version["served"], (name, version["name"])
            schema = version["schema"]["openAPIV3Schema"]
            assert schema["type"] == "object"
            assert set(schema["properties"]) >= {"apiVersion", "kind", "metadata"}
            assert list(structural_problems(schema)) == [], (name, version["name"])
            has_status = "status" in version.get("subresources", {})
            assert has_status == EXPECTED_CRDS[name], (name, version["name"])
            if has_status:
                assert "status" in schema["properties"], name
            for column in version.get("additionalPrinterColumns", []):
                assert column["jsonPath"].startswith("."), (name, column)


@needs_kubectl
def test_clusterqueue_wide_columns() -> None:
    crd = next(o for o in rendered("k8s/crds") if o["spec"]["names"]["kind"] == "ClusterQueue")
    for version in crd["spec"]["versions"]:
        columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
        assert {"Cohort", "Pending", "Admitted", "Reserving", "Strategy"} <= set(columns)
        assert columns["Strategy"].get("priority") == 1  # -o wide
        cohort_field = "cohort" if version["name"] == "v1beta1" else "cohortName"
        assert columns["Cohort"]["jsonPath"] == f".spec.{cohort_field}"


# --- RBAC -------------------------------------------------------------------------------------

# What each service's code asks the API server for (muster.cluster.kube): (group, resource, verb).
_READ = ("list", "watch")
_WATCHED = {
    ("", "namespaces"),
    ("", "limitranges"),
    ("", "nodes"),
    ("", "pods"),
    ("scheduling.k8s.io", "priorityclasses"),
    ("node.k8s.io", "runtimeclasses"),
    ("scheduling.k8s.io", "workloads"),
    ("batch", "jobs"),
    ("jobset.x-k8s.io", "jobsets"),
    ("scheduling.x-k8s.io", "podgroups"),
    *{
        ("kueue.x-k8s.io", r)
        for r in (
            "resourceflavors",
            "clusterqueues",
            "cohorts",
            "localqueues",
            "workloadpriorityclasses",
            "admissionchecks",
            "multikueueconfigs",
            "multikueueclusters",
            "workloads",
            "provisioningrequestconfigs",
        )
    },
}
REQUIRED: dict[str, set[tuple[str, str, str]]] = {
    # resources.watched_sources (list-then-watch; namespaces also for the starting
    # resourceVersion), status.StatusWriter (merge patch of status; GET of a Workload's status
    # before its check list is written), create_workload_for_job (POST, GET on AlreadyExists;
    # blockOwnerDeletion on the Job → jobs/finalizers), checks.runner (ProvisioningRequests
    # and PodTemplates: watch, POST, GET on AlreadyExists, DELETE, PATCH of the owner;
    # blockOwnerDeletion on the Workload and the request → their finalizers), and
    # kube.events (events.k8s.io: POST, PATCH of a series).
    "watcher": {(g, r, v) for g, r in _WATCHED for v in _READ}
    | {
        ("kueue.x-k8s.io", "workloads", "create"),
        ("kueue.x-k8s.io", "workloads", "get"),
        ("kueue.x-k8s.io", "workloads/status", "patch"),
        ("kueue.x-k8s.io", "workloads/status", "get"),
        ("kueue.x-k8s.io", "workloads/finalizers", "update"),
        ("kueue.x-k8s.io", "clusterqueues/status", "patch"),
        ("kueue.x-k8s.io", "localqueues/status", "patch"),
        ("kueue.x-k8s.io", "multikueueclusters/status", "patch"),
        ("batch", "jobs/finalizers", "update"),
        ("jobset.x-k8s.io", "jobsets/finalizers", "update"),
        # job_mirror: the status of a Job or JobSet managed by MultiKueue, in a manager.
        ("batch", "jobs/status", "patch"),
        ("jobset.x-k8s.io", "jobsets/status", "patch"),
        *{
            ("autoscaling.x-k8s.io", "provisioningrequests", v)
            for v in (*_READ, "get", "create", "delete")
        },
        ("autoscaling.x-k8s.io", "provisioningrequests/finalizers", "update"),
        *{("", "podtemplates", v) for v in ("get", "create", "patch")},
        *{("events.k8s.io", "events", v) for v in ("create", "patch")},
    },
    # kube backend: job_of (GET job, GET workload, LIST jobs), start_job/stop_job (PUT job, PATCH
    # jobs/status), jobset_of (GET, LIST jobsets), start_jobset/stop_jobset (PUT jobset),
    # create_pods (POST pods, owner workload with blockOwnerDeletion), pods_of (LIST pods),
    # delete (DELETE pods), bind (POST pods/binding, GET pod after 409), and impersonating
    # the submitter of cmd.apply's Pods and gangs.
    # MultiKueue (copy_writes.create_copy_of, copies_of, stop_workload of a copy): a workload's
    # copy in a worker created, listed by origin, deleted.
    "binder": {
        ("batch", "jobs", "get"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "update"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        ("batch", "jobs/status", "patch"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "list"),
        ("jobset.x-k8s.io", "jobsets", "update"),
        ("jobset.x-k8s.io", "jobsets", "create"),
        ("jobset.x-k8s.io", "jobsets", "delete"),
        ("kueue.x-k8s.io", "workloads", "get"),
        ("kueue.x-k8s.io", "workloads", "list"),
        ("kueue.x-k8s.io", "workloads", "create"),
        ("kueue.x-k8s.io", "workloads", "delete"),
        ("kueue.x-k8s.io", "workloads/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("", "pods/binding", "create"),
        # A routed template's RuntimeClass: its overhead (kube.overheads.runtime_overheads).
        ("node.k8s.io", "runtimeclasses", "get"),
        # cmd.apply's Pods and gangs are written as their submitter (impersonation).
        ("", "users", "impersonate"),
        ("", "groups", "impersonate"),
    },
    # gangpermit.cache: nodes, pods, Workload API Workloads, PodGroups, PriorityClasses.
    "gangpermit": {
        (g, r, v)
        for g, r in (
            ("", "namespaces"),
            ("", "nodes"),
            ("", "pods"),
            ("scheduling.k8s.io", "priorityclasses"),
            ("scheduling.k8s.io", "workloads"),
            ("scheduling.x-k8s.io", "podgroups"),
        )
        for v in _READ
    },
    "admission": set(),
    "preemption": set(),
    # auth_kube (TokenReview), permissions_kube (SubjectAccessReview), kube_submit (writes
    # as the caller).
    "gateway": {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("", "users", "impersonate"),
        ("", "groups", "impersonate"),
    },
}


def granted(objs: tuple[Obj, ...], account: str) -> set[tuple[str, str, str]]:
    roles = {o["metadata"]["name"]: o for o in by_kind(objs, "ClusterRole")}
    out: set[tuple[str, str, str]] = set()
    for binding in by_kind(objs, "ClusterRoleBinding"):
        if not any(s["name"] == account for s in binding["subjects"]):
            continue
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    out |= {(g, r, v) for v in rule["verbs"]}
    return out


@needs_kubectl
def test_rbac_grants_exactly_what_each_service_calls() -> None:
    objs = rendered("k8s/rbac")
    for service, needed in REQUIRED.items():
        assert granted(objs, f"muster-{service}") == needed, service
    accounts = {o["metadata"]["name"]: o for o in by_kind(objs, "ServiceAccount")}
    for service, needed in REQUIRED.items():
        if not needed:
            assert accounts[f"muster-{service}"].get("automountServiceAccountToken") is False


@needs_kubectl
def test_rbac_has_no_wildcards_or_cluster_admin() -> None:
    objs = rendered("k8s/rbac")
    for role in by_kind(objs, "ClusterRole") + by_kind(objs, "Role"):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule
            assert "resourceNames" not in rule
            assert not {"escalate", "bind"} & set(rule["verbs"])
            if "impersonate" in rule["verbs"]:  # binder and gateway write as the caller
                assert role["metadata"]["name"] in ("muster-binder", "muster-gateway"), rule
                assert (rule["apiGroups"], set(rule["resources"])) == ([""], {"users", "groups"})
            assert not {"secrets", "clusterroles", "clusterrolebindings"} & set(rule["resources"])
    for binding in by_kind(objs, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] not in ("cluster-admin", "admin", "edit")


# --- examples ---------------------------------------------------------------------------------

EXAMPLES = sorted((K8S / "examples").glob("*.yaml"))
NODE = """\
apiVersion: v1
kind: Node
metadata: {name: node-1}
status:
  allocatable: {cpu: "16", memory: 64Gi, ephemeral-storage: 200Gi, nvidia.com/gpu: "4", pods: "110"}
"""


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_decodes_without_errors(path: Path) -> None:
    objects, errors = decode_files([path])
    assert [str(e) for e in errors] == []
    assert objects


def test_examples_decode_together() -> None:
    objects, errors = decode_files(EXAMPLES)
    assert [str(e) for e in errors] == []
    kinds = {type(o).__name__ for o in objects}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue", "SchedulingWorkload", "Pod"} <= kinds


def test_two_team_setup_is_the_classic_one() -> None:
    docs = [
        d
        for p in ("two-teams.yaml", "jobs.yaml")
        for d in yaml.safe_load_all((K8S / "examples" / p).read_text())
    ]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert ("ResourceFlavor", "default-flavor") in by
    cq = by[("ClusterQueue", "cluster-queue")]
    assert cq["spec"]["namespaceSelector"] == {}
    (group,) = cq["spec"]["resourceGroups"]
    assert set(group["coveredResources"]) == {
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "ephemeral-storage",
    }
    for team in ("team-a", "team-b"):
        assert ("Namespace", team) in by
        assert by[("LocalQueue", f"lq-{team}")]["metadata"]["namespace"] == team
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert len(jobs) == 2
    for job in jobs:
        assert job["spec"]["suspend"] is True
        assert job["spec"]["parallelism"] == 3
        assert job["spec"]["template"]["spec"]["schedulerName"] == "muster"


def test_gang_example_is_a_workload_api_gang_of_four() -> None:
    docs = list(yaml.safe_load_all((K8S / "examples" / "gang-workload-api.yaml").read_text()))
    (workload,) = [d for d in docs if d["kind"] == "Workload"]
    assert workload["apiVersion"] == "scheduling.k8s.io/v1alpha1"
    (group,) = workload["spec"]["podGroups"]
    assert group["policy"]["gang"]["minCount"] == 4
    pods = [i for d in docs if d["kind"] == "List" for i in d["items"]]
    assert len(pods) == 4
    for pod in pods:
        assert pod["spec"]["workloadRef"] == {"name": "allreduce", "podGroup": group["name"]}


def test_simulate_runs_the_classic_setup_on_one_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(NODE)
    files = [str(K8S / "examples" / "two-teams.yaml"), str(K8S / "examples" / "jobs.yaml")]
    status = muster_main(["simulate", *files, str(node), "-o", "json"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "sample-job-team-a" in out
    assert "sample-job-team-b" in out
    assert "Finished" in out


def test_simulate_admits_the_gpu_example_job_on_its_tainted_flavor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # gpu-nodes is tainted and tolerates its own taint; the Job has no toleration (issue 13).
    files = [str(K8S / "examples" / n) for n in ("two-teams.yaml", "gpu-cpu-queues.yaml")]
    assert muster_main(["simulate", *files, "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    finetune = next(
        wl
        for wl in document["workloads"]
        if wl["metadata"]["ownerReferences"][0]["name"] == "finetune"
    )
    (assignment,) = finetune["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"]["nvidia.com/gpu"] == "gpu-nodes"


CLUSTER = """\
apiVersion: v1
kind: List
items:
""" + "".join(
    f"""- apiVersion: v1
  kind: Node
  metadata:
    name: {block}-{rack}-{n}
    labels:
      topology.example.com/block: {block}
      topology.example.com/rack: {block}-{rack}
      topology.kubernetes.io/zone: zone-{block}
  status: {{allocatable: {{cpu: "2", memory: 8Gi, pods: "110"}}}}
"""
    for block in ("a", "b")
    for rack in ("r1", "r2")
    for n in (1, 2)
)


def test_today_s_gang_examples_place_as_their_comments_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The v1beta1 gang, the two-level CompositePodGroup and the queued Job with
    spec.scheduling, simulated on two blocks of two racks of two 2-cpu nodes."""
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(CLUSTER)
    files = [
        *(str(K8S / "examples" / p) for p in ("two-teams.yaml", "gang-v1beta1.yaml")),
        *(str(K8S / "examples" / p) for p in ("composite-two-level.yaml", "queued-job-gang.yaml")),
    ]
    status = muster_main(["simulate", *files, str(nodes), "-o", "json", "--until", "10"])
    document = json.loads(capsys.readouterr().out)
    assert status == 0
    pods = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in document["pods"]}
    ring = [pods[f"ring-{i}"] for i in range(4)]
    assert all(ring)
    trainer = [pods[f"trainer-{s}-{i}"] for s in "ab" for i in range(4)]
    assert all(trainer)
    assert len({node.split("-")[0] for node in trainer}) == 1  # one block
    for shard in "ab":  # each shard in one rack
        assert len({pods[f"trainer-{shard}-{i}"].rsplit("-", 1)[0] for i in range(4)}) == 1
    job = [node for name, node in pods.items() if name.startswith("job-sharded-train-")]
    assert len(job) == 4
    assert all(job)
    assert len({node.split("-")[0] for node in job}) == 1  # one zone
    conditions = {
        g["metadata"]["name"]: {c["type"]: c["status"] for c in g["status"]["conditions"]}
        for g in document["podGroups"]
        if g["kind"] == "PodGroup"
    }
    assert conditions["ring-workers"] == {"PodGroupInitiallyScheduled": "True"}
    assert conditions["trainer-shard-b"] == {"PodGroupInitiallyScheduled": "True"}


@needs_kubectl
def test_kueues_visibility_api_is_served_by_the_gateway_of_the_prod_overlay() -> None:
    apis = rendered("k8s/visibility")
    services = {s["metadata"]["name"]: s for s in by_kind(overlay("prod"), "Service")}
    versions = []
    for api in by_kind(apis, "APIService"):
        spec = api["spec"]
        assert api["metadata"]["name"] == f"{spec['version']}.{spec['group']}"
        target = spec["service"]
        assert (target["namespace"], target["port"]) == ("muster", 443)
        assert [p["port"] for p in services[target["name"]]["spec"]["ports"]] == [443]
        versions.append(spec["version"])
    assert sorted(versions) == ["v1beta1", "v1beta2"]
    (reader,) = by_kind(apis, "RoleBinding")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["subjects"] == [
        {"kind": "ServiceAccount", "name": "muster-gateway", "namespace": "muster"}
    ]
    assert "gateway-visibility" not in names(overlay("dev"), "Service")


@needs_kubectl
def test_the_dashboard_component_serves_the_page_and_reaches_only_the_gateway(
    tmp_path: Path,
) -> None:
    overlay_dir = tmp_path / "with-dashboard"
    overlay_dir.mkdir()
    (overlay_dir / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(DEPLOY / 'overlays' / 'dev', overlay_dir)}]\n"
        f"components: [{os.path.relpath(DEPLOY / 'components' / 'dashboard', overlay_dir)}]\n"
    )
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(overlay_dir)], check=True, capture_output=True, text=True
    ).stdout
    objs = tuple(doc for doc in yaml.safe_load_all(out) if doc is not None)
    (deployment,) = [d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] == "dashboard"]
    (c,) = containers(deployment)
    service, flags = service_args(c)
    args = importlib.import_module(SERVICES[service]).build_parser().parse_args(flags)
    gateway = {s["metadata"]["name"]: s for s in by_kind(objs, "Service")}["gateway"]
    assert args.gateway == f"gateway:{gateway['spec']['ports'][0]['port']}"
    assert int(args.listen.rsplit(":", 1)[1]) == c["ports"][0]["containerPort"]
    (svc,) = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "dashboard"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert label_match(svc["spec"]["selector"], labels)
    assert allowed_ports(policies_selecting(objs, labels, "Ingress"), "ingress") == {8080, 8081}
    assert allowed_ports(policies_selecting(objs, labels, "Egress"), "egress") == {53, 4222, 50051}
