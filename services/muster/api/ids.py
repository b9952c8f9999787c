"""UUID strings as `str(uuid.uuid5(...))` and `str(uuid.uuid4())` spell them, made cheaply.

Every Submit derives two name-based ids (the object's uid, the event's id) and draws one random
id; building `uuid.UUID` objects for them took about 5 % of the gateway's CPU per call
(`muster bench e2e`). The strings are the same as the standard library's, bit for bit: ids
derived here must never change (JetStream dedupes on them across upgrades).
"""

from __future__ import annotations

import hashlib
import os
import uuid


def uuid5_text(namespace: uuid.UUID, name: str) -> str:
    """`str(uuid.uuid5(namespace, name))`, without the UUID objects."""
    digest = hashlib.sha1(namespace.bytes + name.encode(), usedforsecurity=False).digest()
    return _spelled(bytearray(digest), version=5)


def uuid4_text() -> str:
    """`str(uuid.uuid4())`: a random id, without the UUID object."""
    return _spelled(bytearray(os.urandom(16)), version=4)


def _spelled(raw: bytearray, *, version: int) -> str:
    """The first 16 bytes of `raw` as an RFC 4122 UUID of `version`, in its 8-4-4-4-12 form."""
    raw[6] = (raw[6] & 0x0F) | (version << 4)
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = raw[:16].hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
