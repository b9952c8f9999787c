"""`muster service preemption` flags and their environment variables."""

from __future__ import annotations

import pytest

from muster.preemption.__main__ import configs


def test_evict_grace_and_max_attempts() -> None:
    service, config = configs(
        ["--evict-grace-seconds", "5", "--max-attempts", "3", "--grace-seconds", "7"]
    )
    assert (config.resend_s, config.max_attempts) == (5.0, 3)
    assert service.grace_s == 7.0  # the common flag keeps its meaning: shutdown grace


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    _, config = configs([])
    assert (config.resend_s, config.max_attempts) == (30.0, 10)
    monkeypatch.setenv("MUSTER_EVICT_GRACE_SECONDS", "12")
    monkeypatch.setenv("MUSTER_EVICT_MAX_ATTEMPTS", "4")
    _, config = configs([])
    assert (config.resend_s, config.max_attempts) == (12.0, 4)


@pytest.mark.parametrize("argv", [["--evict-grace-seconds", "0"], ["--max-attempts", "0"]])
def test_bad_settings_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        configs(argv)
    assert exit_.value.code == 2
