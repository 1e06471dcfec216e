"""``/api/bindings``: every binding, a vhost's, those between one exchange and one queue or
exchange (``q``/``e``), and one binding by its properties key."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import Field

from sievemq.admin_api import shapes
from sievemq.admin_api.auth import require, require_vhost
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import bad_request, not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import exchange_name, name
from sievemq.admin_api.rabbit.common import TAG, Body, need_vhost, readable_vhost
from sievemq.gateway.admin.views import AMQPError

router = APIRouter(tags=[TAG])


class BindingBody(Body):
    routing_key: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)


@router.get("/bindings")
async def list_bindings(request: Request, f: Facade, who: User) -> Any:
    return await paginate(
        request, [shapes.binding(b) for b in f.list_bindings() if who.may_see(b.vhost)]
    )


@router.get("/bindings/{vhost}")
async def list_vhost_bindings(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    return await paginate(request, [shapes.binding(b) for b in f.list_bindings(v)])


_KINDS = {"q": "queue", "e": "exchange"}


def _kind(kind: str) -> str:
    if kind not in _KINDS:
        raise not_found()
    return _KINDS[kind]


def _pair(vhost: str, source: str, kind: str, destination: str) -> tuple[str, str, str, str]:
    """A binding path's vhost, source exchange, destination and its kind (queue/exchange)."""
    return name(vhost), exchange_name(source), name(destination), _kind(kind)


@router.get("/bindings/{vhost}/e/{source}/{kind}/{destination}")
async def list_pair_bindings(
    f: Facade, vhost: str, source: str, kind: str, destination: str, who: User
) -> list[dict[str, Any]]:
    v, s, d, k = _pair(vhost, source, kind, destination)
    require_vhost(who, v)
    f.get_exchange(v, s)
    return [
        shapes.binding(b) for b in f.list_bindings(v, source=s, destination=d, destination_type=k)
    ]


@router.post("/bindings/{vhost}/e/{source}/{kind}/{destination}", status_code=201)
async def post_binding(
    f: Facade,
    vhost: str,
    source: str,
    kind: str,
    destination: str,
    body: BindingBody,
    who: User,
) -> Response:
    v, s, d, k = _pair(vhost, source, kind, destination)
    need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "write", k, d)
    require(who, v, "read", "exchange", s)
    try:
        with f.unsynced():  # answered once the change is fdatasynced, in a worker thread
            key = f.bind(v, s, k, d, body.routing_key, body.arguments)
    except AMQPError as error:
        if error.reply_code != 405:
            raise
        # another cluster node's exclusive queue: RabbitMQ's management API answers a
        # channel error as 400 with its code and text
        raise bad_request(f"{error.reply_code} {error.reply_text}") from None
    await f.synced()
    return Response(status_code=201, headers={"location": key})


@router.get("/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}")
async def get_binding(
    f: Facade,
    vhost: str,
    source: str,
    kind: str,
    destination: str,
    props: str,
    who: User,
) -> dict[str, Any]:
    v, s, d, k = _pair(vhost, source, kind, destination)
    p = name(props)
    require_vhost(who, v)
    for b in f.list_bindings(v, source=s, destination=d, destination_type=k):
        if b.properties_key == p:
            return shapes.binding(b)
    raise not_found()


@router.delete("/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", status_code=204)
async def delete_binding(
    f: Facade,
    vhost: str,
    source: str,
    kind: str,
    destination: str,
    props: str,
    who: User,
) -> Response:
    v, s, d, k = _pair(vhost, source, kind, destination)
    p = name(props)
    require_vhost(who, v, write=True)
    require(who, v, "write", k, d)
    require(who, v, "read", "exchange", s)
    return await saved(f, lambda: f.unbind(v, s, k, d, p))
