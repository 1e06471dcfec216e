"""``/api/channels``: AMQP channels (users without the monitoring tag see only their own);
on a cluster node every node's (``admin_api/cluster_lists.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sievemq.admin_api import shapes
from sievemq.admin_api.cluster_lists import cluster_list, owned_by, remote_object
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import not_found
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, readable_vhost
from sievemq.gateway.admin.views import NotFound

router = APIRouter(tags=[TAG])


@router.get("/channels")
async def list_channels(request: Request, f: Facade, who: User) -> Any:
    local = [
        shapes.channel(c, f.node_name)
        for c in f.list_channels()
        if who.may_monitor or c.user == who.name
    ]
    return await cluster_list(request, f, local, owned_by(who.name, who.may_monitor))


@router.get("/vhosts/{vhost}/channels")
async def list_vhost_channels(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    local = [
        shapes.channel(c, f.node_name)
        for c in f.list_channels(v)
        if who.may_monitor or c.user == who.name
    ]
    return await cluster_list(request, f, local, owned_by(who.name, who.may_monitor))


@router.get("/channels/{channel}")
async def get_channel(request: Request, f: Facade, channel: str, who: User) -> dict[str, Any]:
    try:
        view = f.get_channel(name(channel))
    except NotFound:
        found = await remote_object(request, f, f"/api/channels/{channel}")
        if found is None or not owned_by(who.name, who.may_monitor)(found[1]):
            raise
        return found[1]
    if not who.may_monitor and view.user != who.name:
        raise not_found()
    return shapes.channel(view, f.node_name)
