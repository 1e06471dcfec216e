"""A connection's socket byte and segment counts from the kernel (Linux ``TCP_INFO``), as
RabbitMQ reports ``recv_oct``/``send_oct``/``recv_cnt``/``send_cnt`` from its sockets'
statistics. Nothing is counted on the data path: the kernel keeps these anyway."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

# struct tcp_info (linux/tcp.h): __u64 tcpi_bytes_acked at 120, tcpi_bytes_received at 128,
# __u32 tcpi_segs_out at 136, tcpi_segs_in at 140 (Linux 4.1+)
_LAYOUT = struct.Struct("=QQII")
_OFFSET = 120
_SIZE = _OFFSET + _LAYOUT.size


@dataclass(frozen=True)
class SocketCounts:
    send_oct: int  # bytes sent and acknowledged by the peer
    recv_oct: int
    send_cnt: int  # TCP segments
    recv_cnt: int


def socket_counts(transport: Any) -> SocketCounts | None:
    """The counts of a transport's TCP socket; None when the platform has no TCP_INFO
    with byte counts, or the socket is gone."""
    option = getattr(socket, "TCP_INFO", None)
    if transport is None or option is None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, option, _SIZE)
    except (OSError, AttributeError):
        return None
    if len(raw) < _SIZE:
        return None
    acked, received, segs_out, segs_in = _LAYOUT.unpack_from(raw, _OFFSET)
    return SocketCounts(acked, received, segs_out, segs_in)
