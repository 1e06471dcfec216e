"""Cluster-wide lists of connections, channels and consumers (docs/cluster.md).

On a cluster node a list route adds what the other live nodes list for the same path
(``BrokerFacade.peers``, fetched on demand, ``cluster/admin_peers.py``) to its own items, each
naming its ``node``. Another node's request (``request.state.cluster_peer``) gets this
node's items only, so nothing fans out twice; the asking node filters the others' items by
what its user may see. Nodes that did not answer in time are named in ``PARTIAL_HEADER``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request, Response

from sievemq.admin_api.pagination import paginate
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import PARTIAL_HEADER, AdminPeersPort

Item = dict[str, Any]


def peers_of(request: Request, f: BrokerFacade) -> AdminPeersPort | None:
    """The other nodes to ask, or None: a single node, or a request from another node."""
    if getattr(request.state, "cluster_peer", False):
        return None
    return f.peers


def request_path(request: Request) -> str:
    """The path as the client sent it (still percent-encoded: ``%2F`` stays one segment)."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
    return path.split("?", 1)[0]


async def cluster_list(
    request: Request, f: BrokerFacade, local: list[Item], keep: Callable[[Item], bool]
) -> Response:
    """``local`` plus the other nodes' items for this path that ``keep`` lets through,
    paginated as one list."""
    peers = peers_of(request, f)
    missing: list[str] = []
    items = local
    if peers is not None:
        listing = await peers.gather(request_path(request))
        items = local + [i for i in listing.items if keep(i)]
        missing = listing.missing
    response = await paginate(request, items)
    if missing:
        response.headers[PARTIAL_HEADER] = ",".join(missing)
    return response


async def remote_object(request: Request, f: BrokerFacade, path: str) -> tuple[str, Item] | None:
    """The node that has the object at ``path`` (it was not found here), and the object."""
    peers = peers_of(request, f)
    return None if peers is None else await peers.find(path)


def owned_by(who_name: str, may_monitor: bool) -> Callable[[Item], bool]:
    """Items a user may see: every one with the monitoring tag, else their own."""
    return lambda item: may_monitor or item.get("user") == who_name
