"""JetStream key-value buckets (`MUSTER_VISIBILITY`, `MUSTER_SHARDS`, `MUSTER_SIM_<cluster>`).

`open_bucket` binds to a bucket, creating it first if it is missing; reads, writes and watches
are nats-py's `KeyValue` methods (`get`, `put`, `create`, `update`, `delete`, `watch`, `keys`).
"""

from __future__ import annotations

import re

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from muster.bus.errors import SetupError

_KEY = re.compile(r"[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*")


def valid_key(key: str) -> bool:
    """Whether `key` can be stored: JetStream's key characters in non-empty dot-separated
    tokens (`lq.ns.../x` has an empty one: the server would refuse its subject)."""
    return _KEY.fullmatch(key) is not None


async def open_bucket(
    js: JetStreamContext,
    bucket: str,
    *,
    ttl_s: float | None = None,
    history: int = 1,
    replicas: int = 1,
) -> KeyValue:
    """The bucket named `bucket`, created with `ttl_s` (None: keep forever), `history` and
    `replicas` (servers of a NATS cluster holding it; an existing bucket is left as it is)."""
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        pass
    # Two processes may create it at once: the server accepts an identical second create.
    try:
        return await js.create_key_value(
            bucket=bucket, ttl=ttl_s, history=history, replicas=replicas
        )
    except TimeoutError as exc:  # a user without the right gets no answer at all
        raise SetupError(
            f"cannot create key-value bucket {bucket} (it is missing): NATS did not answer; with "
            "per-service NATS users run `muster nats-setup` with the admin user first"
        ) from exc
