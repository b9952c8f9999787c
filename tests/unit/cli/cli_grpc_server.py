"""A stand-in gateway for the client commands' tests: a real gRPC server on a free loopback
port serving one servicer of the test's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TypeVar

import grpc

S = TypeVar("S")


@contextlib.contextmanager
def serving(add: Callable[[S, grpc.Server], None], servicer: S) -> Iterator[str]:
    """The address of a server `add` gave `servicer` to, for the body; stopped after it."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
