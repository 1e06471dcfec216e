"""Test helpers shipped with SieveMQ: a real gateway for SieveMQ's tests and an application's.

As aiosmtpd ships its own: use them to test SieveMQ itself or an application against a real
gateway.

- ``running_gateway()``: the gateway in-process on free ports (AMQP + admin), stopped and
  checked for a clean stop when the ``async with`` block ends.
- ``ServerProcess`` / ``start_server_process()``: ``sievemq serve`` as a real subprocess,
  for tests that SIGKILL it, restart it, or use a blocking client library.
- ``RawClient`` / ``AsyncRawClient``: an AMQP 0-9-1 client that sends and reads raw frames.

Modules imported by name: ``wait`` (``eventually``), ``clock`` (``ManualClock``), ``tls``
(a self-signed certificate), ``stream_files`` and ``queue_files`` (a stream's segment files, a
quorum queue's live records: the copies replication tests compare), and one per client
library, which needs that library installed:
``pika_client``, ``stream_client`` (rstream), ``aiormq_client``, ``admin_client`` (httpx).

This package is wiring (like ``serve.py``): it may import any part of the gateway, and no
part of the gateway may import it.
"""

from sievemq.testing.gateway import GatewayShutdownError, RunningGateway, running_gateway
from sievemq.testing.process import ServerProcess, ServerStartError, start_server_process
from sievemq.testing.raw import AsyncRawClient, Closed, RawClient

__all__ = [
    "AsyncRawClient",
    "Closed",
    "GatewayShutdownError",
    "RawClient",
    "RunningGateway",
    "ServerProcess",
    "ServerStartError",
    "running_gateway",
    "start_server_process",
]
