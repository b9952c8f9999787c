"""MultiKueue objects as users write them: AdmissionCheck parameters, MultiKueueConfig and
MultiKueueCluster in v1beta1 and v1beta2, and the errors that name the object and field."""

from __future__ import annotations

import pytest

from muster.api import decode_yaml
from muster.api.model import AdmissionCheck, MultiKueueCluster, MultiKueueConfig

VERSIONS = pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])


def check_yaml(version: str, *, parameters: str) -> str:
    return f"""
apiVersion: kueue.x-k8s.io/{version}
kind: AdmissionCheck
metadata: {{name: dispatch}}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  {parameters}
"""


def config_yaml(version: str, clusters: str, *, dispatch: str | None = None) -> str:
    annotations = f"annotations: {{muster.dev/dispatch: {dispatch}}}" if dispatch else ""
    return f"""
apiVersion: kueue.x-k8s.io/{version}
kind: MultiKueueConfig
metadata:
  name: workers
  {annotations}
spec:
  clusters: {clusters}
"""


def errors_of(text: str) -> list[str]:
    objects, errors = decode_yaml(text)
    assert objects == []
    return [str(e) for e in errors]


@VERSIONS
def test_multikueue_objects_decode_with_their_clusters_in_order(version: str) -> None:
    text = "---".join(
        [
            check_yaml(
                version,
                parameters="parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, "
                "name: workers}",
            ),
            config_yaml(version, "[east, west-2]", dispatch="best-fit"),
            f"""
apiVersion: kueue.x-k8s.io/{version}
kind: MultiKueueCluster
metadata: {{name: east}}
spec:
  kubeConfig: {{locationType: Secret, location: east-secret}}
""",
        ]
    )
    objects, errors = decode_yaml(text)
    assert errors == []
    check, config, cluster = objects
    assert isinstance(check, AdmissionCheck)
    assert check.parameters is not None
    assert (check.parameters.kind, check.parameters.name) == ("MultiKueueConfig", "workers")
    assert isinstance(config, MultiKueueConfig)
    assert config.clusters == ("east", "west-2")
    assert config.dispatch == "best-fit"
    assert isinstance(cluster, MultiKueueCluster)
    assert cluster.name == "east"


def test_dispatch_defaults_to_first_fit() -> None:
    (config,), errors = decode_yaml(config_yaml("v1beta2", "[a]"))
    assert errors == []
    assert isinstance(config, MultiKueueConfig)
    assert config.dispatch == "first-fit"


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        pytest.param(
            "",
            "AdmissionCheck/dispatch: spec.parameters: is required for controllerName "
            "kueue.x-k8s.io/multikueue",
            id="missing",
        ),
        pytest.param(
            "parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: p}",
            "AdmissionCheck/dispatch: spec.parameters.kind: must be 'MultiKueueConfig', "
            "got 'ProvisioningRequestConfig'",
            id="wrong-kind",
        ),
        pytest.param(
            "parameters: {apiGroup: example.com, kind: MultiKueueConfig, name: p}",
            "AdmissionCheck/dispatch: spec.parameters.apiGroup: must be 'kueue.x-k8s.io', "
            "got 'example.com'",
            id="wrong-group",
        ),
        pytest.param(
            "parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig}",
            "AdmissionCheck/dispatch: spec.parameters.name: is required",
            id="no-name",
        ),
    ],
)
def test_multikueue_check_must_name_its_config(parameters: str, expected: str) -> None:
    assert errors_of(check_yaml("v1beta2", parameters=parameters)) == [expected]


def test_other_checks_need_no_parameters() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: prov}
spec: {controllerName: kueue.x-k8s.io/provisioning-request}
"""
    (check,), errors = decode_yaml(text)
    assert errors == []
    assert isinstance(check, AdmissionCheck)
    assert check.parameters is None


@pytest.mark.parametrize(
    ("clusters", "dispatch", "expected"),
    [
        pytest.param("[]", None, ["spec.clusters: must list at least one"], id="empty"),
        pytest.param(
            "[a, b.c]",
            None,
            [
                "spec.clusters[1]: must be a muster cluster id (letters, digits, '-' and '_'), "
                "got 'b.c'"
            ],
            id="dot",
        ),
        pytest.param("[a, dlq]", None, ["spec.clusters[1]: 'dlq' is reserved"], id="reserved"),
        pytest.param("[a, b, a]", None, ["spec.clusters[2]: 'a' is listed twice"], id="twice"),
        pytest.param(
            "[a]",
            "round-robin",
            [
                'metadata.annotations["muster.dev/dispatch"]: must be first-fit or best-fit, '
                "got 'round-robin'"
            ],
            id="strategy",
        ),
    ],
)
def test_bad_multikueue_config_names_the_field(
    clusters: str, dispatch: str | None, expected: list[str]
) -> None:
    errors = errors_of(config_yaml("v1beta1", clusters, dispatch=dispatch))
    assert len(errors) == len(expected)
    for error, wanted in zip(errors, expected, strict=True):
        assert error.startswith("MultiKueueConfig/workers: " + wanted)


def test_multikueue_cluster_name_must_be_a_cluster_id() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: eu.west}
"""
    assert errors_of(text) == [
        "MultiKueueCluster/eu.west: metadata.name: must be a muster cluster id (letters, digits, "
        "'-' and '_'), got 'eu.west'"
    ]


@pytest.mark.parametrize(
    ("version", "spec"),
    [
        ("v1beta1", "kubeConfig: {locationType: Secret, location: east-secret}"),
        ("v1beta2", "clusterSource: {kubeConfig: {location: east-secret}}"),
    ],
)
def test_multikueue_cluster_kubeconfig_is_read_in_both_versions(version: str, spec: str) -> None:
    text = f"""
apiVersion: kueue.x-k8s.io/{version}
kind: MultiKueueCluster
metadata: {{name: east}}
spec:
  {spec}
"""
    objects, errors = decode_yaml(text)
    assert errors == []
    (cluster,) = objects
    assert isinstance(cluster, MultiKueueCluster)
    assert cluster.kube_config is not None
    assert (cluster.kube_config.location_type, cluster.kube_config.location) == (
        "Secret",
        "east-secret",
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "kubeConfig: {locationType: Url, location: x}",
            "spec.kubeConfig.locationType: must be Secret or Path, got 'Url'",
        ),
        ("kubeConfig: {locationType: Path}", "spec.kubeConfig.location: is required"),
    ],
)
def test_bad_multikueue_cluster_kubeconfig_names_the_field(spec: str, expected: str) -> None:
    text = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: MultiKueueCluster
metadata: {{name: east}}
spec:
  {spec}
"""
    assert errors_of(text) == [f"MultiKueueCluster/east: {expected}"]
