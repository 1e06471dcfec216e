"""``/api/connections``: AMQP and stream-protocol connections (users without the monitoring
tag see only their own), one connection, closing it, and its channels."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api import shapes
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import not_authorised, not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, readable_vhost
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import Principal

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


@router.get("/connections")
async def list_connections(request: Request, f: Facade, who: User) -> Any:
    return await paginate(
        request,
        [shapes.connection(c, f.node_name) for c in visible_connections(f, who, None)],
    )


@router.get("/vhosts/{vhost}/connections")
async def list_vhost_connections(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    return await paginate(
        request, [shapes.connection(c, f.node_name) for c in visible_connections(f, who, v)]
    )


@router.get("/connections/{conn}")
async def get_connection(f: Facade, conn: str, who: User) -> dict[str, Any]:
    return shapes.connection(own_connection(f, who, name(conn)), f.node_name)


@router.delete("/connections/{conn}", status_code=204)
async def close_connection(request: Request, f: Facade, conn: str, who: User) -> Response:
    view = f.get_connection(name(conn))
    if not who.is_administrator and view.user != who.name:
        raise not_authorised("Not administrator user")
    f.close_connection(view.name, request.headers.get("x-reason"))
    return Response(status_code=204)


@router.get("/connections/{conn}/channels")
async def connection_channels(f: Facade, conn: str, who: User) -> list[dict[str, Any]]:
    view = own_connection(f, who, name(conn))
    return [shapes.channel(c, f.node_name) for c in f.list_channels(connection=view.name)]
