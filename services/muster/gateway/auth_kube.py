"""`--authentication kube`: Kubernetes bearer tokens (service accounts, OIDC, whatever the API
server accepts) checked with the TokenReview API, so what works with kubectl works here."""

from __future__ import annotations

from muster.cluster.errors import ClusterError
from muster.cluster.kube.reviews import Reviews
from muster.gateway.auth import AuthenticationUnavailableError
from muster.gateway.permissions import Caller


class KubeTokens:
    """A `TokenAuthenticator` asking the API server (answers cached by `Reviews`)."""

    def __init__(self, reviews: Reviews) -> None:
        self._reviews = reviews

    async def authenticate(self, token: str) -> Caller | None:
        try:
            user = await self._reviews.user_of(token)
        except ClusterError as exc:  # the API server is down, or refuses muster's account
            raise AuthenticationUnavailableError(f"TokenReview: {exc.message}") from None
        if user is None:
            return None
        return Caller(user=user.username, groups=user.groups, via="kube-token")
