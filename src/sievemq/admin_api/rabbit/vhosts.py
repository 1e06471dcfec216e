"""``/api/vhosts``: list, one vhost, create, delete, and a vhost's permissions."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api import shapes
from sievemq.admin_api.auth import require_vhost
from sievemq.admin_api.bodies import optional_json
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade, User
from sievemq.admin_api.errors import not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, Body, need_vhost

router = APIRouter(tags=[TAG])


class VhostBody(Body):
    """Checked by the facade, so that a bad value is a 400 naming it."""

    description: Any = None
    tags: Any = None
    default_queue_type: Any = None


@router.get("/vhosts")
async def list_vhosts(request: Request, f: Facade, who: User) -> Any:
    return await paginate(
        request,
        [shapes.vhost(v, f.node_name) for v in f.list_vhosts() if who.may_see(v.name)],
    )


@router.get("/vhosts/{vhost}")
async def get_vhost(f: Facade, vhost: str, who: User) -> dict[str, Any]:
    v = name(vhost)
    require_vhost(who, v)
    for view in f.list_vhosts():
        if view.name == v:
            return shapes.vhost(view, f.node_name)
    raise not_found()


@router.put("/vhosts/{vhost}", status_code=201)
async def put_vhost(request: Request, f: Facade, vhost: str, who: Admin) -> Response:
    body = await optional_json(request, VhostBody) or VhostBody()
    return await saved(
        f,
        lambda: f.add_vhost(name(vhost), body.description, body.tags, body.default_queue_type),
    )


@router.delete("/vhosts/{vhost}", status_code=204)
async def delete_vhost(f: Facade, vhost: str, who: Admin) -> Response:
    return await saved(f, lambda: f.delete_vhost(name(vhost)))


@router.get("/vhosts/{vhost}/permissions")
async def vhost_permissions(f: Facade, vhost: str, who: Admin) -> list[dict[str, Any]]:
    v = name(vhost)
    need_vhost(f, v)
    return [p.__dict__ for p in f.list_permissions(vhost=v)]
