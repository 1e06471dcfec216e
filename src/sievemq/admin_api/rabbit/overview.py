"""``/api/overview`` and the small questions a management UI asks first: who am I, how do I
log in, which extensions are there."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sievemq.admin_api import shapes
from sievemq.admin_api.cluster_totals import cluster_overview
from sievemq.admin_api.deps import Facade, Heavy, User
from sievemq.admin_api.rabbit.cluster_name import cluster_name
from sievemq.admin_api.rabbit.common import TAG
from sievemq.gateway.admin.views import EXCHANGE_TYPES

router = APIRouter(tags=[TAG])


@router.get("/overview")
async def overview(f: Facade, who: User, slicer: Heavy) -> dict[str, Any]:
    streams = await slicer.collect(f.iter_streams())
    shown = shapes.overview(f.overview(streams), list(EXCHANGE_TYPES))
    shown["cluster_name"] = cluster_name(f)  # set with PUT /api/cluster-name
    if f.cluster is not None:  # every live node's last published totals added
        shown = cluster_overview(shown, f.cluster.node_views())
    return shown


@router.get("/overview/history")
async def overview_history(f: Facade, who: User) -> list[dict[str, Any]]:
    """SieveMQ's: the node's message rates and queue lengths at each round of the rate
    sampler over the last minutes, oldest first (RabbitMQ's ``msg_rates_age`` samples are
    counters of many objects; this is the one series the dashboard's overview draws)."""
    return [
        {
            "timestamp": round(p.timestamp * 1000),
            **{f"{k}_rate": r for k, r in p.rates.items()},
            "messages": p.messages,
            "messages_ready": p.messages - p.messages_unacknowledged,
            "messages_unacknowledged": p.messages_unacknowledged,
        }
        for p in list(f.history)
    ]


@router.get("/whoami")
async def whoami(who: User) -> dict[str, Any]:
    return {"name": who.name, "tags": who.tags}


@router.get("/auth")
async def auth_settings() -> dict[str, Any]:
    return {"oauth_enabled": False}


@router.get("/extensions")
async def extensions(who: User) -> list[dict[str, Any]]:
    return []
