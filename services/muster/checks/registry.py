"""The admission check controllers muster runs, by the name the watcher's
`--check-controllers` flag takes. A new controller is one module and one entry here: the
watcher then runs it on Kubernetes and `muster simulate` on its virtual clock (`muster.sim.checks`).

MultiKueue's check is the one muster answers elsewhere: admission dispatches
(`muster.core.dispatcher`), and so does the simulator's Fleet."""

from __future__ import annotations

from collections.abc import Callable

from muster.api.convert import KUEUE_V1BETA1, KUEUE_V1BETA2
from muster.api.wellknown import MULTIKUEUE_CONTROLLER
from muster.checks.framework import CheckController
from muster.checks.provisioning import ProvisioningController

# name → how to make it for a kueue.x-k8s.io version
CONTROLLERS: dict[str, Callable[[str], CheckController]] = {
    "provisioning-request": lambda version: ProvisioningController(kueue_version=version),
}
NONE = "none"
# controllerName → what answers its checks instead of a controller here.
ANSWERED_ELSEWHERE = {MULTIKUEUE_CONTROLLER: "MultiKueue dispatch (muster.core.dispatcher)"}


def controller_names(text: str) -> tuple[str, ...]:
    """The names in a comma-separated `--check-controllers` value ("none": no controller);
    ValueError naming the flag and the names it knows for an unknown one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == (NONE,):
        return ()
    unknown = [n for n in names if n not in CONTROLLERS]
    if unknown or not names:
        known = ", ".join([*CONTROLLERS, NONE])
        shown = ", ".join(unknown) or repr(text)
        raise ValueError(f"--check-controllers: unknown controller {shown}; one of {known}")
    return names


def make(names: tuple[str, ...], *, kueue_version: str) -> list[CheckController]:
    return [CONTROLLERS[name](kueue_version) for name in names]


def by_controller_name(*, kueue_version: str = "v1beta2") -> dict[str, CheckController]:
    """Every registered controller, by the `spec.controllerName` its AdmissionChecks carry."""
    controllers = make(tuple(CONTROLLERS), kueue_version=kueue_version)
    return {c.controller_name: c for c in controllers}


def config_kinds() -> frozenset[tuple[str, str]]:
    """(apiVersion, kind) of every registered controller's configuration object, in each
    Kueue version muster reads: what `muster simulate` keeps as written for the controllers."""
    return frozenset(
        (c.config.api_version, c.config.kind)
        for api_version in (KUEUE_V1BETA1, KUEUE_V1BETA2)
        for c in by_controller_name(kueue_version=api_version.partition("/")[2]).values()
    )
