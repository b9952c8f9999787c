"""Each service package runs as `python -m muster.<service>`, as `muster service <service>`
does: `python -m muster.gangpermit` exited 0 having done nothing (no `__main__` guard)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SERVICES = ("admission", "binder", "dashboard", "gangpermit", "gateway", "preemption", "watcher")


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_module_runs_its_own_command_line(service: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"muster.{service}", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: "), (done.stdout[:200], done.stderr[-2000:])
