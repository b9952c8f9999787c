"""Who is calling: every RPC but the health service is authenticated before its request is read.

The gateway's server (`loop_server`, or `aio_server`) finds each call's caller with
`authenticate` before it reads the request: a verified client certificate, else
`authorization: Bearer <token>` checked by each token authenticator in turn; UNAUTHENTICATED,
without reading the body, when there is none. The handler finds the caller with `current_caller()`.

Without any authentication configured the gateway may only listen on loopback (checked by
`GatewayConfig`), and every caller is `muster:anonymous` in group `muster:admins`: the local
demo works with no setup.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterable, Sequence
from typing import Final, NoReturn, Protocol, cast, runtime_checkable

import grpc

from muster.gateway.auth_certs import subject_caller
from muster.gateway.permissions import ADMIN_GROUP, Caller

log = logging.getLogger(__name__)

UNAUTHENTICATED_MESSAGE: Final = (
    "missing or invalid credentials (a bearer token or a client certificate)"
)
ANONYMOUS: Final = Caller(user="muster:anonymous", groups=(ADMIN_GROUP,), via="anonymous")

Metadata = Iterable[tuple[str, str | bytes]]
# Set for each call by the server (`loop_server` or `aio_server`), read by the servicers.
CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("muster_gateway_caller")


class AuthenticationUnavailableError(Exception):
    """The caller could not be checked now (the API server did not answer a TokenReview)."""


class TokenAuthenticator(Protocol):
    """Who a bearer token stands for, or None when this authenticator does not know it."""

    async def authenticate(self, token: str) -> Caller | None: ...


@runtime_checkable
class LocalTokens(TokenAuthenticator, Protocol):
    """A `TokenAuthenticator` that asks no one (a tokens file): it can answer on any thread."""

    def known(self, token: str) -> Caller | None: ...


class Authentication:
    """The chain every call goes through: client certificate, then bearer tokens.

    `anonymous` (only when nothing else is configured) is who a call without credentials is.
    """

    def __init__(
        self,
        *,
        tokens: Sequence[TokenAuthenticator] = (),
        certificates: bool = False,
        anonymous: Caller | None = None,
    ) -> None:
        self.tokens = tuple(tokens)
        self.certificates = certificates
        self.anonymous = anonymous
        # Whether `caller_at_once` may answer: no authenticator asks anyone (TokenReview).
        self.at_once = all(isinstance(t, LocalTokens) for t in self.tokens)

    async def caller(
        self, metadata: Metadata | None, auth_context: dict[str, list[bytes]] | None
    ) -> Caller | None:
        """Who is calling, or None. A certificate wins over a token, as in Kubernetes."""
        if self.at_once:
            return self.caller_at_once(metadata, auth_context)
        found, token = self._without_tokens(metadata, auth_context)
        if token is None:
            return found
        for authenticator in self.tokens:
            if (found := await authenticator.authenticate(token)) is not None:
                return found
        return None  # a token nobody knows is refused, even where anonymous is allowed

    def caller_at_once(
        self, metadata: Metadata | None, auth_context: dict[str, list[bytes]] | None
    ) -> Caller | None:
        """`caller` without waiting, on any thread; only when `at_once`."""
        found, token = self._without_tokens(metadata, auth_context)
        if token is None:
            return found
        known = (cast(LocalTokens, t).known(token) for t in self.tokens)
        return next((caller for caller in known if caller is not None), None)

    def _without_tokens(
        self, metadata: Metadata | None, auth_context: dict[str, list[bytes]] | None
    ) -> tuple[Caller | None, str | None]:
        """The caller a certificate, or a call without a token, stands for (and None); else
        None and the bearer token the token authenticators must look at."""
        if self.certificates and auth_context:
            found = subject_caller(auth_context)
            if found is not None:
                return found, None
        token = bearer_token(metadata)
        if token is not None and self.tokens:  # with none configured a token means nothing
            return None, token
        return self.anonymous, None


def bearer_token(metadata: Metadata | None) -> str | None:
    """The token of the first `authorization: Bearer <token>` metadata entry, if any."""
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        scheme, _, token = text.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def current_caller() -> Caller:
    """The caller of the RPC being handled (set by the server)."""
    return CALLER.get()


class CallContext(Protocol):
    """What authenticating a call reads of its context (`loop_server.CallContext`)."""

    def invocation_metadata(self) -> Metadata | None: ...

    def auth_context(self) -> dict[str, list[bytes]]: ...

    def peer(self) -> str: ...

    async def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...


def peer_identity(
    authentication: Authentication, context: CallContext
) -> dict[str, list[bytes]] | None:
    """The call's TLS identity where client certificates are checked, else None: gRPC builds
    that dict anew at each asking, and without certificates nothing reads it."""
    return context.auth_context() if authentication.certificates else None


async def authenticate(authentication: Authentication, context: CallContext, method: str) -> Caller:
    """Who is calling `method`; UNAUTHENTICATED (or UNAVAILABLE) ends the call otherwise."""
    try:
        caller = await authentication.caller(
            context.invocation_metadata(), peer_identity(authentication, context)
        )
    except AuthenticationUnavailableError as exc:
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot check credentials now: {exc}")
    if caller is None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, unauthenticated(method, context))
    return caller


def unauthenticated(method: str, context: CallContext) -> str:
    """The status message of a call refused for want of credentials, logged."""
    # The peer and method only: never the credential.
    log.info("refused an unauthenticated call to %s from %s", method, context.peer())
    return UNAUTHENTICATED_MESSAGE
