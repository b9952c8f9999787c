"""kueuectl's verbs as a user types them, against a stack `muster up` started.

Each test has its own namespace and LocalQueue on one ClusterQueue per test (so the tests
share one stack and not its quota), submits Jobs with `muster submit`, acts with `muster
stop|resume|delete`, and reads the outcome from `muster workloads`, `describe`, `queues` and
`events` once the event that settles it has come (waited for on the gateway's Watch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from up_stack import Up, down, muster, start, wait_for_event

from muster.gateway.workloads import not_found

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    stack = start(tmp_path_factory.mktemp("up"), "--speed", "1")
    try:
        yield stack
    finally:
        down(stack)


def queues(name: str, *, cpu: int) -> str:
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: default-flavor}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {name}}}}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{{name: cpu, nominalQuota: {cpu}}}]
---
apiVersion: v1
kind: Namespace
metadata: {{name: {name}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{namespace: {name}, name: lq}}
spec: {{clusterQueue: {name}}}
"""


def job(namespace: str, name: str, *, cpu: int, pods: int = 1) -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  namespace: {namespace}
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: lq}}
  annotations: {{muster.dev/run-seconds: "3600"}}
spec:
  suspend: true
  parallelism: {pods}
  completions: {pods}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        resources: {{requests: {{cpu: "{cpu}"}}}}
"""


def submit(up: Up, tmp_path: Path, *documents: str) -> None:
    path = tmp_path / f"m{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text("---\n".join(documents))
    muster(up, "submit", str(path))


def workloads(up: Up, namespace: str) -> dict[str, str]:
    """Job name -> status, from `muster workloads -n NS -o json`."""
    reply = json.loads(muster(up, "workloads", "-n", namespace, "-o", "json").stdout)
    return {w["ownerName"]: w["status"] for w in reply.get("items", [])}


def last_sequence(up: Up, namespace: str) -> int:
    lines = muster(up, "events", "-n", namespace, "-o", "json").stdout.splitlines()
    return int(json.loads(lines[-1])["sequence"]) if lines else 0


def test_stop_workload_evicts_it_lets_the_next_in_and_resume_queues_it_again(
    up: Up, tmp_path: Path
) -> None:
    ns = "verbs-stop"
    submit(up, tmp_path, queues(ns, cpu=4))
    submit(up, tmp_path, job(ns, "first", cpu=4), job(ns, "second", cpu=4))
    wait_for_event(up.gateway, f"{ns}/job-first-", "workload.admitted")
    assert workloads(up, ns) == {"first": "ADMITTED", "second": "PENDING"}

    assert muster(up, "stop", "workload", "first", "-n", ns).stdout.startswith(
        f"workload.kueue.x-k8s.io/{ns}/job-first-"
    )
    wait_for_event(up.gateway, f"{ns}/job-second-", "workload.admitted")
    assert workloads(up, ns) == {"first": "INACTIVE", "second": "ADMITTED"}
    described = muster(up, "describe", "workload", "first", "-n", ns).stdout
    assert re.search(r"^  Evicted +True +Deactivated", described, re.M)
    assert "stopped by " in described
    assert "Pods: <none>" in described
    again = muster(up, "stop", "workload", "first", "-n", ns).stdout
    assert again.rstrip().endswith(" already stopped")

    after = last_sequence(up, ns)
    muster(up, "resume", "workload", "first", "-n", ns)
    wait_for_event(up.gateway, f"{ns}/job-first-", "workload.pending", after=after)
    assert workloads(up, ns) == {"first": "PENDING", "second": "ADMITTED"}
    listed = muster(up, "workloads", "-n", ns, "--status", "pending").stdout
    assert re.search(rf"^{ns} +job-first-\w+ +job/first +lq +{ns} +PENDING +0 ", listed, re.M)


def test_stop_localqueue_drains_it_and_keep_already_running_holds_it(
    up: Up, tmp_path: Path
) -> None:
    ns = "verbs-lq"
    submit(up, tmp_path, queues(ns, cpu=8))
    submit(up, tmp_path, job(ns, "running", cpu=4))
    wait_for_event(up.gateway, f"{ns}/job-running-", "workload.admitted")

    stopped = muster(up, "stop", "localqueue", "lq", "-n", ns, "--keep-already-running")
    assert stopped.stdout.strip() == f"localqueue.kueue.x-k8s.io/{ns}/lq stopped (Hold)"
    after = last_sequence(up, ns)
    submit(up, tmp_path, job(ns, "held", cpu=1))
    pending = wait_for_event(up.gateway, f"{ns}/job-held-", "workload.pending", after=after)
    assert pending.pending.message == "LocalQueue lq is inactive"
    assert workloads(up, ns) == {"running": "ADMITTED", "held": "PENDING"}

    muster(up, "stop", "lq", "lq", "-n", ns)  # now HoldAndDrain: what runs is evicted
    evicted = wait_for_event(up.gateway, f"{ns}/job-running-", "workload.evicted")
    assert evicted.evicted.reason == "LocalQueueStopped"

    assert muster(up, "resume", "localqueue", "lq", "-n", ns).stdout.strip().endswith("resumed")
    wait_for_event(up.gateway, f"{ns}/job-held-", "workload.admitted")


def test_stop_clusterqueue_marks_it_inactive_and_delete_workload_releases_its_quota(
    up: Up, tmp_path: Path
) -> None:
    ns = "verbs-cq"
    submit(up, tmp_path, queues(ns, cpu=4))
    submit(up, tmp_path, job(ns, "big", cpu=2, pods=2), job(ns, "small", cpu=1))
    wait_for_event(up.gateway, f"{ns}/job-big-", "workload.admitted")

    muster(up, "stop", "clusterqueue", ns, "--keep-already-running")
    after = last_sequence(up, ns)
    shown = muster(up, "queues", "--cluster-queue", ns).stdout
    assert re.search(rf"^{ns} +- +no \(Stopped\)", shown, re.M)

    assert (
        muster(up, "delete", "workload", "big", "-n", ns, "--yes")
        .stdout.strip()
        .endswith(" deleted")
    )
    wait_for_event(up.gateway, f"{ns}/job-big-", "workload.eviction_completed", after=after)
    assert workloads(up, ns) == {"small": "PENDING"}  # the queue holds it: stopped
    muster(up, "resume", "cq", ns)
    wait_for_event(up.gateway, f"{ns}/job-small-", "workload.admitted")
    quota = muster(up, "queues", "--cluster-queue", ns).stdout
    assert re.search(rf"^{ns} +default-flavor +cpu +4 +- +1 ", quota, re.M)  # small's 1 cpu


def test_events_by_job_name_are_readable_and_unknown_objects_are_refused(
    up: Up, tmp_path: Path
) -> None:
    ns = "verbs-events"
    submit(up, tmp_path, queues(ns, cpu=4), job(ns, "train", cpu=1, pods=3))
    wait_for_event(up.gateway, f"{ns}/job-train-", "workload.running")

    shown = muster(up, "events", "--workload", "train", "-n", ns).stdout
    types = [line.split()[2] for line in shown.splitlines()[1:]]
    # No check to pass: one line tells the reservation and the admission (events.md).
    assert types[:2] == ["workload.submitted", "workload.admitted"]
    assert re.search(r"workload\.admitted +\S+ +quota reserved and admitted: ClusterQueue ", shown)
    # `muster up`'s binder stores no `bound` for pods it makes on their nodes (docs/events.md,
    # "Launchers store `bound` only for binds"): the permit tells where they run.
    assert "workload.bound" not in types
    assert types[2:4] == ["workload.gang_permitted", "workload.running"]
    assert "{" not in shown  # no payload dumped as JSON
    assert re.search(r"workload\.gang_permitted +\S+ +3 pods on node-", shown)
    described = muster(up, "describe", "workload", "train", "-n", ns).stdout
    for condition, reason in (
        ("QuotaReserved", "QuotaReserved"),
        ("Admitted", "Admitted"),
        ("PodsReady", "Started"),  # Kueue's job reconciler's word
    ):
        assert re.search(rf"^  {condition} +True +{reason}", described, re.M), described

    missing = muster(up, "stop", "workload", "nope", "-n", ns, ok=False)
    assert missing.returncode == 2
    assert missing.stderr == f"muster: NOT_FOUND: {not_found(ns, 'nope')}\n"
    wrong = muster(up, "delete", "workload", "train", "-n", ns, ok=False)  # no --yes, no tty
    assert wrong.returncode == 2
    assert "add --yes" in wrong.stderr
    yaml_out = muster(up, "describe", "workload", "train", "-n", ns, "-o", "yaml").stdout
    assert "ownerName: train\n" in yaml_out
