"""The light-gpu section: light jobs that may leave a congested GPU queue, on the virtual clock.

A published study (Kueue and MultiKueue, a CPU ClusterQueue and 4 Tesla T4 GPUs) put a gateway
in front of Kueue that sends light Stable Diffusion jobs to the CPU queue when the GPU queue is
congested. This section replays that batch through `muster simulate`'s own path (scenario YAML,
`muster.api` decoding, `muster.sim`) under each routing policy, and the same batch over
H100/A100/L40/CPU tiers. Each run's makespan is compared with the static policy's; each run can
be drawn as a Gantt chart of GPU slots and CPU work (matplotlib, imported only to draw).
docs/routing.md derives the tiers' run times.
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import msgspec

from muster.api.decode import decode_yaml
from muster.api.wellknown import WORKLOAD_LABEL
from muster.bench.table import Column, number, render_table
from muster.core.events import EventType
from muster.core.routing import Policy, RoutingSettings
from muster.sim import SimulationResult, build_scenario, simulate

SECTION = "light-gpu"
JOBS = 30  # the study's batch: half 30-step jobs, half 5-step ones
UNIFORM_GAP_S = 1.0  # uniform: one job a second, alternating GPU and light
# burst: 15 GPU jobs, then 15 light ones, back to back. One submission every 0.1 s, about what
# one `kubectl create` takes: a gateway deciding at submission sees the jobs before admitted.
BURST_GAP_S = 0.1
CPU, MEMORY_GI, GPUS = 4, 6, 1  # what every job requests (on a CPU pool: no GPU)
REQUESTS = f'{{cpu: "{CPU}", memory: {MEMORY_GI}Gi, nvidia.com/gpu: "{GPUS}"}}'
TARGET_REDUCTION_PCT = 20.0  # fastest against static, study case, both arrival patterns

# T4 times from the study: 30 steps in 29.6 s, 5 steps in 26.0 s, so 0.144 s per step on top of
# 25.28 s that does not depend on the steps (start, model load). Other GPUs: the same fixed part,
# the per-step part divided by their diffusion throughput relative to a T4 (docs/routing.md).
T4_STEP_S = (29.6 - 26.0) / 25
FIXED_S = 26.0 - 5 * T4_STEP_S
RELATIVE_THROUGHPUT = {"l40": 4.0, "a100": 5.0, "h100": 8.0}


def tier_seconds(tier: str, steps: int) -> float:
    """Expected run time of a `steps`-step job on GPU `tier`, to 0.01 s."""
    return round(FIXED_S + steps * T4_STEP_S / RELATIVE_THROUGHPUT[tier], 2)


class Pool(msgspec.Struct, frozen=True, kw_only=True):
    """Nodes of one kind, with their flavor, ClusterQueue and LocalQueue (all named `name`)."""

    name: str
    nodes: int
    node_cpu: int
    node_memory_gi: int
    node_gpus: int  # 0: a CPU pool
    gpu_job_s: float | None  # a 30-step job's run time here; None: it cannot run here
    light_job_s: float  # a 5-step job's


CPU_POOL = Pool(
    name="cpu", nodes=2, node_cpu=12, node_memory_gi=30, node_gpus=0, gpu_job_s=None,
    light_job_s=90.0,
)  # fmt: skip
STUDY = (
    Pool(
        name="gpu", nodes=4, node_cpu=10, node_memory_gi=40, node_gpus=1, gpu_job_s=29.6,
        light_job_s=26.0,
    ),
    CPU_POOL,
)  # fmt: skip
TIERED = (
    *(
        Pool(
            name=tier, nodes=count, node_cpu=10, node_memory_gi=40, node_gpus=1,
            gpu_job_s=tier_seconds(tier, 30), light_job_s=tier_seconds(tier, 5),
        )
        for tier, count in (("h100", 1), ("a100", 1), ("l40", 2))
    ),
    CPU_POOL,
)  # fmt: skip
CASES: Mapping[str, tuple[tuple[Pool, ...], tuple[Policy, ...]]] = {
    "study": (STUDY, (Policy.STATIC, Policy.THRESHOLD, Policy.FASTEST)),
    "tiered": (TIERED, (Policy.STATIC, Policy.FASTEST)),
}
ARRIVALS = ("uniform", "burst")


class LightGpuRow(msgspec.Struct, frozen=True, kw_only=True):
    """One case, arrival pattern and policy; `-o json` prints exactly these fields."""

    section: str = SECTION
    case: str  # "study" (T4 and CPU) or "tiered" (H100, A100, L40, CPU)
    arrivals: str  # "uniform" or "burst"
    policy: str
    scale: float
    jobs: int
    light_jobs: int
    makespan_s: float  # first submission to last completion, virtual
    reduction_pct: float  # of the makespan, against static in the same case and arrivals
    light_on_cpu: int  # light jobs that ran on the CPU pool
    moved_at_s: tuple[float, ...]  # when a job was routed away from where it was
    ran_in: Mapping[str, int]  # ClusterQueue -> jobs that ran there
    chart: str  # the Gantt chart's path; "" without charts


class Job(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    light: bool
    at_s: float


def jobs_of(arrivals: str, *, count: int) -> list[Job]:
    """uniform: GPU, light, GPU, ... one a second; burst: the GPU half, then the light half."""
    if arrivals == "uniform":
        kinds = [i % 2 == 1 for i in range(count)]
        gap = UNIFORM_GAP_S
    else:
        kinds = [i >= math.ceil(count / 2) for i in range(count)]
        gap = BURST_GAP_S
    return [
        Job(name=f"{'sd5' if light else 'sd30'}-{i:02d}", light=light, at_s=round(i * gap, 6))
        for i, light in enumerate(kinds)
    ]


# --- the scenario ----------------------------------------------------------------------------


def scenario_yaml(case: str, arrivals: str, *, jobs: int = JOBS) -> str:
    """The scenario `muster simulate` runs for this case: pools, nodes and Jobs, as YAML."""
    pools = CASES[case][0]
    batch = jobs_of(arrivals, count=jobs)
    head = [
        f"# muster bench light-gpu, case {case}, {arrivals} arrivals: {len(batch)} Stable "
        "Diffusion Jobs",
        "# (sd30-*: 30 steps, GPU only; sd5-*: 5 steps, GPU or CPU) declared on ClusterQueue "
        f"{pools[0].name}.",
        "# Try: muster simulate FILE --routing-policy threshold (or fastest, or static).",
        "apiVersion: v1",
        "kind: Namespace",
        "metadata: {name: sd}",
    ]
    documents = ["\n".join(head)]
    documents += [pool_yaml(pool) for pool in pools]
    documents += [job_yaml(job, pools) for job in batch]
    return "\n---\n".join(documents) + "\n"


def pool_yaml(pool: Pool) -> str:
    resources = [
        ("cpu", pool.nodes * pool.node_cpu),
        ("memory", f"{pool.nodes * pool.node_memory_gi}Gi"),
    ]
    if pool.node_gpus:
        resources.append(("nvidia.com/gpu", pool.nodes * pool.node_gpus))
    covered = ", ".join(name for name, _ in resources)
    quotas = ", ".join(f"{{name: {name}, nominalQuota: {amount}}}" for name, amount in resources)
    allocatable = f'cpu: "{pool.node_cpu}", memory: {pool.node_memory_gi}Gi'
    if pool.node_gpus:
        allocatable += f', nvidia.com/gpu: "{pool.node_gpus}"'
    nodes = "\n".join(
        f"- {{apiVersion: v1, kind: Node, metadata: {{name: {pool.name}-{i}, labels: "
        f"{{muster.dev/pool: {pool.name}}}}}, status: {{allocatable: {{{allocatable}}}}}}}"
        for i in range(1, pool.nodes + 1)
    )
    return f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: {pool.name}}}
spec: {{nodeLabels: {{muster.dev/pool: {pool.name}}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {pool.name}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [{covered}]
    flavors: [{{name: {pool.name}, resources: [{quotas}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: sd, name: {pool.name}}}
spec: {{clusterQueue: {pool.name}}}
---
apiVersion: v1
kind: List
items:
{nodes}"""


def job_yaml(job: Job, pools: Sequence[Pool]) -> str:
    """A Job on the first pool, with every other pool it can run on as an alternative."""
    declared, *others = pools
    alternatives = [
        alternative_yaml(pool, run_s)
        for pool in others
        if (run_s := pool.light_job_s if job.light else pool.gpu_job_s) is not None
    ]
    run_s = declared.light_job_s if job.light else declared.gpu_job_s
    annotations = [
        f'muster.dev/submit-after: "{job.at_s:g}"',
        f'muster.dev/run-seconds: "{run_s:g}"',
    ]
    if alternatives:
        annotations.append(f"muster.dev/alternatives: '[{', '.join(alternatives)}]'")
    lines = "\n".join(f"    {line}" for line in annotations)
    return f"""apiVersion: batch/v1
kind: Job
metadata:
  namespace: sd
  name: {job.name}
  labels: {{kueue.x-k8s.io/queue-name: {declared.name}}}
  annotations:
{lines}
spec:
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers:
      - name: diffusion
        resources: {{requests: {REQUESTS}}}"""


def alternative_yaml(pool: Pool, run_s: float) -> str:
    requests = "" if pool.node_gpus else ", requests: {nvidia.com/gpu: 0}"
    return f"{{queueName: {pool.name}{requests}, runSeconds: {run_s:g}}}"


def run_yaml(text: str, *, policy: Policy) -> SimulationResult:
    """Decode and simulate as `muster simulate --routing-policy POLICY` would."""
    objects, errors = decode_yaml(text, source=SECTION)
    if errors:
        raise ValueError("\n".join(str(error) for error in errors))
    return simulate(build_scenario(objects), routing=RoutingSettings(default_policy=policy))


# --- the runs --------------------------------------------------------------------------------


def run(*, scale: float, charts: Path | None) -> Iterator[LightGpuRow]:
    """Every case, arrival pattern and policy, static first; rows as each run finishes."""
    count = max(2, round(JOBS * scale))
    for case, (pools, policies) in CASES.items():
        for arrivals in ARRIVALS:
            text = scenario_yaml(case, arrivals, jobs=count)
            if charts is not None:
                charts.mkdir(parents=True, exist_ok=True)
                (charts / f"{case}-{arrivals}.yaml").write_text(text)
            static_s: float | None = None
            for policy in policies:
                result = run_yaml(text, policy=policy)
                chart = ""
                if charts is not None:
                    path = charts / f"{case}-{arrivals}-{policy.value}.png"
                    title = f"{case}, {arrivals} arrivals, {policy.value}"
                    write_chart(result, pools, path, title=title)
                    chart = str(path)
                row = measure(result, pools, case=case, arrivals=arrivals, policy=policy)
                row = msgspec.structs.replace(row, scale=scale, chart=chart)
                if static_s is None:
                    static_s = row.makespan_s
                reduction = 100 * (static_s - row.makespan_s) / static_s if static_s else 0.0
                yield msgspec.structs.replace(row, reduction_pct=round(reduction, 2))


def measure(
    result: SimulationResult, pools: Sequence[Pool], *, case: str, arrivals: str, policy: Policy
) -> LightGpuRow:
    """The row of one run, from its timings and its Routed events."""
    timings = list(result.timings.values())
    start = min(t.arrived_s for t in timings)
    ends = [t.finished_s for t in timings]
    makespan = math.inf if None in ends else max(e for e in ends if e is not None) - start
    ran_in: dict[str, int] = {pool.name: 0 for pool in pools}
    light_on_cpu = 0
    for t in timings:
        queue = t.last_admission.cluster_queue if t.last_admission is not None else "-"
        ran_in[queue] = ran_in.get(queue, 0) + 1
        if "/job-sd5-" in t.key and queue == CPU_POOL.name:
            light_on_cpu += 1
    moved = tuple(
        e.time for e in result.events if e.type is EventType.ROUTED and e.from_queue != e.to_queue
    )
    return LightGpuRow(
        case=case,
        arrivals=arrivals,
        policy=policy.value,
        scale=0.0,
        jobs=len(timings),
        light_jobs=sum(1 for t in timings if "/job-sd5-" in t.key),
        makespan_s=round(makespan, 6),
        reduction_pct=0.0,
        light_on_cpu=light_on_cpu,
        moved_at_s=tuple(round(at, 6) for at in moved),
        ran_in=ran_in,
        chart="",
    )


# --- the chart -------------------------------------------------------------------------------


def lanes(
    result: SimulationResult, pools: Sequence[Pool]
) -> dict[str, list[tuple[float, float, str]]]:
    """Per node, in the order of the pools (and, where pods overlap on one node, per slot of
    it): (start, end, job) of each pod bound there."""
    rows: dict[str, list[tuple[float, float, str]]] = {}
    by_node: dict[str, list[tuple[float, float, str]]] = {}
    for state in result.pods:
        if state.bound_s is None or not state.node:
            continue
        end = state.ended_s if state.ended_s is not None else result.end_s
        job = state.pod.meta.labels.get(WORKLOAD_LABEL, state.pod.meta.name)
        by_node.setdefault(state.node, []).append((state.bound_s, end, job))
    rank = {pool.name: i for i, pool in enumerate(pools)}
    for node in sorted(by_node, key=lambda n: (rank.get(n.rsplit("-", 1)[0], len(rank)), n)):
        slots: list[list[tuple[float, float, str]]] = []
        for bar in sorted(by_node[node]):
            slot = next((s for s in slots if s[-1][1] <= bar[0]), None)
            if slot is None:
                slots.append([bar])
            else:
                slot.append(bar)
        for i, slot in enumerate(slots):
            rows[node if len(slots) == 1 else f"{node} #{i + 1}"] = slot
    return rows


def can_draw() -> bool:
    """Whether matplotlib (muster's `bench` extra) is installed: only the charts need it."""
    return importlib.util.find_spec("matplotlib") is not None


def write_chart(result: SimulationResult, pools: Sequence[Pool], path: Path, *, title: str) -> None:
    """A PNG Gantt chart: one row per GPU slot and CPU slot, one bar per job."""
    import matplotlib  # imported here only: drawing is optional and slow to import

    matplotlib.use("Agg")
    from matplotlib import pyplot

    rows = lanes(result, pools)
    names = list(rows)
    figure, axes = pyplot.subplots(figsize=(11, 1.2 + 0.35 * len(names)))
    colors = {"sd30": "tab:blue", "sd5": "tab:orange"}
    for y, name in enumerate(names):
        for start, end, job in rows[name]:
            kind = "sd5" if job.startswith("job-sd5-") else "sd30"
            axes.barh(y, end - start, left=start, color=colors[kind], edgecolor="white")
    axes.set_yticks(range(len(names)), labels=names)
    axes.invert_yaxis()
    axes.set_xlabel("virtual seconds")
    pools_text = ", ".join(p.name for p in pools)
    axes.set_title(f"{title} (pools {pools_text}); blue: 30 steps, orange: 5 steps")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    pyplot.close(figure)


# --- the table -------------------------------------------------------------------------------


def columns() -> list[Column[LightGpuRow]]:
    return [
        Column("CASE", lambda row: row.case, numeric=False),
        Column("ARRIVALS", lambda row: row.arrivals, numeric=False),
        Column("POLICY", lambda row: row.policy, numeric=False),
        Column("JOBS", lambda row: str(row.jobs)),
        Column("LIGHT", lambda row: str(row.light_jobs)),
        Column("MAKESPAN(s)", lambda row: number(row.makespan_s, digits=1)),
        Column("REDUCTION%", lambda row: number(row.reduction_pct, digits=1)),
        Column("LIGHT-ON-CPU", lambda row: str(row.light_on_cpu)),
        Column("MOVES", lambda row: str(len(row.moved_at_s))),
        Column(
            "RAN-IN",
            lambda row: " ".join(f"{q}:{n}" for q, n in row.ran_in.items()),
            numeric=False,
        ),
    ]


def render(rows: list[LightGpuRow]) -> str:
    """The table, when the threshold policy moved jobs, the target, and where the charts are."""
    notes = [
        f"{row.arrivals}: threshold moved light jobs at t={', '.join(map(number, row.moved_at_s))}"
        for row in rows
        if row.case == "study" and row.policy == Policy.THRESHOLD and row.moved_at_s
    ]
    notes += [target_note(row) for row in rows if row.case == "study" and row.policy == "fastest"]
    charts = sorted({str(Path(row.chart).parent) for row in rows if row.chart})
    notes += [f"charts and scenario YAML: {directory}" for directory in charts]
    if any(row.scale != 1.0 for row in rows):
        notes.append("(jobs scaled with --scale; the target is for scale 1)")
    return render_table(columns(), rows) + "\n" + "".join(f"{note}\n" for note in notes)


def target_note(row: LightGpuRow) -> str:
    met = "met" if row.reduction_pct >= TARGET_REDUCTION_PCT else "MISSED"
    return (
        f"{row.arrivals}: fastest cuts the makespan by >= {TARGET_REDUCTION_PCT:g} % against "
        f"static: {met} ({number(row.reduction_pct, digits=1)} %)"
    )


def default_charts_dir() -> Path:
    """A new directory under the system's temporary directory; the table names it."""
    return Path(tempfile.mkdtemp(prefix="muster-light-gpu-"))
