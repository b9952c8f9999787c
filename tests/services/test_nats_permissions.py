"""The generated NATS configuration (muster.bus.permissions) on a real nats-server: each service's
user can do its job and is refused outside it.

Every refusal is paired with something the same user may do, on a neighbouring subject, so a
case cannot pass because the user can do nothing at all. That each service can do its whole
job under its user is shown by `muster run` (tests/services/test_muster_run*.py), which starts
every service with its own user and fails on any permission violation in the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import api
from nats_process import NatsServer
from service_exit import exit_status

from muster.bus import BusConfig, connect
from muster.bus.errors import SetupError
from muster.bus.natsconf import authorization, server_config
from muster.bus.permissions import ADMIN, Deployment, inbox_prefix, users
from muster.bus.setup import setup_nats

DEPLOYMENT = Deployment(clusters=("local", "w1"), simulated=("local", "w1"), admission_shards=2)
PASSWORDS = {u.name: secrets.token_urlsafe(16) for u in users(DEPLOYMENT)}
ANSWER_S = 5.0  # a refusal or an answer comes at once; this only bounds a broken server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A nats-server with every user of DEPLOYMENT, streams and buckets set up by the admin."""
    store = tmp_path_factory.mktemp("nats")
    users_block = authorization(users(DEPLOYMENT), auth="password", passwords=PASSWORDS)
    config = server_config(port=-1, store_dir=str(store / "js"), authorization_block=users_block)
    server = NatsServer(store, config=config)
    server.start()
    try:
        asyncio.run(_set_up(server.url))
        yield server
    finally:
        server.stop()


async def _set_up(url: str) -> None:
    bus = await connect(BusConfig(url=url, user=ADMIN, password=PASSWORDS[ADMIN]))
    try:
        await setup_nats(bus.js, deployment=DEPLOYMENT)
        # The binder's command consumers, as the binder of each cluster creates them.
        for cluster in DEPLOYMENT.clusters:
            await bus.js.add_consumer(
                "MUSTER_COMMANDS",
                config=api.ConsumerConfig(
                    name=f"binder-{cluster}-evict",
                    durable_name=f"binder-{cluster}-evict",
                    ack_policy=api.AckPolicy.EXPLICIT,
                    filter_subject=f"muster.v1.{cluster}.cmd.evict",
                ),
            )
    finally:
        await bus.close()


class Session:
    """One connection as `user`; `attempt` tells whether the server let a request through."""

    def __init__(self, nc: NatsClient, refused: asyncio.Queue[str], url: str) -> None:
        self.nc = nc
        self.refused = refused
        self.url = url

    async def attempt(self, subject: str, payload: bytes = b"{}") -> str:
        """'allowed' when the request reached a subscriber or was answered 'no responders';
        'refused' when the server reported a permission violation for `subject`."""
        request = asyncio.ensure_future(self.nc.request(subject, payload, timeout=ANSWER_S))
        refusal = asyncio.ensure_future(self.refused.get())
        done, _ = await asyncio.wait({request, refusal}, return_when=asyncio.FIRST_COMPLETED)
        for task in (request, refusal):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, nats.errors.Error):
                await task
        if refusal in done:
            assert subject.lower() in refusal.result(), refusal.result()
            return "refused"
        with contextlib.suppress(nats.errors.NoRespondersError):
            request.result()
        return "allowed"

    async def subscribe(self, subject: str) -> str:
        """'refused' when the server refuses a subscription to `subject`, 'allowed' once a
        message published there by the admin arrives."""
        sub = await self.nc.subscribe(subject)
        refusal = asyncio.ensure_future(self.refused.get())
        arrival = asyncio.ensure_future(sub.next_msg(timeout=ANSWER_S))
        await self.nc.flush()
        admin = await nats.connect(self.url, user=ADMIN, password=PASSWORDS[ADMIN])
        try:
            await admin.publish(subject.replace(">", "probe"), b"probe")
            await admin.flush()
            done, _ = await asyncio.wait({refusal, arrival}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await admin.close()
        for task in (refusal, arrival):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, nats.errors.Error):
                await task
        return "refused" if refusal in done else "allowed"


@contextlib.asynccontextmanager
async def session(url: str, user: str) -> AsyncIterator[Session]:
    refused: asyncio.Queue[str] = asyncio.Queue()

    async def on_error(exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            refused.put_nowait(str(exc).lower())

    nc = await nats.connect(
        url,
        user=user,
        password=PASSWORDS[user],
        inbox_prefix=inbox_prefix(user),
        error_cb=on_error,
        allow_reconnect=False,
    )
    try:
        yield Session(nc, refused, url)
    finally:
        await nc.close()


PULL = json.dumps({"batch": 1, "no_wait": True}).encode()

# user, what it must not do, what it may do instead (the same kind of request), why it matters
PUBLISH_CASES = [
    ("gateway", "muster.v1.local.cmd.evict", "muster.v1.local.cmd.apply",
     "the gateway's credential cannot have the binder delete pods"),
    ("watcher-local", "muster.v1.local.workload.admitted", "muster.v1.local.workload.submitted",
     "a watcher reports, it never admits"),
    ("binder-local", "muster.v1.local.config.applied", "muster.v1.local.workload.bound",
     "the binder cannot change quotas or queues"),
    ("watcher-local", "muster.v1.w1.workload.submitted", "muster.v1.local.workload.submitted",
     "a cluster's watcher speaks for its own cluster only"),
    ("gangpermit-local", "muster.v1.w1.cmd.evict", "muster.v1.local.cmd.evict",
     "gang-permit evicts on its own cluster only"),
    ("preemption", "muster.v1.local.workload.admitted", "muster.v1.local.cmd.evict",
     "preemption executes evictions and decides nothing"),
    ("admission", "muster.v1.local.cmd.evict", "muster.v1.local.workload.evicted",
     "admission asks preemption to evict; it never commands a binder"),
    ("gateway", "muster.v1.dlq.binder-local", "muster.v1.local.workload.submitted",
     "no one writes another consumer's dead letters"),
    ("watcher-local", "muster.v1.local.workload.submitted.3.ml.x",
     "muster.v1.local.workload.submitted.3",
     "only a gateway stores a submitted on its name's subject: the name's claim"),
    ("gateway", "muster.v1.local.workload.deleted.3.ml.x",
     "muster.v1.local.workload.submitted.3.ml.x", "a name's subject holds a submitted only"),
    ("gangpermit-local", "$KV.MUSTER_SHARDS.admission.0", "$KV.MUSTER_CLUSTERS.local",
     "gang-permit cannot take an admission shard's lease"),
    ("gangpermit-local", "$KV.MUSTER_CLUSTERS.w1", "$KV.MUSTER_CLUSTERS.local",
     "a cluster reports its own room only"),
    ("gangpermit-local", "$KV.MUSTER_CLUSTERS.w1.part.0", "$KV.MUSTER_CLUSTERS.local.part.0",
     "a large room's parts too"),
    ("gateway", "$KV.MUSTER_VISIBILITY.cq.team-a", "$JS.API.DIRECT.GET.KV_MUSTER_VISIBILITY",
     "the gateway reads queue status, it cannot write it"),
    ("watcher-local", "$KV.MUSTER_SIM_local.pod.x.y", "$JS.API.DIRECT.GET.KV_MUSTER_SIM_local",
     "the watcher reads the simulated cluster; the binder writes it"),
    # redteam5: finished pods free quota a workload holds, so only its cluster's watcher tells them
    ("gateway", "muster.v1.local.workload.reclaimable_pods.x",
     "muster.v1.local.workload.submitted", "a user cannot free quota by saying pods finished"),
    ("watcher-w1", "muster.v1.local.workload.reclaimable_pods.x",
     "muster.v1.w1.workload.reclaimable_pods.x", "a worker tells its own cluster's pods only"),
    # bigspec: a binder starts a workload from the manifest kept in its own cluster's bucket
    ("binder-w1", "$O.MUSTER_MANIFESTS_local.M.x", "$O.MUSTER_MANIFESTS_w1.M.x",
     "no cluster's credential plants the spec another cluster's binder starts"),
    ("gateway", "$O.MUSTER_MANIFESTS_local.M.x", "muster.v1.local.workload.submitted",
     "nor a user's: only the binders keep manifests"),
    ("binder-w1", "muster.v1.local.workload.finished", "muster.v1.w1.workload.finished",
     "a binder ends only what was admitted to its own cluster"),
]  # fmt: skip

API_CASES = [
    ("preemption", "$JS.API.STREAM.UPDATE.MUSTER_EVENTS", "$JS.API.STREAM.INFO.MUSTER_EVENTS",
     b"{}", "services cannot change the streams (retention, subjects)"),
    ("admission", "$JS.API.STREAM.DELETE.MUSTER_EVENTS", "$JS.API.STREAM.INFO.MUSTER_EVENTS",
     b"{}", "nor delete them"),
    ("binder-local", "$JS.API.STREAM.PURGE.MUSTER_EVENTS", "$JS.API.STREAM.INFO.MUSTER_EVENTS",
     b"{}", "nor purge the history admission rebuilds from"),
    ("gateway", "$JS.API.CONSUMER.CREATE.MUSTER_COMMANDS", "$JS.API.CONSUMER.CREATE.MUSTER_EVENTS",
     b"{}", "only binders read the work queue of commands"),
    # (No case publishes a command for w1: binder-w1's pull finds nothing and is answered.)
    ("binder-w1", "$JS.API.CONSUMER.MSG.NEXT.MUSTER_COMMANDS.binder-local-evict",
     "$JS.API.CONSUMER.MSG.NEXT.MUSTER_COMMANDS.binder-w1-evict",
     PULL, "a binder cannot take another cluster's commands"),
    ("gateway", "$JS.API.CONSUMER.MSG.NEXT.MUSTER_EVENTS.admission-0",
     "$JS.API.CONSUMER.MSG.NEXT.MUSTER_EVENTS.some-ephemeral-reader",
     PULL, "pulling a service's durable would spend its deliveries"),
    ("gateway", "$JS.API.CONSUMER.DELETE.MUSTER_EVENTS.preemption",
     "$JS.API.CONSUMER.DELETE.MUSTER_EVENTS.some-ephemeral-reader",
     b"", "nor delete it"),
    ("watcher-local", "$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.binder-local",
     "$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.some-ephemeral-reader",
     b"{}", "nor take its name"),
    ("gateway", "$JS.API.STREAM.MSG.GET.MUSTER_COMMANDS", "$JS.API.STREAM.MSG.GET.MUSTER_EVENTS",
     json.dumps({"last_by_subj": "muster.v1.*.workload.submitted.*.ml.x"}).encode(),
     "the gateway reads who holds a name, and no command"),
    ("gangpermit-local", "$JS.API.CONSUMER.MSG.NEXT.MUSTER_EVENTS.binder-local",
     "$JS.API.CONSUMER.INFO.MUSTER_EVENTS.binder-local",
     PULL, "gang-permit reads how far its binder got (a restart), and takes none of its work"),
    ("gangpermit-local", "$JS.API.CONSUMER.DELETE.MUSTER_EVENTS.binder-local",
     "$JS.API.CONSUMER.INFO.MUSTER_EVENTS.binder-local", b"", "nor deletes it"),
    ("gangpermit-local", "$JS.API.CONSUMER.INFO.MUSTER_EVENTS.binder-w1",
     "$JS.API.CONSUMER.INFO.MUSTER_EVENTS.binder-local", b"", "its own cluster's binder only"),
    ("gangpermit-local", "$JS.API.STREAM.MSG.GET.OBJ_MUSTER_SNAPSHOTS",
     "$JS.API.STREAM.MSG.GET.KV_MUSTER_SIM_local",
     b"{}", "admission's snapshots are admission's"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("user", "refused", "allowed", "why"),
    PUBLISH_CASES,
    ids=[f"{c[0]}:{c[1]}" for c in PUBLISH_CASES],
)
async def test_service_may_not_publish_outside_its_subjects(
    secured: NatsServer, user: str, refused: str, allowed: str, why: str
) -> None:
    async with session(secured.url, user) as s:
        assert await s.attempt(allowed) == "allowed", f"{user} may publish on {allowed}"
        assert await s.attempt(refused) == "refused", why
    assert _violations(secured) >= 1


@pytest.mark.parametrize(
    ("user", "refused", "allowed", "payload", "why"),
    API_CASES,
    ids=[f"{c[0]}:{c[1]}" for c in API_CASES],
)
async def test_service_may_not_use_jetstream_outside_its_streams_and_consumers(
    secured: NatsServer, user: str, refused: str, allowed: str, payload: bytes, why: str
) -> None:
    async with session(secured.url, user) as s:
        assert await s.attempt(allowed, payload) == "allowed", f"{user} may use {allowed}"
        assert await s.attempt(refused, payload) == "refused", why


@pytest.mark.parametrize(
    ("user", "refused", "allowed"),
    [
        ("admission", "muster.v1.>", "_INBOX.admission.x"),
        ("gateway", "_INBOX.binder-local.>", "_INBOX.gateway.>"),
        ("binder-local", "_INBOX.>", "_INBOX.binder-local.>"),
    ],
)
async def test_service_reads_only_its_own_inbox(
    secured: NatsServer, user: str, refused: str, allowed: str
) -> None:
    """Replies (PubAcks, pulled messages, key-value values) reach each service in its inbox;
    no service can listen to the others' or to the subjects themselves."""
    async with session(secured.url, user) as s:
        assert await s.subscribe(allowed) == "allowed"
        assert await s.subscribe(refused) == "refused"


async def test_a_service_before_nats_setup_stops_and_says_what_to_run(tmp_path: Path) -> None:
    """Its user may not make the streams or buckets: it must say so, not hang or crash-loop
    silently (deploy/ runs the nats-setup Job; `muster run` sets up before starting services)."""
    users_block = authorization(users(DEPLOYMENT), auth="password", passwords=PASSWORDS)
    config = server_config(port=-1, store_dir=str(tmp_path / "js"), authorization_block=users_block)
    server = NatsServer(tmp_path, config=config)
    server.start()
    try:
        bus = await connect(
            BusConfig(
                url=server.url,
                user="gateway",
                password=PASSWORDS["gateway"],
                inbox_prefix=inbox_prefix("gateway"),
                publish_timeout_s=1.0,
            )
        )
        try:
            with pytest.raises(SetupError, match=r"stream MUSTER_EVENTS.*muster nats-setup"):
                await bus.ensure_streams()
            with pytest.raises(SetupError, match=r"bucket MUSTER_VISIBILITY.*muster nats-setup"):
                await bus.kv("MUSTER_VISIBILITY")
        finally:
            await bus.close()
    finally:
        server.stop()


async def test_a_service_refused_a_permission_at_start_exits_1_naming_it(
    secured: NatsServer, tmp_path: Path
) -> None:
    """A refusal goes unanswered, like a request lost to a NATS restart, but it never comes
    right: a start that NATS refused is not made again (as one a restart cut short is)."""
    log = tmp_path / "preemption.log"
    status = await exit_status(
        "preemption",
        nats_url=secured.url,
        user="gangpermit-local",
        password=PASSWORDS["gangpermit-local"],
        log=log,
        within_s=45,
    )
    text = log.read_text()
    assert status == 1, text
    assert "NATS refused a permission: nats: permissions violation" in text
    assert "starting again" not in text


def _violations(server: NatsServer) -> int:
    return server.log_path.read_text().count("Violation")


def test_every_refusal_names_a_real_user() -> None:
    known = {u.name for u in users(DEPLOYMENT)}
    for case in (*PUBLISH_CASES, *API_CASES):
        assert case[0] in known


def test_passwords_never_reach_the_server_log(secured: NatsServer) -> None:
    text = secured.log_path.read_text()
    assert text  # the cases above made it write
    assert not [p for p in PASSWORDS.values() if p in text]
