"""Probing another node's cluster port: an election's candidate that reaches too few of the
other members offers no tail."""

from __future__ import annotations

import asyncio
import socket

from sievemq.cluster.reach import Reach


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_listening_node_is_reached_and_a_closed_port_is_not() -> None:
    accepted: list[bool] = []

    def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    addresses = {"b": f"127.0.0.1:{port}", "c": f"127.0.0.1:{_closed_port()}"}
    reach = Reach(addresses.get)
    assert await reach.reaches("b") is True
    assert await reach.reaches("c") is False
    assert await reach.reaches("gone") is False  # not running: no address
    server.close()
    await server.wait_closed()


async def test_a_hundred_elections_asking_cost_one_probe_per_node() -> None:
    asked: list[str] = []

    def address_of(node: str) -> str | None:
        asked.append(node)
        return None

    reach = Reach(address_of)
    answers = await asyncio.gather(*(reach.reaches("c") for _ in range(100)))
    assert answers == [False] * 100 and asked == ["c"]
    assert await reach.reaches("c") is False and asked == ["c"]  # (kept a second)
