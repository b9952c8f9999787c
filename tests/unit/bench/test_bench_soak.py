"""`muster bench soak`'s judgement of the maps it counted, and the census each process takes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from muster.bench import census
from muster.bench.soak import SoakRow, grew, judged, not_valid
from muster.core.submissions import EndedSubmissions

PER_WAVE = 2_500


@pytest.mark.parametrize(
    ("sizes", "growing"),
    [
        ([2_500, 5_000, 7_500, 10_000], True),  # one entry per workload
        ([0, 278, 392, 536, 631], True),  # a few per wave, for good
        ([2_553, 990, 3_490, 1_927], False),  # a cache emptied when full
        ([1_954, 1_834, 1_714, 1_594], False),  # shrinking
        ([100, 2_600, 2_600, 2_600], False),  # filled by the first wave, then steady
        ([2_500, 5_000, 7_500, 7_500], False),  # held in the last wave: at its cap
        ([2_500, 5_000, 7_500], False),  # too few waves to judge
    ],
)
def test_a_map_grows_when_every_wave_after_the_first_adds_to_it(
    sizes: list[int], growing: bool
) -> None:
    assert grew(sizes, per_wave=PER_WAVE) is growing


def test_a_growing_map_with_a_cap_is_bounded_and_one_without_is_named() -> None:
    ended = "muster.core.submissions.EndedSubmissions._ended"
    history = {
        ended: [2_500, 5_000, 7_500, 10_000],
        "muster.gateway.example.Kept.forever": [2_500, 5_000, 7_500, 10_000],
        "muster.gateway.example.Kept.steady": [40, 40, 40, 40],
    }
    growing, capped = judged(history, per_wave=PER_WAVE)

    assert growing == ["muster.gateway.example.Kept.forever 2500 -> 10000"]
    assert capped == [f"{ended} 2500 -> 10000 (cap 900 s of ends)"]


def row(**fields: object) -> SoakRow:
    base: dict[str, object] = {
        "wave": 4, "workloads": 10_000, "per_wave": PER_WAVE, "process": "gateway",
        "rss_mb": 100.0, "maps": {}, "wave_s": 40.0, "load": 30.0,
    }  # fmt: skip
    return SoakRow(**(base | fields))  # type: ignore[arg-type]


def test_a_row_is_not_valid_naming_the_process_and_the_growing_map_or_its_silence() -> None:
    assert not_valid(row(capped=["x 1 -> 4 (cap 9)"])) is None
    assert not_valid(row(growing=["muster.a.B.c 2500 -> 10000"])) == (
        "gateway: grew with every wave: muster.a.B.c 2500 -> 10000"
    )
    assert not_valid(row(answered=False, process="binder")) == (
        "wave 4: binder wrote no census (ended?)"
    )


def test_the_census_counts_a_muster_objects_large_maps_by_class_and_attribute() -> None:
    submissions = EndedSubmissions()
    for i in range(300):
        submissions.submitted(f"ns/w-{i}", f"id-{i}")
        submissions.ended(f"ns/w-{i}")

    found = census.containers(min_size=300)

    assert found["muster.core.submissions.EndedSubmissions._ended"] >= 300
    assert "muster.core.submissions.EndedSubmissions._open" not in found  # emptied: below


def test_an_installed_census_answers_the_signal_with_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(census.CENSUS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(census.MIN_SIZE_ENV, "1000000")
    before = signal.getsignal(census.SIGNAL)
    try:
        census.install()
        os.kill(os.getpid(), census.SIGNAL)  # handled before the next line runs
        answer = json.loads((tmp_path / f"{os.getpid()}-1.json").read_text())
    finally:
        signal.signal(census.SIGNAL, before)

    assert answer["pid"] == os.getpid()
    assert answer["rss_kb"] > 0
    assert answer["maps"] == {}  # none this large


def test_without_its_directory_the_census_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(census.CENSUS_DIR_ENV, raising=False)
    before = signal.getsignal(census.SIGNAL)
    census.install()
    assert signal.getsignal(census.SIGNAL) is before
