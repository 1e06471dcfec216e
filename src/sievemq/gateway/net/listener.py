"""Listening sockets: the AMQP(S) servers and the bound socket handed to the admin HTTP server.

``sievemq serve`` binds every port first (``bind_listeners``, nothing heavier than the
``socket`` module), before it imports the admin app or opens the data directory: a port in
use is reported at once, not after seconds of imports and recovery. The loop then serves
on the bound sockets (``serve_on``).

With TLS the loop does the handshake before it calls the protocol factory's
``connection_made``, so the AMQP protocol sees decrypted bytes and never knows; a failed
handshake (a plain-text client, a bad certificate, a timeout) closes only that socket.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

BACKLOG = 1024


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


def listen_tcp(
    host: str, port: int, backlog: int = BACKLOG, reuse_port: bool = False
) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets on every address ``host`` resolves to (as the
    loop's ``create_server`` binds them; port 0 picks a free port). Raises ``OSError``
    naming the address when one is in use or not on this host (nothing stays open).
    ``reuse_port``: SO_REUSEPORT, so that several nodes of one machine (same user) listen
    on the same port and the kernel spreads new connections over them."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    out: list[socket.socket] = []
    try:
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as error:
                why = (error.strerror or str(error)).lower()
                raise OSError(
                    error.errno, f"error while attempting to bind on address {addr!r}: {why}"
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


def port_of(socks: list[socket.socket]) -> int:
    return int(socks[0].getsockname()[1])


@dataclass
class BoundListeners:
    """Every port ``sievemq serve`` listens on, bound before the heavy setup starts."""

    amqp: list[socket.socket] = field(default_factory=list)
    stream: list[socket.socket] = field(default_factory=list)
    admin: list[socket.socket] = field(default_factory=list)
    amqps: list[socket.socket] = field(default_factory=list)  # only with TLS
    stream_tls: list[socket.socket] = field(default_factory=list)  # only with TLS
    cluster: list[socket.socket] = field(default_factory=list)  # only in a cluster

    def close(self) -> None:
        for socks in (
            self.amqp,
            self.stream,
            self.admin,
            self.amqps,
            self.stream_tls,
            self.cluster,
        ):
            for sock in socks:
                sock.close()


def bind_listeners(
    amqp_host: str,
    amqp_port: int,
    stream_port: int,
    admin_host: str,
    admin_port: int,
    tls_ports: tuple[int, int] | None = None,
    reuse_port: bool = False,
) -> BoundListeners:
    """Bind AMQP, AMQPS and stream-TLS (``tls_ports``: their ports, with TLS), stream and
    admin, in that order; raises ``OSError`` at the first that fails, with none left open.
    ``reuse_port``: AMQP, AMQPS and admin are shared with the machine's other nodes
    (SO_REUSEPORT); the Stream-protocol ports stay this node's own (Metadata names them)."""
    bound = BoundListeners()
    try:
        bound.amqp = listen_tcp(amqp_host, amqp_port, reuse_port=reuse_port)
        if tls_ports is not None:
            bound.amqps = listen_tcp(amqp_host, tls_ports[0], reuse_port=reuse_port)
        bound.stream = listen_tcp(amqp_host, stream_port)
        if tls_ports is not None:
            bound.stream_tls = listen_tcp(amqp_host, tls_ports[1])
        bound.admin = listen_tcp(admin_host, admin_port, 128, reuse_port=reuse_port)
    except BaseException:
        bound.close()
        raise
    return bound


async def serve_on(
    protocol_factory: Callable[[], asyncio.Protocol],
    socks: list[socket.socket],
    *,
    ssl_context: ssl.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
) -> tuple[list[asyncio.Server], int]:
    """Serve ``protocol_factory`` on already bound sockets (TLS with ``ssl_context``);
    returns the servers (one per socket) and the port."""
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(
            protocol_factory,
            sock=sock,
            backlog=BACKLOG,
            ssl=ssl_context,
            ssl_handshake_timeout=ssl_handshake_timeout if ssl_context is not None else None,
        )
        for sock in socks
    ]
    return servers, port_of(socks)
