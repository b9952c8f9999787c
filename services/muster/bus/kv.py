"""JetStream key-value buckets (`MUSTER_VISIBILITY`, `MUSTER_SHARDS`, `MUSTER_SIM_<cluster>`).

`open_bucket` binds to a bucket, creating it first if it is missing; reads, writes and watches
are nats-py's `KeyValue` methods (`get`, `put`, `create`, `update`, `delete`, `watch`, `keys`).
`follow_bucket` hands every entry of a bucket to a callback, for as long as the service runs,
across NATS restarts.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from muster.bus.cancel import raise_if_cancelling
from muster.bus.errors import SetupError

log = logging.getLogger(__name__)

_RETRY_S: Final = 1.0
_DELETED: Final = ("DEL", "PURGE")

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


class OpenBucket(Protocol):
    """`Bus.kv`: the bucket of that name, created when missing."""

    async def __call__(self, bucket: str) -> KeyValue: ...


# A key and its value (None: the key was deleted); may be a coroutine function.
OnEntry = Callable[[str, bytes | None], Awaitable[None] | None]


async def follow_bucket(
    open_bucket: OpenBucket,
    bucket: str,
    on_entry: OnEntry,
    *,
    on_loaded: Callable[[], None] | None = None,
) -> None:
    """Hand every entry of `bucket` to `on_entry`: the stored ones (then `on_loaded()`), then
    each change, until cancelled; after any NATS error (a server restart) the watch starts over
    from the stored values a second later, so callers must take a repeated entry as news."""
    while True:
        raise_if_cancelling()
        try:
            kv = await open_bucket(bucket)
            watcher = await kv.watchall()
            try:
                # Setting up the watch may have swallowed a cancellation (bus/cancel.py), and
                # with nothing written to the bucket the loop below would never look again.
                raise_if_cancelling()
                async for entry in watcher:
                    if entry is None:  # the stored values are all in
                        if on_loaded is not None:
                            on_loaded()
                        continue
                    deleted = entry.operation in _DELETED
                    done = on_entry(entry.key, None if deleted else (entry.value or b""))
                    if inspect.isawaitable(done):
                        await done
            finally:
                await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
            log.warning("%s not followed, again in %gs: %r", bucket, _RETRY_S, exc)
        await asyncio.sleep(_RETRY_S)
