"""A workload's podsets read once per template (`PodSetsByTemplate`): every manifest, read after
any others that share its templates, decodes as `manifest_workload` reads it alone, or fails
with the same error; a template is read again only when it must be."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster import payloads
from muster.api.convert import pod_set_of
from muster.api.errors import ObjectErrors
from muster.api.model import PodSet, Workload
from muster.api.raw import RawPodSet
from muster.payloads import (
    PayloadError,
    PodSetsByTemplate,
    manifest_workload,
    written_workload,
)

# Quantities and keys a user may write, a few of them wrong (each must be refused by name).
QUANTITIES = st.sampled_from(["100m", "1", "2Gi", "64Mi", "0.5", 3, "-1", "x", "1e3"])
RESOURCES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "example.com/Bad Name"])
LABELS = st.dictionaries(
    st.sampled_from(["app", "tier", "Bad Key!", "kubernetes.io/arch"]),
    st.sampled_from(["a", "amd64", "x" * 70]),
    max_size=2,
)


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": draw(st.dictionaries(RESOURCES, QUANTITIES, max_size=3))
    }
    if draw(st.booleans()):
        resources["limits"] = draw(st.dictionaries(RESOURCES, QUANTITIES, max_size=2))
    container: dict[str, Any] = {"name": draw(st.sampled_from(["c", "d"])), "resources": resources}
    if draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def templates(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), min_size=1, max_size=2))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers(), max_size=2))
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(LABELS)
    if draw(st.booleans()):
        spec["tolerations"] = [
            {"key": draw(st.sampled_from(["gpu", "spot"])), "operator": "Exists"}
        ]
    if draw(st.booleans()):
        spec["overhead"] = {"cpu": draw(QUANTITIES)}
    template: dict[str, Any] = {"spec": spec}
    if draw(st.booleans()):
        template["metadata"] = {"labels": draw(LABELS), "annotations": {"note": "n"}}
    return template


@st.composite
def manifests(draw: st.DrawFn, pool: list[dict[str, Any]]) -> str:
    """A Workload whose podsets take their templates from `pool` (so that manifests share them),
    with names and counts of their own."""
    names = draw(st.lists(st.sampled_from(["main", "w", "Not A Label"]), min_size=1, max_size=3))
    pod_sets: list[dict[str, Any]] = []
    for name in names:
        pod_set: dict[str, Any] = {
            "name": name,
            "count": draw(st.integers(0, 4)),
            "template": draw(st.sampled_from(pool)),
        }
        if draw(st.booleans()):
            pod_set["minCount"] = draw(st.integers(0, 4))
        pod_sets.append(pod_set)
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"namespace": "ml", "name": draw(st.sampled_from(["a", "b"])), "uid": "u"},
        "spec": {"queueName": "q", "podSets": pod_sets},
    }
    # Key orders and spacing as any writer might: the same template may be spelled two ways.
    return json.dumps(doc, sort_keys=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))


def read(text: str, pod_sets: PodSetsByTemplate) -> Workload | str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(payloads, "_POD_SETS", pod_sets)
        try:
            return written_workload(text, what="ml/w")
        except PayloadError as err:
            return str(err)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pool=st.lists(templates(), min_size=1, max_size=3))
def test_a_manifest_read_after_others_sharing_its_templates_reads_as_alone(
    data: st.DataObject, pool: list[dict[str, Any]]
) -> None:
    kept = PodSetsByTemplate()
    for text in data.draw(st.lists(manifests(pool), min_size=1, max_size=6)):
        got = read(text, kept)
        assert got == read(text, PodSetsByTemplate(max_bytes=0))  # each template read anew
        # One `manifest_workload` refuses is never admitted: `written_workload` need not refuse it.
        with contextlib.suppress(PayloadError):
            assert got == manifest_workload(text, what="ml/w")


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []

    def counted(raw: RawPodSet, errs: ObjectErrors, *, index: int) -> PodSet:
        reads.append(index)
        return pod_set_of(raw, errs, index=index)

    monkeypatch.setattr("muster.payloads.pod_set_of", counted)
    return reads


TEMPLATE = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}


def workload(name: str, template: dict[str, Any], *, count: int = 1) -> str:
    pod_set = {"name": "main", "count": count, "template": template}
    return json.dumps(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"namespace": "ml", "name": name},
            "spec": {"queueName": "q", "podSets": [pod_set]},
        }
    )


def test_a_template_is_read_once_for_every_workload_that_shares_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(payloads, "_POD_SETS", PodSetsByTemplate())
    reads = count_reads(monkeypatch)
    first = written_workload(workload("a", TEMPLATE), what="ml/a")
    second = written_workload(workload("b", TEMPLATE, count=3), what="ml/b")
    assert len(reads) == 1
    assert (first.pod_sets[0].count, second.pod_sets[0].count) == (1, 3)
    assert second.pod_sets[0].requests == {"cpu": 100}


def test_a_template_with_a_problem_is_refused_by_name_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(payloads, "_POD_SETS", PodSetsByTemplate())
    bad = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "x"}}}]}}
    for name in ("a", "b"):
        with pytest.raises(PayloadError, match=r"spec\.podSets\[0\]\.template.*cpu"):
            written_workload(workload(name, bad), what=f"ml/{name}")


def test_the_oldest_template_makes_room_and_large_ones_are_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(payloads, "_POD_SETS", PodSetsByTemplate(entries=2, max_bytes=200))
    reads = count_reads(monkeypatch)
    kinds = [{**TEMPLATE, "metadata": {"labels": {"k": str(i)}}} for i in range(3)]
    for template in [*kinds, kinds[2], kinds[0]]:  # the first was made room for
        written_workload(workload("a", template), what="ml/a")
    assert len(reads) == 4
    large = {**TEMPLATE, "metadata": {"annotations": {"note": "x" * 300}}}
    for _ in range(2):
        written_workload(workload("a", large), what="ml/a")
    assert len(reads) == 6
