"""``/api/permissions``: a user's configure/write/read regexes in a vhost (administrators)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, Body, need_vhost

router = APIRouter(tags=[TAG])


class PermissionBody(Body):
    configure: str
    write: str
    read: str


@router.get("/permissions")
async def list_permissions(request: Request, f: Facade, who: Admin) -> Any:
    return await paginate(request, [p.__dict__ for p in f.list_permissions()])


@router.get("/permissions/{vhost}/{username}")
async def get_permission(f: Facade, vhost: str, username: str, who: Admin) -> dict[str, Any]:
    return dict(f.get_permission(name(vhost), name(username)).__dict__)


@router.put("/permissions/{vhost}/{username}", status_code=201)
async def put_permission(
    f: Facade, vhost: str, username: str, body: PermissionBody, who: Admin
) -> Response:
    v, u = name(vhost), name(username)
    need_vhost(f, v)
    return await saved(f, lambda: f.set_permission(u, v, body.configure, body.write, body.read))


@router.delete("/permissions/{vhost}/{username}", status_code=204)
async def delete_permission(f: Facade, vhost: str, username: str, who: Admin) -> Response:
    return await saved(f, lambda: f.clear_permission(name(username), name(vhost)))
