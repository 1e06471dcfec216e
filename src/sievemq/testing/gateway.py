"""The gateway in-process, on the caller's event loop: ``async with running_gateway() as gw``.

Why in-process as well as ``ServerProcess``: a test can then talk to the gateway with a
real client AND look inside it — the broker's statistics, a queue's readers, the node's
connections, the admin facade — without an HTTP layer, and it starts in milliseconds.

It is wired like ``sievemq serve`` (same ``protocol_factory``, same alarms, the same admin
app served by uvicorn on a bound socket, the same ``stop_gateway`` sequence), on free ports
of 127.0.0.1. Leaving the block stops it the way SIGTERM does and then asserts the stop was
clean: no connection left, the admin server ended without an error, and nothing reached the
event loop's exception handler while it ran (an exception in a callback or a task nobody
awaited, which a test would otherwise never see).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from sievemq.admin_api import create_app
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import ListenerView
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.net.listener import bind_tcp, start_amqp_listener
from sievemq.gateway.rates import SAMPLE_INTERVAL_S
from sievemq.gateway.runtime.alarms import ResourceAlarms, SystemProbe
from sievemq.gateway.runtime.node import Limits, Node
from sievemq.serve import AdminServer, protocol_factory, stop_gateway
from sievemq.storage import Durability

HOST = "127.0.0.1"
NO_LIMIT = 1 << 62  # a memory limit no test machine reaches: the memory alarm stays off

__all__ = ["GatewayShutdownError", "RunningGateway", "running_gateway"]


class GatewayShutdownError(AssertionError):
    """The in-process gateway did not stop cleanly (the message says what was left)."""


@dataclass
class RunningGateway:
    """What a test gets inside ``running_gateway``: ports, URL and the live objects."""

    data_dir: Path
    broker: Broker
    node: Node
    alarms: ResourceAlarms
    facade: BrokerFacade
    amqp_port: int
    admin_port: int
    host: str = HOST
    loop_errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def port(self) -> int:
        """The AMQP port (the name most tests use)."""
        return self.amqp_port

    @property
    def url(self) -> str:
        """AMQP URL for the default user and vhost."""
        return f"amqp://guest:guest@{self.host}:{self.amqp_port}/"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    def queue(self, name: str, vhost: str = "/") -> StreamQueue:
        """A declared queue, to look at its readers and statistics."""
        return self.broker.vhost(vhost).get_queue(name)


@contextlib.asynccontextmanager
async def running_gateway(
    data_dir: Path | None = None,
    *,
    limits: Limits | None = None,
    durability: Durability = Durability.NEVER,
    alarm_interval_s: float = 0.05,
    disk_free_limit: int = 0,
    grace_s: float = 2.0,
    sample_interval_s: float = SAMPLE_INTERVAL_S,
    **limit_values: Any,
) -> AsyncIterator[RunningGateway]:
    """Start the gateway (AMQP + admin) on free ports; stop it and assert a clean stop.

    ``data_dir`` defaults to a fresh temporary directory removed afterwards. ``limits`` or
    keyword values of ``Limits`` (``heartbeat=1``) set the connection limits. Durability is
    ``never`` by default: tests check behaviour, not disks. The alarms poll the real memory
    and disk every ``alarm_interval_s`` with limits that never trip, until a test moves them
    (``gw.facade`` / ``gw.alarms.set_limits``), as ``rabbitmqctl set_disk_free_limit`` does.
    ``grace_s`` is how long clients get to answer the shutdown's connection.close.
    The admin plane's rate sampler runs every ``sample_interval_s``.
    """
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sievemq-")))
        async with _gateway(
            data_dir, limits or Limits(**limit_values), durability, alarm_interval_s,
            disk_free_limit, grace_s, sample_interval_s,
        ) as gateway:  # fmt: skip
            yield gateway


@contextlib.asynccontextmanager
async def _gateway(
    data_dir: Path,
    limits: Limits,
    durability: Durability,
    alarm_interval_s: float,
    disk_free_limit: int,
    grace_s: float,
    sample_interval_s: float,
) -> AsyncIterator[RunningGateway]:
    loop = asyncio.get_running_loop()
    data_dir.mkdir(parents=True, exist_ok=True)
    errors: list[dict[str, Any]] = []
    previous_handler = loop.get_exception_handler()

    def record(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        errors.append(context)
        if previous_handler is not None:
            previous_handler(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(record)
    broker = Broker(data_dir, BrokerSettings(durability=durability))
    node = Node(broker, limits, loop)
    alarms = ResourceAlarms(
        SystemProbe(data_dir), memory_limit=NO_LIMIT, disk_free_limit=disk_free_limit
    )
    alarms.add_listener(node.on_alarms)
    alarms.start(loop, alarm_interval_s)
    amqp_server, amqp_port = await start_amqp_listener(lambda: protocol_factory(node), HOST, 0)
    admin_sock, admin_port = bind_tcp(HOST, 0)
    ready = False
    facade = BrokerFacade(broker, alarms=alarms, node=node)
    facade.listeners = [
        ListenerView("amqp", HOST, amqp_port),
        ListenerView("http", HOST, admin_port),
    ]
    config = uvicorn.Config(
        create_app(is_ready=lambda: ready, facade=facade),
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    admin = AdminServer(config)
    admin_task = asyncio.ensure_future(admin.serve(sockets=[admin_sock]))
    while not admin.started and not admin_task.done():
        await asyncio.sleep(0.01)
    ready = True
    facade.start_sampling(sample_interval_s)
    gateway = RunningGateway(
        data_dir=data_dir,
        broker=broker,
        node=node,
        alarms=alarms,
        facade=facade,
        amqp_port=amqp_port,
        admin_port=admin_port,
        loop_errors=errors,
    )
    try:
        yield gateway
    finally:
        ready = False
        await facade.stop_sampling()
        await stop_gateway(node, [amqp_server], alarms, grace_s)
        admin.should_exit = True
        await asyncio.wait_for(admin_task, timeout=10)
        await asyncio.sleep(0)  # connection_lost callbacks of aborted transports
        loop.set_exception_handler(previous_handler)
    _assert_clean(gateway, admin_task)


def _assert_clean(gateway: RunningGateway, admin_task: asyncio.Future[None]) -> None:
    problems: list[str] = []
    if gateway.node.connections:
        problems.append(f"{len(gateway.node.connections)} connection(s) still registered")
    if admin_task.exception() is not None:
        problems.append(f"admin server failed: {admin_task.exception()!r}")
    problems.extend(
        f"event loop error: {ctx.get('message')} {ctx.get('exception')!r}"
        for ctx in gateway.loop_errors
    )
    if problems:
        raise GatewayShutdownError("unclean gateway stop:\n" + "\n".join(problems))
