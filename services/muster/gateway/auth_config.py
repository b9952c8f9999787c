"""The gateway's security settings (`SecurityConfig`, checked once) and what they open: the
authentication chain, the authorizer, the TLS credentials, the API-server client.

| setting                      | who is calling                                   |
|------------------------------|--------------------------------------------------|
| `tls.client_ca` (mTLS)       | the client certificate: CN user, O groups        |
| `tokens_file`                | a bearer token listed (by SHA-256) in the file   |
| `authentication: kube`       | a Kubernetes bearer token (TokenReview)          |
| `token` (legacy)             | `muster:legacy-token` in `muster:admins`         |
| none of them                 | `muster:anonymous` in `muster:admins`, on loopback |
|                              | only (or `allow_anonymous`, for a container whose |
|                              | port is published on the host's loopback)         |

Authorization: `policy` (the policy file; `muster:admins` only without one) or `kube`
(SubjectAccessReview).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal

import grpc
import msgspec

from muster.cluster.kube.settings import KubeConfig
from muster.gateway.auth import ANONYMOUS, Authentication, TokenAuthenticator
from muster.gateway.auth_certs import ServerCertificates, TlsFiles
from muster.gateway.auth_tokens import LegacyToken, TokensFile
from muster.gateway.permissions import Authorizer, Caller
from muster.gateway.permissions_file import PolicyAuthorizer

if TYPE_CHECKING:
    from muster.cluster.kube.reviews import Reviews

AuthenticationMode = Literal["static", "kube"]
AuthorizationMode = Literal["policy", "kube"]
AUTHENTICATION_MODES: tuple[AuthenticationMode, ...] = ("static", "kube")
AUTHORIZATION_MODES: tuple[AuthorizationMode, ...] = ("policy", "kube")


class SecurityConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the gateway authenticates and authorizes (see the module doc)."""

    token: str | None = None  # legacy: the one bearer token of an admin
    tokens_file: str = ""
    tls: TlsFiles | None = None
    authentication: AuthenticationMode = "static"
    authorization: AuthorizationMode = "policy"
    policy_file: str = ""
    kube: KubeConfig = KubeConfig()  # the API server, for the kube modes
    # Anonymous admins on any address: only where the network already limits who reaches the
    # port (compose publishes the container's port on the host's loopback only).
    allow_anonymous: bool = False

    def __post_init__(self) -> None:
        if self.token is not None and not self.token:
            raise ValueError("token must not be empty")
        if self.authentication not in AUTHENTICATION_MODES:
            raise ValueError(f"authentication must be static or kube, got {self.authentication!r}")
        if self.authorization not in AUTHORIZATION_MODES:
            raise ValueError(f"authorization must be policy or kube, got {self.authorization!r}")
        if self.authorization == "kube" and self.policy_file:
            raise ValueError("a policy file is for --authorization policy, not kube")
        problems = self.kube.problems()
        if problems:
            raise ValueError("; ".join(problems))
        if self.allow_anonymous and self.authenticates:
            raise ValueError("allowing anonymous callers makes no sense with authentication")

    @property
    def authenticates(self) -> bool:
        """Whether any caller must prove who they are (else everyone is anonymous)."""
        client_ca = self.tls is not None and bool(self.tls.client_ca)
        return bool(self.token or self.tokens_file or client_ca or self.authentication == "kube")

    def check_listen(self, host: str) -> None:
        """ValueError when nothing authenticates callers and `host` is not loopback."""
        if not self.authenticates and not self.allow_anonymous and not is_loopback(host):
            raise ValueError(
                f"listening on {host} needs authentication: give --tokens-file, --client-ca, "
                "--authentication kube or --token (without any, every caller is an admin, so "
                "only a loopback address is allowed, unless --allow-anonymous on)"
            )


def is_loopback(host: str) -> bool:
    """Whether `host` ("127.0.0.1", "[::1]", "localhost") is only reachable from this machine."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Security(msgspec.Struct, kw_only=True):
    """What `open_security` opened, for the gateway's lifetime."""

    authentication: Authentication
    authorizer: Authorizer
    certificates: ServerCertificates | None

    @property
    def credentials(self) -> grpc.ServerCredentials | None:
        return self.certificates.credentials if self.certificates is not None else None


@contextlib.asynccontextmanager
async def open_security(config: SecurityConfig) -> AsyncIterator[Security]:
    """Read the files (FileError, a ValueError, when one is bad) and connect to the API server
    when a kube mode needs it (ClusterError when there is no client configuration)."""
    certificates = ServerCertificates(config.tls) if config.tls is not None else None
    tokens: list[TokenAuthenticator] = []
    if config.tokens_file:
        tokens.append(_Sync(TokensFile(config.tokens_file)))
    if config.token:
        tokens.append(_Sync(LegacyToken(config.token)))
    authorizer: Authorizer = PolicyAuthorizer(config.policy_file)
    async with contextlib.AsyncExitStack() as stack:
        if "kube" in (config.authentication, config.authorization):
            # Imported here: the Kubernetes client is loaded only when a kube mode is on.
            from muster.gateway.auth_kube import KubeTokens
            from muster.gateway.permissions_kube import KubeAuthorizer

            reviews = await open_reviews(config.kube)
            stack.push_async_callback(reviews.close)
            if config.authentication == "kube":
                tokens.append(KubeTokens(reviews))
            if config.authorization == "kube":
                authorizer = KubeAuthorizer(reviews)
        authentication = Authentication(
            tokens=tokens,
            certificates=config.tls is not None and bool(config.tls.client_ca),
            anonymous=None if config.authenticates else ANONYMOUS,
        )
        yield Security(
            authentication=authentication, authorizer=authorizer, certificates=certificates
        )


async def open_reviews(kube: KubeConfig) -> Reviews:
    """TokenReview and SubjectAccessReview against the API server of `kube` (close it)."""
    from muster.cluster.kube.config import api_client
    from muster.cluster.kube.ratelimit import TokenBucket
    from muster.cluster.kube.reviews import Reviews
    from muster.cluster.kube.transport import Transport

    api = await api_client(kube)
    transport = Transport(api, writes=TokenBucket(0, 1), request_timeout_s=kube.request_timeout_s)
    return Reviews(transport)


class _Sync:
    """A token table (tokens file, legacy token) as a `TokenAuthenticator`."""

    def __init__(self, table: TokensFile | LegacyToken) -> None:
        self.table = table

    async def authenticate(self, token: str) -> Caller | None:
        return self.table.caller(token)

    def known(self, token: str) -> Caller | None:
        return self.table.caller(token)
