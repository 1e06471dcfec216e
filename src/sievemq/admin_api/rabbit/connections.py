"""``/api/connections``: AMQP and stream-protocol connections (users without the monitoring
tag see only their own), one connection, closing it, and its channels. On a cluster node
every node's (``admin_api/cluster_lists.py``), each with its ``node``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api import shapes
from sievemq.admin_api.cluster_lists import cluster_list, owned_by, peers_of, remote_object
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import ApiError, not_authorised, not_found
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, readable_vhost
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import NotFound, Principal

router = APIRouter(tags=[TAG])


def visible_connections(f: BrokerFacade, who: Principal, vhost: str | None) -> list[Any]:
    """The connections ``who`` may see: all with the monitoring tag, else their own."""
    return [c for c in f.list_connections(vhost) if who.may_monitor or c.user == who.name]


def own_connection(f: BrokerFacade, who: Principal, conn: str) -> Any:
    """One connection ``who`` may see (404 otherwise, as if it did not exist)."""
    view = f.get_connection(conn)
    if not who.may_monitor and view.user != who.name:
        raise not_found()
    return view


async def find_connection(
    request: Request, f: Facade, who: Principal, conn: str
) -> tuple[str | None, dict[str, Any]]:
    """A connection ``who`` may see, on this node (None) or the node that holds it."""
    try:
        return None, shapes.connection(own_connection(f, who, name(conn)), f.node_name)
    except NotFound:
        found = await remote_object(request, f, f"/api/connections/{conn}")
        if found is None or not owned_by(who.name, who.may_monitor)(found[1]):
            raise
        return found


@router.get("/connections")
async def list_connections(request: Request, f: Facade, who: User) -> Any:
    local = [shapes.connection(c, f.node_name) for c in visible_connections(f, who, None)]
    return await cluster_list(request, f, local, owned_by(who.name, who.may_monitor))


@router.get("/vhosts/{vhost}/connections")
async def list_vhost_connections(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    local = [shapes.connection(c, f.node_name) for c in visible_connections(f, who, v)]
    return await cluster_list(request, f, local, owned_by(who.name, who.may_monitor))


@router.get("/connections/{conn}")
async def get_connection(request: Request, f: Facade, conn: str, who: User) -> dict[str, Any]:
    return (await find_connection(request, f, who, conn))[1]


@router.delete("/connections/{conn}", status_code=204)
async def close_connection(request: Request, f: Facade, conn: str, who: User) -> Response:
    reason = request.headers.get("x-reason")
    try:
        view = f.get_connection(name(conn))
    except NotFound:
        found = await remote_object(request, f, f"/api/connections/{conn}")
        if found is None:
            raise
        node, item = found
        if not who.is_administrator and item.get("user") != who.name:
            raise not_authorised("Not administrator user") from None
        peers = peers_of(request, f)
        assert peers is not None  # remote_object found it through them
        status = await peers.delete(node, f"/api/connections/{conn}", reason)
        if status == 404:
            raise
        if status >= 300:
            raise ApiError(
                503, "node_unavailable", f"cluster node '{node}' did not close it ({status})"
            ) from None
        return Response(status_code=204)
    if not who.is_administrator and view.user != who.name:
        raise not_authorised("Not administrator user")
    f.close_connection(view.name, reason)
    return Response(status_code=204)


@router.get("/connections/{conn}/channels")
async def connection_channels(request: Request, f: Facade, conn: str, who: User) -> Any:
    node, _ = await find_connection(request, f, who, conn)
    if node is None:
        return [shapes.channel(c, f.node_name) for c in f.list_channels(connection=name(conn))]
    return await cluster_list(request, f, [], owned_by(who.name, who.may_monitor))
