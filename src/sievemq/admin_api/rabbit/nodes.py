"""``/api/nodes``: this node (memory and disk from the alarms, file descriptors against the
process's limit) and, in a cluster, every member as it publishes itself into etcd."""

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


def node_info(f: BrokerFacade) -> dict[str, Any]:
    """This node as ``/api/nodes`` shows it; a cluster node publishes the same into etcd."""
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
        "listeners": [
            {"protocol": li.protocol, "ip_address": li.ip_address, "port": li.port}
            for li in o.listeners
        ],
        # SieveMQ's: the queues this node holds (in a cluster: leads), its client connections
        # and, in a cluster, its links to the other nodes (docs/cluster.md, flow control)
        "sievemq": {
            "queues": o.totals.queues,
            "connections": o.totals.connections,
            **({"links": f.cluster.link_views()} if f.cluster is not None else {}),
        },
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


def _nodes(f: BrokerFacade) -> list[dict[str, Any]]:
    """This node, and with a cluster every member: a live one as it last published itself
    into etcd, a stopped one by name with ``running: false`` (as RabbitMQ lists it)."""
    local = node_info(f)
    if f.cluster is None:
        return [local]
    out = []
    for member in f.cluster.node_views():
        if member.local:
            out.append(local)
        elif member.running:
            out.append({**member.record, "name": member.name, "running": True})
        else:
            out.append({"name": member.name, "type": "disc", "running": False})
    return out


@router.get("/nodes")
async def nodes(f: Facade, who: Monitor) -> list[dict[str, Any]]:
    return _nodes(f)


@router.get("/nodes/{node}")
async def get_node(f: Facade, node: str, who: Monitor) -> dict[str, Any]:
    wanted = name(node)
    for found in _nodes(f):
        if found["name"] == wanted:
            return found
    raise not_found()
