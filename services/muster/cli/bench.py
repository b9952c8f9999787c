"""`muster bench [SECTION]`: run benchmark sections and print their rows.

Each section is a `Section` in `SECTIONS`; `muster bench` alone runs every one with its
defaults. `-o json` prints one JSON object per row per line, so runs can be compared with
`jq` or `diff`. Another section (e2e, placement, ...) adds one entry to `SECTIONS`.

The exit status is 1 when a row is not valid (a section's `not_valid` says why: in e2e, a
process ended during the case; in kueue-live, placement-e2e and multicluster, work that never
finished or bound), after every row is printed: a script or CI running the bench
must not take such a row for a measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from muster.bench import admission, admission_pending, light_gpu, placement, podgroups
from muster.bench.kueue_perf import CONFIGS
from muster.bench.table import render_json_line

EXIT_OK, EXIT_NOT_VALID = 0, 1
ALL = "all"

RowT = TypeVar("RowT", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True)
class Section(Generic[RowT]):
    """One benchmark: its options, a run that yields rows as they finish, and its table."""

    name: str
    help: str
    add_options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Iterator[RowT]]
    render: Callable[[list[RowT]], str]
    # Why a row is not a measurement (None: it is); a section whose rows are always whole
    # leaves it out.
    not_valid: Callable[[RowT], str | None] = lambda row: None


def add_admission_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        choices=[*CONFIGS, ALL],
        default=ALL,
        help="which of Kueue's scalability configurations to run (default: all)",
    )
    parser.add_argument(
        "--pending",
        type=int,
        nargs="*",
        metavar="N",
        help="instead: N workloads queued over 1 000 ClusterQueues before any quota frees, one "
        "row per N (none given: 10 000, 100 000 and 1 000 000, times --scale): memory, load "
        "time, decision latency and rebuild from the snapshot",
    )


def run_admission(args: argparse.Namespace) -> Iterator[msgspec.Struct]:
    if args.pending is not None:
        if any(n < 1 for n in args.pending):
            raise SystemExit(f"muster bench admission: --pending: must be >= 1: {args.pending}")
        counts = args.pending or admission_pending.default_counts(args.scale)
        yield from admission_pending.run(counts=counts, scale=args.scale)
        return
    names = list(CONFIGS) if args.config == ALL else [args.config]
    for name in names:
        yield admission.run_config(CONFIGS[name], scale=args.scale)


def render_admission(rows: list[msgspec.Struct]) -> str:
    """Kueue's configurations, or the pending rows (`--pending`)."""
    pending = [row for row in rows if isinstance(row, admission_pending.PendingRow)]
    if pending:
        return admission_pending.render(pending)
    return admission.render([row for row in rows if isinstance(row, admission.AdmissionRow)])


def _e2e() -> Any:  # imported only when run: it needs gRPC and the service processes
    from muster.bench import e2e

    return e2e


def add_e2e_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shards",
        type=at_least(1),
        nargs="+",
        default=[1, 2, 4],
        help="admission shard counts to measure (default: 1 2 4)",
    )
    parser.add_argument(
        "--observe",
        nargs="+",
        choices=("off", "on", "otlp"),
        default=["off"],
        help="metrics and tracing of the services: off, on (/metrics, no span exporter), otlp "
        "(and spans exported over OTLP to a receiver here); each case runs once per mode given "
        "(default: off)",
    )
    add_manifest_option(parser)


def add_manifest_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--manifest",
        choices=("yaml", "json"),
        default="yaml",
        help="how the client writes each Submit's workloads: yaml (as `muster submit -f` sends "
        "them) or json (one object per call, as kubectl and programs send; a List of several) "
        "(default: yaml)",
    )


def run_e2e(args: argparse.Namespace) -> Iterator[Any]:
    return _e2e().run(  # type: ignore[no-any-return]
        scale=args.scale,
        shard_counts=tuple(args.shards),
        observe=tuple(args.observe),
        manifest=args.manifest,
    )


def _floor() -> Any:  # imported only when run, as e2e
    from muster.bench import floor

    return floor


def add_floor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs", type=int, default=1, metavar="N", help="how many floor runs (default: 1)"
    )
    parser.add_argument(
        "--with-e2e",
        action="store_true",
        help="follow each floor run with e2e's burst case (1 shard, one per Submit, as many "
        "workloads), and print the floor's share of each process's CPU",
    )
    add_manifest_option(parser)


def run_floor(args: argparse.Namespace) -> Iterator[Any]:
    if args.runs < 1:
        raise SystemExit(f"muster bench floor: --runs: must be >= 1: {args.runs}")
    return _floor().run(  # type: ignore[no-any-return]
        scale=args.scale, runs=args.runs, with_e2e=args.with_e2e, manifest=args.manifest
    )


def _buckets() -> Any:  # imported only when run, as e2e
    from muster.bench import buckets

    return buckets


def run_buckets(args: argparse.Namespace) -> Iterator[Any]:
    return _buckets().run(scale=args.scale)  # type: ignore[no-any-return]


def _chaos() -> Any:  # imported only when run, as e2e
    # It starts service processes again while its gRPC channel is open: gRPC's fork handlers
    # would log a line at every start. Read when gRPC is first imported, as here.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    from muster.bench import chaos

    return chaos


def add_chaos_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workloads", type=at_least(1), default=300, help="workloads per run (default: 300)"
    )
    parser.add_argument(
        "--shards", type=at_least(1), default=1, help="admission shards (default: 1)"
    )
    parser.add_argument("--seed", type=int, default=1, help="of the workloads and the kills")
    parser.add_argument(
        "--gangs",
        type=at_least(0),
        default=0,
        help="of the workloads, gangs outside Kueue that preempt admitted ones (default: 0)",
    )
    parser.add_argument(
        "--checks",
        action="store_true",
        help="two ClusterQueues require an admission check the run answers (Ready or Retry)",
    )
    parser.add_argument(
        "--routing",
        action="store_true",
        help="half the workloads may run in their cohort's other ClusterQueue (fastest)",
    )
    parser.add_argument(
        "--routing-across",
        action="store_true",
        help="with --routing, alternatives in the other cohort too (another shard's)",
    )
    parser.add_argument(
        "--big-pods",
        type=at_least(0),
        default=0,
        help="of the workloads, big ones (16 to 40 pods) evicted and bound in parts (default: 0)",
    )
    parser.add_argument("--faults-only", action="store_true", help="skip the run without faults")


def run_chaos(args: argparse.Namespace) -> Iterator[Any]:
    chaos = _chaos()
    return chaos.run(  # type: ignore[no-any-return]
        scale=args.scale,
        workloads=args.workloads,
        shards=args.shards,
        seed=args.seed,
        gangs=args.gangs,
        shapes=chaos.Shapes(
            checks=args.checks,
            routing=args.routing,
            across=args.routing_across,
            big_pods=args.big_pods,
        ),
        faults_only=args.faults_only,
    )


def _placement_e2e() -> Any:  # imported only when run, as e2e
    from muster.bench import placement_e2e

    return placement_e2e


def run_placement_e2e(args: argparse.Namespace) -> Iterator[Any]:
    return _placement_e2e().run(scale=args.scale)  # type: ignore[no-any-return]


def _kube() -> Any:  # imported only when run: it starts the API-server stand-in
    from muster.bench import kube

    return kube


def _multicluster() -> Any:  # imported only when run: it starts stand-ins and services
    from muster.bench import multicluster

    return multicluster


def run_multicluster(args: argparse.Namespace) -> Iterator[Any]:
    return _multicluster().run(scale=args.scale)  # type: ignore[no-any-return]


def run_kube(args: argparse.Namespace) -> Iterator[Any]:
    return _kube().run(scale=args.scale)  # type: ignore[no-any-return]


def _soak() -> Any:  # imported only when run, as e2e
    from muster.bench import soak

    return soak


def add_soak_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--waves",
        type=at_least(1),
        default=8,
        help="waves of 2 500 workloads (times --scale), each submitted, run, finished and "
        "deleted before the census (default: 8)",
    )


def run_soak(args: argparse.Namespace) -> Iterator[Any]:
    return _soak().run(scale=args.scale, waves=args.waves)  # type: ignore[no-any-return]


def _decode() -> Any:  # imported only when run: it plans Submits with the gateway's code
    from muster.bench import decode

    return decode


def run_decode(args: argparse.Namespace) -> Iterator[Any]:
    return _decode().run(scale=args.scale)  # type: ignore[no-any-return]


def _book() -> Any:  # imported only when run: it folds events with the gateway's code
    from muster.bench import book

    return book


def run_book(args: argparse.Namespace) -> Iterator[Any]:
    return _book().run(scale=args.scale)  # type: ignore[no-any-return]


def _gateway() -> Any:  # imported only when run: it starts a gateway process
    from muster.bench import gateway

    return gateway


def run_gateway(args: argparse.Namespace) -> Iterator[Any]:
    return _gateway().run(scale=args.scale)  # type: ignore[no-any-return]


def _submit() -> Any:  # imported only when run: it starts a gateway process
    from muster.bench import submit_calls

    return submit_calls


def run_submit(args: argparse.Namespace) -> Iterator[Any]:
    return _submit().run(scale=args.scale, manifest=args.manifest)  # type: ignore[no-any-return]


def _clusters() -> Any:  # imported only when run: it starts a gateway process
    from muster.bench import cluster_views

    return cluster_views


def run_clusters(args: argparse.Namespace) -> Iterator[Any]:
    return _clusters().run(scale=args.scale)  # type: ignore[no-any-return]


def _kueue_live() -> Any:  # imported only when run: it starts the service processes
    from muster.bench import kueue_live

    return kueue_live


def add_kueue_live_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        choices=list(CONFIGS),
        default="baseline",
        help="which of Kueue's scalability configurations to run (default: baseline)",
    )
    parser.add_argument(
        "--shards", type=at_least(1), default=1, help="admission shards (default: 1)"
    )
    parser.add_argument(
        "--run-from",
        nargs="+",
        choices=("created", "started"),
        default=["created"],
        help="what a pod's run time counts from, one run each: created (when its workload was "
        "admitted, as Kueue's perf runner finishes workloads; default) or started",
    )


def run_kueue_live(args: argparse.Namespace) -> Iterator[Any]:
    return _kueue_live().run(  # type: ignore[no-any-return]
        config=CONFIGS[args.config], scale=args.scale, shards=args.shards, run_from=args.run_from
    )


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scoring",
        choices=("binpack", "spread"),
        default="binpack",
        help="how nodes are scored (default: binpack)",
    )


def run_placement(args: argparse.Namespace) -> Iterator[placement.PlacementRow]:
    yield from placement.run(scale=args.scale, scoring=args.scoring)
    yield from podgroups.run(scale=args.scale, scoring=args.scoring)


def add_light_gpu_options(parser: argparse.ArgumentParser) -> None:
    charts = parser.add_mutually_exclusive_group()
    charts.add_argument(
        "--charts",
        type=Path,
        metavar="DIR",
        help="write each run's Gantt chart (PNG) and each scenario's YAML here "
        "(default: a new temporary directory, named under the table)",
    )
    charts.add_argument("--no-charts", action="store_true", help="draw no charts")


NO_MATPLOTLIB = (
    "matplotlib is not installed (it is muster's `bench` extra: pip install 'muster[bench]')"
)


def run_light_gpu(args: argparse.Namespace) -> Iterator[light_gpu.LightGpuRow]:
    charts = None if args.no_charts else args.charts or light_gpu.default_charts_dir()
    if charts is not None and not light_gpu.can_draw():
        if args.charts:  # asked for by name: an error, not a silent table without them
            print(f"muster bench light-gpu: --charts: {NO_MATPLOTLIB}", file=sys.stderr)
            raise SystemExit(2)
        print(f"muster bench light-gpu: no charts: {NO_MATPLOTLIB}", file=sys.stderr)
        charts = None
    return light_gpu.run(scale=args.scale, charts=charts)


SECTIONS: dict[str, Section[Any]] = {  # Any: each section has its own row type
    section.name: section
    for section in (
        Section(
            name=admission.SECTION,
            help="Kueue's scalability configurations on the virtual clock: decisions per "
            "second of wall time, waits and cohort usage",
            add_options=add_admission_options,
            run=run_admission,
            render=render_admission,
        ),
        Section(
            name=placement.SECTION,
            help="the gang scheduler alone, as Kubernetes' scheduler_perf: pods/s over 5 000 "
            "nodes, and ms per 3-pod gang for 1 000 / 2 000 / 3 000 gangs; then 100 000 pods "
            "and 1 000 gangs of 32 over 50 000 nodes, with RSS; batched and streamed; then "
            "PodGroups and a CompositePodGroup beside the same gangs as v1alpha1",
            add_options=add_placement_options,
            run=run_placement,
            render=placement.render,
        ),
        Section(
            name=light_gpu.SECTION,
            help="light jobs that may run on GPU or CPU (a published Kueue gateway study) on "
            "the virtual clock: makespan per routing policy, and over H100/A100/L40/CPU tiers",
            add_options=add_light_gpu_options,
            run=run_light_gpu,
            render=light_gpu.render,
        ),
        Section(
            name="decode",
            help="multi-document YAML (1 and 10 MiB of Workloads) decoded with strict field "
            "validation, and one Submit of 1 000 objects planned: MiB/s and objects/s",
            add_options=lambda parser: None,
            run=run_decode,
            render=lambda rows: _decode().render(rows),
        ),
        Section(
            name="book",
            help="the gateway's workload book (muster workloads, the dashboard): events folded "
            "per second, one list of every workload, memory per workload (10 000 and 50 000)",
            add_options=lambda parser: None,
            run=run_book,
            render=lambda rows: _book().render(rows),
        ),
        Section(
            name="e2e",
            help="workloads through NATS and every service process on the simulated cluster: "
            "throughput and submit->admitted / submit->bound latency at 1, 2 and 4 shards",
            add_options=add_e2e_options,
            run=run_e2e,
            render=lambda rows: _e2e().render(rows),
            not_valid=lambda row: _e2e().not_valid(row),
        ),
        Section(
            name="floor",
            help="the e2e burst's I/O per workload (a gRPC Submit, 9 stored messages with their "
            "PubAcks, 16 deliveries) through stand-ins that decode but decide nothing: CPU "
            "ms/workload per process, the transport's floor under muster's",
            add_options=add_floor_options,
            run=run_floor,
            render=lambda rows: _floor().render(rows),
            not_valid=lambda row: _floor().not_valid(row),
        ),
        Section(
            name="buckets",
            help="what each key-value bucket keeps after 200 and 400 workloads ran and were "
            "deleted: stored messages, live keys, tombstones and the ones that expire",
            add_options=lambda parser: None,
            run=run_buckets,
            render=lambda rows: _buckets().render(rows),
        ),
        Section(
            name="soak",
            help="waves of workloads submitted, run, finished and deleted through every "
            "service: each process's RSS and largest maps after each wave; NOT VALID when a "
            "map grows with every wave",
            add_options=add_soak_options,
            run=run_soak,
            render=lambda rows: _soak().render(rows),
            not_valid=lambda row: _soak().not_valid(row),
        ),
        Section(
            name="kueue-live",
            help="Kueue's baseline (15 000 workloads, 30 ClusterQueues) through the gateway, "
            "NATS and every service in real time: wall time against the virtual-clock makespan "
            "of the same plan, usage while work waits, submit->admitted per class, lost",
            add_options=add_kueue_live_options,
            run=run_kueue_live,
            render=lambda rows: _kueue_live().render(rows),
            not_valid=lambda row: _kueue_live().not_valid(row),
        ),
        Section(
            name="placement-e2e",
            help="pods through NATS, gangpermit, binder and the sim kubelet: pods/s and "
            "creation->bound latency, single pods and gangs of 3",
            add_options=lambda parser: None,
            run=run_placement_e2e,
            render=lambda rows: _placement_e2e().render(rows),
            not_valid=lambda row: _placement_e2e().not_valid(row),
        ),
        Section(
            name="chaos",
            help="every service as a process under SIGKILLs and nats-server restarts, the same "
            "workloads without and with faults: lost, stuck, run twice, quota and node "
            "violations, evictions, wall time",
            add_options=add_chaos_options,
            run=run_chaos,
            render=lambda rows: _chaos().render(rows),
        ),
        Section(
            name="kube",
            help="the Kubernetes backend against the API-server stand-in: watch events/s "
            "decoded, and status writes/s achieved under the configured rate limit",
            add_options=lambda parser: None,
            run=run_kube,
            render=lambda rows: _kube().render(rows),
        ),
        Section(
            name="multicluster",
            help="one-pod Jobs through the services on Kubernetes stand-ins, over a manager and "
            "3 MultiKueue workers, against one cluster: Jobs/s and dispatch->bound p50/p99",
            add_options=lambda parser: None,
            run=run_multicluster,
            render=lambda rows: _multicluster().render(rows),
            not_valid=lambda row: _multicluster().not_valid(row),
        ),
        Section(
            name="gateway",
            help="what callers without valid credentials cost the gateway: its memory during "
            "and after 128 parallel unauthenticated 4 MiB Submits",
            add_options=lambda parser: None,
            run=run_gateway,
            render=lambda rows: _gateway().render(rows),
        ),
        Section(
            name="submit",
            help="the gateway's and the client's CPU per one-workload Submit: a gateway and a "
            "nats-server, no other service; 64 calls in flight, then one",
            add_options=add_manifest_option,
            run=run_submit,
            render=lambda rows: _submit().render(rows),
        ),
        Section(
            name="clusters",
            help="Visibility.Clusters at 5 000 and 50 000 nodes: a cluster's totals and a page "
            "of 100 nodes, wall and the gateway's CPU per call; its CPU while the cluster beats",
            add_options=lambda parser: None,
            run=run_clusters,
            render=lambda rows: _clusters().render(rows),
        ),
    )
}


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `least` (a bench run with 0 admission shards
    admitted nothing until its timeout)."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}: {text!r}")
        return value

    return whole


def scale_argument(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0: {text!r}")
    return value


def add_common_options(parser: argparse.ArgumentParser, *, with_defaults: bool) -> None:
    """-o and --scale, before or after the section name; after it, they win."""

    def default(value: object) -> object:
        return value if with_defaults else argparse.SUPPRESS

    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default=default("table"),
        help="table for people (default); json: one object per row per line",
    )
    parser.add_argument(
        "--scale",
        type=scale_argument,
        default=default(1.0),
        metavar="F",
        help="multiply every workload count by F (at least 1 per class) for quick runs",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster bench",
        description="Run benchmark sections and print one row per case. "
        "With no SECTION, run every section.",
    )
    add_common_options(parser, with_defaults=True)
    sections = parser.add_subparsers(dest="section", metavar="SECTION")
    for section in SECTIONS.values():
        sub = sections.add_parser(section.name, help=section.help, description=section.help)
        add_common_options(sub, with_defaults=False)
        section.add_options(sub)
    return parser


def main(argv: Sequence[str]) -> int:
    """Run the section named in `argv`, or every section; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.section is not None:
        return exit_status(run_section(SECTIONS[args.section], args))
    not_valid: list[str] = []
    for n, section in enumerate(SECTIONS.values()):
        # No section named, so argv holds only common options: add the name for its defaults.
        section_args = parser.parse_args([*argv, section.name])
        if section_args.output == "table" and n > 0:
            sys.stdout.write("\n")
        not_valid += run_section(section, section_args)
    return exit_status(not_valid)


def exit_status(not_valid: list[str]) -> int:
    """EXIT_NOT_VALID, with a line on stderr per row that is not valid, when there is one."""
    if not not_valid:
        return EXIT_OK
    lines = "".join(f"\n  {why}" for why in not_valid)
    sys.stderr.write(f"muster bench: {len(not_valid)} row(s) NOT VALID:{lines}\n")
    return EXIT_NOT_VALID


def run_section(section: Section[RowT], args: argparse.Namespace) -> list[str]:
    """Print the section's rows: each JSON line as soon as its row is done, or one table.
    Returns why each row that is not valid is not, prefixed by the section's name."""
    rows: list[RowT] = []
    not_valid: list[str] = []
    for row in section.run(args):
        why = section.not_valid(row)
        if why:
            not_valid.append(f"{section.name}: {why}")
        if args.output == "json":
            sys.stdout.write(render_json_line(row))
            sys.stdout.flush()
        else:
            rows.append(row)
    if args.output == "table":
        sys.stdout.write(f"{section.name}\n\n{section.render(rows)}")
    return not_valid
