"""``/api/consumers``: AMQP consumers of the vhosts the user may see; on a cluster node
every node's (``admin_api/cluster_lists.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sievemq.admin_api import shapes
from sievemq.admin_api.cluster_lists import cluster_list
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.rabbit.common import TAG, readable_vhost

router = APIRouter(tags=[TAG])


@router.get("/consumers")
async def list_consumers(request: Request, f: Facade, who: User) -> Any:
    local = [shapes.consumer(c, f.node_name) for c in f.list_consumers() if who.may_see(c.vhost)]
    return await cluster_list(request, f, local, lambda c: who.may_see(_vhost(c)))


@router.get("/consumers/{vhost}")
async def list_vhost_consumers(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    local = [shapes.consumer(c, f.node_name) for c in f.list_consumers(v)]
    return await cluster_list(request, f, local, lambda c: True)


def _vhost(item: dict[str, Any]) -> str:
    queue = item.get("queue")
    return str(queue.get("vhost", "")) if isinstance(queue, dict) else ""
