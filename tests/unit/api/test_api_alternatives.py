"""muster.dev/alternatives decoding: what a user writes on a Job or Workload, and its errors."""

from __future__ import annotations

import pytest

from muster.api.alternatives import with_alternatives
from muster.api.decode import decode_yaml
from muster.api.model import Alternative, Workload

GI = 2**30 * 1000
ANNOTATION = 'metadata.annotations["muster.dev/alternatives"]'


def decoded(alternatives: str) -> tuple[list[object], list[str]]:
    """A Job on LocalQueue gpu whose muster.dev/alternatives is `alternatives` (YAML text),
    decoded as every manifest is: the objects and the problems."""
    indented = "\n".join(f"      {line}" for line in alternatives.splitlines())
    objects, errors = decode_yaml(f"""
apiVersion: batch/v1
kind: Job
metadata:
  namespace: ml
  name: sd-light
  labels: {{kueue.x-k8s.io/queue-name: gpu}}
  annotations:
    muster.dev/alternatives: |
{indented}
spec:
  template:
    spec:
      containers: [{{name: c, resources: {{requests: {{cpu: "4", nvidia.com/gpu: "1"}}}}}}]
""")
    return list(objects), [str(error) for error in errors]


def job(alternatives: str) -> Workload:
    (wl,), errors = decoded(alternatives)
    assert errors == []
    assert isinstance(wl, Workload)
    return wl


def problems(alternatives: str) -> list[str]:
    """What decoding says about `alternatives`; the Job itself is refused."""
    objects, errors = decoded(alternatives)
    assert objects == []
    return errors


def test_decodes_a_yaml_list_in_order_of_preference() -> None:
    text = """
- queueName: l40
  runSeconds: 26.4
- queueName: cpu
  requests: {nvidia.com/gpu: 0, memory: 8Gi}
  runSeconds: "90"
"""
    assert job(text).alternatives == (
        Alternative(queue_name="l40", run_seconds=26.4),
        Alternative(
            queue_name="cpu", requests={"nvidia.com/gpu": 0, "memory": 8 * GI}, run_seconds=90.0
        ),
    )


def test_decodes_json_too() -> None:
    assert job('[{"queueName": "cpu"}]').alternatives == (Alternative(queue_name="cpu"),)


def test_a_workload_without_the_annotation_is_returned_as_it_is() -> None:
    (wl,), _ = decode_yaml("""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: ml, name: w}
spec: {queueName: gpu, podSets: [{name: main, count: 1, template: {spec: {containers: []}}}]}
""")
    assert isinstance(wl, Workload)

    assert with_alternatives(wl, who="Workload/ml/w") == (wl, [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "[queueName: cpu",
            f"Job/ml/sd-light: {ANNOTATION}: invalid YAML at line 2: "
            "did not find expected ',' or ']'",
            id="bad-yaml",
        ),
        pytest.param(
            "cpu",
            f"Job/ml/sd-light: {ANNOTATION}: must be a non-empty list of alternatives, "
            "got a string",
            id="not-a-list",
        ),
        pytest.param(
            "[]",
            f"Job/ml/sd-light: {ANNOTATION}: must be a non-empty list of alternatives, "
            "got an empty list",
            id="empty",
        ),
        pytest.param(
            "- cpu",
            f"Job/ml/sd-light: {ANNOTATION}[0]: must be an object with queueName, requests, "
            "runSeconds, got a string",
            id="entry-not-an-object",
        ),
        pytest.param(
            "- {runSeconds: 90}",
            f"Job/ml/sd-light: {ANNOTATION}[0].queueName: is required: the name of a LocalQueue",
            id="no-queue",
        ),
        pytest.param(
            "- {queueName: cpu, cpu: 4}",
            f"Job/ml/sd-light: {ANNOTATION}[0].cpu: unknown field; known: queueName, "
            "requests, runSeconds",
            id="unknown-field",
        ),
        pytest.param(
            '- {queueName: cpu, requests: {cpu: "-1"}}',
            f"Job/ml/sd-light: {ANNOTATION}[0].requests.cpu: must be >= 0, got -1",
            id="negative-quantity",
        ),
        pytest.param(
            "- {queueName: cpu, requests: {cpu: lots}}",
            f"Job/ml/sd-light: {ANNOTATION}[0].requests.cpu: ",
            id="bad-quantity",
        ),
        pytest.param(
            "- {queueName: cpu, requests: [cpu]}",
            f"Job/ml/sd-light: {ANNOTATION}[0].requests: must be a map of resource names to "
            "quantities, got a list",
            id="requests-not-a-map",
        ),
        pytest.param(
            "- {queueName: cpu, runSeconds: -5}",
            f"Job/ml/sd-light: {ANNOTATION}[0].runSeconds: must be a finite number of "
            "seconds >= 0, got -5",
            id="negative-run-time",
        ),
        pytest.param(
            "- {queueName: cpu, runSeconds: true}",
            f"Job/ml/sd-light: {ANNOTATION}[0].runSeconds: must be a finite number of "
            "seconds >= 0, got True",
            id="boolean-run-time",
        ),
        pytest.param(
            "- {queueName: gpu}",
            f"Job/ml/sd-light: {ANNOTATION}[0].queueName: duplicate: queue 'gpu' is listed "
            "already as the declared queue",
            id="the-declared-queue",
        ),
        pytest.param(
            "- {queueName: cpu}\n- {queueName: cpu}",
            f"Job/ml/sd-light: {ANNOTATION}[1].queueName: duplicate: queue 'cpu' is listed "
            "already at [0]",
            id="duplicate-queue",
        ),
    ],
)
def test_reports_a_bad_value_with_object_and_field(text: str, expected: str) -> None:
    (problem,) = problems(text)

    assert problem.startswith(expected)


def test_reports_every_problem_of_every_entry() -> None:
    found = problems("- {queueName: cpu, size: 1, runSeconds: -1}\n- {queueName: cpu}")

    assert [p.split(": ", 2)[1] for p in found] == [
        f"{ANNOTATION}[0].size",
        f"{ANNOTATION}[0].runSeconds",
        f"{ANNOTATION}[1].queueName",
    ]


GANG_POD = """
apiVersion: v1
kind: Pod
metadata:
  namespace: ml
  name: worker-0
  labels: {scheduling.x-k8s.io/pod-group: ring}
  annotations:
    muster.dev/alternatives: '[{queueName: l40}, {queueName: cpu, requests: {nvidia.com/gpu: 0}}]'
spec:
  schedulerName: muster
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def test_an_alternative_that_changes_requests_of_pods_muster_does_not_create_is_refused() -> None:
    objects, errors = decode_yaml(GANG_POD)

    assert list(objects) == []
    assert [str(e) for e in errors] == [
        f"Pod/ml/worker-0: {ANNOTATION}[1].requests: cannot change the requests of pods muster "
        "does not create (a Pod, the pods of a gang); submit a Job or a Kueue Workload to run "
        "with other requests"
    ]


def test_an_alternative_that_keeps_the_requests_of_such_pods_passes() -> None:
    objects, errors = decode_yaml(GANG_POD.replace(", requests: {nvidia.com/gpu: 0}", ""))

    assert (len(list(objects)), list(errors)) == (1, [])
