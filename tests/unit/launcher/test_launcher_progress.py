"""A start's progress: services coming up or the still-starting ones using CPU keep it going;
next to no CPU and none up for `stall_s` ends it."""

from __future__ import annotations

from muster.launcher.progress import Progress


def test_imports_that_crawl_at_load_keep_a_start_going_past_any_fixed_bound() -> None:
    progress = Progress(stall_s=30.0, moving_cpu_s=0.2)
    # 15 services, none up for 90 s, using 0.3 s of CPU between them every 10 s.
    readings = [progress.still_moving(up=0, cpu_s=0.03 * t, now_s=t) for t in range(0, 91)]

    assert all(readings)


def test_a_service_coming_up_is_progress_though_the_rest_used_no_cpu() -> None:
    progress = Progress(stall_s=30.0)
    assert progress.still_moving(up=0, cpu_s=5.0, now_s=0.0)
    assert progress.still_moving(up=1, cpu_s=1.0, now_s=29.0)  # one up: the rest's CPU is less

    assert progress.still_moving(up=1, cpu_s=1.0, now_s=58.0)
    assert not progress.still_moving(up=1, cpu_s=1.0, now_s=59.0)


def test_a_stuck_service_that_polls_stalls_the_start() -> None:
    progress = Progress(stall_s=30.0, moving_cpu_s=0.2)
    # A few ms of CPU a second: a wait that never ends, polled.
    readings = [progress.still_moving(up=3, cpu_s=2.0 + 0.005 * t, now_s=t) for t in range(0, 31)]

    assert all(readings[:30])
    assert readings[30] is False
