"""RabbitMQ's policies, operator policies, runtime parameters and global parameters.

Same paths, bodies, codes and refusal texts as RabbitMQ 3.10's management plugin (taken
from a live peer). Who may do what, as RabbitMQ: policies need ``policymaker`` (or
``administrator``) and a permission in the vhost, operator policies and global parameters
an administrator. A change is written to the definitions log on the loop and its fdatasync
runs in a worker thread before the answer (``unsynced``/``synced``), like every admin change;
putting a policy to work on thousands of queues runs in slices between loop turns.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from sievemq.admin_api.auth import admin, authenticate, facade_of
from sievemq.admin_api.changes import saved
from sievemq.admin_api.errors import ApiError, bad_request, not_authorised, not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit import _json_body as json_body
from sievemq.admin_api.slicing import Slicer, heavy
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import BadRequest, ParameterView, Principal

router = APIRouter(prefix="/api", tags=["RabbitMQ management API: policies and parameters"])


async def policymaker(request: Request) -> Principal:
    """Dependency: a user that may manage policies (policymaker or administrator)."""
    principal = authenticate(request)
    if not (principal.is_administrator or "policymaker" in principal.tags):
        raise not_authorised("Not policymaker user")
    return principal


Policymaker = Annotated[Principal, Depends(policymaker)]
Admin = Annotated[Principal, Depends(admin)]
Heavy = Annotated[Slicer, Depends(heavy)]


def _visible(who: Principal, vhost: str) -> bool:
    return who.is_administrator or vhost in who.permissions


def _vhost(f: BrokerFacade, who: Principal, raw: str) -> str:
    """The vhost of a path: 404 when it does not exist, 401 when the user has no access."""
    vhost = name(raw)
    if not f.vhost_exists(vhost):
        raise not_found()
    if not _visible(who, vhost):
        raise not_authorised(f"access to vhost '{vhost}' refused for user '{who.name}'")
    return vhost


def _changed_vhost(f: BrokerFacade, who: Principal, raw: str) -> str:
    """As ``_vhost``, with RabbitMQ's answer to a PUT into a missing vhost."""
    if not f.vhost_exists(name(raw)):
        raise ApiError(404, "not_found", "vhost_not_found")
    return _vhost(f, who, raw)


def _parameter_json(p: ParameterView) -> dict[str, Any]:
    return {"value": p.value, "vhost": p.vhost, "component": p.component, "name": p.name}


def _escaped(error: BadRequest) -> ApiError:
    """RabbitMQ 3.10 escapes ``<``/``>`` in a refused policy's reason (not an operator
    policy's): kept, so clients comparing texts see the same."""
    return bad_request(error.explanation.replace("<", "&lt;").replace(">", "&gt;"))


# ------------------------------------------------------------------------------ policies


def _register(path: str, operator: bool) -> None:
    """GET/PUT/DELETE routes of ``/api/policies`` or ``/api/operator-policies``."""
    allowed = Depends(admin if operator else policymaker)
    kind = "operator policy" if operator else "policy"

    async def list_all(request: Request, who: Principal = allowed) -> Any:
        f = facade_of(request)
        items = [p for p in f.list_policies(operator=operator) if _visible(who, p.vhost)]
        return await paginate(request, [p.to_json() for p in items])

    async def list_vhost(request: Request, vhost: str, who: Principal = allowed) -> Any:
        f = facade_of(request)
        v = _vhost(f, who, vhost)
        return await paginate(request, [p.to_json() for p in f.list_policies(v, operator)])

    async def get_one(
        request: Request,
        vhost: str,
        policy: str,
        who: Principal = allowed,
    ) -> dict[str, Any]:
        f = facade_of(request)
        return f.get_policy(_vhost(f, who, vhost), name(policy), operator).to_json()

    async def put_one(
        request: Request,
        vhost: str,
        policy: str,
        slicer: Heavy,
        who: Principal = allowed,
    ) -> Response:
        f = facade_of(request)
        v = _changed_vhost(f, who, vhost)
        body = await json_body(request)

        def change() -> bool:
            try:
                return f.put_policy(v, name(policy), body, operator, apply=False)
            except BadRequest as error:
                if operator:
                    raise
                raise _escaped(error) from None

        return await saved(f, change, policies_of=(v, slicer))

    async def delete_one(
        request: Request,
        vhost: str,
        policy: str,
        slicer: Heavy,
        who: Principal = allowed,
    ) -> Response:
        f = facade_of(request)
        v = _vhost(f, who, vhost)
        return await saved(
            f,
            lambda: f.delete_policy(v, name(policy), operator, apply=False),
            policies_of=(v, slicer),
        )

    router.add_api_route(path, list_all, methods=["GET"], summary=f"every {kind}")
    router.add_api_route(
        path + "/{vhost}", list_vhost, methods=["GET"], summary=f"a vhost's {kind}s"
    )
    item = path + "/{vhost}/{policy}"
    router.add_api_route(item, get_one, methods=["GET"], summary=f"one {kind}")
    router.add_api_route(
        item, put_one, methods=["PUT"], status_code=201, summary=f"create or change a {kind}"
    )
    router.add_api_route(
        item, delete_one, methods=["DELETE"], status_code=204, summary=f"delete a {kind}"
    )


_register("/policies", operator=False)
_register("/operator-policies", operator=True)


# ------------------------------------------------------------------------------ parameters


@router.get("/parameters")
async def list_parameters(request: Request, who: Policymaker) -> Any:
    f = facade_of(request)
    items = [p for p in f.list_parameters() if _visible(who, p.vhost)]
    return await paginate(request, [_parameter_json(p) for p in items])


@router.get("/parameters/{component}")
async def list_component(request: Request, component: str, who: Policymaker) -> Any:
    f = facade_of(request)
    items = [p for p in f.list_parameters(name(component)) if _visible(who, p.vhost)]
    return await paginate(request, [_parameter_json(p) for p in items])


@router.get("/parameters/{component}/{vhost}")
async def list_component_vhost(
    request: Request, component: str, vhost: str, who: Policymaker
) -> Any:
    f = facade_of(request)
    v = _vhost(f, who, vhost)
    items = f.list_parameters(name(component), v)
    return await paginate(request, [_parameter_json(p) for p in items])


@router.get("/parameters/{component}/{vhost}/{parameter}")
async def get_parameter(
    request: Request, component: str, vhost: str, parameter: str, who: Policymaker
) -> dict[str, Any]:
    f = facade_of(request)
    v = _vhost(f, who, vhost)
    return _parameter_json(f.get_parameter(name(component), v, name(parameter)))


@router.put("/parameters/{component}/{vhost}/{parameter}", status_code=201)
async def put_parameter(
    request: Request,
    component: str,
    vhost: str,
    parameter: str,
    who: Policymaker,
    slicer: Heavy,
) -> Response:
    f = facade_of(request)
    v = _changed_vhost(f, who, vhost)
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
    request: Request, component: str, vhost: str, parameter: str, who: Admin, slicer: Heavy
) -> Response:
    f = facade_of(request)
    v = _vhost(f, who, vhost)
    return await saved(
        f,
        lambda: f.delete_parameter(name(component), v, name(parameter), apply=False),
        policies_of=(v, slicer),
    )


# ------------------------------------------------------------------------------ global parameters


def _global_json(p: ParameterView) -> dict[str, Any]:
    return {"name": p.name, "value": p.value}


@router.get("/global-parameters")
async def list_global_parameters(request: Request, who: Admin) -> Any:
    items = facade_of(request).list_global_parameters()
    return await paginate(request, [_global_json(p) for p in items])


@router.get("/global-parameters/{parameter}")
async def get_global_parameter(request: Request, parameter: str, who: Admin) -> dict[str, Any]:
    return _global_json(facade_of(request).get_global_parameter(name(parameter)))


@router.put("/global-parameters/{parameter}", status_code=201)
async def put_global_parameter(request: Request, parameter: str, who: Admin) -> Response:
    f = facade_of(request)
    body = await json_body(request)
    if not isinstance(body, dict) or "value" not in body:
        raise bad_request("[{key_missing,value}]")
    value = body["value"]
    return await saved(f, lambda: f.put_global_parameter(name(parameter), value))


@router.delete("/global-parameters/{parameter}", status_code=204)
async def delete_global_parameter(request: Request, parameter: str, who: Admin) -> Response:
    f = facade_of(request)
    return await saved(f, lambda: f.delete_global_parameter(name(parameter)))
