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

T = TypeVar("T")


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable: ServicerContext.abort raises")


async def answer(question: Awaitable[T], context: grpc.aio.ServicerContext) -> T:
    """The authorizer's answer; UNAVAILABLE when it cannot give one (the API server is away)."""
    try:
        return await question
    except AuthorizationUnavailableError as exc:
        await abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot check permissions now: {exc}")


async def deny(context: grpc.aio.ServicerContext, caller: Caller, action: Action) -> NoReturn:
    await abort(context, grpc.StatusCode.PERMISSION_DENIED, denial(caller, action))
