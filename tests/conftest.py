"""Hypothesis profiles: "ci" (CI set) is derandomized and bounded, "dev" explores, "deep" hunts.

Pick one explicitly with HYPOTHESIS_PROFILE=<name>.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=250, database=None, print_blob=True
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.register_profile("deep", deadline=None, max_examples=3000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)
