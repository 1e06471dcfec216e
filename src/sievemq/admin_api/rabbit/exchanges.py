"""``/api/exchanges``: list, declare, delete, publish one message, and an exchange's bindings
as source or destination."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import Field

from sievemq.admin_api import shapes
from sievemq.admin_api.auth import require, require_vhost
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import bad_request
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import exchange_name, name
from sievemq.admin_api.rabbit.common import TAG, Body, need_vhost, readable_vhost
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import Principal

router = APIRouter(tags=[TAG])


class ExchangeBody(Body):
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class PublishBody(Body):
    routing_key: str = ""
    payload: str = ""
    payload_encoding: str = "string"
    properties: dict[str, Any] = Field(default_factory=dict)


def _exchanges(f: BrokerFacade, who: Principal, vhost: str | None) -> list[dict[str, Any]]:
    seen = [x for x in f.list_exchanges(vhost) if who.may_see(x.vhost)]
    seen.sort(key=lambda x: (x.vhost, x.name))  # RabbitMQ's order (rabbitmqadmin shows it)
    return [shapes.exchange(x) for x in seen]


@router.get("/exchanges")
async def list_exchanges(request: Request, f: Facade, who: User) -> Any:
    return await paginate(request, _exchanges(f, who, None))


@router.get("/exchanges/{vhost}")
async def list_vhost_exchanges(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    return await paginate(request, _exchanges(f, who, v))


@router.get("/exchanges/{vhost}/{exchange}")
async def get_exchange(f: Facade, vhost: str, exchange: str, who: User) -> dict[str, Any]:
    v, x = name(vhost), exchange_name(exchange)
    require_vhost(who, v)
    out = shapes.exchange(f.get_exchange(v, x))
    out["incoming"] = []
    out["outgoing"] = []
    return out


@router.put("/exchanges/{vhost}/{exchange}", status_code=201)
async def put_exchange(
    f: Facade, vhost: str, exchange: str, body: ExchangeBody, who: User
) -> Response:
    v, x = name(vhost), exchange_name(exchange)
    need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "exchange", x)
    # (answered once the change is fdatasynced, in a worker thread: ``saved``)
    return await saved(
        f,
        lambda: f.declare_exchange(
            v, x, body.type, body.durable, body.auto_delete, body.internal, body.arguments
        ),
    )


@router.delete("/exchanges/{vhost}/{exchange}", status_code=204)
async def delete_exchange(
    request: Request, f: Facade, vhost: str, exchange: str, who: User
) -> Response:
    v, x = name(vhost), exchange_name(exchange)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "exchange", x)
    if_unused = request.query_params.get("if-unused", "false").lower() == "true"

    def delete() -> None:
        f.delete_exchange(v, x, if_unused)

    return await saved(f, delete)


@router.post("/exchanges/{vhost}/{exchange}/publish")
async def publish(
    f: Facade, vhost: str, exchange: str, body: PublishBody, who: User
) -> dict[str, bool]:
    """Publish one message; answers once every stream it routed to stored it."""
    v, x = name(vhost), exchange_name(exchange)
    need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "write", "exchange", x or "amq.default")
    if body.payload_encoding == "string":
        payload = body.payload.encode("utf-8")
    elif body.payload_encoding == "base64":
        try:
            payload = base64.b64decode(body.payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("payload is not valid base64") from None
    else:
        raise bad_request(f"unknown payload_encoding '{body.payload_encoding}'")
    routed = await f.publish(v, x, body.routing_key, payload, body.properties)
    return {"routed": routed}


def _bindings(
    f: BrokerFacade, who: Principal, vhost: str, exchange: str, as_source: bool
) -> list[dict[str, Any]]:
    """The bindings with this exchange as their source, or as their destination."""
    v, x = name(vhost), exchange_name(exchange)
    require_vhost(who, v)
    f.get_exchange(v, x)
    if as_source:
        return [shapes.binding(b) for b in f.list_bindings(v, source=x)]
    return [
        shapes.binding(b) for b in f.list_bindings(v, destination=x, destination_type="exchange")
    ]


@router.get("/exchanges/{vhost}/{exchange}/bindings/source")
async def exchange_bindings_source(
    f: Facade, vhost: str, exchange: str, who: User
) -> list[dict[str, Any]]:
    return _bindings(f, who, vhost, exchange, as_source=True)


@router.get("/exchanges/{vhost}/{exchange}/bindings/destination")
async def exchange_bindings_destination(
    f: Facade, vhost: str, exchange: str, who: User
) -> list[dict[str, Any]]:
    return _bindings(f, who, vhost, exchange, as_source=False)
