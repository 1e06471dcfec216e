"""Joining a cluster at start-up: what `sievemq serve --cluster-etcd` adds to a node.

The wiring (serve.py) calls ``join`` before the ready line and ``Membership.leave`` at
shutdown; nothing here is imported by a single node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sievemq.cluster.coordination import EtcdClient, EtcdUnavailable
from sievemq.cluster.membership import Identity, Membership, node_id_for

log = logging.getLogger("sievemq.cluster")

JOIN_WAIT_S = 30.0  # how long a starting node waits for etcd before it gives up (exit 1)


async def join(
    endpoints: list[str],
    name: str,
    data_dir: Path,
    cluster_address: str,
    ttl_s: int,
    stats: Callable[[], dict[str, Any]],
    wait_s: float = JOIN_WAIT_S,
) -> Membership:
    """Register this node and start watching the others; raises ``NameTaken`` (another
    live node has the name) or ``EtcdUnavailable`` (no endpoint answered for ``wait_s``:
    an etcd started beside the nodes may need a moment)."""
    client = EtcdClient(endpoints)
    me = Identity(name, node_id_for(data_dir), cluster_address)
    membership = Membership(client, me, ttl_s, stats)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                await membership.join()
                return membership
            except EtcdUnavailable as error:
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting for etcd: %s", error)
                await asyncio.sleep(1.0)
    except BaseException:
        await membership.leave()
        raise
