"""`sievemq serve`: the AMQP and stream listeners and the admin HTTP app on one event loop.

Prints exactly one line, ``sievemq ready amqp=HOST:PORT stream=HOST:PORT admin=http://HOST:PORT``,
once all listen (port 0 picks a free port; the printed port is the real one). With
``--tls-cert`` and ``--tls-key`` a second AMQP listener speaks TLS on ``amqps_port`` and the
line gains ``amqps=HOST:PORT`` after the amqp field (parse it by key).
SIGTERM/SIGINT: stop accepting and reading, flush and fsync every stream, send the confirms
of what was read, close connections (plain and TLS) with 320 CONNECTION_FORCED, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from sievemq import __version__
from sievemq.admin_api import create_app
from sievemq.amqp import errors
from sievemq.amqp.tables import TableLimits
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import ListenerView
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.gateway.model.classic.message import MemoryWindow
from sievemq.gateway.net.listener import BoundListeners, serve_on
from sievemq.gateway.net.protocol import AMQPProtocol
from sievemq.gateway.net.stream_protocol import stream_protocol_factory
from sievemq.gateway.runtime import descriptors
from sievemq.gateway.runtime.alarms import ResourceAlarms, SystemProbe, total_memory
from sievemq.gateway.runtime.node import Limits, Node
from sievemq.gateway.session.connection import Connection
from sievemq.gateway.session.peer import PeerConnection
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.node import StreamNode
from sievemq.settings import Settings
from sievemq.storage import Durability, handles
from sievemq.units import parse_memory_watermark

log = logging.getLogger("sievemq")
limits_log = logging.getLogger("sievemq.limits")  # start-up figures, shown at INFO


class AdminServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the gateway owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def limits_from(settings: Settings, max_connections: int | None = None) -> Limits:
    """The connection limits; ``max_connections`` is the descriptor budget's share."""
    return Limits(
        channel_max=settings.channel_max,
        frame_max=settings.frame_max,
        heartbeat=settings.heartbeat,
        max_connections=settings.max_connections if max_connections is None else max_connections,
        max_message_size=settings.max_message_size,
        max_unparsed_bytes=max(settings.max_unparsed_bytes, settings.frame_max * 2),
        max_pending_content_bytes=settings.max_pending_content_bytes,
        delivery_batch=settings.delivery_batch,
        handshake_timeout_s=settings.handshake_timeout_s,
        sync_interval_ms=settings.sync_interval_ms,
        write_buffer_high=settings.write_buffer_high,
        tables=TableLimits(
            max_depth=settings.max_table_depth,
            max_entries=settings.max_table_entries,
            max_array_length=settings.max_array_length,
        ),
        max_sql_length=settings.max_sql_length,
        max_sql_depth=settings.max_sql_depth,
    )


def descriptor_budget(settings: Settings) -> descriptors.DescriptorBudget:
    """Raise the soft descriptor limit to the hard one and split it (logged; a flag set
    above its share is lowered, with a warning): ``gateway/runtime/descriptors.py``."""
    before, total = descriptors.raise_soft_limit()
    budget = descriptors.plan(total, settings.max_connections, settings.max_open_files)
    raised = f" (raised from {before}, the hard limit)" if total > before else ""
    limits_log.info("file descriptor limit %d%s: %s", total, raised, budget.describe())
    lowered = []
    if "max_connections" in settings.model_fields_set and settings.max_connections > budget.sockets:
        lowered.append(f"--max-connections {settings.max_connections} lowered to {budget.sockets}")
    if settings.max_open_files is not None and settings.max_open_files > budget.open_files:
        lowered.append(f"--max-open-files {settings.max_open_files} lowered to {budget.open_files}")
    if lowered:
        limits_log.warning(
            "%s: the process may open %d file descriptors", "; ".join(lowered), total
        )
    return budget


def alarms_from(settings: Settings) -> ResourceAlarms:
    """The memory and disk alarms over this process and the data directory."""
    watermark = parse_memory_watermark(settings.memory_high_watermark)
    return ResourceAlarms(
        SystemProbe(settings.data_dir),
        memory_limit=watermark.limit(total_memory()),
        disk_free_limit=settings.disk_free_limit,
    )


def protocol_factory(node: Node, conn: Connection | None = None) -> AMQPProtocol:
    """A client socket's protocol (``conn``: another kind of session, e.g. a cluster link)."""
    conn = Connection(node) if conn is None else conn
    limits = node.limits
    protocol = AMQPProtocol(
        conn,
        node,
        limits.frame_max,
        limits.max_unparsed_bytes,
        limits.write_buffer_high,
        limits.handshake_timeout_s,
    )
    conn.frame_reader = protocol.reader
    conn.read_control = protocol
    return protocol


def ready_line(
    amqp: str,
    admin: str,
    amqps: str | None = None,
    stream: str | None = None,
    stream_tls: str | None = None,
    cluster: tuple[str, str] | None = None,
) -> str:
    """The start-up line scripts wait for; fields are ``key=value`` in a fixed order
    (``cluster``: the node's name and its inter-node address, in a cluster)."""
    fields = [f"amqp={amqp}"] + ([f"amqps={amqps}"] if amqps is not None else [])
    fields += [f"stream={stream}"] if stream is not None else []
    fields += [f"streams={stream_tls}"] if stream_tls is not None else []
    fields.append(f"admin={admin}")
    fields += [f"node={cluster[0]}", f"cluster={cluster[1]}"] if cluster is not None else []
    return " ".join(["sievemq ready", *fields])


async def run(settings: Settings, ssl_context: ssl.SSLContext | None, bound: BoundListeners) -> int:
    """Serve until SIGTERM/SIGINT (AMQPS too with ``ssl_context``) on the ``bound`` sockets;
    returns the exit status."""
    loop = asyncio.get_running_loop()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    budget = descriptor_budget(settings)
    handles.shared.set_capacity(budget.open_files)  # before any stream opens
    broker = Broker(
        settings.data_dir,
        BrokerSettings(
            durability=Durability(settings.fsync),
            sync_interval_ms=settings.sync_interval_ms,
            default_user=settings.default_user,
            default_password=settings.default_pass,
            default_user_loopback_only=settings.default_user == "guest",
            default_queue_type=settings.default_queue_type,
            cluster=settings.cluster_etcd is not None,
            queue_window=MemoryWindow(
                messages=settings.queue_memory_messages, bytes=settings.queue_memory_bytes
            ),
        ),
    )
    facade = BrokerFacade(broker, __version__, None)
    if settings.node_name is not None:
        facade.node_name = settings.node_name
    if settings.definitions is not None:
        problem = load_definitions(facade, settings.definitions)
        if problem is not None:
            broker.close()
            bound.close()
            print(
                f"sievemq serve: --definitions {settings.definitions}: {problem}", file=sys.stderr
            )
            return 1
    node = Node(broker, limits_from(settings, budget.sockets), loop, gc_freeze=settings.gc_freeze)
    alarms = alarms_from(settings)
    alarms.add_listener(node.on_alarms)
    node.exhaustion_listeners.append(alarms.storage_write_failed)
    alarms.start(loop, settings.alarm_interval_ms / 1000)
    servers: list[asyncio.AbstractServer] = []
    snode = StreamNode(
        node,
        settings.advertise_host or settings.amqp_host,  # Open and Metadata name it
        settings.stream_frame_max,
        settings.heartbeat,
        settings.stream_consumer_update_timeout_s,
    )
    alarms.add_listener(snode.on_alarms)
    amqp_servers, amqp_port = await serve_on(lambda: protocol_factory(node), bound.amqp)
    servers.extend(amqp_servers)
    amqps: str | None = None
    if ssl_context is not None and bound.amqps:
        # same node, same factory: TLS clients share limits, streams and shutdown
        amqps_servers, amqps_port = await serve_on(
            lambda: protocol_factory(node),
            bound.amqps,
            ssl_context=ssl_context,
            ssl_handshake_timeout=settings.handshake_timeout_s,
        )
        servers.extend(amqps_servers)
        amqps = f"{settings.amqp_host}:{amqps_port}"
    stream_servers, stream_port = await serve_on(
        stream_protocol_factory(
            lambda: StreamConnection(snode), settings.stream_frame_max, settings.write_buffer_high
        ),
        bound.stream,
    )
    snode.advertised_port = stream_port
    servers.extend(stream_servers)
    stream_tls: str | None = None
    if ssl_context is not None and bound.stream_tls:
        stream_tls_servers, stream_tls_port = await serve_on(
            stream_protocol_factory(
                lambda: StreamConnection(snode, tls=True),
                settings.stream_frame_max,
                settings.write_buffer_high,
            ),
            bound.stream_tls,
            ssl_context=ssl_context,
            ssl_handshake_timeout=settings.handshake_timeout_s,
        )
        snode.advertised_tls_port = stream_tls_port
        servers.extend(stream_tls_servers)
        stream_tls = f"{settings.amqp_host}:{stream_tls_port}"
    admin_port = int(bound.admin[0].getsockname()[1])
    ready = False
    facade.alarms, facade.node, facade.stream_node = alarms, node, snode
    facade.listeners = [ListenerView("amqp", settings.amqp_host, amqp_port)]
    if amqps is not None:
        facade.listeners.append(
            ListenerView("amqp/ssl", settings.amqp_host, int(amqps.rsplit(":", 1)[1]))
        )
    facade.listeners.append(ListenerView("stream", settings.amqp_host, stream_port))
    if stream_tls is not None:
        facade.listeners.append(
            ListenerView("stream/ssl", settings.amqp_host, int(stream_tls.rsplit(":", 1)[1]))
        )
    facade.listeners.append(ListenerView("http", settings.admin_host, admin_port))
    app = create_app(is_ready=lambda: ready, facade=facade)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    admin = AdminServer(config)
    admin_task = asyncio.ensure_future(admin.serve(sockets=bound.admin))
    while not admin.started and not admin_task.done():
        await asyncio.sleep(0.01)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    cluster: tuple[str, str] | None = None
    membership: Any = None
    placement: Any = None
    if settings.cluster_etcd is not None and settings.node_name is not None:
        from sievemq.cluster.secret import ClusterSecret

        # the inter-node link (cluster/link.py): AMQP from the other nodes, logged in with
        # the cluster secret, served by this node's session code (gateway/session/peer.py)
        secret = ClusterSecret()
        snode.cluster_secret = secret.get  # stream replicas log in with it too
        cluster_servers, cluster_port = await serve_on(
            lambda: protocol_factory(node, PeerConnection(node, secret.get)), bound.cluster
        )
        servers.extend(cluster_servers)
        cluster = (
            settings.node_name,
            f"{settings.advertise_host or settings.amqp_host}:{cluster_port}",
        )
        advertised = {
            "host": snode.advertised_host,
            "stream": snode.advertised_port,
            "stream_tls": snode.advertised_tls_port or None,
            "replies": node.direct_replies.instance.hex(),  # whose reply names (cluster/replies.py)
        }
        joined = await _join_cluster(settings, cluster[1], facade, node, advertised, secret)
        if isinstance(joined, int):
            await stop_gateway(node, servers, alarms, settings.shutdown_timeout_s, snode)
            admin.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(admin_task, timeout=settings.shutdown_timeout_s)
            return joined
        membership, placement = joined
        facade.cluster = membership
        node.link_flow = placement.links  # client connections held while a link drains
        facade.peers = _admin_peers(membership, secret)
        if settings.definitions is not None:
            # again, through etcd now: the join's reconcile kept the cluster's state, and
            # the file's objects go to every node (they win, as on a single node)
            load_definitions(facade, settings.definitions)
    ready = True
    facade.start_sampling(settings.collect_statistics_interval_ms / 1000)
    node.gc.start(loop)  # recovery and wiring done: freeze what lives as long as the server
    print(
        ready_line(
            f"{settings.amqp_host}:{amqp_port}",
            f"http://{settings.admin_host}:{admin_port}",
            amqps,
            f"{settings.amqp_host}:{stream_port}",
            stream_tls,
            cluster,
        ),
        flush=True,
    )
    await stop.wait()
    ready = False
    if membership is not None:
        await placement.stop()
        await membership.leave()  # the others see this node go now, not a TTL later
    await facade.stop_sampling()
    await stop_gateway(node, servers, alarms, settings.shutdown_timeout_s, snode)
    admin.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(admin_task, timeout=settings.shutdown_timeout_s)
    return 0


def _admin_peers(membership: Any, secret: Any) -> Any:
    """The other nodes' admin APIs, for the cluster-wide connection/channel/consumer lists
    (closed when the node leaves)."""
    from sievemq.cluster.admin_peers import AdminPeers

    peers = AdminPeers(membership, secret.get)
    membership.on_leave.append(peers.close)
    return peers


async def _join_cluster(
    settings: Settings,
    address: str,
    facade: BrokerFacade,
    node: Node,
    advertised: dict[str, Any],
    secret: Any,
) -> Any:
    """Join the cluster (its Membership and Placement), or the exit status when this node
    may not: 2 when its name is a live node's, 1 when etcd cannot be reached."""
    from sievemq.admin_api.cluster_totals import published_parts, published_totals
    from sievemq.admin_api.rabbit.nodes import node_info
    from sievemq.cluster.coordination import EtcdError, EtcdUnavailable
    from sievemq.cluster.joining import join
    from sievemq.cluster.membership import NameTaken

    assert settings.node_name is not None
    try:
        return await join(
            settings.etcd_endpoints,
            settings.node_name,
            settings.data_dir,
            address,
            settings.cluster_lease_ttl,
            lambda: node_info(facade),
            node.broker,
            node.definitions_sync,
            secret,
            advertised=advertised,
            admin=facade,
            totals=lambda: published_totals(facade),
            parts=published_parts(facade),
        )
    except NameTaken as error:
        print(f"sievemq serve: {error}", file=sys.stderr)
        return 2
    except (EtcdUnavailable, EtcdError) as error:
        print(f"sievemq serve: cannot join the cluster: {error}", file=sys.stderr)
        return 1


def load_definitions(facade: BrokerFacade, path: Path) -> str | None:
    """Merge a definitions file at boot; the reason it was refused, or None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return str(error)
    if not isinstance(data, dict):
        return "definitions must be a JSON object"
    try:
        facade.import_definitions(data)
    except errors.AMQPError as error:
        return error.explanation
    return None


async def shutdown(
    node: Node, servers: list[asyncio.AbstractServer], snode: StreamNode | None = None
) -> None:
    """Stop accepting and reading, store and confirm what was read, then send close 320.

    The order matters: a connection's channels stop settling confirms once it is closed, so
    every publish read before the signal is written, fsynced and acked (or nacked) first.
    """
    node.accepting = False
    for server in servers:
        server.close()
    for conn in list(node.connections):
        conn.stop_reading()
    if snode is not None:
        snode.stop_reading()
    node.flush_all()  # waits for appends in flight, writes the buffers, fsyncs
    await asyncio.sleep(0)  # the channels' confirm flushes (call_soon) write their frames
    forced = errors.ConnectionForced("broker forced connection closure with reason 'shutdown'")
    for conn in list(node.connections):
        conn.close(forced)
    if snode is not None:
        snode.save_sequences()  # every append is written: the snapshot matches the data
        snode.close_all("shutdown")


async def stop_gateway(
    node: Node,
    servers: list[asyncio.AbstractServer],
    alarms: ResourceAlarms | None,
    grace_s: float,
    snode: StreamNode | None = None,
) -> None:
    """The whole stop sequence (``serve`` and ``sievemq.testing`` share it): alarms off,
    ``shutdown``, up to ``grace_s`` for clients to answer close-ok and hang up, abort the
    rest, then write and fsync every stream and close the broker."""
    loop = asyncio.get_running_loop()
    if alarms is not None:
        alarms.stop()
    await shutdown(node, servers, snode)
    deadline = loop.time() + grace_s
    while node.connections and loop.time() < deadline:
        await asyncio.sleep(0.02)
    for conn in list(node.connections):
        conn.abort()
    node.flush_all()
    node.broker.close()
    node.executor.shutdown(wait=True)


def serve(settings: Settings, ssl_context: ssl.SSLContext | None, bound: BoundListeners) -> int:
    """Run the server on one event loop (uvloop when installed); returns the exit status.

    The caller loads the TLS files (``gateway.net.tls.server_ssl_context``) and then binds
    every port (``cli.bind``) before importing this module, so that bad TLS files or a port
    in use fail at once, before the admin app's imports and the data directory's recovery.
    """
    # timestamped (UTC, milliseconds), as RabbitMQ's log lines are: a cluster's faults are
    # read across several nodes' logs, in order
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    limits_log.setLevel(logging.INFO)
    loop_factory: Any = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run(settings, ssl_context, bound))
