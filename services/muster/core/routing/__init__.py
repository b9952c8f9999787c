"""Routing: which of its declared queue and alternatives a workload runs through (issue 6).

`model` holds the policies and decisions, `options` a workload's options, `threshold` and
`fastest` the two policies' rules, `policies` the registry from each policy to its rule,
`loads` the engine state they read, `router` the per-engine state the engine consults and
`control` what the engine asks of routing and carries out.
docs/routing.md explains the policies.
"""

from muster.core.routing.model import (
    POLICIES,
    Choice,
    Hysteresis,
    Policy,
    Route,
    RoutingSettings,
    ThresholdRule,
)
from muster.core.routing.options import options_of, run_seconds_on
from muster.core.routing.router import Router

__all__ = [
    "POLICIES",
    "Choice",
    "Hysteresis",
    "Policy",
    "Route",
    "Router",
    "RoutingSettings",
    "ThresholdRule",
    "options_of",
    "run_seconds_on",
]
