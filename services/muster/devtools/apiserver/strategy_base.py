"""The shape of a per-kind strategy (`strategies`, `gangs`): defaults, server-set fields on
create, validation, and which fields an update may change."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from muster.devtools.apiserver.errors import Cause
from muster.devtools.apiserver.objects import JsonObj


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """What strategies may read besides the object: PriorityClasses and the time."""

    priority_class: Callable[[str], JsonObj | None]
    global_default_priority_class: Callable[[], JsonObj | None]
    now: str


class Strategy:
    """The default: no defaults, no extra checks; metadata names are RFC 1123 subdomains."""

    name_check = "subdomain"

    def defaults(self, obj: JsonObj) -> None:
        """Fill fields the server defaults when missing (on create and on update)."""

    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        """Server-set fields of a new object; may raise ApiError (admission)."""

    def causes(self, obj: JsonObj) -> list[Cause]:
        return []

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        return []
