"""`Bucket.create` when the key expires during it: nats-py's create, refused because the key
was there, reads the key to tell a deleted one from a live one, and finds nothing (its TTL
ended in between, as an admission lease's does while a successor waits for it). That is a
create that lost a race, a `Conflict` to try again after, not a missing bucket: a restarted
admission replica exited on it (`muster bench chaos`)."""

from __future__ import annotations

from typing import cast

import nats.js.errors
import pytest
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from muster.bus.errors import Conflict
from muster.bus.kv import Bucket


class ExpiringKey:
    """nats-py's `KeyValue.create` as it behaves when the key expires between its write and
    its check: KeyNotFoundError."""

    async def create(self, key: str, value: bytes) -> int:
        raise nats.js.errors.KeyNotFoundError


async def test_a_key_that_expired_during_a_create_is_a_conflict() -> None:
    bucket = Bucket(cast(KeyValue, ExpiringKey()), "MUSTER_SHARDS", js=cast(JetStreamContext, None))
    with pytest.raises(Conflict) as lost:
        await bucket.create("admission.0", b"owner")
    assert lost.value.subject == "$KV.MUSTER_SHARDS.admission.0"
