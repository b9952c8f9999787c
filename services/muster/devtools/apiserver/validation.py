"""Metadata checks every resource gets on create and update: names, labels, annotations.

Each check returns `Cause`s (one per bad field) so a request is answered 422 with all of them.
"""

from __future__ import annotations

import re

from muster.devtools.apiserver.errors import Cause, bad_value, required
from muster.devtools.apiserver.objects import JsonObj, meta

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(_LABEL)
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def dns_label_causes(field: str, value: str) -> list[Cause]:
    """RFC 1123 label: lower-case alphanumerics and '-', at most 63 characters."""
    if len(value) > 63:
        return [bad_value(field, value, "must be no more than 63 characters")]
    if not _DNS_LABEL.fullmatch(value):
        return [
            bad_value(
                field,
                value,
                "not an RFC 1123 label (lower-case letters, digits and "
                "'-', beginning and ending with a letter or digit)",
            )
        ]
    return []


def dns_subdomain_causes(field: str, value: str) -> list[Cause]:
    """RFC 1123 subdomain: dot-separated labels, at most 253 characters."""
    if len(value) > 253:
        return [bad_value(field, value, "must be no more than 253 characters")]
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return [
            bad_value(
                field,
                value,
                "not an RFC 1123 subdomain (dot-separated labels of "
                "lower-case letters, digits and '-')",
            )
        ]
    return []


def qualified_name_causes(field: str, key: str) -> list[Cause]:
    """A label or annotation key: an optional DNS-subdomain prefix and '/', then a name of at
    most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or dns_subdomain_causes(field, prefix)):
        return [bad_value(field, key, "the prefix part is not an RFC 1123 subdomain")]
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return [
            bad_value(
                field,
                key,
                "the name part is not up to 63 letters, digits, '-', '_' "
                "and '.', beginning and ending with a letter or digit",
            )
        ]
    return []


def label_value_causes(field: str, value: object) -> list[Cause]:
    if not isinstance(value, str):
        return [bad_value(field, value, "must be a string")]
    if value and (len(value) > 63 or not _QUALIFIED_NAME.fullmatch(value)):
        return [
            bad_value(
                field,
                value,
                "not a label value (empty, or up to 63 letters, digits, "
                "'-', '_' and '.', beginning and ending with a letter or digit)",
            )
        ]
    return []


def metadata_causes(obj: JsonObj, *, name_check: str, namespaced: bool) -> list[Cause]:
    """Problems with `obj.metadata`; `name_check` is "label", "subdomain" or "label-value"."""
    md = meta(obj)
    causes: list[Cause] = []
    name = md.get("name")
    if not isinstance(name, str) or not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    elif name_check == "label":
        causes += dns_label_causes("metadata.name", name)
    else:
        causes += dns_subdomain_causes("metadata.name", name)
        if name_check == "label-value" and len(name) > 63:
            causes.append(bad_value("metadata.name", name, "must be no more than 63 characters"))
    if namespaced and not md.get("namespace"):
        causes.append(required("metadata.namespace"))
    return causes + labels_and_annotations_causes(md, "metadata")


def labels_and_annotations_causes(md: JsonObj, path: str) -> list[Cause]:
    """Problems with the labels and annotations of metadata `md` (at `path`: an object's, or
    a pod template's, which Kubernetes checks the same way)."""
    causes: list[Cause] = []
    for field in ("labels", "annotations"):
        values = md.get(field)
        if values is None:
            continue
        if not isinstance(values, dict):
            causes.append(bad_value(f"{path}.{field}", "", "must be a map of strings"))
            continue
        for key, value in values.items():
            causes += qualified_name_causes(f"{path}.{field}", key)
            if field == "labels":
                causes += label_value_causes(f"{path}.labels", value)
            elif not isinstance(value, str):
                causes.append(bad_value(f"{path}.annotations", value, "must be a string"))
    return causes
