"""The cluster secret: what a link connection logs in with (``cluster/link.py``).

One random secret per cluster, kept in etcd at ``sievemq/cluster_secret``: the first node
that joins writes it (create-if-absent), every other node reads it, and every node watches
it. A node that finds it gone (etcd restarted without its data) writes back the one it knows,
so the links keep working. The secret is never logged and never shown by the admin API.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from sievemq.cluster.coordination import EtcdClient, EtcdError, EtcdUnavailable, Event
from sievemq.cluster.membership import ROOT

log = logging.getLogger("sievemq.cluster")

SECRET_KEY = ROOT + "cluster_secret"


class ClusterSecret:
    """This node's copy of the cluster secret (None until it joined)."""

    def __init__(self) -> None:
        self.value: str | None = None
        self.client: EtcdClient | None = None
        self._task: asyncio.Future[None] | None = None

    def get(self) -> str | None:
        return self.value

    async def ensure(self, client: EtcdClient) -> None:
        """Read the secret, writing one first when the cluster has none (create-if-absent:
        of two nodes joining at once, one secret wins and both use it)."""
        self.client = client
        mine = self.value or secrets.token_urlsafe(32)
        held = await client.create(SECRET_KEY, mine)
        self.value = mine if held is None else held.value.decode("utf-8")

    def apply(self, events: list[Event], reset: bool) -> None:
        """The watched key: a new value is taken; a deletion (or a reset without it) is
        answered by writing back the value this node knows."""
        present = False
        for event in events:
            if event.kv.key != SECRET_KEY:
                continue
            if event.kind == "put":
                self.value = event.kv.value.decode("utf-8")
                present = True
            else:
                present = False
        if (reset or events) and not present and self.value is not None:
            self.restore()

    def restore(self) -> None:
        """Write this node's secret back if etcd has none (in the background)."""
        if self.client is None or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.ensure_future(self._restore(self.client))

    async def _restore(self, client: EtcdClient) -> None:
        try:
            await self.ensure(client)
        except (EtcdUnavailable, EtcdError) as error:
            log.warning("cannot write the cluster secret back to etcd: %s", error)
