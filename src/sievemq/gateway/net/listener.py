"""Listening sockets: the AMQP(S) servers and the bound socket handed to the admin HTTP server.

With TLS the loop does the handshake before it calls the protocol factory's
``connection_made``, so the AMQP protocol sees decrypted bytes and never knows; a failed
handshake (a plain-text client, a bad certificate, a timeout) closes only that socket.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable


async def start_amqp_listener(
    protocol_factory: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    backlog: int = 1024,
    *,
    ssl_context: ssl.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
) -> tuple[asyncio.Server, int]:
    """Listen for AMQP clients (AMQPS with ``ssl_context``); returns the server and real port."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        protocol_factory,
        host=host,
        port=port,
        backlog=backlog,
        reuse_address=True,
        ssl=ssl_context,
        ssl_handshake_timeout=ssl_handshake_timeout if ssl_context is not None else None,
    )
    sockets = server.sockets
    real_port = int(sockets[0].getsockname()[1]) if sockets else port
    return server, real_port


def bind_tcp(host: str, port: int) -> tuple[socket.socket, int]:
    """A bound, listening TCP socket for another server (uvicorn); returns it and its port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock, int(sock.getsockname()[1])
