"""`muster status`'s RESTARTS and LAST EXIT columns, as `kubectl get pods` shows them."""

from __future__ import annotations

import pytest

from muster.cli.up import restarts_and_last_exit
from muster.launcher.upstate import Process

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("restarts", "status", "ago_s", "expected"),
    [
        (0, None, None, ("0", "-")),  # never exited
        (1, -9, 12, ("1 (12s ago)", "-9 (SIGKILL)")),
        (2, 1, 185, ("2 (3m5s ago)", "1 (Error)")),
        (3, 0, 7200, ("3 (2h ago)", "0 (Completed)")),
        (4, -15, 90000, ("4 (1d1h ago)", "-15 (SIGTERM)")),
        (5, -200, 30, ("5 (30s ago)", "-200 (signal 200)")),
        (0, None, 2, ("0 (2s ago)", "? (did not start)")),
    ],
)
def test_restarts_and_the_last_exit(
    restarts: int, status: int | None, ago_s: float | None, expected: tuple[str, str]
) -> None:
    p = Process(name="admission-0", pid=1, started=1, restarts=restarts, last_exit=status)
    if ago_s is not None:
        p.last_exit_at = NOW - ago_s
    assert restarts_and_last_exit(p, NOW) == expected
