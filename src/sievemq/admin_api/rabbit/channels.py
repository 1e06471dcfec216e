"""``/api/channels``: AMQP channels (users without the monitoring tag see only their own)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sievemq.admin_api import shapes
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, readable_vhost

router = APIRouter(tags=[TAG])


@router.get("/channels")
async def list_channels(request: Request, f: Facade, who: User) -> Any:
    return await paginate(
        request,
        [
            shapes.channel(c, f.node_name)
            for c in f.list_channels()
            if who.may_monitor or c.user == who.name
        ],
    )


@router.get("/vhosts/{vhost}/channels")
async def list_vhost_channels(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    return await paginate(
        request,
        [
            shapes.channel(c, f.node_name)
            for c in f.list_channels(v)
            if who.may_monitor or c.user == who.name
        ],
    )


@router.get("/channels/{channel}")
async def get_channel(f: Facade, channel: str, who: User) -> dict[str, Any]:
    view = f.get_channel(name(channel))
    if not who.may_monitor and view.user != who.name:
        raise not_found()
    return shapes.channel(view, f.node_name)
