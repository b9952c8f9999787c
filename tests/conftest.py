"""Hypothesis profiles: "ci" (CI set) is derandomized and bounded, "dev" explores, "deep" hunts.

Pick one explicitly with HYPOTHESIS_PROFILE=<name>.
"""

from __future__ import annotations

import os

import budget
import pytest
from hypothesis import settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=250, database=None, print_blob=True
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.register_profile("deep", deadline=None, max_examples=3000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


@pytest.fixture(autouse=True)
def _wait_budget(request: pytest.FixtureRequest) -> None:
    """Start the clock waits in the test are bounded by (`tests/budget.py`)."""
    marker = request.node.get_closest_marker("timeout")
    timeout = marker.args[0] if marker and marker.args else marker and marker.kwargs.get("timeout")
    if timeout is None:
        timeout = request.config.getoption("timeout", None) or request.config.getini("timeout")
    budget.start(float(timeout or 0))
