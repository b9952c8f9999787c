"""Choosing the cluster backend (`muster.cluster.choose`): watcher, binder and gangpermit take
`--cluster-backend sim|kube` and the Kubernetes flags (or their MUSTER_* variables), refuse bad
values naming the flag, and open what was chosen."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from muster.binder import __main__ as binder_main
from muster.bus.kv import open_bucket
from muster.bus.service import ServiceConfig
from muster.cluster.choose import BackendConfig, open_backend
from muster.cluster.errors import ClusterError
from muster.cluster.kube import KubeBackend, StatusWriter
from muster.cluster.sim.backend import SimBackend
from muster.devtools.apiserver import ApiServer
from muster.gangpermit import __main__ as gangpermit_main
from muster.launcher.nats_server import NatsServer
from muster.watcher import __main__ as watcher_main

pytestmark = pytest.mark.timeout(30)

SERVICES = {"watcher": watcher_main, "binder": binder_main, "gangpermit": gangpermit_main}
every_service = pytest.mark.parametrize("service", sorted(SERVICES))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("MUSTER_CLUSTER_BACKEND", "MUSTER_KUBE_HOST", "MUSTER_KUBE_IN_CLUSTER",
                "MUSTER_KUEUE_VERSION", "MUSTER_SCHEDULER_NAME", "MUSTER_KUBE_WRITE_QPS",
                "KUBECONFIG"):  # fmt: skip
        monkeypatch.delenv(key, raising=False)


def backend_of(service: str, argv: list[str]) -> tuple[ServiceConfig, BackendConfig]:
    config, main = SERVICES[service].parse(argv)
    backend: BackendConfig = main.keywords["backend"]
    return config, backend


@every_service
def test_the_simulated_cluster_is_the_default(service: str) -> None:
    _, backend = backend_of(service, [])
    assert backend.kind == "sim"


@every_service
def test_kube_flags_reach_the_client_configuration(service: str) -> None:
    _, backend = backend_of(
        service,
        [
            "--cluster-backend", "kube", "--kube-host", "https://10.0.0.1:6443",
            "--kube-context", "prod", "--kube-write-qps", "5", "--kube-write-burst", "7",
            "--kueue-version", "v1beta2", "--scheduler-name", "gangs",
        ],
    )  # fmt: skip
    kube = backend.kube
    assert backend.kind == "kube"
    assert (kube.host, kube.context, kube.write_qps, kube.write_burst) == (
        "https://10.0.0.1:6443",
        "prod",
        5.0,
        7,
    )
    assert (kube.kueue_version, kube.scheduler_name) == ("v1beta2", "gangs")


@every_service
def test_the_environment_chooses_in_cluster_kubernetes(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSTER_CLUSTER_BACKEND", "kube")
    monkeypatch.setenv("MUSTER_KUBE_IN_CLUSTER", "on")
    monkeypatch.setenv("MUSTER_KUEUE_VERSION", "v1beta2")
    _, backend = backend_of(service, [])
    assert (backend.kind, backend.kube.in_cluster, backend.kube.kueue_version) == (
        "kube",
        True,
        "v1beta2",
    )


def test_the_watcher_takes_the_status_write_rate() -> None:
    _, backend = backend_of("watcher", ["--kube-status-qps", "3", "--kube-status-burst", "2"])
    assert (backend.status.qps, backend.status.burst) == (3.0, 2)
    _, main = watcher_main.parse(["--kueue-version", "v1beta2"])
    assert main.keywords["config"].kueue_version == "v1beta2"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "controllers"),
    [
        (None, ("provisioning-request",)),
        ("none", ()),
        (" provisioning-request ", ("provisioning-request",)),
    ],
)
def test_the_watcher_runs_the_check_controllers_named(
    value: str | None, controllers: tuple[str, ...]
) -> None:
    _, main = watcher_main.parse(["--check-controllers", value] if value is not None else [])
    assert main.keywords["config"].check_controllers == controllers  # type: ignore[attr-defined]


def test_the_watcher_takes_the_event_write_rate(capsys: pytest.CaptureFixture[str]) -> None:
    _, main = watcher_main.parse(["--kube-event-qps", "2.5", "--kube-event-burst", "7"])
    kube = main.keywords["kube"]  # type: ignore[attr-defined]
    assert (kube.event_qps, kube.event_burst) == (2.5, 7)
    for argv, message in (
        (["--kube-event-qps", "-1"], "--kube-event-qps must be >= 0"),
        (["--kube-event-burst", "0"], "--kube-event-burst must be >= 1"),
    ):
        with pytest.raises(SystemExit):
            watcher_main.main(argv)
        assert message in capsys.readouterr().err


def test_an_unknown_check_controller_exits_2_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        watcher_main.main(["--check-controllers", "provisioning-request,multikueue"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--check-controllers: unknown controller multikueue" in err
    assert "one of provisioning-request, none" in err


def test_gangpermit_places_the_pods_of_the_scheduler_its_backend_watches() -> None:
    _, main = gangpermit_main.parse(["--scheduler-name", "gangs"])
    keywords = main.keywords  # type: ignore[attr-defined]
    assert keywords["config"].scheduler_name == keywords["backend"].kube.scheduler_name == "gangs"


@every_service
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster-backend", "kind"], "--cluster-backend must be one of sim, kube, got 'kind'"),
        (["--kube-write-qps", "-1"], "--kube-write-qps must be >= 0"),
        (["--kube-write-burst", "0"], "--kube-write-burst must be >= 1"),
        (["--kueue-version", "v1"], "--kueue-version must be one of v1beta1, v1beta2"),
        (["--kube-host", "10.0.0.1:6443"], "--kube-host must be an http:// or https:// URL"),
        (["--kube-in-cluster", "on", "--kubeconfig", "k"], "--kube-in-cluster and --kubeconfig"),
        (["--kube-in-cluster", "sometimes"], "--kube-in-cluster"),
    ],
    ids=["backend", "qps", "burst", "kueue-version", "host", "in-cluster-and-file", "switch"],
)
def test_bad_values_exit_2_naming_the_flag(
    service: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        SERVICES[service].main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_status_rate_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        watcher_main.main(["--kube-status-burst", "0"])
    assert "--kube-status-burst must be >= 1" in capsys.readouterr().err


@every_service
def test_help_explains_the_backend_flags(service: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        SERVICES[service].main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--cluster-backend sim|kube" in text
    assert "simulated in NATS (sim) or a Kubernetes API server (kube)" in text
    for flag in ("--kube-host URL", "--kubeconfig FILE", "--kube-in-cluster on|off",
                 "--kube-write-qps R", "--kueue-version v1beta1|v1beta2"):  # fmt: skip
        assert flag in text
    assert ("--kube-status-qps R" in text) is (service == "watcher")


async def opened(config: BackendConfig, **kw: Any) -> tuple[type, type | None]:
    async with open_backend(config, **kw) as cluster:
        return type(cluster.backend), None if cluster.status is None else type(cluster.status)


@pytest.fixture
async def nats_url(tmp_path: Path) -> AsyncIterator[str]:
    server = NatsServer(tmp_path / "nats")
    url = await server.start(log_path=tmp_path / "nats.log")
    try:
        yield url
    finally:
        await server.stop()


async def test_open_backend_gives_the_sim_over_the_services_connection(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        made = await opened(
            BackendConfig(), buckets=functools.partial(open_bucket, nc.jetstream()), cluster="east"
        )
        assert made == (SimBackend, None)
        bucket = await nc.jetstream().key_value("MUSTER_SIM_east")  # opened: the sim's store
        assert bucket is not None
    finally:
        await nc.close()


async def test_open_backend_gives_kubernetes_with_its_status_writer() -> None:
    async with ApiServer() as server:
        _, backend = backend_of("binder", ["--cluster-backend", "kube", "--kube-host", server.url])
        made = await opened(backend, buckets=None, cluster="local")
        assert made == (KubeBackend, StatusWriter)


async def test_kubernetes_without_any_configuration_fails_clearly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    _, backend = backend_of("gangpermit", ["--cluster-backend", "kube"])
    with pytest.raises(ClusterError, match="no Kubernetes client configuration"):
        await opened(backend, buckets=None, cluster="local")
