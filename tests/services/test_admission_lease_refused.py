"""A shard lease NATS refuses ends admission's start with the key and the refusal named, where
it used to wait for the lease forever (a refusal looked like NATS being away).

Two refusals: a NATS user who may not write the lease's key (the server drops the request and
reports a permissions violation), and a `MUSTER_SHARDS` bucket that cannot hold the lease's
value (JetStream answers with an error).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from admission_world import start_admission
from nats.js.api import KeyValueConfig
from nats_process import NatsServer
from service_exit import exit_status

from muster.admission.lease import LeaseRefusedError
from muster.bus import Bus, BusConfig
from muster.bus.buckets import SHARDS_BUCKET
from muster.bus.natsconf import server_config

pytestmark = pytest.mark.timeout(60)

EXITS_WITHIN_S = 45.0  # a refusal is told at once or after one request's timeout (5 s)

# Every right but writing the shard leases' keys.
NO_LEASE_WRITES = """
authorization {
  users = [
    { user: "admission", password: "not-a-secret",
      permissions: { publish: { allow: ">", deny: "$KV.MUSTER_SHARDS.>" }, subscribe: ">" } }
  ]
}
"""


async def test_a_lease_key_the_user_may_not_write_exits_1_naming_it(tmp_path: Path) -> None:
    config = server_config(
        port=-1, store_dir=str(tmp_path / "js"), authorization_block=NO_LEASE_WRITES
    )
    server = NatsServer(tmp_path, config=config)
    server.start()
    log = tmp_path / "admission.log"
    try:
        status = await exit_status(
            "admission",
            nats_url=server.url,
            user="admission",
            password="not-a-secret",
            log=log,
            within_s=EXITS_WITHIN_S,
        )
    finally:
        server.stop()
    text = log.read_text()
    assert status == 1, text
    assert "lease admission.0: NATS refused a permission" in text
    assert "$kv.muster_shards.admission.0" in text.lower()  # the server names the subject
    assert "starting again" not in text


async def test_a_bucket_that_cannot_hold_the_lease_stops_admission_naming_it(
    bus: Bus, bus_config: BusConfig
) -> None:
    # Made by someone else, too small for an owner's name: admission takes it as it is.
    await bus.js.create_key_value(KeyValueConfig(bucket=SHARDS_BUCKET, max_value_size=4))
    admission = await start_admission(bus_config)
    try:
        with pytest.raises(LeaseRefusedError, match=r"lease admission\.0: JetStream refused it"):
            await asyncio.wait_for(admission.task, EXITS_WITHIN_S)
        assert not admission.health.serving
    finally:
        await admission.stop()
