"""``/api/stream/*``: the stream plugin's views of stream-protocol connections, their
consumers and publishers, and single-active-consumer groups (a SieveMQ extension)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api import shapes
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import not_authorised, not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, readable_vhost
from sievemq.admin_api.rabbit.connections import own_connection, visible_connections
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import Principal

router = APIRouter(tags=[TAG])


def _visible(who: Principal, views: list[Any]) -> list[Any]:
    """Monitoring users see every stream client; others only their own connections'."""
    return [v for v in views if who.may_monitor or v.user == who.name]


def _in_vhost(f: BrokerFacade, who: Principal, vhost: str | None) -> str | None:
    return None if vhost is None else readable_vhost(f, who, vhost)


@router.get("/stream/connections")
async def list_stream_connections(request: Request, f: Facade, who: User) -> Any:
    """The stream plugin's view: stream-protocol connections only."""
    return await paginate(
        request,
        [
            shapes.connection(c, f.node_name)
            for c in visible_connections(f, who, None)
            if c.protocol == "stream"
        ],
    )


@router.get("/stream/connections/{vhost}")
async def list_vhost_stream_connections(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = _in_vhost(f, who, vhost)
    return await paginate(
        request,
        [
            shapes.connection(c, f.node_name)
            for c in visible_connections(f, who, v)
            if c.protocol == "stream"
        ],
    )


def _stream_connection(f: BrokerFacade, who: Principal, vhost: str, conn: str) -> Any:
    """A stream-protocol connection of ``vhost`` the user may see (404 otherwise)."""
    v = _in_vhost(f, who, vhost)
    view = own_connection(f, who, name(conn))
    if view.protocol != "stream" or view.vhost != v:
        raise not_found()
    return view


@router.get("/stream/connections/{vhost}/{conn}")
async def get_stream_connection(f: Facade, vhost: str, conn: str, who: User) -> dict[str, Any]:
    return shapes.connection(_stream_connection(f, who, vhost, conn), f.node_name)


@router.delete("/stream/connections/{vhost}/{conn}", status_code=204)
async def close_stream_connection(
    request: Request, f: Facade, vhost: str, conn: str, who: User
) -> Response:
    view = _stream_connection(f, who, vhost, conn)
    if not who.is_administrator and view.user != who.name:
        raise not_authorised("Not administrator user")
    f.close_connection(view.name, request.headers.get("x-reason"))
    return Response(status_code=204)


def _connection_clients(
    f: BrokerFacade, vhost: str, conn: str, who: Principal, consumers: bool
) -> list[dict[str, Any]]:
    """One stream connection's subscriptions (``consumers``) or publishers."""
    view = _stream_connection(f, who, vhost, conn)
    if consumers:
        return [
            shapes.stream_consumer(c, f.node_name)
            for c in f.list_stream_consumers(view.vhost)
            if c.connection_name == view.name
        ]
    return [
        shapes.stream_publisher(p, f.node_name)
        for p in f.list_stream_publishers(view.vhost)
        if p.connection_name == view.name
    ]


@router.get("/stream/connections/{vhost}/{conn}/consumers")
async def stream_connection_consumers(
    f: Facade, vhost: str, conn: str, who: User
) -> list[dict[str, Any]]:
    return _connection_clients(f, vhost, conn, who, consumers=True)


@router.get("/stream/connections/{vhost}/{conn}/publishers")
async def stream_connection_publishers(
    f: Facade, vhost: str, conn: str, who: User
) -> list[dict[str, Any]]:
    return _connection_clients(f, vhost, conn, who, consumers=False)


@router.get("/stream/consumers")
@router.get("/stream/consumers/{vhost}")
async def list_stream_consumers(
    request: Request, f: Facade, who: User, vhost: str | None = None
) -> Any:
    """The stream plugin's consumers (stream-protocol subscriptions)."""
    views = f.list_stream_consumers(_in_vhost(f, who, vhost))
    return await paginate(
        request, [shapes.stream_consumer(c, f.node_name) for c in _visible(who, views)]
    )


@router.get("/stream/publishers")
@router.get("/stream/publishers/{vhost}")
@router.get("/stream/publishers/{vhost}/{stream}")
async def list_stream_publishers(
    request: Request, f: Facade, who: User, vhost: str | None = None, stream: str | None = None
) -> Any:
    v = _in_vhost(f, who, vhost)
    s = None if stream is None else name(stream)
    if v is not None and s is not None and not f.stream_exists(v, s):
        raise not_found()
    views = f.list_stream_publishers(v, s)
    return await paginate(
        request, [shapes.stream_publisher(p, f.node_name) for p in _visible(who, views)]
    )


@router.get("/stream/consumer-groups")
@router.get("/stream/consumer-groups/{vhost}")
async def list_sac_groups(request: Request, f: Facade, who: User, vhost: str | None = None) -> Any:
    """Single-active-consumer groups (a SieveMQ extension). Users without the monitoring
    tag see the groups their own connections are in, with only their own members."""
    groups = f.list_sac_groups(_in_vhost(f, who, vhost))
    if not who.may_monitor:
        for g in groups:
            g.consumers = [m for m in g.consumers if m.user == who.name]
        groups = [g for g in groups if g.consumers]
    return await paginate(request, [shapes.sac_group(g) for g in groups])
