"""Flags of `muster service binder` and `muster service gangpermit`: bad values are refused."""

from __future__ import annotations

import functools

import pytest

from muster.binder.__main__ import main as binder_main
from muster.binder.__main__ import parse
from muster.gangpermit.__main__ import main as gangpermit_main
from muster.watcher.__main__ import main as watcher_main


@pytest.mark.parametrize(
    ("main", "argv", "message"),
    [
        (binder_main, ["--max-concurrent-binds", "0"], "--max-concurrent-binds must be >= 1"),
        (binder_main, ["--binds-per-second", "-1"], "--binds-per-second must be >= 0"),
        (binder_main, ["--ended-kept-seconds", "0"], "--ended-kept-seconds: ended submissions"),
        (gangpermit_main, ["--ended-kept-seconds", "-1"], "kept a finite number > 0 of seconds"),
        (binder_main, ["--ended-kept-seconds", "inf"], "kept a finite number > 0 of seconds"),
        (binder_main, ["--bound-events", "none"], "--bound-events must be all or binds"),
        (gangpermit_main, ["--gang-timeout-seconds", "0"], "gang timeout"),
        (gangpermit_main, ["--scoring", "random"], "--scoring must be one of binpack, spread"),
        (gangpermit_main, ["--placement-preemption", "maybe"], "--placement-preemption"),
        (gangpermit_main, ["--scheduler-name", ""], "scheduler name must not be empty"),
        (watcher_main, ["--cluster", "a.b"], "cluster id"),
    ],
    ids=[
        "concurrent-binds",
        "binds-per-second",
        "binder-ended-kept",
        "gangpermit-ended-kept",
        "binder-ended-kept-forever",
        "bound-events",
        "gang-timeout",
        "scoring",
        "placement-preemption",
        "scheduler-name",
        "cluster",
    ],
)
def test_bad_flag_values_exit_2_with_a_message(
    main: object, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(main)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("main", [binder_main, gangpermit_main, watcher_main])
def test_help_lists_the_common_flags(main: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(main)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--nats URL" in capsys.readouterr().out


def test_the_binders_ended_kept_seconds_reaches_its_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its effect: test_binder_ended.py (the kept time in `WorkloadSpecs`)."""

    def kept_s(argv: list[str]) -> float:
        _, serve = parse(argv)
        assert isinstance(serve, functools.partial)
        return float(serve.keywords["config"].ended_kept_s)

    assert (kept_s([]), kept_s(["--ended-kept-seconds", "30"])) == (900.0, 30.0)
    monkeypatch.setenv("MUSTER_ENDED_KEPT_SECONDS", "45")
    assert kept_s([]) == 45.0


def test_the_binders_bound_events_reach_its_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its effect: test_binder_created_on_nodes.py, tests/services/test_bound_only_for_binds.py."""

    def for_created(argv: list[str]) -> bool:
        _, serve = parse(argv)
        assert isinstance(serve, functools.partial)
        return bool(serve.keywords["config"].bound_for_created)

    assert (for_created([]), for_created(["--bound-events", "binds"])) == (True, False)
    monkeypatch.setenv("MUSTER_BINDER_BOUND_EVENTS", "binds")
    assert for_created([]) is False
