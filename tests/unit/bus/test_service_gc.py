"""A service's collector settings (muster.bus.service.tune_gc): what start-up built is frozen and
young objects are collected less often than CPython's default."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from muster.bus import service
from muster.bus.service import GC_YOUNG_THRESHOLD, add_common_flags, config_from_args


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """The test process's collector as it was, whatever the test did to it."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _run_nothing(coro: Coroutine[Any, Any, int]) -> int:
    coro.close()  # the service itself is not what this test runs
    return 0


@pytest.mark.usefixtures("restored_gc")
def test_a_service_freezes_what_start_up_built_and_collects_young_objects_less_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)  # CPython's default
    monkeypatch.setattr(service, "run_loop", _run_nothing)
    monkeypatch.setattr(service, "setup_logging", lambda name, level: None)
    monkeypatch.setattr(service, "setup_tracing", lambda name: None)
    parser = argparse.ArgumentParser()
    add_common_flags(parser)
    config = config_from_args(parser.parse_args([]), "tiny")

    async def main(bus: object, health: object) -> None:
        raise AssertionError("not run")

    assert service.run_service(config, main) == 0

    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
