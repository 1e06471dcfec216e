"""Cluster-wide listings for the management API: ask the other nodes' admin ports.

(Also the requests about one queue another node leads: ``relay``.)

``/api/connections``, ``/api/channels``, ``/api/consumers`` (and their per-vhost and
per-connection forms) on any node list every node's, as RabbitMQ's do. Connections and
channels change too fast to publish in etcd (every open and close would be a revision kept
until compaction), so a node fetches the others' lists when asked: one GET per live node, in
parallel, to the admin listener each published in its etcd record, with a short timeout.
A node that does not answer in time is left out and named (``AdminPeers.gather``).

Node-to-node requests carry the cluster secret (``cluster/secret.py``) in ``PEER_HEADER``,
never a user's password; the receiving node answers them with its own items only (no fan-out
of its own) and all of them: the asking node filters by what its user may see.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import httpx

from sievemq.cluster.membership import Membership
from sievemq.gateway.admin.views import (
    PEER_HEADER,
    RELAY_USER_HEADER,
    PeerListing,
    RelayedAnswer,
    RelayedRequest,
)

TIMEOUT_S = 2.0  # per node: a node slower than this is left out of the listing
RELAY_TIMEOUT_S = 15.0  # a get of many messages on a loaded leader takes its time
WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


class AdminPeers:
    """The other live nodes' admin APIs, reached with the cluster secret."""

    def __init__(
        self, membership: Membership, secret: Callable[[], str | None], timeout_s: float = TIMEOUT_S
    ) -> None:
        self.membership = membership
        self._secret = secret
        self._http = httpx.AsyncClient(timeout=timeout_s)

    def is_peer(self, presented: str) -> bool:
        """Whether ``presented`` is the cluster secret (compared in constant time)."""
        mine = self._secret()
        return mine is not None and secrets.compare_digest(presented.encode(), mine.encode())

    def admin_url(self, name: str) -> str | None:
        """A live node's admin API base URL from its etcd record (None: not published)."""
        record = self.membership.records.get(name, {})
        for listener in record.get("stats", {}).get("listeners", []):
            if listener.get("protocol") == "http":
                host = str(listener.get("ip_address") or "")
                if host in WILDCARDS:
                    host = str(record.get("advertised", {}).get("host") or "127.0.0.1")
                if ":" in host and not host.startswith("["):
                    host = f"[{host}]"
                return f"http://{host}:{listener.get('port')}"
        return None

    def peers(self) -> list[str]:
        return sorted(n for n in self.membership.records if n != self.membership.me.name)

    async def _get(self, name: str, path: str) -> tuple[int, Any]:
        base, secret = self.admin_url(name), self._secret()
        if base is None or secret is None:
            raise httpx.TransportError(f"node {name!r} published no admin listener")
        answer = await self._http.get(base + path, headers={PEER_HEADER: secret})
        return answer.status_code, answer.json() if answer.status_code == 200 else None

    async def gather(self, path: str) -> PeerListing:
        """``GET path`` (a JSON list) on every other live node at once: their items, and
        the nodes that did not answer a list in time."""
        names = self.peers()
        answers = await asyncio.gather(*(self._get(n, path) for n in names), return_exceptions=True)
        listing = PeerListing(items=[], missing=[])
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, tuple) and answer[0] == 200 and isinstance(answer[1], list):
                listing.items.extend(i for i in answer[1] if isinstance(i, dict))
            elif isinstance(answer, tuple) and answer[0] == 404:
                continue  # that node has no such vhost or connection: nothing to list
            else:
                listing.missing.append(name)
        return listing

    async def find(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """The first other node that answers ``GET path`` with an object: (node, object)."""
        names = self.peers()
        answers = await asyncio.gather(*(self._get(n, path) for n in names), return_exceptions=True)
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, tuple) and answer[0] == 200 and isinstance(answer[1], dict):
                return name, answer[1]
        return None

    async def delete(self, node: str, path: str, reason: str | None) -> int:
        """``DELETE path`` on ``node`` (with the client's ``x-reason``): its HTTP status."""
        base, secret = self.admin_url(node), self._secret()
        if base is None or secret is None:
            return 503
        headers = {PEER_HEADER: secret, **({"x-reason": reason} if reason else {})}
        try:
            answer = await self._http.delete(base + path, headers=headers)
        except httpx.HTTPError:
            return 503
        return answer.status_code

    async def relay(self, node: str, request: RelayedRequest) -> RelayedAnswer | None:
        """A client's get, purge or browse of a queue ``node`` leads, done there for the
        same user (``RELAY_USER_HEADER``: ``node`` checks that user's permissions again);
        its answer as it is, or None when ``node`` was not reached in time."""
        base, secret = self.admin_url(node), self._secret()
        if base is None or secret is None:
            return None
        url = base + request.path + (f"?{request.query}" if request.query else "")
        headers = {PEER_HEADER: secret, RELAY_USER_HEADER: request.user}
        if request.body:
            headers["content-type"] = "application/json"
        try:
            answer = await self._http.request(
                request.method,
                url,
                content=request.body or None,
                headers=headers,
                timeout=RELAY_TIMEOUT_S,
            )
        except httpx.HTTPError:
            return None
        kind = answer.headers.get("content-type", "application/json")
        return RelayedAnswer(answer.status_code, answer.content, kind)

    async def close(self) -> None:
        await self._http.aclose()
