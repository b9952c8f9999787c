"""The routing-policy registry: every `Policy`, with the rule that decides for it.

Adding a policy is a module holding its rule (as `threshold` and `fastest` do), a `Policy`
member with its Routed reason (`model.REASONS`, and the name in `api.wellknown`), and one
line in `RULES`. A policy missing here is refused when a workload would be routed by it
(and by tests/unit/core/test_routing_policies.py), never run as another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from muster.core.routing import fastest, threshold
from muster.core.routing.model import Ask, Candidate, Choice, Policy, RoutingSettings

# A policy's rule: the option to take among `candidates` (index 0 the declared queue).
Decide = Callable[[Sequence[Candidate], Ask, RoutingSettings], Choice]


class Rule(NamedTuple):
    decide: Decide
    once: bool  # decides once, when the workload arrives; else again while it is pending


RULES: Mapping[Policy, Rule | None] = {
    Policy.STATIC: None,  # never routes: the workload stays on its declared queue
    Policy.THRESHOLD: Rule(threshold.rule, once=True),
    Policy.FASTEST: Rule(fastest.rule, once=False),
}


class UnregisteredPolicyError(LookupError):
    """A `Policy` with no entry in `RULES`: a bug in muster, not in the user's objects."""


def rule_of(policy: Policy) -> Rule | None:
    """The rule deciding for `policy`, or None when it does not route (static)."""
    try:
        return RULES[policy]
    except KeyError:
        message = f"routing policy {policy.value} has no rule in RULES"
        raise UnregisteredPolicyError(message) from None
