"""``/api/aliveness-test`` and ``/api/health/checks/*``: 200 ``ok`` or 503 ``failed`` with
RabbitMQ's reason and details."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from sievemq.admin_api.auth import require_vhost
from sievemq.admin_api.deps import Facade, User
from sievemq.admin_api.errors import ApiError, bad_request
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, need_vhost

router = APIRouter(tags=[TAG])


@router.get("/aliveness-test/{vhost}")
async def aliveness(f: Facade, vhost: str, who: User) -> dict[str, str]:
    v = name(vhost)
    need_vhost(f, v)
    require_vhost(who, v)
    return {"status": "ok"}


def _failed(reason: str, **extra: Any) -> ApiError:
    err = ApiError(503, "failed", reason, extra=extra)
    err.body = {"status": "failed", "reason": reason, **extra}
    return err


@router.get("/health/checks/alarms")
@router.get("/health/checks/local-alarms")
async def health_alarms(f: Facade, who: User) -> dict[str, Any]:
    alarms = f.active_alarms()
    if alarms:
        raise _failed(
            "There are alarms in effect in the cluster",
            alarms=[{"node": f.node_name, "resource": a} for a in alarms],
        )
    return {"status": "ok"}


@router.get("/health/checks/virtual-hosts")
async def health_vhosts(who: User) -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/checks/port-listener/{port}")
async def health_port(f: Facade, port: str, who: User) -> dict[str, Any]:
    try:
        wanted = int(port)
    except ValueError:
        raise bad_request(f"invalid port '{port}'") from None
    ports = [li.port for li in f.listeners]
    if wanted not in ports:
        raise _failed("No active listener", missing=wanted, ports=ports)
    return {"status": "ok", "port": wanted}


@router.get("/health/checks/protocol-listener/{protocol}")
async def health_protocol(f: Facade, protocol: str, who: User) -> dict[str, Any]:
    protocols = [li.protocol for li in f.listeners]
    aliases = {"amqp091": "amqp", "amqp0.9.1": "amqp", "amqp0-9-1": "amqp", "amqps": "amqp/ssl"}
    wanted = aliases.get(protocol.lower(), protocol.lower())
    if wanted not in protocols:
        raise _failed("No active listener", missing=protocol, protocols=protocols)
    return {"status": "ok", "protocol": protocol}


@router.get("/health/checks/ready-to-serve-clients")
@router.get("/health/checks/is-in-service")
async def health_ready(request: Request, who: User) -> dict[str, str]:
    ready = request.app.state.is_ready
    if ready is not None and not ready():
        raise _failed("the node is not ready to serve clients")
    return {"status": "ok"}


@router.get("/health/checks/below-node-connection-limit")
async def health_conn_limit(f: Facade, who: User) -> dict[str, Any]:
    limit = f.node.limits.max_connections if f.node is not None else 0
    used = len(f.list_connections())
    if limit and used >= limit:
        raise _failed("node connection limit is reached", limit=limit, connections=used)
    return {"status": "ok", "limit": limit, "connections": used}
