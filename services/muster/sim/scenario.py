"""A scenario: the configuration objects, the Kueue Configuration and the workloads to replay.

`load_scenario` reads YAML files through `muster.api`; `build_scenario` takes objects already
decoded (the benchmark builds tens of thousands of workloads in code). Both collect every
problem as a `FieldError` and raise `InvalidScenarioError` with all of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from muster.api.decode import decode_files, decode_yaml, kueue_config_from_file
from muster.api.errors import FieldError
from muster.api.model import (
    AdmissionCheck,
    ApiObject,
    ClusterQueue,
    ConfigObject,
    KueueConfig,
    Workload,
)
from muster.sim.annotations import (
    CHECK_RESULT,
    AnnotationError,
    CheckScript,
    WorkloadScript,
    annotation_path,
    parse_check_script,
    parse_workload_script,
)


class Arrival(msgspec.Struct, frozen=True, kw_only=True):
    """One workload and when it arrives; `rank` is its place in the order of arrival."""

    at_s: float
    rank: int
    workload: Workload
    script: WorkloadScript


class Scenario(msgspec.Struct, frozen=True, kw_only=True):
    config: KueueConfig | None
    objects: tuple[ConfigObject, ...]  # what Engine(...) is built from
    arrivals: tuple[Arrival, ...]  # sorted by (at_s, rank)
    check_results: Mapping[str, CheckScript]  # AdmissionCheck name -> default script

    @property
    def cluster_queues(self) -> tuple[ClusterQueue, ...]:
        return tuple(obj for obj in self.objects if isinstance(obj, ClusterQueue))


class InvalidScenarioError(Exception):
    """The scenario cannot run; `errors` holds one `FieldError` per problem, in input order."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = tuple(errors)


class ScenarioFileError(Exception):
    """A scenario or config file cannot be read; str() names the file and the reason."""


def load_scenario(
    paths: Sequence[str | Path], *, config_path: str | Path | None = None
) -> Scenario:
    """Decode the scenario files (and the `--config` file), then build the scenario.

    A Configuration from `config_path` replaces one found among `paths`.
    """
    objects = decode_checked(paths)
    config = None
    if config_path is not None:
        config = config_from_file(config_path)
    return build_scenario(objects, config=config)


def load_scenario_text(text: str, *, source: str) -> Scenario:
    """Decode one multi-document YAML string (the built-in demo) and build the scenario."""
    objects, errors = decode_yaml(text, source=source)
    if errors:
        raise InvalidScenarioError(errors)
    return build_scenario(list(objects))


def decode_checked(paths: Sequence[str | Path]) -> list[ApiObject]:
    """Decode files with `muster.api`, raising `ScenarioFileError` or `InvalidScenarioError`."""
    for path in paths:
        if not Path(path).is_file():
            raise ScenarioFileError(f"{path}: no such file")
    try:
        objects, errors = decode_files([Path(path) for path in paths])
    except OSError as exc:
        raise ScenarioFileError(f"{exc.filename}: {exc.strerror}") from exc
    if errors:
        raise InvalidScenarioError(errors)
    return list(objects)


def config_from_file(path: str | Path) -> KueueConfig:
    """The one Kueue Configuration a `--config` file must hold."""
    config, errors = kueue_config_from_file(path)
    if config is None:
        raise InvalidScenarioError(errors)
    return config


def build_scenario(objects: Sequence[ApiObject], *, config: KueueConfig | None = None) -> Scenario:
    """Split decoded objects into engine configuration and timed arrivals.

    `config`, when given, wins over a Configuration among `objects`. Order of arrival is
    `metadata.creationTimestamp` where given, else the position in `objects`; workloads without
    a timestamp come before those with one; ties keep their position.
    """
    errors: list[FieldError] = []
    configs = [obj for obj in objects if isinstance(obj, KueueConfig)]
    if len(configs) > 1:
        problem = f"found {len(configs)} Configurations; keep one, or pass one with --config"
        errors.append(FieldError(obj="Configuration", path="kind", problem=problem))
    if config is None and configs:
        config = configs[0]
    config_objects = tuple(obj for obj in objects if not isinstance(obj, KueueConfig | Workload))
    check_results = admission_check_results(config_objects, errors)
    workloads = [obj for obj in objects if isinstance(obj, Workload)]
    arrivals = timed_arrivals(workloads, errors)
    if errors:
        raise InvalidScenarioError(errors)
    return Scenario(
        config=config, objects=config_objects, arrivals=arrivals, check_results=check_results
    )


def admission_check_results(
    objects: Sequence[ApiObject], errors: list[FieldError]
) -> dict[str, CheckScript]:
    """Default check scripts from `muster.dev/check-result` on AdmissionCheck objects."""
    results: dict[str, CheckScript] = {}
    for obj in objects:
        if not isinstance(obj, AdmissionCheck) or CHECK_RESULT not in obj.meta.annotations:
            continue
        try:
            results[obj.meta.name] = parse_check_script(obj.meta.annotations[CHECK_RESULT])
        except ValueError as exc:
            name = f"AdmissionCheck/{obj.meta.name}"
            errors.append(
                FieldError(obj=name, path=annotation_path(CHECK_RESULT), problem=str(exc))
            )
    return results


def timed_arrivals(workloads: Sequence[Workload], errors: list[FieldError]) -> tuple[Arrival, ...]:
    """Each workload with its arrival time and rank, sorted as the runner submits them."""
    keyed: list[tuple[tuple[float, int], Workload, WorkloadScript]] = []
    seen: set[str] = set()
    for position, wl in enumerate(workloads):
        if wl.key in seen:
            errors.append(
                FieldError(obj=source_name(wl), path="metadata.name", problem="duplicate")
            )
            continue
        seen.add(wl.key)
        try:
            script = parse_workload_script(wl.meta.annotations)
        except AnnotationError as exc:
            path = annotation_path(exc.annotation)
            errors.append(FieldError(obj=source_name(wl), path=path, problem=exc.problem))
            continue
        created = creation_time(wl, errors)
        order = -math.inf if created is None else created.timestamp()
        keyed.append(((order, position), wl, script))
    keyed.sort(key=lambda item: item[0])
    arrivals = [
        Arrival(at_s=script.submit_after_s, rank=rank, workload=wl, script=script)
        for rank, (_, wl, script) in enumerate(keyed)
    ]
    arrivals.sort(key=lambda arrival: (arrival.at_s, arrival.rank))
    return tuple(arrivals)


def creation_time(wl: Workload, errors: list[FieldError]) -> datetime | None:
    """`metadata.creationTimestamp` as an aware UTC time; naive times are taken as UTC."""
    text = wl.meta.creation_timestamp
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        problem = f"must be an RFC 3339 time such as 2024-01-02T03:04:05Z, got {text!r}"
        errors.append(
            FieldError(obj=source_name(wl), path="metadata.creationTimestamp", problem=problem)
        )
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def source_name(wl: Workload) -> str:
    """How errors name a workload: as the Job it came from, if any, else as a Workload."""
    for owner in wl.meta.owner_references:
        if owner.kind == "Job":
            return f"Job/{wl.meta.namespace}/{owner.name}"
    return f"Workload/{wl.meta.namespace}/{wl.meta.name}"
