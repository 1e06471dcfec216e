"""``/api/definitions``: export (optionally as a download) and import the whole broker's or
one vhost's definitions."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.bodies import json_body
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade
from sievemq.admin_api.errors import bad_request
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, need_vhost
from sievemq.gateway.admin.facade import BrokerFacade

router = APIRouter(tags=[TAG])


def _definitions(request: Request, f: BrokerFacade, vhost: str | None) -> Response:
    data = f.export_definitions(vhost).__dict__
    headers = {}
    download = request.query_params.get("download")
    if download:
        headers["content-disposition"] = f'attachment; filename="{download}"'
    return Response(json.dumps(data), media_type="application/json", headers=headers)


@router.get("/definitions")
async def get_definitions(request: Request, f: Facade, who: Admin) -> Response:
    return _definitions(request, f, None)


@router.get("/definitions/{vhost}")
async def get_vhost_definitions(request: Request, f: Facade, vhost: str, who: Admin) -> Response:
    v = name(vhost)
    need_vhost(f, v)
    return _definitions(request, f, v)


@router.post("/definitions", status_code=204)
async def post_definitions(request: Request, f: Facade, who: Admin) -> Response:
    data = await json_body(request)
    if not isinstance(data, dict):
        raise bad_request("definitions must be a JSON object")
    return await saved(f, lambda: f.import_definitions(data))


@router.post("/definitions/{vhost}", status_code=204)
async def post_vhost_definitions(request: Request, f: Facade, vhost: str, who: Admin) -> Response:
    v = name(vhost)
    need_vhost(f, v)
    data = await json_body(request)
    if not isinstance(data, dict):
        raise bad_request("definitions must be a JSON object")
    return await saved(f, lambda: f.import_definitions(data, v))
