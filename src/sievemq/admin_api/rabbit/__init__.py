"""RabbitMQ's management HTTP API over the gateway facade: same paths, fields and codes.

One module per resource, each an ``APIRouter``; ``router`` puts them under ``/api`` in the
order FastAPI must try them (where two paths could match the same request, the one listed
first answers: ``/users/without-permissions`` before ``/users/{username}``).

Handlers are ``async def`` on purpose: they run on the gateway's event loop (never in a
worker thread), so they read live broker state without locks and never block AMQP (nothing
here does network or long disk I/O; browsing is bounded inside the facade). Each takes the
facade as a typed dependency (``f: Facade``, ``admin_api/deps.py``).
"""

from __future__ import annotations

from fastapi import APIRouter

from sievemq.admin_api.rabbit import (
    bindings,
    channels,
    cluster_name,
    connections,
    consumers,
    definitions,
    exchanges,
    health,
    limits,
    nodes,
    overview,
    parameters,
    permissions,
    policies,
    queues,
    stream_plugin,
    users,
    vhosts,
)

RESOURCES = (
    overview,
    cluster_name,
    nodes,
    health,
    queues,
    exchanges,
    bindings,
    connections,
    stream_plugin,
    channels,
    consumers,
    vhosts,
    users,
    permissions,
    limits,
    definitions,
    policies,
    parameters,
)

router = APIRouter(prefix="/api")
for _resource in RESOURCES:
    router.include_router(_resource.router)

__all__ = ["router"]
