"""RabbitMQ's policies and operator policies: ``/api/policies`` and ``/api/operator-policies``.

Same paths, bodies, codes and refusal texts as RabbitMQ 3.10's management plugin (taken
from a live peer). Policies need ``policymaker`` (or ``administrator``) and a permission in
the vhost, operator policies an administrator. A change is written to the definitions log on
the loop and its fdatasync runs in a worker thread before the answer (``unsynced``/``synced``),
like every admin change; putting a policy to work on thousands of queues runs in slices
between loop turns.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from sievemq.admin_api.auth import admin, policymaker
from sievemq.admin_api.bodies import json_body
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Facade, Heavy
from sievemq.admin_api.errors import ApiError, bad_request
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import (
    POLICIES_TAG,
    changed_policy_vhost,
    may_change,
    policy_vhost,
)
from sievemq.gateway.admin.views import BadRequest, Principal

router = APIRouter(tags=[POLICIES_TAG])


def _escaped(error: BadRequest) -> ApiError:
    """RabbitMQ 3.10 escapes ``<``/``>`` in a refused policy's reason (not an operator
    policy's): kept, so clients comparing texts see the same."""
    return bad_request(error.explanation.replace("<", "&lt;").replace(">", "&gt;"))


def _register(path: str, operator: bool) -> None:
    """GET/PUT/DELETE routes of ``/api/policies`` or ``/api/operator-policies``."""
    allowed = Depends(admin if operator else policymaker)
    kind = "operator policy" if operator else "policy"

    async def list_all(request: Request, f: Facade, who: Principal = allowed) -> Any:
        items = [p for p in f.list_policies(operator=operator) if may_change(who, p.vhost)]
        return await paginate(request, [p.to_json() for p in items])

    async def list_vhost(request: Request, f: Facade, vhost: str, who: Principal = allowed) -> Any:
        v = policy_vhost(f, who, vhost)
        return await paginate(request, [p.to_json() for p in f.list_policies(v, operator)])

    async def get_one(
        f: Facade,
        vhost: str,
        policy: str,
        who: Principal = allowed,
    ) -> dict[str, Any]:
        return f.get_policy(policy_vhost(f, who, vhost), name(policy), operator).to_json()

    async def put_one(
        request: Request,
        f: Facade,
        vhost: str,
        policy: str,
        slicer: Heavy,
        who: Principal = allowed,
    ) -> Response:
        v = changed_policy_vhost(f, who, vhost)
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
        f: Facade,
        vhost: str,
        policy: str,
        slicer: Heavy,
        who: Principal = allowed,
    ) -> Response:
        v = policy_vhost(f, who, vhost)
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
