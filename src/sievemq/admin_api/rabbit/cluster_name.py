"""``/api/cluster-name``: the name RabbitMQ's UI and management clients show for the cluster.

As RabbitMQ: the name is the global parameter ``cluster_name`` (so it is kept in the
definitions, survives a restart and moves with an export/import; in a cluster it goes
through etcd like every definition, so every node shows it), the node's name until one is
set (in a cluster, its first node's name); any management user may read it, an
administrator sets it (``PUT {"name": ...}``, 204). The overview's ``cluster_name`` shows
the same.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.bodies import json_body
from sievemq.admin_api.changes import saved
from sievemq.admin_api.deps import Admin, Facade, User
from sievemq.admin_api.errors import bad_request
from sievemq.admin_api.rabbit.common import TAG
from sievemq.gateway.admin.facade import BrokerFacade

router = APIRouter(tags=[TAG])

PARAMETER = "cluster_name"  # RabbitMQ's global parameter


def cluster_name(f: BrokerFacade) -> str:
    """The name set with PUT (or in imported definitions), else in a cluster the name of
    its first node (kept in etcd, the same on every node), else the node's name."""
    for parameter in f.list_global_parameters():
        if parameter.name == PARAMETER and isinstance(parameter.value, str):
            return parameter.value
    if f.cluster is not None:
        return f.cluster.cluster_name
    return f.node_name


@router.get("/cluster-name")
async def get_cluster_name(f: Facade, who: User) -> dict[str, Any]:
    return {"name": cluster_name(f)}


@router.put("/cluster-name", status_code=204)
async def put_cluster_name(request: Request, f: Facade, who: Admin) -> Response:
    body = await json_body(request)
    if not isinstance(body, dict) or "name" not in body:
        raise bad_request("[{key_missing,name}]")
    value = body["name"]
    if not isinstance(value, str) or not value:
        raise bad_request(f"cluster name must be a non-empty string, got {value!r}")

    def change() -> None:
        f.put_global_parameter(PARAMETER, value)

    return await saved(f, change)
