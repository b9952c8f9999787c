"""Who may do what on NATS: one table of what each muster service publishes and reads.

`ROLES` says, per service, which events it publishes (and for which clusters), which durable
consumers it owns, which streams it replays, which key-value buckets and object stores it
reads or writes. `users(deployment)` compiles it into one NATS user per service (per cluster
for the per-cluster services) with publish and subscribe allow lists, JetStream API subjects
included; `muster.bus.natsconf` writes those as nats-server configuration and as the matrix in
docs/events.md, so the server, the docs and the code cannot disagree.

Taken from what the code does (bus/subjects.py, each service's `service.py`); the test in
tests/services/test_nats_permissions.py runs the services under these users and fails on any
permission violation, so a service that starts doing something new must say so here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final, Literal

import msgspec

from muster.bus.subjects import (
    COMMANDS_STREAM,
    DLQ_STREAM,
    EVENTS_STREAM,
    NAMED_EVENTS,
    PREFIX,
    check_cluster,
    partitioned,
)

JS_API: Final = "$JS.API"
ADMIN: Final = "admin"  # creates streams and buckets (`muster nats-setup`); nothing else uses it
SIM_BUCKET_PREFIX: Final = "MUSTER_SIM_"  # + cluster id (muster.cluster.keys.bucket_name)
MAX_ADMISSION_SHARDS: Final = 64

Scope = Literal["own", "any"]
"""A subject's cluster token: the service's own cluster, or any cluster (`*`)."""


class Durable(msgspec.Struct, frozen=True):
    """A durable consumer a service owns: no other user may create, read or ack it."""

    stream: str
    name: str  # "{cluster}" and "{shard}" are filled in
    filters: tuple[str, ...]  # its filter subjects ("{cluster}" filled in)
    # Consumed through one durable per term of a lease, named `<name>-<term>-<owner>`
    # (admission/takeover.py `term_durable`): readers create, pull and delete any name but
    # others' durables; acking too, for this one.
    per_term: bool = False


class KeyValue(msgspec.Struct, frozen=True):
    """A key-value bucket a service reads, and the keys it may write (none: read only)."""

    bucket: str  # "{cluster}" filled in
    writes: tuple[str, ...] = ()  # key patterns ("{cluster}" filled in; ">" for every key)


class Role(msgspec.Struct, frozen=True, kw_only=True):
    """What one service does on NATS."""

    service: str
    per_cluster: bool  # one user per cluster id (watcher-local, binder-w1, ...)
    publishes: tuple[tuple[str, Scope], ...] = ()  # event types, and for which clusters
    durables: tuple[Durable, ...] = ()
    # Other services' durables whose progress (consumer info: the ack floor) it reads, never
    # pulls from nor acks: (stream, name with "{cluster}" filled in).
    looks_at: tuple[tuple[str, str], ...] = ()
    replays: tuple[str, ...] = ()  # streams it reads through ephemeral consumers
    last_gets: tuple[str, ...] = ()  # streams whose last message on a filter it reads
    key_values: tuple[KeyValue, ...] = ()
    object_stores: tuple[str, ...] = ()  # read and written (a replaced object purges chunks)
    # MUSTER_SIM_<cluster>, when simulated; "prune": write, and purge its old tombstones
    sim_store: Literal["", "read", "write", "prune"] = ""
    # Dead letters of its loops besides its durables' (bus.poison: followers, cluster
    # watches), as `muster.v1.dlq.<name>` ("{cluster}" filled in).
    dead_letters: tuple[str, ...] = ()
    only_simulated: bool = False  # exists only for simulated clusters (the sim kubelet)
    about: str = ""


def _own(*event_types: str) -> tuple[tuple[str, Scope], ...]:
    return tuple((t, "own") for t in event_types)


def _any(*event_types: str) -> tuple[tuple[str, Scope], ...]:
    return tuple((t, "any") for t in event_types)


_OWN: Final = PREFIX + ".{cluster}"  # a subject of the service's own cluster, filled in later


def _events(*events: str) -> tuple[str, ...]:
    """Filters of these workload events of the service's own cluster, with and without the
    partition token (docs/events.md, "Partitions")."""
    return tuple(s for e in events for s in (f"{_OWN}.workload.{e}", f"{_OWN}.workload.{e}.*"))


ROLES: Final[tuple[Role, ...]] = (
    Role(
        service="watcher",
        per_cluster=True,
        about="turns the cluster's objects into events; writes Kueue statuses",
        publishes=_own(
            "workload.submitted",
            "workload.deleted",
            "workload.finished",
            "workload.pods_pending",
            "workload.running",
            "workload.pods_ready",
            "workload.admission_check",  # check controllers' answers (Kubernetes)
            "workload.active_changed",  # a Kueue Workload's spec.active (Kubernetes)
            "workload.reclaimable_pods",  # a Workload's or Job's finished pods (Kubernetes)
            "workload.copy_status",  # a MultiKueue copy's status, for the manager's Job
            "config.applied",
            "config.deleted",
        ),
        replays=(EVENTS_STREAM,),
        last_gets=(EVENTS_STREAM,),  # its start check: the last named `submitted` (seen_clusters)
        key_values=(
            KeyValue("MUSTER_WATCHER", writes=("{cluster}", "{cluster}.>")),
            KeyValue("MUSTER_PARTITIONS"),
            # Heartbeats: a MultiKueueCluster's Active condition (Kubernetes).
            KeyValue("MUSTER_CLUSTERS"),
        ),
        sim_store="read",
        dead_letters=("watcher-{cluster}",),
    ),
    Role(
        service="admission",
        per_cluster=False,
        about="decides admission for its partitions' cohort trees",
        publishes=_any(
            "workload.pending",
            "workload.quota_reserved",
            "workload.admitted",
            "workload.preemption_requested",
            "workload.evicted",
            "workload.eviction_completed",
            "workload.requeued",
            "workload.routed",
            "workload.admission_check",
            "workload.forwarded",  # to the partition a LocalQueue moved to
            "queue.status",
            "config.partition",  # a LocalQueue left a partition
        ),
        durables=(Durable(EVENTS_STREAM, "admission-{shard}", (), per_term=True),),
        replays=(EVENTS_STREAM,),
        key_values=(
            KeyValue("MUSTER_SHARDS", writes=(">",)),
            KeyValue("MUSTER_VISIBILITY", writes=(">",)),
            KeyValue("MUSTER_CLUSTERS"),
            KeyValue("MUSTER_PARTITIONS", writes=(">",)),
        ),
        object_stores=("MUSTER_SNAPSHOTS",),
    ),
    Role(
        service="preemption",
        per_cluster=False,
        about="turns evictions into `cmd.evict` for the victim's cluster",
        publishes=_any("cmd.evict"),
        durables=(Durable(EVENTS_STREAM, "preemption", ()),),
        replays=(EVENTS_STREAM,),
    ),
    Role(
        service="gangpermit",
        per_cluster=True,
        about="places whole gangs on the cluster's nodes",
        publishes=_own(
            "workload.gang_waiting",
            "workload.gang_permitted",
            "workload.gang_rejected",
            "workload.placement_preempted",
            "cmd.evict",
        ),
        # At a restart: a permit the binder acknowledged holds no nodes for pods deleted since.
        looks_at=((EVENTS_STREAM, "binder-{cluster}"),),
        replays=(EVENTS_STREAM,),
        key_values=(KeyValue("MUSTER_CLUSTERS", writes=("{cluster}", "{cluster}.part.*")),),
        sim_store="read",
        dead_letters=("gangpermit-{cluster}", "gangpermit-{cluster}-cluster"),
    ),
    Role(
        service="binder",
        per_cluster=True,
        about="starts, binds and stops the cluster's pods",
        publishes=_own(
            "workload.bound",
            "workload.gang_rejected",
            "workload.eviction_completed",
            "workload.eviction_dropped",  # a late eviction's answer, for preemption
            "workload.requests_refused",
            "workload.finished",  # an admitted workload whose manifest is gone for good
        ),
        durables=(
            Durable(EVENTS_STREAM, "binder-{cluster}", _events("admitted", "gang_permitted")),
            Durable(COMMANDS_STREAM, "binder-{cluster}-evict", (_OWN + ".cmd.evict",)),
            Durable(COMMANDS_STREAM, "binder-{cluster}-apply", (_OWN + ".cmd.apply",)),
        ),
        replays=(EVENTS_STREAM,),
        object_stores=("MUSTER_MANIFESTS_{cluster}",),
        sim_store="write",
        dead_letters=("binder-{cluster}-specs",),
    ),
    Role(
        service="gateway",
        per_cluster=False,
        about="the gRPC API: Submit, stop, resume and delete, queue status, Watch",
        publishes=_any(
            "workload.submitted",
            "workload.active_changed",
            "workload.deleted",
            "config.applied",
            "cmd.apply",
        ),
        replays=(EVENTS_STREAM,),
        last_gets=(EVENTS_STREAM,),  # who holds a name (`Bus.last_stored`)
        key_values=(
            KeyValue("MUSTER_VISIBILITY"),
            KeyValue("MUSTER_CLUSTERS"),
            KeyValue("MUSTER_PARTITIONS"),
            KeyValue("MUSTER_NAMES", writes=(">",)),  # Submit's claims of workload names
        ),
    ),
    Role(
        service="sim-cluster",
        per_cluster=True,
        about="the simulated cluster's kubelet and garbage collector",
        replays=(EVENTS_STREAM,),  # every cluster's `workload.deleted` (the collector)
        # The watcher's resume point: pod tombstones it has read are pruned (sim/tombstones.py)
        key_values=(KeyValue("MUSTER_WATCHER"),),
        sim_store="prune",
        only_simulated=True,
    ),
)


def role(service: str) -> Role:
    """The role of `service`; KeyError naming the known ones if there is none."""
    for r in ROLES:
        if r.service == service:
            return r
    raise KeyError(f"no NATS role for service {service!r}; known: {[r.service for r in ROLES]}")


def identity(service: str, cluster: str) -> str:
    """The NATS user of `service` working on `cluster`: `binder-local`, or `admission`."""
    return f"{service}-{check_cluster(cluster)}" if role(service).per_cluster else service


def inbox_prefix(user: str) -> str:
    """Where `user`'s replies arrive; it may subscribe there and nowhere else."""
    return f"_INBOX.{user}"


def inbox_of(service: str, cluster: str) -> str:
    """The inbox prefix of `service`'s connection: its user's, or NATS's default for a
    program that is not one of muster's services."""
    if service not in {r.service for r in ROLES}:
        return "_INBOX"
    return inbox_prefix(identity(service, cluster))


class Deployment(msgspec.Struct, frozen=True, kw_only=True):
    """The clusters and shards a NATS configuration is made for."""

    clusters: tuple[str, ...] = ("local",)
    simulated: tuple[str, ...] = ()  # the clusters whose nodes and pods are in MUSTER_SIM_<c>
    admission_shards: int = 1

    def __post_init__(self) -> None:
        if not self.clusters:
            raise ValueError("a deployment needs at least one cluster id")
        for cluster in self.clusters:
            check_cluster(cluster)
        if len(set(self.clusters)) != len(self.clusters):
            raise ValueError(f"cluster ids repeat: {list(self.clusters)}")
        if unknown := set(self.simulated) - set(self.clusters):
            raise ValueError(f"simulated clusters not in the cluster list: {sorted(unknown)}")
        if not 1 <= self.admission_shards <= MAX_ADMISSION_SHARDS:
            raise ValueError(
                f"admission shards must be in 1..{MAX_ADMISSION_SHARDS}, "
                f"got {self.admission_shards}"
            )


class Permissions(msgspec.Struct, frozen=True, kw_only=True):
    """One NATS user's permissions, as nats-server's `permissions` block says them."""

    publish_allow: tuple[str, ...]
    publish_deny: tuple[str, ...]
    subscribe_allow: tuple[str, ...]


class User(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    service: str  # its role's service, or "admin"
    cluster: str  # "" for a service that is not per cluster
    permissions: Permissions


def users(deployment: Deployment) -> list[User]:
    """Every NATS user of `deployment`: one per service (and cluster), then the admin."""
    placed = list(_placed(deployment))
    durables = {(d.stream, name) for _, _, owned in placed for d, name in owned}
    out = [
        User(
            name=_name(r, cluster),
            service=r.service,
            cluster=cluster,
            permissions=_compile(r, cluster, owned, durables, deployment),
        )
        for r, cluster, owned in placed
    ]
    admin = Permissions(publish_allow=(">",), publish_deny=(), subscribe_allow=(">",))
    return [*out, User(name=ADMIN, service=ADMIN, cluster="", permissions=admin)]


def _placed(
    deployment: Deployment,
) -> Iterator[tuple[Role, str, list[tuple[Durable, str]]]]:
    """Each role with its cluster ("" if not per cluster) and its durables' names there."""
    for r in ROLES:
        for cluster in deployment.clusters if r.per_cluster else ("",):
            if r.only_simulated and cluster not in deployment.simulated:
                continue
            owned = [
                (d, d.name.format(cluster=cluster, shard=shard))
                for d in r.durables
                for shard in (range(deployment.admission_shards) if "{shard}" in d.name else [0])
            ]
            yield r, cluster, owned


def _compile(
    r: Role,
    cluster: str,
    owned: Sequence[tuple[Durable, str]],
    every_durable: set[tuple[str, str]],
    deployment: Deployment,
) -> Permissions:
    # Every service checks at start that muster's streams exist (Bus.ensure_streams).
    publish = [_stream_info(s) for s in (EVENTS_STREAM, COMMANDS_STREAM, DLQ_STREAM)]
    for event_type, scope in r.publishes:
        subject = f"{PREFIX}.{cluster if scope == 'own' else '*'}.{event_type}"
        # With its partition token; without, as a service from before partitions publishes.
        publish += [subject, f"{subject}.*"] if partitioned(event_type) else [subject]
        if event_type.removeprefix("workload.") in NAMED_EVENTS and r.service == "gateway":
            publish.append(f"{subject}.*.>")  # and its name after it (`named_subject`)
    for durable, name in owned:
        publish += _durable_subjects(durable, name, cluster)
    for stream in r.replays:
        publish += _reader_subjects(stream)
    publish += [f"{JS_API}.STREAM.MSG.GET.{stream}" for stream in r.last_gets]
    publish += [f"{PREFIX}.dlq.{name.format(cluster=cluster)}" for name in r.dead_letters]
    for kv in r.key_values:
        bucket = kv.bucket.format(cluster=cluster)
        publish += _reader_subjects(f"KV_{bucket}", direct_get=True)
        publish += [f"$KV.{bucket}.{key.format(cluster=cluster)}" for key in kv.writes]
    for store in (s.format(cluster=cluster) for s in r.object_stores):
        stream = f"OBJ_{store}"
        publish += [*_reader_subjects(stream, direct_get=True, push=True), f"$O.{store}.>"]
        publish.append(f"{JS_API}.STREAM.PURGE.{stream}")
        # nats-py's object store watch (list) looks its stream up by subject: names only.
        publish.append(f"{JS_API}.STREAM.NAMES")
    if r.sim_store and cluster in deployment.simulated:
        bucket = SIM_BUCKET_PREFIX + cluster
        publish += _reader_subjects(f"KV_{bucket}", direct_get=True)
        if r.sim_store in ("write", "prune"):
            publish.append(f"$KV.{bucket}.>")
        if r.sim_store == "prune":
            publish.append(f"{JS_API}.STREAM.PURGE.KV_{bucket}")
    mine = {(d.stream, name) for d, name in owned}
    looked = {(stream, name.format(cluster=cluster)) for stream, name in r.looks_at}
    publish += [f"{JS_API}.CONSUMER.INFO.{stream}.{name}" for stream, name in sorted(looked)]
    deny = [
        s
        for stream, name in sorted(every_durable - mine)
        for s in _taking(stream, name, looks=(stream, name) in looked)
    ]
    return Permissions(
        publish_allow=tuple(dict.fromkeys(publish)),
        publish_deny=tuple(deny),
        subscribe_allow=(f"{inbox_prefix(_name(r, cluster))}.>",),
    )


def _name(r: Role, cluster: str) -> str:
    return identity(r.service, cluster) if r.per_cluster else r.service


def _stream_info(stream: str) -> str:
    return f"{JS_API}.STREAM.INFO.{stream}"


def _durable_subjects(durable: Durable, name: str, cluster: str) -> list[str]:
    """Bind to, pull from, ack and dead-letter a durable the service owns."""
    stream = durable.stream
    if len(durable.filters) == 1:
        # One filter travels in the API subject: the server checks it against the request, so
        # the user can create this consumer with this filter only (no other cluster's commands).
        only = durable.filters[0].format(cluster=cluster)
        create = [f"{JS_API}.CONSUMER.CREATE.{stream}.{name}.{only}"]
    else:
        create = [f"{JS_API}.CONSUMER.CREATE.{stream}.{name}"]
    return [
        _stream_info(stream),
        *create,
        f"{JS_API}.CONSUMER.INFO.{stream}.{name}",
        # Made again with other filters (admission, when the partitions it decides change).
        f"{JS_API}.CONSUMER.DELETE.{stream}.{name}",
        f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{name}",
        f"$JS.ACK.{stream}.{name}.>",
        *([f"$JS.ACK.{stream}.*.>"] if durable.per_term else []),
        f"{PREFIX}.dlq.{name}",
    ]


def _reader_subjects(stream: str, *, direct_get: bool = False, push: bool = False) -> list[str]:
    """Read `stream` through ephemeral consumers (replays, key-value watches) and, for
    buckets, direct gets; never someone else's durable (see `_taking`). Muster's own readers
    pull; `push`: nats-py's ordered push consumer reads it too (an object store's chunks),
    whose flow control is answered on `$JS.FC`."""
    subjects = [
        _stream_info(stream),
        f"{JS_API}.CONSUMER.CREATE.{stream}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.*",
        f"{JS_API}.CONSUMER.CREATE.{stream}.*.>",
        f"{JS_API}.CONSUMER.INFO.{stream}.*",
        f"{JS_API}.CONSUMER.DELETE.{stream}.*",
        f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.*",
    ]
    if push:
        subjects.append(f"$JS.FC.{stream}.>")
    if direct_get:
        subjects += [f"{JS_API}.DIRECT.GET.{stream}", f"{JS_API}.DIRECT.GET.{stream}.>"]
        subjects.append(f"{JS_API}.STREAM.MSG.GET.{stream}")
    return subjects


# JetStream's one-token consumer requests on a named consumer but INFO (the two-token ones,
# DURABLE.CREATE, MSG.NEXT and LEADER.STEPDOWN, are denied by `CONSUMER.*.*`); another verb,
# unknown today, is in no allow list.
_ONE_TOKEN_VERBS: Final = ("CREATE", "DELETE", "PAUSE", "UNPIN", "RESET")


def _taking(stream: str, durable: str, *, looks: bool = False) -> list[str]:
    """Every API subject that would create, change, read, ack or delete another user's
    durable: pulling from it would steal its messages and spend their deliveries. `looks`:
    reading its info (its progress) is left out, the only request that changes nothing."""
    verbs = _ONE_TOKEN_VERBS if looks else ("*",)
    return [
        *(f"{JS_API}.CONSUMER.{verb}.{stream}.{durable}" for verb in verbs),
        f"{JS_API}.CONSUMER.*.{stream}.{durable}.>",
        f"{JS_API}.CONSUMER.*.*.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
    ]
