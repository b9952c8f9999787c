"""Reading a service's /metrics in tests: every sample by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(address: str) -> Samples:
    """The samples `http://<address>/metrics` serves now."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample `name` whose labels include `labels` (summed when several match)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    return sum(found) if found else None
