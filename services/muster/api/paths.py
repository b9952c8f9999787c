"""Field paths as YAML spells them, for messages: `spec.podSets[0].count`, `labels["a/b"]`."""

from __future__ import annotations

import re

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_path(base: str, key: str) -> str:
    """Return the path of map entry `key` under `base`: `requests.cpu`, `requests["a.b/c"]`."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{base}.{key}" if base else key
    return f'{base}["{key}"]'
