"""A workload's podsets read once per template (`PodSetsByTemplate`): every manifest, read after
any others that share its templates, decodes as `manifest_workload` reads it alone, or fails
with the same error; a template is read again only when it must be. Admission's reading of a
`submitted` (`fact_of`, through `decode_manifest`, which checks everything) likewise."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster import payloads
from muster.admission.fact_reader import fact_of
from muster.admission.facts import Fact, FactError, Submit
from muster.api.convert import pod_set_of
from muster.api.errors import ObjectErrors
from muster.api.model import PodSet, Workload
from muster.api.raw import RawPodSet, RawWorkload
from muster.contracts.v1 import events_pb2 as pb
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


class ReadAlone(PodSetsByTemplate):
    """No podset given: `workload_from_raw` reads each itself, as before templates were kept."""

    def of(self, text: str, raw: RawWorkload, errs: ObjectErrors) -> tuple[PodSet, ...] | None:
        return None


def admitted_fact(text: str, pod_sets: PodSetsByTemplate) -> Fact | str | None:
    """What admission reads of `text` submitted under its own name (its Submit, or the error)."""
    env = pb.Envelope(workload=f"ml/{json.loads(text)['metadata']['name']}", cluster="c")
    env.submitted.manifest_json = text
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(payloads, "_POD_SETS", pod_sets)
        try:
            return fact_of(env)
        except FactError as err:
            return str(err)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pool=st.lists(templates(), min_size=1, max_size=3))
def test_admission_reads_a_submitted_after_others_sharing_its_templates_as_alone(
    data: st.DataObject, pool: list[dict[str, Any]]
) -> None:
    kept = PodSetsByTemplate()
    for text in data.draw(st.lists(manifests(pool), min_size=1, max_size=6)):
        # Every fact, and every error's words (object, field, order), as if each template was
        # read anew; a manifest a template's problem refuses is refused so every time.
        assert admitted_fact(text, kept) == admitted_fact(text, ReadAlone())


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


def submits(facts: list[Fact | str | None]) -> list[Submit]:
    return [f for f in facts if isinstance(f, Submit)]


def test_admission_reads_a_template_once_and_names_each_problem_as_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = PodSetsByTemplate()
    reads = count_reads(monkeypatch)
    facts = [admitted_fact(workload(name, TEMPLATE), kept) for name in ("a", "b", "c")]
    assert len(reads) == 1
    assert [(f.workload.key, f.workload.pod_sets[0].requests) for f in submits(facts)] == [
        ("ml/a", {"cpu": 100}),
        ("ml/b", {"cpu": 100}),
        ("ml/c", {"cpu": 100}),
    ]
    # A bad queue name is named before the podsets' problems, as when the template is read anew.
    bad = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "x"}}}]}}
    text = workload("d", bad).replace('"queueName": "q"', '"queueName": "Q!"')
    refused = admitted_fact(text, kept)
    assert refused == admitted_fact(text, ReadAlone())
    assert isinstance(refused, str)
    assert refused.index("spec.queueName") < refused.index("spec.podSets[0].template")
    # A kept template's podset under another workload's bad queue name: refused by that name.
    shared = admitted_fact(workload("e", TEMPLATE).replace('"q"', '"Q!"'), kept)
    assert isinstance(shared, str)
    assert "spec.queueName" in shared
    # The bad template was tried (by the typed pass, then by the dict's reading, which names
    # the problem) and not kept; the good one was read once.
    assert len(reads) == 3


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
