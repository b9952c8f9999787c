"""A valid Kueue Workload manifest as a `workload.submitted` carries it, for tests that build
events by hand (the gateway's book lists only a `submitted` admission would take)."""

from __future__ import annotations

import json


def workload_manifest(key: str, *, queue: str = "lq") -> str:
    """The manifest JSON of a one-pod Workload keyed `key` ("<namespace>/<name>") in `queue`."""
    namespace, _, name = key.partition("/")
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    return json.dumps(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "queueName": queue,
                "podSets": [
                    {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
                ],
            },
        }
    )


def runtime_class_workload(name: str, runtime_class: str = "kata") -> str:
    """YAML of Workload ns/`name` in LocalQueue lq: two pods of 500m cpu, naming
    `runtime_class`."""
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ns, name: {name}}}
spec:
  queueName: lq
  podSets:
  - name: main
    count: 2
    template:
      spec:
        runtimeClassName: {runtime_class}
        containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]
"""
