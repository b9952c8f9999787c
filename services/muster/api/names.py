"""Names as Kubernetes checks them: object names, label keys and values, generated names.

Every name muster takes from a user reaches event payloads, key-value keys and file names, so
each is checked here before it gets anywhere: DNS-1123 subdomains (most object names, and
Kueue's references to them: `spec.clusterQueue`, `spec.queueName`, cohorts, flavors), DNS-1123
labels (namespaces, podset names), label keys and values (`metadata.labels`). The rules and
limits are Kubernetes' (`k8s.io/apimachinery/pkg/util/validation`) and Kueue's CRD patterns.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Final, Protocol

from muster.api.paths import key_path

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
LABEL_VALUE_MAX: Final = 63
ANNOTATIONS_MAX_BYTES: Final = 256 * 1024  # all of an object's annotations together
# A generated name is the prefix (cut to fit) and 5 characters from Kubernetes' alphabet,
# which has no vowels (no words) and no 0/1/3 (no look-alikes).
GENERATED_SUFFIX_LENGTH: Final = 5
GENERATED_PREFIX_MAX: Final = DNS1123_LABEL_MAX - GENERATED_SUFFIX_LENGTH
_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL: Final = re.compile(_LABEL, re.ASCII)
_DNS1123_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.ASCII)
_QUALIFIED_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
_LABEL_VALUE: Final = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?", re.ASCII)

NameCheck = Callable[[str], "str | None"]


def dns1123_label_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 label (a namespace, a podset), or None when it is."""
    if len(name) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters, got {len(name)}"
    if not _DNS1123_LABEL.fullmatch(name):
        return (
            f"must be a DNS-1123 label (lower-case letters, digits and '-', starting and"
            f" ending with a letter or digit), got {_shown(name)}"
        )
    return None


def dns1123_subdomain_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (most object names), or None when it is."""
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters, got {len(name)}"
    if not _DNS1123_SUBDOMAIN.fullmatch(name):
        return (
            f"must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each"
            f" part starting and ending with a letter or digit), got {_shown(name)}"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` cannot be a label value, or None when it can ("" can)."""
    if len(value) > LABEL_VALUE_MAX:
        return f"must be no more than {LABEL_VALUE_MAX} characters, got {len(value)}"
    if not _LABEL_VALUE.fullmatch(value):
        return (
            "must be a label value (letters, digits, '-', '_' and '.', starting and ending"
            f" with a letter or digit), got {_shown(value)}"
        )
    return None


def qualified_name_problem(key: str) -> str | None:
    """Why `key` cannot be a label or annotation key (`[prefix/]name`), or None when it can."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or dns1123_subdomain_problem(prefix) is not None):
        return f"prefix must be a DNS-1123 subdomain, got {_shown(key)}"
    if not name or len(name) > DNS1123_LABEL_MAX or not _QUALIFIED_NAME.fullmatch(name):
        return (
            f"name part must be 1 to {DNS1123_LABEL_MAX} letters, digits, '-', '_' or '.',"
            f" starting and ending with a letter or digit, got {_shown(key)}"
        )
    return None


def label_problems(labels: Mapping[str, str], *, path: str) -> Iterator[tuple[str, str]]:
    """(field path, problem) for each bad key or value of `labels`."""
    for key, value in labels.items():
        problem = qualified_name_problem(key)
        if problem is None:
            problem = label_value_problem(value)
        if problem is not None:
            yield key_path(path, key), problem


def annotation_problems(annotations: Mapping[str, str], *, path: str) -> Iterator[tuple[str, str]]:
    """(field path, problem) for each bad key of `annotations`, and for their total size."""
    total = 0
    for key, value in annotations.items():
        problem = qualified_name_problem(key)
        if problem is not None:
            yield key_path(path, key), problem
        total += len(key.encode("utf-8", "replace")) + len(value.encode("utf-8", "replace"))
    if total > ANNOTATIONS_MAX_BYTES:
        yield path, f"must have at most {ANNOTATIONS_MAX_BYTES} bytes in all, got {total}"


def generated_name(prefix: str, *, seed: str) -> str:
    """`prefix` (cut to fit) plus 5 characters derived from `seed`, as `generateName` asks.

    Kubernetes draws the 5 characters at random; muster derives them from `seed`, so the same
    seed (a scenario file and position, a Submit's idempotency key and position) always names
    the object alike and a retried Submit creates nothing twice.
    """
    digest = int.from_bytes(hashlib.sha256(f"{seed}/{prefix}".encode()).digest()[:8], "big")
    suffix = []
    for _ in range(GENERATED_SUFFIX_LENGTH):
        digest, index = divmod(digest, len(_ALPHABET))
        suffix.append(_ALPHABET[index])
    return prefix[:GENERATED_PREFIX_MAX] + "".join(suffix)


def _shown(text: str) -> str:
    """`text` quoted for a message, cut short: a hostile name may be long or odd."""
    return ascii(text) if len(text) <= 80 else f"{text[:77]!a}..."


class _Errors(Protocol):
    def add(self, path: str, problem: str) -> None: ...


def check_reference(errs: _Errors, name: str | None, path: str, *, label: bool = False) -> None:
    """Record a problem with `name`, a reference to another object (`spec.clusterQueue`, a
    flavor, a cohort), unless it is empty or a valid name: a DNS-1123 subdomain, or with
    `label` a DNS-1123 label (Kueue's podset names)."""
    if not name:
        return
    problem = dns1123_label_problem(name) if label else dns1123_subdomain_problem(name)
    if problem is not None:
        errs.add(path, problem)
