"""``/api/consumers``: AMQP consumers of the vhosts the user may see."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sievemq.admin_api import shapes
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.rabbit.common import TAG, readable_vhost

router = APIRouter(tags=[TAG])


@router.get("/consumers")
async def list_consumers(request: Request, f: Facade, who: User) -> Any:
    return await paginate(
        request,
        [shapes.consumer(c, f.node_name) for c in f.list_consumers() if who.may_see(c.vhost)],
    )


@router.get("/consumers/{vhost}")
async def list_vhost_consumers(request: Request, f: Facade, vhost: str, who: User) -> Any:
    v = readable_vhost(f, who, vhost)
    return await paginate(request, [shapes.consumer(c, f.node_name) for c in f.list_consumers(v)])
