"""Bearer tokens the gateway knows: a tokens file (or a Secret mounted as one) and the legacy
single `--token`.

The file holds the SHA-256 of each token, never the token, with the identity it stands for:

```yaml
tokens:
- sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
  user: alice
  groups: [team-a]
```

It is read again when it changes (`reloading`), so a token is added or revoked without a
restart. The legacy `--token` is the caller `muster:legacy-token` in group `muster:admins`:
whoever holds it may do anything, as before identities existed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any, Final

from muster.gateway.permissions import ADMIN_GROUP, Caller, PolicyError
from muster.gateway.reloading import ReloadingFile, yaml_document

LEGACY_USER: Final = "muster:legacy-token"
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_ENTRY_FIELDS: Final = ("sha256", "user", "groups")


def token_hash(token: str) -> str:
    """The hex SHA-256 of `token`: what the tokens file lists."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(data: bytes, *, source: str = "tokens") -> dict[str, Caller]:
    """Token hash → caller, from a tokens file's bytes; PolicyError naming every problem.

    Errors name a line or an entry, never a value: the file is a credential store.
    """
    doc = yaml_document(data, source=source)
    if doc is None:
        return {}
    if not isinstance(doc, Mapping) or set(doc) - {"tokens", "apiVersion", "kind"}:
        raise PolicyError([f"{source}: (document): must be a mapping with one field, tokens"])
    entries = doc.get("tokens") or []
    if not isinstance(entries, list):
        raise PolicyError([f"{source}: tokens: must be a list"])
    found: dict[str, Caller] = {}
    problems: list[str] = []
    for i, entry in enumerate(entries):
        where = f"{source}: tokens[{i}]"
        caller, digest, wrong = _entry(entry, where)
        problems += wrong
        if digest in found:
            problems.append(f"{where}.sha256: listed twice")
        elif caller is not None:
            found[digest] = caller
    if problems:
        raise PolicyError(problems)
    return found


def _entry(entry: Any, where: str) -> tuple[Caller | None, str, list[str]]:
    if not isinstance(entry, Mapping):
        return None, "", [f"{where}: must be a mapping with sha256, user and groups"]
    problems = [f"{where}.{k}: unknown field" for k in entry if k not in _ENTRY_FIELDS]
    digest = entry.get("sha256")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest.lower()):
        problems.append(f"{where}.sha256: must be 64 hex digits (the SHA-256 of the token)")
        digest = ""
    user = entry.get("user")
    if not isinstance(user, str) or not user:
        problems.append(f"{where}.user: is required")
    groups = entry.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        problems.append(f"{where}.groups: must be a list of non-empty strings")
    if problems:
        return None, str(digest).lower(), problems
    caller = Caller(user=str(user), groups=tuple(groups), via="token")
    return caller, str(digest).lower(), []


class TokensFile:
    """The tokens file, reloaded on change; `caller(token)` is who the token stands for."""

    def __init__(self, path: str) -> None:
        self._file = ReloadingFile(
            path, parse_tokens, what="tokens file", refuse=_revokes_every_token
        )

    @property
    def reloads(self) -> int:
        return self._file.reloads

    def caller(self, token: str) -> Caller | None:
        return self._file.current().get(token_hash(token))


def _revokes_every_token(last: Mapping[str, Caller], new: Mapping[str, Caller]) -> str:
    """Why a tokens file read again may not leave no token at all: every caller would be
    refused, and a file truncated while it is written (emptied first, then written) reads so."""
    if last and not new:
        return (
            f"tokens: lists no token, where the last good version listed {len(last)}: every "
            "caller would be refused (a file emptied while written?); to start with no token, "
            "restart the gateway"
        )
    return ""


class LegacyToken:
    """The single `--token`: an admin, kept for setups made before identities existed."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the legacy token must not be empty")
        self._expected = token.encode()

    def caller(self, token: str) -> Caller | None:
        if hmac.compare_digest(token.encode(), self._expected):
            return Caller(user=LEGACY_USER, groups=(ADMIN_GROUP,), via="legacy-token")
        return None
