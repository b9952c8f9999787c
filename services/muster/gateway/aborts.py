"""Ending a gRPC call with a status, and asking the authorizer on behalf of one.

Shared by the gateway's servicers (`service`, `control`, `workloads`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import NoReturn, TypeVar

import grpc
import grpc.aio

from muster.gateway.permissions import Action, Caller, denial
from muster.gateway.permissions_kube import AuthorizationUnavailableError
from muster.gateway.submit import MAX_MESSAGE_BYTES, encoded_size

T = TypeVar("T")

# A status message travels percent-encoded in a trailer, and clients may refuse trailers past
# 8 KiB (then they report "Stream removed", not the status): a message echoing a hostile name
# is cut to the budget a Submit's problems keep to.
_BUDGET = MAX_MESSAGE_BYTES
_SURELY_FITS = _BUDGET // 12  # a character costs at most 4 UTF-8 bytes, 3 encoded each


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, fitted(message))
    raise AssertionError("unreachable: ServicerContext.abort raises")


def fitted(message: str) -> str:
    """`message`, cut where its encoded trailer would pass the budget."""
    if len(message) <= _SURELY_FITS:
        return message
    size = 0
    for i, char in enumerate(message):
        size += encoded_size(char)
        if size > _BUDGET - 64:  # room for the note saying it was cut
            return f"{message[:i]}... (cut: {len(message)} characters)"
    return message


async def answer(question: Awaitable[T], context: grpc.aio.ServicerContext) -> T:
    """The authorizer's answer; UNAVAILABLE when it cannot give one (the API server is away)."""
    try:
        return await question
    except AuthorizationUnavailableError as exc:
        await abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot check permissions now: {exc}")


async def deny(context: grpc.aio.ServicerContext, caller: Caller, action: Action) -> NoReturn:
    await abort(context, grpc.StatusCode.PERMISSION_DENIED, denial(caller, action))
