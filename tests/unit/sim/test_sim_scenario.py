"""Building a scenario: what goes to the engine, order and time of arrival, input errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_yaml import admission_check, cluster, workload

from muster.api import decode_yaml
from muster.api.model import KueueConfig, Workload
from muster.sim import InvalidScenarioError, ScenarioFileError, build_scenario, load_scenario
from muster.sim.annotations import CheckAttempt

CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady: {enable: true, timeout: 7s}
"""


def objects_of(*documents: str) -> list:  # type: ignore[type-arg]
    objects, errors = decode_yaml("---\n".join(documents), source="test.yaml")
    assert not errors, errors
    return objects


def arrival_names(*documents: str) -> list[tuple[float, str]]:
    scenario = build_scenario(objects_of(*documents))
    return [(a.at_s, a.workload.meta.name) for a in scenario.arrivals]


def test_config_objects_go_to_the_engine_and_workloads_arrive() -> None:
    scenario = build_scenario(objects_of(cluster(), CONFIG, workload("w")))

    kinds = sorted(type(obj).__name__ for obj in scenario.objects)
    assert kinds == ["ClusterQueue", "LocalQueue", "Namespace", "ResourceFlavor"]
    assert [a.workload.meta.name for a in scenario.arrivals] == ["w"]
    assert scenario.config is not None
    assert scenario.config.wait_for_pods_ready.timeout_seconds == 7


def test_orders_by_creation_timestamp_then_document_order() -> None:
    assert arrival_names(
        workload("c", created="2024-01-01T00:00:03Z"),
        workload("untimed-1"),
        workload("a", created="2024-01-01T00:00:01+00:00"),
        workload("b", created="2024-01-01T00:00:01Z"),
        workload("untimed-2"),
    ) == [(0, "untimed-1"), (0, "untimed-2"), (0, "a"), (0, "b"), (0, "c")]


def test_arrival_time_comes_before_arrival_order() -> None:
    assert arrival_names(
        workload("late", after=10, created="2024-01-01T00:00:00Z"),
        workload("early", after=2.5, created="2024-01-01T00:00:09Z"),
        workload("same-time", after=10, created="2024-01-01T00:00:05Z"),
    ) == [(2.5, "early"), (10, "late"), (10, "same-time")]


def test_config_argument_wins_over_the_scenario_configuration() -> None:
    mine = KueueConfig()

    scenario = build_scenario(objects_of(cluster(), CONFIG), config=mine)

    assert scenario.config is mine


def test_two_configurations_are_an_error() -> None:
    with pytest.raises(InvalidScenarioError) as caught:
        build_scenario(objects_of(CONFIG, CONFIG))

    assert [str(e) for e in caught.value.errors] == [
        "Configuration: kind: found 2 Configurations; keep one, or pass one with --config"
    ]


def test_collects_every_annotation_error_with_object_and_field() -> None:
    documents = (
        workload("a", annotations={"muster.dev/run-seconds": "-3"}),
        workload("b", annotations={"muster.dev/check.prov": "Maybe"}),
        admission_check("prov", result="Ready@x"),
    )

    with pytest.raises(InvalidScenarioError) as caught:
        build_scenario(objects_of(*documents))

    assert [str(e) for e in caught.value.errors] == [
        'AdmissionCheck/prov: metadata.annotations["muster.dev/check-result"]: '
        "element 0: delay must be a number of seconds, got 'x'",
        'Workload/team-a/a: metadata.annotations["muster.dev/run-seconds"]: '
        "must be a finite number of seconds >= 0, got '-3'",
        'Workload/team-a/b: metadata.annotations["muster.dev/check.prov"]: '
        "element 0: state must be one of Ready, Retry, Rejected, Pending, got 'Maybe'",
    ]


def train_job(annotation: str, *, parallelism: int = 1) -> str:
    """Job team-a/train on LocalQueue lq, with one `key: value` annotation."""
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  namespace: team-a
  name: train
  labels: {{kueue.x-k8s.io/queue-name: lq}}
  annotations: {{{annotation}}}
spec:
  parallelism: {parallelism}
  template:
    spec:
      containers: [{{name: main, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def test_names_a_job_in_errors_about_its_workload() -> None:
    with pytest.raises(InvalidScenarioError) as caught:
        build_scenario(objects_of(train_job("muster.dev/submit-after: soon")))

    (error,) = caught.value.errors
    assert str(error).startswith(
        'Job/team-a/train: metadata.annotations["muster.dev/submit-after"]'
    )


def test_duplicate_workloads_are_an_error() -> None:
    wl = objects_of(workload("w"))[0]
    assert isinstance(wl, Workload)

    with pytest.raises(InvalidScenarioError, match=r"Workload/team-a/w: metadata\.name: duplicate"):
        build_scenario([wl, wl])


def test_admission_check_result_becomes_the_default_script() -> None:
    scenario = build_scenario(objects_of(admission_check("prov", result="Retry@1,Ready")))

    assert scenario.check_results == {
        "prov": (CheckAttempt(state="Retry", delay_s=1), CheckAttempt(state="Ready"))
    }


def test_loads_files_in_order_and_config_from_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("---\n".join([cluster(), workload("first")]))
    (tmp_path / "b.yaml").write_text(workload("second"))
    (tmp_path / "config.yaml").write_text(CONFIG)

    scenario = load_scenario(
        [tmp_path / "a.yaml", tmp_path / "b.yaml"], config_path=tmp_path / "config.yaml"
    )

    assert [a.workload.meta.name for a in scenario.arrivals] == ["first", "second"]
    assert scenario.config is not None
    assert scenario.config.wait_for_pods_ready.enable


def test_config_file_must_hold_only_a_configuration(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("---\n".join([CONFIG, cluster()]))

    with pytest.raises(InvalidScenarioError, match="must hold exactly one Configuration"):
        load_scenario([], config_path=tmp_path / "config.yaml")


def test_missing_file_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFileError, match=r"nope\.yaml: no such file"):
        load_scenario([tmp_path / "nope.yaml"])


def test_reclaimable_pods_past_their_podset_count_are_an_error() -> None:
    documents = (
        workload("a", count=2, annotations={"muster.dev/reclaimable-pods": "main:1@5,main:3@9"}),
    )

    with pytest.raises(InvalidScenarioError) as caught:
        build_scenario(objects_of(*documents))

    assert [str(e) for e in caught.value.errors] == [
        'Workload/team-a/a: metadata.annotations["muster.dev/reclaimable-pods"]: '
        "element 1: count must be between 0 and 2 (podset main), got 3"
    ]


def test_a_job_scripts_its_reclaimable_pods_on_its_podset_main() -> None:
    job = train_job('muster.dev/reclaimable-pods: "main:2@30"', parallelism=3)
    (arrival,) = build_scenario(objects_of(job)).arrivals

    assert [(s.pod_set, s.count, s.delay_s) for s in arrival.script.reclaims] == [("main", 2, 30)]
