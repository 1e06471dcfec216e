"""``/api/vhost-limits`` and ``/api/user-limits``: ``{"value": N}`` per limit name, checked
with RabbitMQ's refusal texts."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.bodies import json_body
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade, Monitor
from sievemq.admin_api.errors import bad_request
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, need_vhost
from sievemq.gateway.admin.views import USER_LIMITS, VHOST_LIMITS

router = APIRouter(tags=[TAG])


def _limits_json(key: str, items: list[tuple[str, dict[str, int]]]) -> list[dict[str, Any]]:
    return [{key: owner, "value": limits} for owner, limits in items]


async def _limit_value(request: Request, name_: str, known: tuple[str, ...]) -> int:
    """The ``{"value": N}`` body of a limit, with RabbitMQ's refusal texts."""
    body = await json_body(request)
    if not isinstance(body, dict) or "value" not in body:
        raise bad_request("[{key_missing,value}]")
    value = body["value"]
    if name_ not in known:
        raise bad_request(
            f'Validation failed\n\nUnrecognised terms [{{<<"{name_}">>,{json.dumps(value)}}}] '
            "in limits\n"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        shown = f'<<"{value}">>' if isinstance(value, str) else json.dumps(value)
        raise bad_request(
            f"Validation failed\n\n{name_} should be a number, actually was {shown}\n"
        )
    return value


@router.get("/vhost-limits")
async def list_vhost_limits(f: Facade, who: Monitor) -> list[dict[str, Any]]:
    return _limits_json("vhost", f.vhost_limits())


@router.get("/vhost-limits/{vhost}")
async def get_vhost_limits(f: Facade, vhost: str, who: Monitor) -> list[dict[str, Any]]:
    v = name(vhost)
    need_vhost(f, v)
    return _limits_json("vhost", f.vhost_limits(v))


@router.put("/vhost-limits/{vhost}/{limit}", status_code=204)
async def put_vhost_limit(
    request: Request, f: Facade, vhost: str, limit: str, who: Admin
) -> Response:
    v = name(vhost)
    need_vhost(f, v)
    value = await _limit_value(request, limit, VHOST_LIMITS)
    return await saved(f, lambda: f.set_vhost_limit(v, limit, value))


@router.delete("/vhost-limits/{vhost}/{limit}", status_code=204)
async def delete_vhost_limit(f: Facade, vhost: str, limit: str, who: Admin) -> Response:
    v = name(vhost)
    need_vhost(f, v)
    return await saved(f, lambda: f.clear_vhost_limit(v, limit))


@router.get("/user-limits")
async def list_user_limits(f: Facade, who: Admin) -> list[dict[str, Any]]:
    return _limits_json("user", f.user_limits())


@router.get("/user-limits/{username}")
async def get_user_limits(f: Facade, username: str, who: Admin) -> list[dict[str, Any]]:
    return _limits_json("user", f.user_limits(name(username)))


@router.put("/user-limits/{username}/{limit}", status_code=204)
async def put_user_limit(
    request: Request, f: Facade, username: str, limit: str, who: Admin
) -> Response:
    u = name(username)
    f.get_user(u)  # 404 first
    value = await _limit_value(request, limit, USER_LIMITS)
    return await saved(f, lambda: f.set_user_limit(u, limit, value))


@router.delete("/user-limits/{username}/{limit}", status_code=204)
async def delete_user_limit(f: Facade, username: str, limit: str, who: Admin) -> Response:
    return await saved(f, lambda: f.clear_user_limit(name(username), limit))
