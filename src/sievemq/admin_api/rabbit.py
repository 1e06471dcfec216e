"""RabbitMQ's management HTTP API over the gateway facade: same paths, fields and codes.

Handlers are ``async def`` on purpose: they run on the gateway's event loop (never in a
worker thread), so they read live broker state without locks and never block AMQP (nothing
here does network or long disk I/O; browsing is bounded inside the facade).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import resource
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sievemq.admin_api import shapes
from sievemq.admin_api.auth import admin, facade_of, monitor, require, require_vhost, user
from sievemq.admin_api.changes import saved
from sievemq.admin_api.errors import ApiError, bad_request, not_authorised, not_found
from sievemq.admin_api.pagination import paginate
from sievemq.admin_api.paths import exchange_name, name
from sievemq.admin_api.slicing import Slicer, heavy
from sievemq.gateway.facade import (
    EXCHANGE_TYPES,
    USER_LIMITS,
    VHOST_LIMITS,
    AMQPError,
    BrokerFacade,
    NotFound,
    Principal,
)

router = APIRouter(prefix="/api", tags=["RabbitMQ management API"])

User = Annotated[Principal, Depends(user)]
Monitor = Annotated[Principal, Depends(monitor)]
Admin = Annotated[Principal, Depends(admin)]
Heavy = Annotated[Slicer, Depends(heavy)]
MAX_BODY_BYTES = 20 * 1024 * 1024  # RabbitMQ's management.http.max_body_size default


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    @field_validator("arguments", mode="before", check_fields=False)
    @classmethod
    def _empty_list_is_empty_table(cls, value: Any) -> Any:
        """Erlang-minded clients (pyrabbit2) send ``"arguments": []``; RabbitMQ takes it."""
        return {} if value == [] or value is None else value


class QueueBody(_Body):
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class ExchangeBody(_Body):
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class PublishBody(_Body):
    routing_key: str = ""
    payload: str = ""
    payload_encoding: str = "string"
    properties: dict[str, Any] = Field(default_factory=dict)


class BindingBody(_Body):
    routing_key: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)


class UserBody(_Body):
    password: str | None = None
    password_hash: str | None = None
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: str | list[str] = ""


class PermissionBody(_Body):
    configure: str
    write: str
    read: str


class VhostBody(_Body):
    description: str = ""
    tags: str | list[str] = ""


class BulkDelete(_Body):
    users: list[str]


def _facade(request: Request) -> BrokerFacade:
    return facade_of(request)


def _created(created: bool) -> Response:
    return Response(status_code=201 if created else 204)


def _tags(tags: str | list[str]) -> list[str]:
    if isinstance(tags, str):
        return [t.strip() for t in tags.split(",") if t.strip()]
    return tags


def _need_vhost(f: BrokerFacade, vhost: str) -> None:
    if not f.vhost_exists(vhost):
        raise not_found()


def _readable_vhost(f: BrokerFacade, who: Principal, raw: str) -> str:
    """The vhost of a path: 404 when it does not exist, then 401 when ``who`` may not read it."""
    v = name(raw)
    _need_vhost(f, v)
    require_vhost(who, v)
    return v


# ------------------------------------------------------------------------------ node


@router.get("/overview")
async def overview(request: Request, who: User, slicer: Heavy) -> dict[str, Any]:
    f = _facade(request)
    streams = await slicer.collect(f.iter_streams())
    out = shapes.overview(f.overview(streams), list(EXCHANGE_TYPES))
    if f.cluster is not None:
        out["cluster_name"] = f.cluster.cluster_name
    return out


@router.get("/whoami")
async def whoami(who: User) -> dict[str, Any]:
    return {"name": who.name, "tags": who.tags}


@router.get("/auth")
async def auth_settings() -> dict[str, Any]:
    return {"oauth_enabled": False}


@router.get("/extensions")
async def extensions(who: User) -> list[dict[str, Any]]:
    return []


def _fds() -> tuple[int, int]:
    """(descriptors open, the soft limit): RabbitMQ's fd_used and fd_total."""
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 0
    return used, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def node_info(f: BrokerFacade) -> dict[str, Any]:
    """This node as ``/api/nodes`` shows it; a cluster node publishes the same into etcd."""
    o = f.overview()
    snap = f.alarms.snapshot() if f.alarms is not None else None
    mem = snap["memory"] if snap else {}
    disk = snap["disk"] if snap else {}
    fd_used, fd_total = _fds()
    return {
        "name": o.node,
        "type": "disc",
        "running": True,
        "uptime": o.uptime_ms,
        "os_pid": str(os.getpid()),
        "processors": os.cpu_count() or 1,
        "fd_used": fd_used,
        "fd_total": fd_total,
        "mem_used": mem.get("used_bytes", 0),
        "mem_limit": mem.get("limit_bytes", 0),
        "mem_alarm": bool(mem.get("alarm", False)),
        "disk_free": disk.get("free_bytes", 0),
        "disk_free_limit": disk.get("limit_bytes", 0),
        "disk_free_alarm": bool(disk.get("alarm", False)),
        "being_drained": False,
        "partitions": [],
        "applications": [],
        "listeners": [
            {"protocol": li.protocol, "ip_address": li.ip_address, "port": li.port}
            for li in o.listeners
        ],
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
async def nodes(request: Request, who: Monitor) -> list[dict[str, Any]]:
    return _nodes(_facade(request))


@router.get("/nodes/{node}")
async def get_node(request: Request, node: str, who: Monitor) -> dict[str, Any]:
    wanted = name(node)
    for found in _nodes(_facade(request)):
        if found["name"] == wanted:
            return found
    raise not_found()


@router.get("/aliveness-test/{vhost}")
async def aliveness(request: Request, vhost: str, who: User) -> dict[str, str]:
    v = name(vhost)
    _need_vhost(_facade(request), v)
    require_vhost(who, v)
    return {"status": "ok"}


# ------------------------------------------------------------------------------ health


def _failed(reason: str, **extra: Any) -> ApiError:
    err = ApiError(503, "failed", reason, extra=extra)
    err.body = {"status": "failed", "reason": reason, **extra}
    return err


@router.get("/health/checks/alarms")
@router.get("/health/checks/local-alarms")
async def health_alarms(request: Request, who: User) -> dict[str, Any]:
    alarms = _facade(request).active_alarms()
    if alarms:
        raise _failed(
            "There are alarms in effect in the cluster",
            alarms=[{"node": _facade(request).node_name, "resource": a} for a in alarms],
        )
    return {"status": "ok"}


@router.get("/health/checks/virtual-hosts")
async def health_vhosts(who: User) -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/checks/port-listener/{port}")
async def health_port(request: Request, port: str, who: User) -> dict[str, Any]:
    try:
        wanted = int(port)
    except ValueError:
        raise bad_request(f"invalid port '{port}'") from None
    ports = [li.port for li in _facade(request).listeners]
    if wanted not in ports:
        raise _failed("No active listener", missing=wanted, ports=ports)
    return {"status": "ok", "port": wanted}


@router.get("/health/checks/protocol-listener/{protocol}")
async def health_protocol(request: Request, protocol: str, who: User) -> dict[str, Any]:
    protocols = [li.protocol for li in _facade(request).listeners]
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
async def health_conn_limit(request: Request, who: User) -> dict[str, Any]:
    f = _facade(request)
    limit = f.node.limits.max_connections if f.node is not None else 0
    used = len(f.list_connections())
    if limit and used >= limit:
        raise _failed("node connection limit is reached", limit=limit, connections=used)
    return {"status": "ok", "limit": limit, "connections": used}


# ------------------------------------------------------------------------------ queues


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
    out.sort(key=lambda q: (q["vhost"], q["name"]))
    return out


@router.get("/queues")
async def list_queues(request: Request, who: User, slicer: Heavy) -> Any:
    return await paginate(request, await _queues(_facade(request), who, None, slicer), slicer)


@router.get("/queues/{vhost}")
async def list_vhost_queues(request: Request, vhost: str, who: User, slicer: Heavy) -> Any:
    f = _facade(request)
    v = _readable_vhost(f, who, vhost)
    return await paginate(request, await _queues(f, who, v, slicer), slicer)


@router.get("/queues/{vhost}/{queue}")
async def get_queue(request: Request, vhost: str, queue: str, who: User) -> dict[str, Any]:
    v, q = name(vhost), name(queue)
    f = _facade(request)
    require_vhost(who, v)
    if not f.stream_exists(v, q):
        view_q = f.get_queue(v, q)
        return shapes.classic_queue(view_q, f.node_name, f.list_consumers(v, q))
    view = f.get_stream(v, q)
    return shapes.queue(view, f.list_consumers(v, q), f.node_name, True)


@router.put("/queues/{vhost}/{queue}", status_code=201)
async def put_queue(
    request: Request, vhost: str, queue: str, body: QueueBody, who: User
) -> Response:
    v, q = name(vhost), name(queue)
    f = _facade(request)
    _need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "queue", q)
    created = f.declare_stream(v, q, body.arguments, body.durable, body.auto_delete, body.exclusive)
    return _created(created)


@router.delete("/queues/{vhost}/{queue}", status_code=204)
async def delete_queue(request: Request, vhost: str, queue: str, who: User) -> Response:
    v, q = name(vhost), name(queue)
    f = _facade(request)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "queue", q)
    f.delete_queue(v, q)
    return Response(status_code=204)


@router.delete("/queues/{vhost}/{queue}/contents")
async def purge_queue(request: Request, vhost: str, queue: str, who: User) -> Response:
    v, q = name(vhost), name(queue)
    f = _facade(request)
    require_vhost(who, v, write=True)
    require(who, v, "read", "queue", q)  # queue.purge needs read, as on AMQP
    try:
        f.purge_queue(v, q)
    except NotFound:
        raise ApiError(404, "not_found", f"NOT_FOUND - no queue '{q}' in vhost '{v}'") from None
    except AMQPError as error:  # a stream (540) or an exclusive queue (405)
        raise bad_request(f"{error.reply_code} {error.explanation}") from None
    return Response(status_code=204)


@router.post("/queues/{vhost}/{queue}/get")
async def get_messages(request: Request, vhost: str, queue: str, who: User) -> Response:
    v, q = name(vhost), name(queue)
    f = _facade(request)
    require_vhost(who, v, write=True)
    if f.stream_exists(v, q):
        raise bad_request(
            f"540 basic.get not supported by stream queues queue '{q}' in vhost '{v}'"
        )
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise bad_request("not_json")
    missing = [k for k in ("ackmode", "count", "encoding") if k not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{k}}}" for k in missing) + "]")
    count, truncate = body["count"], body.get("truncate")
    for value in (count, truncate):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            err = ApiError(400, "bad_request")
            err.body = {"error": "bad_request", "reason": ["not_integer", str(value)]}
            raise err
    if body["encoding"] not in ("auto", "base64"):
        raise bad_request("Unsupported encoding. Please use auto or base64.")
    require(who, v, "read", "queue", q)
    try:
        got = f.get_messages(v, q, count, str(body["ackmode"]), body["encoding"], truncate)
    except NotFound:
        raise ApiError(404, "not_found", f"NOT_FOUND - no queue '{q}' in vhost '{v}'") from None
    except AMQPError as error:
        raise bad_request(f"{error.reply_code} {error.explanation}") from None
    # RabbitMQ shows an empty property table as [] (an empty Erlang proplist)
    items = [dict(vars(m), properties=m.properties or []) for m in got]
    return Response(json.dumps(items), media_type="application/json")


@router.get("/queues/{vhost}/{queue}/bindings")
async def queue_bindings(
    request: Request, vhost: str, queue: str, who: User
) -> list[dict[str, Any]]:
    v, q = name(vhost), name(queue)
    f = _facade(request)
    require_vhost(who, v)
    if not f.stream_exists(v, q):
        f.get_queue(v, q)  # a classic or quorum queue, else 404
    return [shapes.binding(b) for b in f.list_bindings(v, destination=q, destination_type="queue")]


# ------------------------------------------------------------------------------ exchanges


def _exchanges(f: BrokerFacade, who: Principal, vhost: str | None) -> list[dict[str, Any]]:
    return [shapes.exchange(x) for x in f.list_exchanges(vhost) if who.may_see(x.vhost)]


@router.get("/exchanges")
async def list_exchanges(request: Request, who: User) -> Any:
    return await paginate(request, _exchanges(_facade(request), who, None))


@router.get("/exchanges/{vhost}")
async def list_vhost_exchanges(request: Request, vhost: str, who: User) -> Any:
    f = _facade(request)
    v = _readable_vhost(f, who, vhost)
    return await paginate(request, _exchanges(f, who, v))


@router.get("/exchanges/{vhost}/{exchange}")
async def get_exchange(request: Request, vhost: str, exchange: str, who: User) -> dict[str, Any]:
    v, x = name(vhost), exchange_name(exchange)
    f = _facade(request)
    require_vhost(who, v)
    out = shapes.exchange(f.get_exchange(v, x))
    out["incoming"] = []
    out["outgoing"] = []
    return out


@router.put("/exchanges/{vhost}/{exchange}", status_code=201)
async def put_exchange(
    request: Request, vhost: str, exchange: str, body: ExchangeBody, who: User
) -> Response:
    v, x = name(vhost), exchange_name(exchange)
    f = _facade(request)
    _need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "exchange", x)
    created = f.declare_exchange(
        v, x, body.type, body.durable, body.auto_delete, body.internal, body.arguments
    )
    return _created(created)


@router.delete("/exchanges/{vhost}/{exchange}", status_code=204)
async def delete_exchange(request: Request, vhost: str, exchange: str, who: User) -> Response:
    v, x = name(vhost), exchange_name(exchange)
    f = _facade(request)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "exchange", x)
    if_unused = request.query_params.get("if-unused", "false").lower() == "true"
    f.delete_exchange(v, x, if_unused)
    return Response(status_code=204)


@router.post("/exchanges/{vhost}/{exchange}/publish")
async def publish(
    request: Request, vhost: str, exchange: str, body: PublishBody, who: User
) -> dict[str, bool]:
    """Publish one message; answers once every stream it routed to stored it."""
    v, x = name(vhost), exchange_name(exchange)
    f = _facade(request)
    _need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "write", "exchange", x or "amq.default")
    if body.payload_encoding == "string":
        payload = body.payload.encode("utf-8")
    elif body.payload_encoding == "base64":
        try:
            payload = base64.b64decode(body.payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("payload is not valid base64") from None
    else:
        raise bad_request(f"unknown payload_encoding '{body.payload_encoding}'")
    routed = await f.publish(v, x, body.routing_key, payload, body.properties)
    return {"routed": routed}


@router.get("/exchanges/{vhost}/{exchange}/bindings/source")
async def exchange_bindings_source(
    request: Request, vhost: str, exchange: str, who: User
) -> list[dict[str, Any]]:
    v, x = name(vhost), exchange_name(exchange)
    f = _facade(request)
    require_vhost(who, v)
    f.get_exchange(v, x)
    return [shapes.binding(b) for b in f.list_bindings(v, source=x)]


@router.get("/exchanges/{vhost}/{exchange}/bindings/destination")
async def exchange_bindings_destination(
    request: Request, vhost: str, exchange: str, who: User
) -> list[dict[str, Any]]:
    v, x = name(vhost), exchange_name(exchange)
    f = _facade(request)
    require_vhost(who, v)
    f.get_exchange(v, x)
    return [
        shapes.binding(b) for b in f.list_bindings(v, destination=x, destination_type="exchange")
    ]


# ------------------------------------------------------------------------------ bindings


@router.get("/bindings")
async def list_bindings(request: Request, who: User) -> Any:
    f = _facade(request)
    return await paginate(
        request, [shapes.binding(b) for b in f.list_bindings() if who.may_see(b.vhost)]
    )


@router.get("/bindings/{vhost}")
async def list_vhost_bindings(request: Request, vhost: str, who: User) -> Any:
    f = _facade(request)
    v = _readable_vhost(f, who, vhost)
    return await paginate(request, [shapes.binding(b) for b in f.list_bindings(v)])


_KINDS = {"q": "queue", "e": "exchange"}


def _kind(kind: str) -> str:
    if kind not in _KINDS:
        raise not_found()
    return _KINDS[kind]


@router.get("/bindings/{vhost}/e/{source}/{kind}/{destination}")
async def list_pair_bindings(
    request: Request, vhost: str, source: str, kind: str, destination: str, who: User
) -> list[dict[str, Any]]:
    v, s, d, k = name(vhost), exchange_name(source), name(destination), _kind(kind)
    f = _facade(request)
    require_vhost(who, v)
    f.get_exchange(v, s)
    return [
        shapes.binding(b) for b in f.list_bindings(v, source=s, destination=d, destination_type=k)
    ]


@router.post("/bindings/{vhost}/e/{source}/{kind}/{destination}", status_code=201)
async def post_binding(
    request: Request,
    vhost: str,
    source: str,
    kind: str,
    destination: str,
    body: BindingBody,
    who: User,
) -> Response:
    v, s, d, k = name(vhost), exchange_name(source), name(destination), _kind(kind)
    f = _facade(request)
    _need_vhost(f, v)
    require_vhost(who, v, write=True)
    require(who, v, "write", k, d)
    require(who, v, "read", "exchange", s)
    key = f.bind(v, s, k, d, body.routing_key, body.arguments)
    return Response(status_code=201, headers={"location": key})


@router.get("/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}")
async def get_binding(
    request: Request,
    vhost: str,
    source: str,
    kind: str,
    destination: str,
    props: str,
    who: User,
) -> dict[str, Any]:
    v, s, d, k, p = (
        name(vhost),
        exchange_name(source),
        name(destination),
        _kind(kind),
        name(props),
    )
    f = _facade(request)
    require_vhost(who, v)
    for b in f.list_bindings(v, source=s, destination=d, destination_type=k):
        if b.properties_key == p:
            return shapes.binding(b)
    raise not_found()


@router.delete("/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", status_code=204)
async def delete_binding(
    request: Request,
    vhost: str,
    source: str,
    kind: str,
    destination: str,
    props: str,
    who: User,
) -> Response:
    v, s, d, k, p = (
        name(vhost),
        exchange_name(source),
        name(destination),
        _kind(kind),
        name(props),
    )
    f = _facade(request)
    require_vhost(who, v, write=True)
    require(who, v, "write", k, d)
    require(who, v, "read", "exchange", s)
    f.unbind(v, s, k, d, p)
    return Response(status_code=204)


# ------------------------------------------------------------------------------ connections


def _visible_connections(f: BrokerFacade, who: Principal, vhost: str | None) -> list[Any]:
    return [c for c in f.list_connections(vhost) if who.may_monitor or c.user == who.name]


@router.get("/connections")
async def list_connections(request: Request, who: User) -> Any:
    f = _facade(request)
    return await paginate(
        request,
        [shapes.connection(c, f.node_name) for c in _visible_connections(f, who, None)],
    )


@router.get("/stream/connections")
async def list_stream_connections(request: Request, who: User) -> Any:
    """The stream plugin's view: stream-protocol connections only."""
    f = _facade(request)
    return await paginate(
        request,
        [
            shapes.connection(c, f.node_name)
            for c in _visible_connections(f, who, None)
            if c.protocol == "stream"
        ],
    )


def _visible(who: Principal, views: list[Any]) -> list[Any]:
    """Monitoring users see every stream client; others only their own connections'."""
    return [v for v in views if who.may_monitor or v.user == who.name]


def _in_vhost(f: BrokerFacade, who: Principal, vhost: str | None) -> str | None:
    return None if vhost is None else _readable_vhost(f, who, vhost)


@router.get("/stream/connections/{vhost}")
async def list_vhost_stream_connections(request: Request, vhost: str, who: User) -> Any:
    f = _facade(request)
    v = _in_vhost(f, who, vhost)
    return await paginate(
        request,
        [
            shapes.connection(c, f.node_name)
            for c in _visible_connections(f, who, v)
            if c.protocol == "stream"
        ],
    )


def _stream_connection(f: BrokerFacade, who: Principal, vhost: str, conn: str) -> Any:
    """A stream-protocol connection of ``vhost`` the user may see (404 otherwise)."""
    v = _in_vhost(f, who, vhost)
    view = _own_connection(f, who, name(conn))
    if view.protocol != "stream" or view.vhost != v:
        raise not_found()
    return view


@router.get("/stream/connections/{vhost}/{conn}")
async def get_stream_connection(
    request: Request, vhost: str, conn: str, who: User
) -> dict[str, Any]:
    f = _facade(request)
    return shapes.connection(_stream_connection(f, who, vhost, conn), f.node_name)


@router.delete("/stream/connections/{vhost}/{conn}", status_code=204)
async def close_stream_connection(request: Request, vhost: str, conn: str, who: User) -> Response:
    f = _facade(request)
    view = _stream_connection(f, who, vhost, conn)
    if not who.is_administrator and view.user != who.name:
        raise not_authorised("Not administrator user")
    f.close_connection(view.name, request.headers.get("x-reason"))
    return Response(status_code=204)


def _connection_clients(
    request: Request, vhost: str, conn: str, who: Principal, consumers: bool
) -> list[dict[str, Any]]:
    """One stream connection's subscriptions (``consumers``) or publishers."""
    f = _facade(request)
    view = _stream_connection(f, who, vhost, conn)
    if consumers:
        return [
            shapes.stream_consumer(c, f.node_name)
            for c in f.list_stream_consumers(view.vhost)
            if c.connection_name == view.name
        ]
    return [
        shapes.stream_publisher(p, f.node_name)
        for p in f.list_stream_publishers(view.vhost)
        if p.connection_name == view.name
    ]


@router.get("/stream/connections/{vhost}/{conn}/consumers")
async def stream_connection_consumers(
    request: Request, vhost: str, conn: str, who: User
) -> list[dict[str, Any]]:
    return _connection_clients(request, vhost, conn, who, consumers=True)


@router.get("/stream/connections/{vhost}/{conn}/publishers")
async def stream_connection_publishers(
    request: Request, vhost: str, conn: str, who: User
) -> list[dict[str, Any]]:
    return _connection_clients(request, vhost, conn, who, consumers=False)


@router.get("/stream/consumers")
@router.get("/stream/consumers/{vhost}")
async def list_stream_consumers(request: Request, who: User, vhost: str | None = None) -> Any:
    """The stream plugin's consumers (stream-protocol subscriptions)."""
    f = _facade(request)
    views = f.list_stream_consumers(_in_vhost(f, who, vhost))
    return await paginate(
        request, [shapes.stream_consumer(c, f.node_name) for c in _visible(who, views)]
    )


@router.get("/stream/publishers")
@router.get("/stream/publishers/{vhost}")
@router.get("/stream/publishers/{vhost}/{stream}")
async def list_stream_publishers(
    request: Request, who: User, vhost: str | None = None, stream: str | None = None
) -> Any:
    f = _facade(request)
    v = _in_vhost(f, who, vhost)
    s = None if stream is None else name(stream)
    if v is not None and s is not None and not f.stream_exists(v, s):
        raise not_found()
    views = f.list_stream_publishers(v, s)
    return await paginate(
        request, [shapes.stream_publisher(p, f.node_name) for p in _visible(who, views)]
    )


@router.get("/stream/consumer-groups")
@router.get("/stream/consumer-groups/{vhost}")
async def list_sac_groups(request: Request, who: User, vhost: str | None = None) -> Any:
    """Single-active-consumer groups (a SieveMQ extension). Users without the monitoring
    tag see the groups their own connections are in, with only their own members."""
    f = _facade(request)
    groups = f.list_sac_groups(_in_vhost(f, who, vhost))
    if not who.may_monitor:
        for g in groups:
            g.consumers = [m for m in g.consumers if m.user == who.name]
        groups = [g for g in groups if g.consumers]
    return await paginate(request, [shapes.sac_group(g) for g in groups])


@router.get("/vhosts/{vhost}/connections")
async def list_vhost_connections(request: Request, vhost: str, who: User) -> Any:
    f = _facade(request)
    v = _readable_vhost(f, who, vhost)
    return await paginate(
        request, [shapes.connection(c, f.node_name) for c in _visible_connections(f, who, v)]
    )


def _own_connection(f: BrokerFacade, who: Principal, conn: str) -> Any:
    view = f.get_connection(conn)
    if not who.may_monitor and view.user != who.name:
        raise not_found()
    return view


@router.get("/connections/{conn}")
async def get_connection(request: Request, conn: str, who: User) -> dict[str, Any]:
    f = _facade(request)
    return shapes.connection(_own_connection(f, who, name(conn)), f.node_name)


@router.delete("/connections/{conn}", status_code=204)
async def close_connection(request: Request, conn: str, who: User) -> Response:
    f = _facade(request)
    view = f.get_connection(name(conn))
    if not who.is_administrator and view.user != who.name:
        raise not_authorised("Not administrator user")
    f.close_connection(view.name, request.headers.get("x-reason"))
    return Response(status_code=204)


@router.get("/connections/{conn}/channels")
async def connection_channels(request: Request, conn: str, who: User) -> list[dict[str, Any]]:
    f = _facade(request)
    view = _own_connection(f, who, name(conn))
    return [shapes.channel(c, f.node_name) for c in f.list_channels(connection=view.name)]


@router.get("/channels")
async def list_channels(request: Request, who: User) -> Any:
    f = _facade(request)
    return await paginate(
        request,
        [
            shapes.channel(c, f.node_name)
            for c in f.list_channels()
            if who.may_monitor or c.user == who.name
        ],
    )


@router.get("/vhosts/{vhost}/channels")
async def list_vhost_channels(request: Request, vhost: str, who: User) -> Any:
    f = _facade(request)
    v = _readable_vhost(f, who, vhost)
    return await paginate(
        request,
        [
            shapes.channel(c, f.node_name)
            for c in f.list_channels(v)
            if who.may_monitor or c.user == who.name
        ],
    )


@router.get("/channels/{channel}")
async def get_channel(request: Request, channel: str, who: User) -> dict[str, Any]:
    f = _facade(request)
    view = f.get_channel(name(channel))
    if not who.may_monitor and view.user != who.name:
        raise not_found()
    return shapes.channel(view, f.node_name)


@router.get("/consumers")
async def list_consumers(request: Request, who: User) -> Any:
    f = _facade(request)
    return await paginate(
        request,
        [shapes.consumer(c, f.node_name) for c in f.list_consumers() if who.may_see(c.vhost)],
    )


@router.get("/consumers/{vhost}")
async def list_vhost_consumers(request: Request, vhost: str, who: User) -> Any:
    f = _facade(request)
    v = _readable_vhost(f, who, vhost)
    return await paginate(request, [shapes.consumer(c, f.node_name) for c in f.list_consumers(v)])


# ------------------------------------------------------------------------------ vhosts


@router.get("/vhosts")
async def list_vhosts(request: Request, who: User) -> Any:
    f = _facade(request)
    return await paginate(
        request,
        [shapes.vhost(v, f.node_name) for v in f.list_vhosts() if who.may_see(v.name)],
    )


@router.get("/vhosts/{vhost}")
async def get_vhost(request: Request, vhost: str, who: User) -> dict[str, Any]:
    v = name(vhost)
    f = _facade(request)
    require_vhost(who, v)
    for view in f.list_vhosts():
        if view.name == v:
            return shapes.vhost(view, f.node_name)
    raise not_found()


@router.put("/vhosts/{vhost}", status_code=201)
async def put_vhost(request: Request, vhost: str, who: Admin) -> Response:
    await _optional_json(request, VhostBody)
    f = _facade(request)
    return await saved(f, lambda: f.add_vhost(name(vhost)))


@router.delete("/vhosts/{vhost}", status_code=204)
async def delete_vhost(request: Request, vhost: str, who: Admin) -> Response:
    f = _facade(request)
    return await saved(f, lambda: f.delete_vhost(name(vhost)))


@router.get("/vhosts/{vhost}/permissions")
async def vhost_permissions(request: Request, vhost: str, who: Admin) -> list[dict[str, Any]]:
    v = name(vhost)
    f = _facade(request)
    _need_vhost(f, v)
    return [p.__dict__ for p in f.list_permissions(vhost=v)]


# ------------------------------------------------------------------------------ users


def _user_json(u: Any) -> dict[str, Any]:
    return {
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": u.hashing_algorithm,
        "tags": u.tags,
        "limits": u.limits,
    }


@router.get("/users")
async def list_users(request: Request, who: Admin) -> Any:
    return await paginate(request, [_user_json(u) for u in _facade(request).list_users()])


@router.get("/users/without-permissions")
async def users_without_permissions(request: Request, who: Admin) -> list[dict[str, Any]]:
    f = _facade(request)
    with_perms = {p.user for p in f.list_permissions()}
    return [_user_json(u) for u in f.list_users() if u.name not in with_perms]


@router.post("/users/bulk-delete", status_code=204)
async def bulk_delete_users(request: Request, body: BulkDelete, who: Admin) -> Response:
    f = _facade(request)

    def delete_all() -> None:
        for username in body.users:
            with contextlib.suppress(NotFound):
                f.delete_user(username)

    return await saved(f, delete_all)


@router.get("/users/{username}")
async def get_user(request: Request, username: str, who: Admin) -> dict[str, Any]:
    return _user_json(_facade(request).get_user(name(username)))


@router.put("/users/{username}", status_code=201)
async def put_user(request: Request, username: str, body: UserBody, who: Admin) -> Response:
    f = _facade(request)
    return await saved(
        f,
        lambda: f.put_user(
            name(username),
            password=body.password,
            tags=_tags(body.tags),
            password_hash=body.password_hash,
            hashing_algorithm=body.hashing_algorithm,
        ),
    )


@router.delete("/users/{username}", status_code=204)
async def delete_user(request: Request, username: str, who: Admin) -> Response:
    f = _facade(request)
    return await saved(f, lambda: f.delete_user(name(username)))


@router.get("/users/{username}/permissions")
async def user_permissions(request: Request, username: str, who: Admin) -> list[dict[str, Any]]:
    f = _facade(request)
    u = name(username)
    f.get_user(u)
    return [p.__dict__ for p in f.list_permissions(user=u)]


# ------------------------------------------------------------------------------ permissions


# ------------------------------------------------------------------------------ limits


def _limits_json(key: str, items: list[tuple[str, dict[str, int]]]) -> list[dict[str, Any]]:
    return [{key: owner, "value": limits} for owner, limits in items]


async def _limit_value(request: Request, name_: str, known: tuple[str, ...]) -> int:
    """The ``{"value": N}`` body of a limit, with RabbitMQ's refusal texts."""
    body = await _json_body(request)
    if not isinstance(body, dict) or "value" not in body:
        raise bad_request("[{key_missing,value}]")
    value = body["value"]
    if name_ not in known:
        raise bad_request(
            f'Validation failed\n\nUnrecognised terms [{{<<"{name_}">>,{json.dumps(value)}}}] '
            "in limits\n"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        shown = f'<<"{value}">>' if isinstance(value, str) else json.dumps(value)
        raise bad_request(
            f"Validation failed\n\n{name_} should be a number, actually was {shown}\n"
        )
    return value


@router.get("/vhost-limits")
async def list_vhost_limits(request: Request, who: Monitor) -> list[dict[str, Any]]:
    return _limits_json("vhost", _facade(request).vhost_limits())


@router.get("/vhost-limits/{vhost}")
async def get_vhost_limits(request: Request, vhost: str, who: Monitor) -> list[dict[str, Any]]:
    f = _facade(request)
    v = name(vhost)
    _need_vhost(f, v)
    return _limits_json("vhost", f.vhost_limits(v))


@router.put("/vhost-limits/{vhost}/{limit}", status_code=204)
async def put_vhost_limit(request: Request, vhost: str, limit: str, who: Admin) -> Response:
    f = _facade(request)
    v = name(vhost)
    _need_vhost(f, v)
    value = await _limit_value(request, limit, VHOST_LIMITS)
    return await saved(f, lambda: f.set_vhost_limit(v, limit, value))


@router.delete("/vhost-limits/{vhost}/{limit}", status_code=204)
async def delete_vhost_limit(request: Request, vhost: str, limit: str, who: Admin) -> Response:
    f = _facade(request)
    v = name(vhost)
    _need_vhost(f, v)
    return await saved(f, lambda: f.clear_vhost_limit(v, limit))


@router.get("/user-limits")
async def list_user_limits(request: Request, who: Admin) -> list[dict[str, Any]]:
    return _limits_json("user", _facade(request).user_limits())


@router.get("/user-limits/{username}")
async def get_user_limits(request: Request, username: str, who: Admin) -> list[dict[str, Any]]:
    return _limits_json("user", _facade(request).user_limits(name(username)))


@router.put("/user-limits/{username}/{limit}", status_code=204)
async def put_user_limit(request: Request, username: str, limit: str, who: Admin) -> Response:
    f = _facade(request)
    u = name(username)
    f.get_user(u)  # 404 first
    value = await _limit_value(request, limit, USER_LIMITS)
    return await saved(f, lambda: f.set_user_limit(u, limit, value))


@router.delete("/user-limits/{username}/{limit}", status_code=204)
async def delete_user_limit(request: Request, username: str, limit: str, who: Admin) -> Response:
    f = _facade(request)
    return await saved(f, lambda: f.clear_user_limit(name(username), limit))


@router.get("/permissions")
async def list_permissions(request: Request, who: Admin) -> Any:
    return await paginate(request, [p.__dict__ for p in _facade(request).list_permissions()])


@router.get("/permissions/{vhost}/{username}")
async def get_permission(request: Request, vhost: str, username: str, who: Admin) -> dict[str, Any]:
    return dict(_facade(request).get_permission(name(vhost), name(username)).__dict__)


@router.put("/permissions/{vhost}/{username}", status_code=201)
async def put_permission(
    request: Request, vhost: str, username: str, body: PermissionBody, who: Admin
) -> Response:
    f = _facade(request)
    v, u = name(vhost), name(username)
    _need_vhost(f, v)
    return await saved(f, lambda: f.set_permission(u, v, body.configure, body.write, body.read))


@router.delete("/permissions/{vhost}/{username}", status_code=204)
async def delete_permission(request: Request, vhost: str, username: str, who: Admin) -> Response:
    f = _facade(request)
    return await saved(f, lambda: f.clear_permission(name(username), name(vhost)))


# ------------------------------------------------------------------------------ definitions


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "bad_request", "request body too large")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "bad_request", "not_json") from None


async def _optional_json(request: Request, model: type[_Body]) -> _Body | None:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return model.model_validate_json(raw)
    except ValueError:
        raise ApiError(400, "bad_request", "not_json") from None


def _definitions(request: Request, vhost: str | None) -> Response:
    data = _facade(request).export_definitions(vhost).__dict__
    headers = {}
    download = request.query_params.get("download")
    if download:
        headers["content-disposition"] = f'attachment; filename="{download}"'
    return Response(json.dumps(data), media_type="application/json", headers=headers)


@router.get("/definitions")
async def get_definitions(request: Request, who: Admin) -> Response:
    return _definitions(request, None)


@router.get("/definitions/{vhost}")
async def get_vhost_definitions(request: Request, vhost: str, who: Admin) -> Response:
    v = name(vhost)
    _need_vhost(_facade(request), v)
    return _definitions(request, v)


@router.post("/definitions", status_code=204)
async def post_definitions(request: Request, who: Admin) -> Response:
    data = await _json_body(request)
    if not isinstance(data, dict):
        raise bad_request("definitions must be a JSON object")
    f = _facade(request)
    return await saved(f, lambda: f.import_definitions(data))


@router.post("/definitions/{vhost}", status_code=204)
async def post_vhost_definitions(request: Request, vhost: str, who: Admin) -> Response:
    v = name(vhost)
    _need_vhost(_facade(request), v)
    data = await _json_body(request)
    if not isinstance(data, dict):
        raise bad_request("definitions must be a JSON object")
    f = _facade(request)
    return await saved(f, lambda: f.import_definitions(data, v))
