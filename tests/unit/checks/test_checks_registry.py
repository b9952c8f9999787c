"""The home of admission check controllers (`muster.checks.registry`): every check kind muster
names has a controller, and the simulator runs each registered one."""

from __future__ import annotations

from muster.api import wellknown
from muster.api.model import AdmissionCheck, ObjectMeta
from muster.checks.registry import ANSWERED_ELSEWHERE, by_controller_name, config_kinds
from muster.sim.checks import CheckModels
from muster.sim.scenario import build_scenario
from muster.sim.timeline import Action


def known_controller_names() -> set[str]:
    """Every `*_CONTROLLER` controllerName in muster.api.wellknown: the check kinds muster
    answers."""
    return {
        value
        for name, value in vars(wellknown).items()
        if name.endswith("_CONTROLLER") and isinstance(value, str)
    }


def test_every_check_kind_muster_names_has_a_controller() -> None:
    answered = {*by_controller_name(), *ANSWERED_ELSEWHERE}
    assert known_controller_names() - answered == set()
    assert wellknown.PROVISIONING_CONTROLLER in by_controller_name()


def test_the_simulator_keeps_every_registered_controllers_configuration_as_written() -> None:
    kinds = config_kinds()
    for controller in by_controller_name().values():
        for version in ("v1beta1", "v1beta2"):
            assert (f"{controller.config.group}/{version}", controller.config.kind) in kinds


class NoTimeline:
    def push(self, at_s: float, action: Action) -> None:
        raise AssertionError(f"nothing is reserved, yet {action} was scheduled at {at_s}")


def test_the_simulator_runs_every_registered_controller_instead_of_a_script() -> None:
    checks = [
        AdmissionCheck(meta=ObjectMeta(name=f"check-{i}"), controller_name=name)
        for i, name in enumerate(sorted(by_controller_name()))
    ]
    scripted = AdmissionCheck(meta=ObjectMeta(name="scripted"), controller_name="example.com/x")
    models = CheckModels(NoTimeline(), build_scenario([*checks, scripted]))
    assert all(models.runs(check.meta.name) for check in checks)
    assert not models.runs("scripted")
