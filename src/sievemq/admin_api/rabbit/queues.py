"""``/api/queues``: streams and classic/quorum queues in RabbitMQ's shape; declare, delete,
purge, ``get`` (classic queues only, as RabbitMQ refuses it on streams) and their bindings."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import Field

from sievemq.admin_api import shapes
from sievemq.admin_api.auth import require, require_vhost
from sievemq.admin_api.bodies import json_body, parse_int
from sievemq.admin_api.changes import saved
from sievemq.admin_api.cluster_relay import led_elsewhere, on_leader
from sievemq.admin_api.cluster_totals import with_replica_reads
from sievemq.admin_api.deps import Facade, Heavy, User
from sievemq.admin_api.errors import ApiError, bad_request
from sievemq.admin_api.pagination import is_paged, paginate
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG, Body, need_vhost, readable_vhost
from sievemq.admin_api.slicing import Slicer
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import AMQPError, NotFound, Principal, RemoteQueueView

router = APIRouter(tags=[TAG])


class QueueBody(Body):
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    arguments: dict[str, Any] = Field(default_factory=dict)


async def _queues(f: BrokerFacade, who: Principal, vhost: str | None, slicer: Slicer) -> list[Any]:
    consumers = f.list_consumers(vhost)
    by_queue: dict[tuple[str, str], list[Any]] = {}
    for c in consumers:
        by_queue.setdefault((c.vhost, c.stream), []).append(c)
    out: list[Any] = []
    for v in f.iter_streams(vhost):
        if who.may_see(v.vhost):
            out.append(shapes.queue(v, by_queue.get((v.vhost, v.name), []), f.node_name, False))
        await slicer.step()
    for q in f.iter_queues(vhost):
        if who.may_see(q.vhost):
            out.append(shapes.classic_queue(q, f.node_name))
        await slicer.step()
    if f.cluster is not None:  # the queues other nodes lead
        out += [
            shapes.remote_queue(q) for q in f.cluster.remote_queues(vhost) if who.may_see(q.vhost)
        ]
    out.sort(key=lambda q: (q["vhost"], q["name"]))
    return _with_members(f, out)


def _with_members(f: BrokerFacade, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In a cluster, a stream's or quorum queue's ``members`` (leader, then replicas),
    those ``online`` and its ``leader`` (RabbitMQ 3.10+'s fields)."""
    if f.cluster is not None:
        for row in rows:
            found = f.cluster.queue_members(row["vhost"], row["name"])
            if found is not None and row.get("type") in ("stream", "quorum"):
                row["members"], row["online"] = found
                row.setdefault("leader", found[0][0])
    return with_replica_reads(f, rows)


def _remote(f: BrokerFacade, vhost: str, queue: str) -> RemoteQueueView:
    """The queue another cluster node leads under this name; NotFound when none does."""
    remote = led_elsewhere(f, vhost, queue)
    if remote is None:
        raise NotFound(f"no queue '{queue}' in vhost '{vhost}'")
    return remote


async def _on_leader(request: Request, f: BrokerFacade, who: Principal, v: str, q: str) -> Response:
    """A get or purge of a queue another cluster node leads: done there
    (``cluster_relay.py``); 404 when no node leads it."""
    try:
        return await on_leader(request, f, who, v, q)
    except NotFound:
        raise ApiError(404, "not_found", f"NOT_FOUND - no queue '{q}' in vhost '{v}'") from None


# sorted by these (or not at all), a page needs the views of its own rows only
BY_NAME = (None, "name", "vhost")


def _keys(f: BrokerFacade, who: Principal, vhost: str | None) -> list[dict[str, Any]]:
    keys = [
        {"vhost": v, "name": n, "stream": s} for v, n, s in f.queue_keys(vhost) if who.may_see(v)
    ]
    if f.cluster is not None:  # the queues other nodes lead, shaped from their records
        keys += [
            {"vhost": q.vhost, "name": q.name, "remote": q}
            for q in f.cluster.remote_queues(vhost)
            if who.may_see(q.vhost)
        ]
    keys.sort(key=lambda k: (k["vhost"], k["name"]))
    return keys


def _expanded(f: BrokerFacade, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The queues of one page (one deleted meanwhile is left out)."""
    out: list[dict[str, Any]] = []
    for k in keys:
        v, q = k["vhost"], k["name"]
        if "remote" in k:
            out.append(shapes.remote_queue(k["remote"]))
            continue
        try:
            if k["stream"]:
                out.append(
                    shapes.queue(f.get_stream(v, q), f.list_consumers(v, q), f.node_name, False)
                )
            else:
                out.append(shapes.classic_queue(f.get_queue(v, q), f.node_name))
        except NotFound:
            continue
    return _with_members(f, out)


async def _list(
    request: Request, f: BrokerFacade, who: Principal, vhost: str | None, slicer: Slicer
) -> Response:
    """A page sorted by name builds 50 views, not 10,000; any other list builds them all."""
    if is_paged(request) and request.query_params.get("sort") in BY_NAME:
        return await paginate(request, _keys(f, who, vhost), slicer, lambda k: _expanded(f, k))
    return await paginate(request, await _queues(f, who, vhost, slicer), slicer)


@router.get("/queues")
async def list_queues(request: Request, f: Facade, who: User, slicer: Heavy) -> Any:
    return await _list(request, f, who, None, slicer)


@router.get("/queues/{vhost}")
async def list_vhost_queues(
    request: Request, f: Facade, vhost: str, who: User, slicer: Heavy
) -> Any:
    v = readable_vhost(f, who, vhost)
    return await _list(request, f, who, v, slicer)


@router.get("/queues/{vhost}/{queue}")
async def get_queue(f: Facade, vhost: str, queue: str, who: User) -> dict[str, Any]:
    v, q = name(vhost), name(queue)
    require_vhost(who, v)
    if not f.stream_exists(v, q):
        try:
            view_q = f.get_queue(v, q)
        except NotFound:
            # led by another node: its record, and its figures as it published them
            return with_replica_reads(f, [shapes.remote_queue(_remote(f, v, q))])[0]
        return shapes.classic_queue(view_q, f.node_name, f.list_consumers(v, q))
    view = f.get_stream(v, q)
    return _with_members(f, [shapes.queue(view, f.list_consumers(v, q), f.node_name, True)])[0]


@router.put("/queues/{vhost}/{queue}", status_code=201)
async def put_queue(f: Facade, vhost: str, queue: str, body: QueueBody, who: User) -> Response:
    v, q = name(vhost), name(queue)
    need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "queue", q)
    # (its files are created, and the change fdatasynced, in a worker thread: ``saved``)
    return await saved(
        f,
        lambda: f.declare_stream(
            v, q, body.arguments, body.durable, body.auto_delete, body.exclusive
        ),
    )


@router.delete("/queues/{vhost}/{queue}", status_code=204)
async def delete_queue(request: Request, f: Facade, vhost: str, queue: str, who: User) -> Response:
    v, q = name(vhost), name(queue)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "queue", q)
    try:
        return await saved(f, lambda: f.delete_queue(v, q))
    except NotFound:  # another cluster node's queue: deleted by it (everywhere, with its record)
        return await on_leader(request, f, who, v, q)


@router.delete("/queues/{vhost}/{queue}/contents")
async def purge_queue(request: Request, f: Facade, vhost: str, queue: str, who: User) -> Response:
    v, q = name(vhost), name(queue)
    require_vhost(who, v, write=True)
    require(who, v, "read", "queue", q)  # queue.purge needs read, as on AMQP
    try:
        f.purge_queue(v, q)
    except NotFound:
        return await _on_leader(request, f, who, v, q)
    except AMQPError as error:  # a stream (540) or an exclusive queue (405)
        raise bad_request(f"{error.reply_code} {error.explanation}") from None
    return Response(status_code=204)


@router.post("/queues/{vhost}/{queue}/get")
async def get_messages(request: Request, f: Facade, vhost: str, queue: str, who: User) -> Response:
    v, q = name(vhost), name(queue)
    require_vhost(who, v, write=True)
    if f.stream_exists(v, q):
        raise bad_request(
            f"540 basic.get not supported by stream queues queue '{q}' in vhost '{v}'"
        )
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("not_json")
    missing = [k for k in ("ackmode", "count", "encoding") if k not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{k}}}" for k in missing) + "]")
    count = parse_int(body["count"])  # "1" too, as RabbitMQ (its rabbitmqadmin sends that)
    truncate = body.get("truncate")
    if truncate is not None:
        truncate = parse_int(truncate)
    if body["encoding"] not in ("auto", "base64"):
        raise bad_request("Unsupported encoding. Please use auto or base64.")
    require(who, v, "read", "queue", q)
    try:
        got = f.get_messages(v, q, count, str(body["ackmode"]), body["encoding"], truncate)
    except NotFound:
        return await _on_leader(request, f, who, v, q)
    except AMQPError as error:
        raise bad_request(f"{error.reply_code} {error.explanation}") from None
    # RabbitMQ shows an empty property table as [] (an empty Erlang proplist)
    items = [dict(vars(m), properties=m.properties or []) for m in got]
    return Response(json.dumps(items), media_type="application/json")


@router.get("/queues/{vhost}/{queue}/bindings")
async def queue_bindings(f: Facade, vhost: str, queue: str, who: User) -> list[dict[str, Any]]:
    v, q = name(vhost), name(queue)
    require_vhost(who, v)
    if not f.stream_exists(v, q):
        try:
            f.get_queue(v, q)  # a classic or quorum queue, else 404
        except NotFound:
            _remote(f, v, q)  # or one another node leads: the bindings this node has to it
    return [shapes.binding(b) for b in f.list_bindings(v, destination=q, destination_type="queue")]
