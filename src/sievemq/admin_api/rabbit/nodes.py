"""``/api/nodes``: the one node, with its memory and disk figures from the alarms and its
file descriptors against the process's limit."""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter

from sievemq.admin_api.deps import Facade, Monitor
from sievemq.admin_api.errors import not_found
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG
from sievemq.gateway.admin.facade import BrokerFacade

router = APIRouter(tags=[TAG])


def _node(f: BrokerFacade) -> dict[str, Any]:
    o = f.overview()
    snap = f.alarms.snapshot() if f.alarms is not None else None
    mem = snap["memory"] if snap else {}
    disk = snap["disk"] if snap else {}
    return {
        "name": o.node,
        "type": "disc",
        "running": True,
        "uptime": o.uptime_ms,
        "os_pid": str(os.getpid()),
        "processors": os.cpu_count() or 1,
        "mem_used": mem.get("used_bytes", 0),
        "mem_limit": mem.get("limit_bytes", 0),
        "mem_alarm": bool(mem.get("alarm", False)),
        "disk_free": disk.get("free_bytes", 0),
        "disk_free_limit": disk.get("limit_bytes", 0),
        "disk_free_alarm": bool(disk.get("alarm", False)),
        **_descriptors(f),
        "being_drained": False,
        "partitions": [],
        "applications": [],
    }


def _descriptors(f: BrokerFacade) -> dict[str, int]:
    """RabbitMQ's four descriptor fields (``fd_total`` is the process's limit)."""
    d = f.descriptors()
    return {
        "fd_used": d.fd_used,
        "fd_total": d.fd_total,
        "sockets_used": d.sockets_used,
        "sockets_total": d.sockets_total,
    }


@router.get("/nodes")
async def nodes(f: Facade, who: Monitor) -> list[dict[str, Any]]:
    return [_node(f)]


@router.get("/nodes/{node}")
async def get_node(f: Facade, node: str, who: Monitor) -> dict[str, Any]:
    if name(node) != f.node_name:
        raise not_found()
    return _node(f)
