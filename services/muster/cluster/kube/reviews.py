"""Asking the API server who a token is (TokenReview) and what a user may do
(SubjectAccessReview), for the gateway's `--authentication kube` and `--authorization kube`.

Answers are kept for a while, as the API server's own webhook authenticator and authorizer
cache them: a yes for `allowed_ttl_s`, a no for `denied_ttl_s` (shorter, so a new RoleBinding
applies soon). Keys of the token cache are the token's SHA-256, never the token.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Final, Generic, TypeVar

import msgspec

from muster.cluster.errors import ClusterError
from muster.cluster.kube.retry import Backoff, retrying
from muster.cluster.kube.transport import Transport

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


_BACKOFF: Final = Backoff(attempts=3)  # a caller waits: do not retry for long


class ReviewedUser(msgspec.Struct, frozen=True, kw_only=True):
    """Who the API server says a token is."""

    username: str
    groups: tuple[str, ...] = ()


class ResourceAttributes(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a SubjectAccessReview asks about (the API's own field names)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""


class TtlCache(Generic[K, V]):
    """At most `max_entries` answers, each kept until its own deadline (oldest evicted first)."""

    def __init__(self, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._max = max_entries
        self._clock = clock

    def lookup(self, key: K) -> tuple[bool, V | None]:
        """(True, the answer) while one is kept for `key`, else (False, None)."""
        found = self._entries.get(key)
        if found is None:
            return False, None
        deadline, value = found
        if self._clock() >= deadline:
            del self._entries[key]
            return False, None
        return True, value

    def put(self, key: K, value: V, *, ttl_s: float) -> None:
        self._entries[key] = (self._clock() + ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


class Reviews:
    """TokenReview and SubjectAccessReview over a `Transport`, with cached answers."""

    def __init__(
        self,
        transport: Transport,
        *,
        allowed_ttl_s: float = 60.0,
        denied_ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff = _BACKOFF,
    ) -> None:
        self.transport = transport
        self.allowed_ttl_s = allowed_ttl_s
        self.denied_ttl_s = denied_ttl_s
        self._backoff = backoff
        self._tokens: TtlCache[str, ReviewedUser | None] = TtlCache(clock=clock)
        self._access: TtlCache[tuple[str, tuple[str, ...], ResourceAttributes], bool] = TtlCache(
            clock=clock
        )
        self.asked = 0  # reviews sent to the API server (not answered from the caches)

    async def close(self) -> None:
        await self.transport.close()

    async def user_of(self, token: str) -> ReviewedUser | None:
        """Who `token` is, or None when the API server does not authenticate it.

        Raises ClusterError when the API server cannot be asked (down, or muster's own
        account may not create TokenReviews).
        """
        key = hashlib.sha256(token.encode()).hexdigest()
        known, cached = self._tokens.lookup(key)
        if known:
            return cached
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        status = (await self._review(TOKEN_REVIEWS, body, obj="TokenReview")).get("status") or {}
        user = status.get("user") or {}
        found = None
        if status.get("authenticated") and user.get("username"):
            found = ReviewedUser(
                username=str(user["username"]), groups=tuple(map(str, user.get("groups") or ()))
            )
        self._tokens.put(key, found, ttl_s=self.allowed_ttl_s if found else self.denied_ttl_s)
        return found

    async def may(self, user: str, groups: tuple[str, ...], attributes: ResourceAttributes) -> bool:
        """Whether the API server's authorizer (RBAC) lets `user` do `attributes`."""
        key = (user, groups, attributes)
        known, cached = self._access.lookup(key)
        if known and cached is not None:
            return cached
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": list(groups),
                "resourceAttributes": msgspec.to_builtins(attributes),
            },
        }
        review = await self._review(ACCESS_REVIEWS, body, obj="SubjectAccessReview")
        allowed = bool((review.get("status") or {}).get("allowed"))
        self._access.put(key, allowed, ttl_s=self.allowed_ttl_s if allowed else self.denied_ttl_s)
        return allowed

    async def _review(self, path: str, body: dict[str, Any], *, obj: str) -> dict[str, Any]:
        async def send() -> dict[str, Any]:
            self.asked += 1
            # Not paced by the write bucket: a review creates nothing.
            answer = await self.transport.checked("POST", path, obj=obj, body=body, paced=False)
            if not isinstance(answer, dict):
                raise ClusterError(obj, "Invalid", "the API server answered no object")
            return answer

        return await retrying(send, backoff=self._backoff)
