"""Keep credentials out of log lines and error messages.

`redact(text)` removes what looks like a credential: the user and password of a URL
(`nats://user:secret@host` → `nats://***@host`), a bearer token, `password=` / `token=`
values, and every secret this process registered with `register` (its NATS password or
token, the gateway's token). The service runtime's log formatter passes every line through it,
so even a message built by a library cannot print a registered secret.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

MASK: Final = "***"
_MIN_SECRET = 4  # shorter "secrets" would mask ordinary words

_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_ASSIGNED = re.compile(
    r"(?i)\b(password|passwd|token|secret|authorization)(['\"]?\s*[=:]\s*)(['\"]?)"
    r"(?:bearer\s+)?[^\s'\",}]+"
)

_secrets: set[str] = set()


def register(*secrets: str | None) -> None:
    """Mask these values wherever they appear in text passed to `redact` from now on."""
    _secrets.update(s for s in secrets if s and len(s) >= _MIN_SECRET)


def redact(text: str) -> str:
    """`text` without URL credentials, bearer tokens, `password=...` values or registered
    secrets."""
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _ASSIGNED.sub(lambda m: f"{m[1]}{m[2]}{m[3]}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)


def redact_url(url: str) -> str:
    """`url` (or comma-separated URLs) with any user and password replaced by `***`."""
    parts = []
    for one in url.split(","):
        split = urlsplit(one.strip())
        if split.username is None and split.password is None:
            parts.append(one.strip())
            continue
        host = split.netloc.rsplit("@", 1)[1]
        parts.append(urlunsplit(split._replace(netloc=f"{MASK}@{host}")))
    return ",".join(parts)
