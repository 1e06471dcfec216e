"""Joining a cluster at start-up: what `sievemq serve --cluster-etcd` adds to a node.

The wiring (serve.py) calls ``join`` before the ready line and ``leave`` at shutdown; nothing
here is imported by a single node.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.membership import Identity, Membership, node_id_for


async def join(
    endpoints: list[str],
    name: str,
    data_dir: Path,
    cluster_address: str,
    ttl_s: int,
    stats: Callable[[], dict[str, Any]],
) -> Membership:
    """Register this node and start watching the others; raises ``NameTaken`` (another
    live node has the name) or ``EtcdUnavailable`` (no endpoint answered)."""
    client = EtcdClient(endpoints)
    membership = Membership(
        client, Identity(name, node_id_for(data_dir), cluster_address), ttl_s, stats
    )
    try:
        await membership.join()
    except BaseException:
        await membership.leave()
        raise
    return membership
