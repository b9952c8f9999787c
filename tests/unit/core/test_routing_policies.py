"""The routing-policy registry: every policy has a rule, and one without is refused.

Adding a policy is a module with its rule plus one line in `policies.RULES`; forgetting the
line must fail here, and a workload routed by such a policy must never run under another's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.api.model import WorkloadKey
from muster.core.engine import Engine
from muster.core.events import EventType
from muster.core.routing import policies
from muster.core.routing.model import REASONS, Policy, RoutingSettings
from muster.sim.scenario import load_scenario

SCENARIO = Path(__file__).parents[2] / "scenarios/routing/fastest-moves-when-gpu-queue-grows.yaml"


def test_every_policy_is_registered_with_a_rule_and_a_reason() -> None:
    assert set(policies.RULES) == set(Policy)
    assert set(REASONS) == set(Policy)
    assert policies.rule_of(Policy.STATIC) is None  # the one policy that never routes
    for policy in Policy:
        rule = policies.rule_of(policy)
        assert policy is Policy.STATIC or rule is not None


def _submit_light(engine: Engine) -> list[EventType]:
    scenario = load_scenario([SCENARIO])
    for arrival in scenario.arrivals:
        if arrival.workload.key == WorkloadKey("ml/light"):
            engine.submit(arrival.workload, now_s=1.0)
    return [e.type for e in engine.schedule(now_s=1.0)]


def _engine() -> Engine:
    scenario = load_scenario([SCENARIO])
    return Engine(scenario.objects, config=scenario.config, routing=RoutingSettings())


def test_a_workload_of_a_registered_policy_is_routed_by_its_rule() -> None:
    assert EventType.ROUTED in _submit_light(_engine())


def test_a_policy_missing_from_the_registry_is_refused_not_run_as_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without = {p: rule for p, rule in policies.RULES.items() if p is not Policy.FASTEST}
    monkeypatch.setattr(policies, "RULES", without)
    engine = _engine()
    with pytest.raises(policies.UnregisteredPolicyError, match="routing policy fastest"):
        _submit_light(engine)
