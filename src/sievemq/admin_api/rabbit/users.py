"""``/api/users``: list, those without any permission, bulk delete, one user, create or
change, delete, and a user's permissions (administrators only)."""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api import shapes
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, Body
from sievemq.gateway.admin.views import NotFound

router = APIRouter(tags=[TAG])


class UserBody(Body):
    password: str | None = None
    password_hash: str | None = None
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: str | list[str] = ""


class BulkDelete(Body):
    users: list[str]


def _tags(tags: str | list[str]) -> list[str]:
    if isinstance(tags, str):
        return [t.strip() for t in tags.split(",") if t.strip()]
    return tags


@router.get("/users")
async def list_users(request: Request, f: Facade, who: Admin) -> Any:
    return await paginate(request, [shapes.user(u) for u in f.list_users()])


@router.get("/users/without-permissions")
async def users_without_permissions(f: Facade, who: Admin) -> list[dict[str, Any]]:
    with_perms = {p.user for p in f.list_permissions()}
    return [shapes.user(u) for u in f.list_users() if u.name not in with_perms]


@router.post("/users/bulk-delete", status_code=204)
async def bulk_delete_users(f: Facade, body: BulkDelete, who: Admin) -> Response:
    def delete_all() -> None:
        for username in body.users:
            with contextlib.suppress(NotFound):
                f.delete_user(username)

    return await saved(f, delete_all)


@router.get("/users/{username}")
async def get_user(f: Facade, username: str, who: Admin) -> dict[str, Any]:
    return shapes.user(f.get_user(name(username)))


@router.put("/users/{username}", status_code=201)
async def put_user(f: Facade, username: str, body: UserBody, who: Admin) -> Response:
    return await saved(
        f,
        lambda: f.put_user(
            name(username),
            password=body.password,
            tags=_tags(body.tags),
            password_hash=body.password_hash,
            hashing_algorithm=body.hashing_algorithm,
        ),
    )


@router.delete("/users/{username}", status_code=204)
async def delete_user(f: Facade, username: str, who: Admin) -> Response:
    return await saved(f, lambda: f.delete_user(name(username)))


@router.get("/users/{username}/permissions")
async def user_permissions(f: Facade, username: str, who: Admin) -> list[dict[str, Any]]:
    u = name(username)
    f.get_user(u)
    return [p.__dict__ for p in f.list_permissions(user=u)]
