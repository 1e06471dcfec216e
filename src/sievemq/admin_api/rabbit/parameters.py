"""RabbitMQ's runtime parameters (``/api/parameters``) and global parameters
(``/api/global-parameters``).

Same paths, bodies, codes and refusal texts as RabbitMQ 3.10's management plugin. Runtime
parameters need ``policymaker`` (or ``administrator``) and a permission in the vhost; setting
one, deleting one and every global parameter need an administrator. A runtime parameter may
change which policy applies where, so a change puts the vhost's policies to work before the
answer, in slices between loop turns.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.bodies import json_body
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade, Heavy, Policymaker
from sievemq.admin_api.errors import bad_request, not_authorised
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import (
    POLICIES_TAG,
    changed_policy_vhost,
    may_change,
    policy_vhost,
)
from sievemq.gateway.admin.views import ParameterView

router = APIRouter(tags=[POLICIES_TAG])


def _parameter_json(p: ParameterView) -> dict[str, Any]:
    return {"value": p.value, "vhost": p.vhost, "component": p.component, "name": p.name}


@router.get("/parameters")
async def list_parameters(request: Request, f: Facade, who: Policymaker) -> Any:
    items = [p for p in f.list_parameters() if may_change(who, p.vhost)]
    return await paginate(request, [_parameter_json(p) for p in items])


@router.get("/parameters/{component}")
async def list_component(request: Request, f: Facade, component: str, who: Policymaker) -> Any:
    items = [p for p in f.list_parameters(name(component)) if may_change(who, p.vhost)]
    return await paginate(request, [_parameter_json(p) for p in items])


@router.get("/parameters/{component}/{vhost}")
async def list_component_vhost(
    request: Request, f: Facade, component: str, vhost: str, who: Policymaker
) -> Any:
    v = policy_vhost(f, who, vhost)
    items = f.list_parameters(name(component), v)
    return await paginate(request, [_parameter_json(p) for p in items])


@router.get("/parameters/{component}/{vhost}/{parameter}")
async def get_parameter(
    f: Facade, component: str, vhost: str, parameter: str, who: Policymaker
) -> dict[str, Any]:
    v = policy_vhost(f, who, vhost)
    return _parameter_json(f.get_parameter(name(component), v, name(parameter)))


@router.put("/parameters/{component}/{vhost}/{parameter}", status_code=201)
async def put_parameter(
    request: Request,
    f: Facade,
    component: str,
    vhost: str,
    parameter: str,
    who: Policymaker,
    slicer: Heavy,
) -> Response:
    v = changed_policy_vhost(f, who, vhost)
    body = await json_body(request)
    if not isinstance(body, dict) or "value" not in body:
        raise bad_request("[{key_missing,value}]")
    if not who.is_administrator:  # operator policies and limits are an administrator's
        raise not_authorised("Not administrator user")
    value = body["value"]
    return await saved(
        f,
        lambda: f.put_parameter(name(component), v, name(parameter), value, False),
        policies_of=(v, slicer),
    )


@router.delete("/parameters/{component}/{vhost}/{parameter}", status_code=204)
async def delete_parameter(
    f: Facade, component: str, vhost: str, parameter: str, who: Admin, slicer: Heavy
) -> Response:
    v = policy_vhost(f, who, vhost)
    return await saved(
        f,
        lambda: f.delete_parameter(name(component), v, name(parameter), apply=False),
        policies_of=(v, slicer),
    )


def _global_json(p: ParameterView) -> dict[str, Any]:
    return {"name": p.name, "value": p.value}


@router.get("/global-parameters")
async def list_global_parameters(request: Request, f: Facade, who: Admin) -> Any:
    items = f.list_global_parameters()
    return await paginate(request, [_global_json(p) for p in items])


@router.get("/global-parameters/{parameter}")
async def get_global_parameter(f: Facade, parameter: str, who: Admin) -> dict[str, Any]:
    return _global_json(f.get_global_parameter(name(parameter)))


@router.put("/global-parameters/{parameter}", status_code=201)
async def put_global_parameter(request: Request, f: Facade, parameter: str, who: Admin) -> Response:
    body = await json_body(request)
    if not isinstance(body, dict) or "value" not in body:
        raise bad_request("[{key_missing,value}]")
    value = body["value"]
    return await saved(f, lambda: f.put_global_parameter(name(parameter), value))


@router.delete("/global-parameters/{parameter}", status_code=204)
async def delete_global_parameter(f: Facade, parameter: str, who: Admin) -> Response:
    return await saved(f, lambda: f.delete_global_parameter(name(parameter)))
