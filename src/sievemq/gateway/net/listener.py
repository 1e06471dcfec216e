"""Listening sockets: the AMQP server and the bound socket handed to the admin HTTP server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable


async def start_amqp_listener(
    protocol_factory: Callable[[], asyncio.Protocol], host: str, port: int, backlog: int = 1024
) -> tuple[asyncio.Server, int]:
    """Listen for AMQP clients; returns the server and the real port (port 0 picks one)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        protocol_factory, host=host, port=port, backlog=backlog, reuse_address=True
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
