"""AdminPeers: the other nodes' lists gathered over HTTP with the cluster secret; a node
that does not answer in time is named, not waited for."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, cast

from sievemq.cluster.admin_peers import AdminPeers
from sievemq.cluster.membership import Membership


def record(port: int) -> dict[str, Any]:
    listeners = [{"protocol": "http", "ip_address": "127.0.0.1", "port": port}]
    return {"stats": {"listeners": listeners}}


async def answering(body: Any, status: int = 200) -> tuple[asyncio.Server, list[bytes]]:
    """A one-shot HTTP server answering ``body``; it keeps the requests it got."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        payload = json.dumps(body).encode()
        head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
        writer.write(f"{head}content-length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0), seen


async def test_gather_lists_the_answering_nodes_and_names_the_silent_ones() -> None:
    good, seen = await answering([{"name": "c1", "node": "good"}])
    gone, _ = await answering({"error": "Object Not Found"}, status=404)
    silent_clients: list[asyncio.StreamWriter] = []

    async def never_answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        silent_clients.append(writer)  # holds the connection open, says nothing

    quiet = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = {s: s.sockets[0].getsockname()[1] for s in (good, gone, quiet)}
    membership = SimpleNamespace(
        me=SimpleNamespace(name="me"),
        records={
            "me": record(1),
            "good": record(port[good]),
            "gone": record(port[gone]),
            "quiet": record(port[quiet]),
            "unlisted": {"stats": {"listeners": []}},
        },
    )
    peers = AdminPeers(cast(Membership, membership), lambda: "s3cret", timeout_s=0.5)
    try:
        listing = await peers.gather("/api/vhosts/%2F/connections")
        assert listing.items == [{"name": "c1", "node": "good"}]
        assert sorted(listing.missing) == ["quiet", "unlisted"]  # "gone": no such vhost there
        request = seen[0].decode().lower()
        assert request.startswith("get /api/vhosts/%2f/connections http/1.1")
        assert "x-sievemq-cluster-secret: s3cret" in request
        assert peers.is_peer("s3cret") and not peers.is_peer("guess")
    finally:
        await peers.close()
        for writer in silent_clients:
            writer.close()
        for server in (good, gone, quiet):
            server.close()
