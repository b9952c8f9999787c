"""What Kueue's ProvisioningRequest admission check writes, as the API server takes it:
core/v1 PodTemplates (kube-apiserver's validation, as far as the template's containers go)
and the cluster-autoscaler's `autoscaling.x-k8s.io/v1` ProvisioningRequest (its CRD's
schema rules: one to 32 podSets, each naming a PodTemplate and a count of at least 1, a
provisioningClassName, at most 100 parameters of at most 255 characters, an immutable spec).
Kueue's ProvisioningRequestConfig is one of the Kueue kinds (`resources.kueue_resources`).
"""

from __future__ import annotations

import re

from muster.devtools.apiserver.errors import Cause, bad_value, immutable, required
from muster.devtools.apiserver.objects import JsonObj
from muster.devtools.apiserver.strategy_base import Strategy

GROUP = "autoscaling.x-k8s.io"
MAX_POD_SETS = 32
MAX_PARAMETERS = 100
PARAMETER_LIMIT = 255
_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class PodTemplateStrategy(Strategy):
    def causes(self, obj: JsonObj) -> list[Cause]:
        template = obj.get("template")
        spec = template.get("spec") if isinstance(template, dict) else None
        containers = spec.get("containers") if isinstance(spec, dict) else None
        if not isinstance(containers, list) or not containers:
            return [required("template.spec.containers")]
        causes = []
        for i, container in enumerate(containers):
            at = f"template.spec.containers[{i}]"
            if not isinstance(container, dict) or not container.get("name"):
                causes.append(required(f"{at}.name"))
            if not isinstance(container, dict) or not container.get("image"):
                causes.append(required(f"{at}.image"))
        return causes


def _pod_set_causes(pod_sets: object) -> list[Cause]:
    if not isinstance(pod_sets, list) or not pod_sets:
        return [required("spec.podSets")]
    if len(pod_sets) > MAX_POD_SETS:
        return [bad_value("spec.podSets", len(pod_sets), f"must have at most {MAX_POD_SETS} items")]
    causes = []
    for i, pod_set in enumerate(pod_sets):
        at = f"spec.podSets[{i}]"
        ref = pod_set.get("podTemplateRef") if isinstance(pod_set, dict) else None
        if not isinstance(ref, dict) or not ref.get("name"):
            causes.append(required(f"{at}.podTemplateRef.name"))
        count = pod_set.get("count") if isinstance(pod_set, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            causes.append(bad_value(f"{at}.count", count, "should be greater than or equal to 1"))
    return causes


class ProvisioningRequestStrategy(Strategy):
    def causes(self, obj: JsonObj) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required("spec")]
        causes = _pod_set_causes(spec.get("podSets"))
        name = spec.get("provisioningClassName")
        if not isinstance(name, str) or not name:
            causes.append(required("spec.provisioningClassName"))
        elif len(name) > 253 or not _CLASS_NAME.fullmatch(name):
            causes.append(bad_value("spec.provisioningClassName", name, "not a DNS subdomain"))
        parameters = spec.get("parameters") or {}
        if not isinstance(parameters, dict) or len(parameters) > MAX_PARAMETERS:
            causes.append(bad_value("spec.parameters", "", f"at most {MAX_PARAMETERS} entries"))
        else:
            for key, value in parameters.items():
                if not isinstance(value, str) or len(value) > PARAMETER_LIMIT:
                    causes.append(
                        bad_value(
                            f"spec.parameters.{key}", value, f"at most {PARAMETER_LIMIT} characters"
                        )
                    )
        return causes

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        if new.get("spec") != old.get("spec"):
            return [immutable("spec", "object")]
        return []


PROVISIONING_STRATEGIES: dict[tuple[str, str], Strategy] = {
    ("", "podtemplates"): PodTemplateStrategy(),
    (GROUP, "provisioningrequests"): ProvisioningRequestStrategy(),
}
