"""Scenario tables: every `<area>/<name>.yaml` here runs through `muster simulate -o json`
(in-process, same JSON) and is compared with `<name>.expect.yaml` next to it.

The expect file lists only the fields worth comparing; anything not listed is ignored.

    about: one line, printed on failure                                    (required)
    xfail_reason: where muster differs from Kueue (the case becomes a strict xfail)
    until: seconds                                          (as `muster simulate --until`)
    workloads:
      <ns>/<name> | job:<ns>/<job name>:     # a Job's (jobset:<ns>/<name>: a JobSet's) key
                                             # resolves through ownerReferences
        admitted: bool       # status.admission set and condition Admitted=True
        reserved: bool       # status.admission set (quota reserved, admitted or not)
        clusterQueue: name   # status.admission.clusterQueue
        flavors: {<podset>: {<resource>: <flavor>}}
        count: {<podset>: n}
        usage: {<podset>: {<resource>: <quantity>}}
        message: text        # the QuotaReserved=False condition's message, exactly
        message_contains: text or [text, ...]
        active: bool         # spec.active
        priority: n          # spec.priority
        conditions: {<Type>: "True" | "False" | null | {status, reason, message}}
        admissionChecks: {<check>: {state, message, retryCount}}   # status.admissionChecks
    events:     # a subsequence of the full event list, in order; only the keys given
      - {time, type, object, reason, message, by}   # object/by may use job:<ns>/<name>
    no_events:  # no event may match any of these
      - {type, object, ...}
    clusterQueues:
      <name>: {pendingWorkloads, reservingWorkloads, admittedWorkloads,
               flavorsReservation: {<flavor>: {<resource>: {total, borrowed}}},
               flavorsUsage: (same), conditions: (as for workloads)}
    localQueues:
      <ns>/<name>: (as clusterQueues; resources have `total` only)
    pods:       # with Nodes in the scenario: each pod as the run left it
      <ns>/<name>:           # null: no such pod (never created, or deleted with its workload)
        node: name | null    # spec.nodeName
        phase: Pending | Running | Succeeded | Failed
        reason: text         # PodScheduled=False reason while pending, status.reason once Failed
        message: text        # the same condition's (or status') message, exactly
        message_contains: text or [text, ...]
        scheduler: name      # spec.schedulerName
    podGroups:  # with Nodes: scheduling.k8s.io PodGroups (and CompositePodGroups) at the end
      <ns>/<name>:
        conditions: {<Type>: "True" | "False" | null | {status, reason, message}}

An invalid scenario's expect file holds `about` and
`error: {exit: n, stderr_contains: [text, ...]}` instead; `null` in a condition means absent.
Scalars compare as the JSON shows them: `total: 4` matches "4", `Admitted: true` matches "True".

Besides its own expect file, each `versions/<name>-v1beta1.yaml` must decide exactly as its
`versions/<name>-v1beta2.yaml`: same events, same workload status, same queue status.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli.main import main

HERE = Path(__file__).parent
EXPECT_SUFFIX = ".expect.yaml"
WORKLOAD_FIELDS = {
    "admitted",
    "reserved",
    "clusterQueue",
    "flavors",
    "count",
    "usage",
    "message",
    "message_contains",
    "active",
    "priority",
    "conditions",
    "admissionChecks",
}
QUEUE_FIELDS = {
    "pendingWorkloads",
    "reservingWorkloads",
    "admittedWorkloads",
    "flavorsReservation",
    "flavorsUsage",
    "conditions",
}
POD_FIELDS = {"node", "phase", "reason", "message", "message_contains", "scheduler"}
TOP_FIELDS = {
    "about",
    "xfail_reason",
    "until",
    "workloads",
    "events",
    "no_events",
    "clusterQueues",
    "localQueues",
    "pods",
    "podGroups",
    "error",
}


def collect() -> list[Any]:
    cases = []
    for expect_path in sorted(HERE.glob(f"*/*{EXPECT_SUFFIX}")):
        scenario = expect_path.with_name(expect_path.name.removesuffix(EXPECT_SUFFIX) + ".yaml")
        expect = yaml.safe_load(expect_path.read_text())
        case_id = str(scenario.relative_to(HERE).with_suffix(""))
        marks = []
        if expect.get("xfail_reason"):
            marks.append(pytest.mark.xfail(reason=expect["xfail_reason"], strict=True))
        cases.append(pytest.param(scenario, expect, id=case_id, marks=marks))
    return cases


CASES = collect()
RUNNABLE = [case for case in CASES if "error" not in case.values[1]]
INVALID = [case for case in CASES if "error" in case.values[1]]
VERSION_PAIRS = [
    pytest.param(
        v1, v1.with_name(v1.name.replace("-v1beta1", "-v1beta2")), id=v1.stem[: -len("-v1beta1")]
    )
    for v1 in sorted((HERE / "versions").glob("*-v1beta1.yaml"))
]


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return status, out.getvalue(), err.getvalue()


def simulate(scenario: Path, expect: dict[str, Any]) -> dict[str, Any]:
    args = ["simulate", str(scenario), "-o", "json"]
    if expect.get("until") is not None:
        args += ["--until", str(expect["until"])]
    status, out, err = run_cli(args)
    assert status == 0, f"muster simulate exited {status}:\n{err}"
    document: dict[str, Any] = json.loads(out)
    return document


# --- views: the JSON document reshaped into the expect schema ----------------------------


def condition_view(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        c["type"]: {"status": c["status"], "reason": c.get("reason"), "message": c.get("message")}
        for c in conditions
    }


def workload_view(wl: dict[str, Any]) -> dict[str, Any]:
    status = wl.get("status", {})
    admission = status.get("admission")
    conditions = condition_view(status.get("conditions", []))
    assignments = admission["podSetAssignments"] if admission else []
    quota = conditions.get("QuotaReserved", {})
    return {
        "admitted": admission is not None
        and conditions.get("Admitted", {}).get("status") == "True",
        "reserved": admission is not None,
        "clusterQueue": admission["clusterQueue"] if admission else None,
        "flavors": {psa["name"]: psa.get("flavors", {}) for psa in assignments},
        "count": {psa["name"]: psa.get("count") for psa in assignments},
        "usage": {psa["name"]: psa.get("resourceUsage", {}) for psa in assignments},
        "message": quota.get("message") if quota.get("status") == "False" else None,
        "active": wl["spec"].get("active", True),
        "priority": wl["spec"].get("priority"),
        "conditions": conditions,
        "admissionChecks": {
            c["name"]: {
                "state": c.get("state"),
                "message": c.get("message"),
                "retryCount": c.get("retryCount", 0),
            }
            for c in status.get("admissionChecks", [])
        },
    }


def pod_view(pod: dict[str, Any]) -> dict[str, Any]:
    spec, status = pod["spec"], pod["status"]
    scheduled = condition_view(status.get("conditions", [])).get("PodScheduled", {})
    waiting = scheduled.get("status") == "False"
    return {
        "node": spec.get("nodeName"),
        "phase": status["phase"],
        "reason": scheduled.get("reason") if waiting else status.get("reason"),
        "message": scheduled.get("message") if waiting else status.get("message"),
        "scheduler": spec["schedulerName"],
    }


def flavor_view(flavors: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f["name"]: {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in f["resources"]}
        for f in flavors
    }


def queue_view(queue: dict[str, Any]) -> dict[str, Any]:
    status = queue["status"]
    return {
        "pendingWorkloads": status.get("pendingWorkloads"),
        "reservingWorkloads": status.get("reservingWorkloads"),
        "admittedWorkloads": status.get("admittedWorkloads"),
        "flavorsReservation": flavor_view(status.get("flavorsReservation", [])),
        "flavorsUsage": flavor_view(status.get("flavorsUsage", [])),
        "conditions": condition_view(status.get("conditions", [])),
    }


def job_keys(document: dict[str, Any]) -> dict[str, str]:
    """`job:<ns>/<job name>` (`jobset:` for a JobSet) -> `<ns>/<workload name>`, through
    ownerReferences."""
    keys = {}
    for wl in document["workloads"]:
        meta = wl["metadata"]
        for owner in meta.get("ownerReferences", []):
            if owner.get("kind") in ("Job", "JobSet"):
                keys[f"{owner['kind'].lower()}:{meta['namespace']}/{owner['name']}"] = (
                    f"{meta['namespace']}/{meta['name']}"
                )
    return keys


# --- comparison ----------------------------------------------------------------------------


def same(expected: Any, actual: Any) -> bool:
    if isinstance(actual, str) and not isinstance(expected, str) and expected is not None:
        if isinstance(expected, bool):
            expected = "True" if expected else "False"
        else:
            expected = str(expected)
    return bool(expected == actual)


def compare(expected: Any, actual: Any, path: str, problems: list[str]) -> None:
    """Every key of `expected` (recursively) must match `actual`; extra keys are ignored."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            compare(value, actual.get(key), f"{path}.{key}", problems)
    elif isinstance(expected, str | int | float | bool) and isinstance(actual, dict):
        compare({"status": expected}, actual, path, problems)  # a condition given by status
    elif not same(expected, actual):
        problems.append(f"{path}: expected {expected!r}, got {actual!r}")


def compare_fields(
    path: str,
    expected: dict[str, Any],
    view: dict[str, Any],
    known: set[str],
    problems: list[str],
) -> None:
    """Compare a workload's or pod's listed fields; `message_contains` checks parts."""
    unknown = set(expected) - known
    assert not unknown, f"{path}: unknown expect fields {sorted(unknown)}"
    for field, value in expected.items():
        if field == "message_contains":
            parts = [value] if isinstance(value, str) else value
            message = view["message"] or ""
            problems.extend(
                f"{path}.message: {message!r} lacks {part!r}"
                for part in parts
                if part not in message
            )
        else:
            compare(value, view[field], f"{path}.{field}", problems)


def compare_workload(
    key: str, expected: dict[str, Any], view: dict[str, Any] | None, problems: list[str]
) -> None:
    path = f"workloads[{key}]"
    if view is None:
        problems.append(f"{path}: no such workload")
        return
    compare_fields(path, expected, view, WORKLOAD_FIELDS, problems)


def compare_pods(expected: dict[str, Any], pods: list[dict[str, Any]], problems: list[str]) -> None:
    views = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": pod_view(p) for p in pods}
    for key, fields in expected.items():
        path, view = f"pods[{key}]", views.get(key)
        if fields is None:
            if view is not None:
                problems.append(f"{path}: expected no such pod, got {view}")
        elif view is None:
            problems.append(f"{path}: no such pod")
        else:
            compare_fields(path, fields, view, POD_FIELDS, problems)


def event_matches(pattern: dict[str, Any], event: dict[str, Any], jobs: dict[str, str]) -> bool:
    for field, value in pattern.items():
        if field in ("object", "by") and isinstance(value, str):
            value = jobs.get(value, value)
        if field == "time" and isinstance(event[field], int | float):
            if float(value) != float(event[field]):
                return False
        elif not same(value, event.get(field)):
            return False
    return True


def compare_events(
    expected: list[dict[str, Any]],
    events: list[dict[str, Any]],
    jobs: dict[str, str],
    problems: list[str],
) -> None:
    position = 0
    for index, pattern in enumerate(expected):
        found = next(
            (at for at in range(position, len(events)) if event_matches(pattern, events[at], jobs)),
            None,
        )
        if found is None:
            problems.append(f"events[{index}]: no match for {pattern} after event #{position}")
            return
        position = found + 1


def event_line(number: int, event: dict[str, Any]) -> str:
    by = f" by={event['by']}" if event["by"] else ""
    return (
        f"  #{number} t={event['time']} {event['type']} {event['object']} "
        f"[{event['reason']}] {event['message']!r}{by}"
    )


def check(document: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    unknown = set(expect) - TOP_FIELDS
    assert not unknown, f"unknown expect fields {sorted(unknown)}"
    problems: list[str] = []
    jobs = job_keys(document)
    views = {
        f"{wl['metadata']['namespace']}/{wl['metadata']['name']}": workload_view(wl)
        for wl in document["workloads"]
    }
    for key, fields in (expect.get("workloads") or {}).items():
        compare_workload(key, fields, views.get(jobs.get(key, key)), problems)
    compare_pods(expect.get("pods") or {}, document["pods"], problems)
    groups = {
        f"{g['metadata']['namespace']}/{g['metadata']['name']}": {
            "conditions": condition_view(g.get("status", {}).get("conditions", []))
        }
        for g in document.get("podGroups", [])
    }
    for key, fields in (expect.get("podGroups") or {}).items():
        if key not in groups:
            problems.append(f"podGroups[{key}]: no such group")
        else:
            compare(fields, groups[key], f"podGroups[{key}]", problems)
    events = document["events"]
    compare_events(expect.get("events") or [], events, jobs, problems)
    for pattern in expect.get("no_events") or []:
        problems.extend(
            f"no_events: {pattern} matches event #{n}"
            for n, event in enumerate(events)
            if event_matches(pattern, event, jobs)
        )
    for kind, name_of in (
        ("clusterQueues", lambda q: q["name"]),
        ("localQueues", lambda q: f"{q['namespace']}/{q['name']}"),
    ):
        queues = {name_of(q): queue_view(q) for q in document[kind]}
        for name, fields in (expect.get(kind) or {}).items():
            unknown = set(fields) - QUEUE_FIELDS
            assert not unknown, f"{kind}[{name}]: unknown expect fields {sorted(unknown)}"
            if name not in queues:
                problems.append(f"{kind}[{name}]: no such queue")
                continue
            compare(fields, queues[name], f"{kind}[{name}]", problems)
    return problems


def report(expect: dict[str, Any], document: dict[str, Any], problems: list[str]) -> str:
    lines = [f"about: {expect['about']}", "", "differences:"]
    lines += [f"  {problem}" for problem in problems]
    lines += ["", "workloads at the end:"]
    for wl in document["workloads"]:
        view = workload_view(wl)
        key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
        shown = {k: view[k] for k in ("admitted", "clusterQueue", "flavors", "count", "message")}
        lines.append(f"  {key}: {json.dumps(shown)}")
    if document["pods"]:
        lines += ["", "pods at the end:"]
        for pod in document["pods"]:
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            lines.append(f"  {key}: {json.dumps(pod_view(pod))}")
    lines += ["", "events:"]
    lines += [event_line(n, event) for n, event in enumerate(document["events"])]
    return "\n".join(lines)


@pytest.mark.parametrize(("scenario", "expect"), RUNNABLE)
def test_scenario(scenario: Path, expect: dict[str, Any]) -> None:
    document = simulate(scenario, expect)
    problems = check(document, expect)
    if problems:
        pytest.fail(report(expect, document, problems), pytrace=False)


@pytest.mark.parametrize(("scenario", "expect"), INVALID)
def test_invalid_scenario(scenario: Path, expect: dict[str, Any]) -> None:
    error = expect["error"]
    status, out, err = run_cli(["simulate", str(scenario), "-o", "json"])
    assert status == error["exit"], f"{expect['about']}\nexit {status}, stderr:\n{err}"
    assert out == "", f"{expect['about']}\nexpected nothing on stdout, got:\n{out}"
    for part in error.get("stderr_contains", []):
        assert part in err, f"{expect['about']}\nstderr lacks {part!r}:\n{err}"


@pytest.mark.parametrize(("v1beta1", "v1beta2"), VERSION_PAIRS)
def test_versions_decide_identically(v1beta1: Path, v1beta2: Path) -> None:
    old, new = (simulate(path, {}) for path in (v1beta1, v1beta2))
    assert old["events"] == new["events"]
    assert [wl["status"] for wl in old["workloads"]] == [wl["status"] for wl in new["workloads"]]
    assert old["clusterQueues"] == new["clusterQueues"]
    assert old["localQueues"] == new["localQueues"]
