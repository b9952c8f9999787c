"""What a Visibility.Clusters request asks for (`NodeQuery`), checked, and its continue token.

Nodes are listed in (cluster, node name) order; a page ends after `limit` nodes, and its
token names the last node it held, so the next page starts after it, as Kubernetes lists
continue from a key. Nodes that join or leave between pages are seen or not, as in a
Kubernetes list continued after its snapshot expired; none is listed twice.
The token is opaque to callers (base64url of a small JSON array), and checked as hostile input.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

import msgspec

from muster.contracts.v1 import services_pb2
from muster.gateway.visibility import InvalidQueryError

MAX_LIMIT: Final = 10_000
MAX_TOKEN_CHARS: Final = 2_048  # far past any token this gateway writes
_TOKEN_VERSION: Final = 1


class NodeQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which clusters, whether with nodes, and which page of them. `after`: the (cluster,
    node) the previous page ended with; `limit` 0: every node, if the answer fits."""

    cluster: str = ""
    without_nodes: bool = False
    limit: int = 0
    after: tuple[str, str] | None = None


EVERYTHING: Final = NodeQuery()


def node_query(request: services_pb2.ClustersRequest) -> NodeQuery:
    """The request, checked; InvalidQueryError naming the field otherwise."""
    if request.limit < 0 or request.limit > MAX_LIMIT:
        raise InvalidQueryError(f"limit: must be from 0 to {MAX_LIMIT}, got {request.limit}")
    if request.without_nodes and (request.limit or request.continue_token):
        field = "limit" if request.limit else "continue_token"
        raise InvalidQueryError(f"{field}: pages nodes, and without_nodes asks for none")
    after = None
    if request.continue_token:
        after = _after(request.continue_token, cluster=request.cluster)
    return NodeQuery(
        cluster=request.cluster,
        without_nodes=request.without_nodes,
        limit=request.limit,
        after=after,
    )


def continue_token(cluster: str, last: tuple[str, str]) -> str:
    """The token of the page after the node `last`, for requests selecting `cluster`."""
    body = msgspec.json.encode([_TOKEN_VERSION, cluster, *last])
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


def _after(token: str, *, cluster: str) -> tuple[str, str]:
    """The node a token's page ended with; InvalidQueryError naming `continue_token`."""
    bad = InvalidQueryError(
        "continue_token: not a token of this gateway's (pass the continue_token of the "
        "previous page unchanged, or none for the first page)"
    )
    if len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise bad
    try:
        body = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        version, selected, last_cluster, last_node = msgspec.json.decode(
            body, type=tuple[int, str, str, str]
        )
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise bad from None
    if version != _TOKEN_VERSION:
        raise bad
    if selected != cluster:
        shown = f"cluster {selected!r}" if selected else "every cluster"
        raise InvalidQueryError(
            f"continue_token: was given for {shown}; ask with the same cluster, or start over"
        )
    return last_cluster, last_node
