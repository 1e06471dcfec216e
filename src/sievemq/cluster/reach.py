"""Whether this node reaches another node now: a TCP connect to its cluster port.

An election's candidate that reaches too few of the other members to be followed stays out
of it. In a 30-minute chaos run an old leader, cut from both other nodes but not from etcd,
handed its streams over to the one elected, heard nothing from it (the cut), offered its
tail with the third node's (whose new leader's loop ran seconds late) and, holding the
longest copy, won back 106 streams that no other node could then follow until the cut
healed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

PROBE_TIMEOUT_S = 1.0  # a connect not answered by then: not reached
FRESH_S = 1.0  # a probe's answer serves every election that asks for this long


class Reach:
    """Probes of other nodes' cluster ports, one in flight per node, each answer kept for
    ``FRESH_S`` (a node that lost the leader of a hundred streams asks a hundred times)."""

    def __init__(self, address_of: Callable[[str], str | None]) -> None:
        self.address_of = address_of  # node -> HOST:PORT of its cluster listener, or None
        self._known: dict[str, tuple[float, bool]] = {}  # node -> (when, reached)
        self._probes: dict[str, asyncio.Future[bool]] = {}

    async def reaches(self, node: str) -> bool:
        loop = asyncio.get_running_loop()
        known = self._known.get(node)
        if known is not None and loop.time() - known[0] < FRESH_S:
            return known[1]
        probe = self._probes.get(node)
        if probe is None:
            probe = self._probes[node] = asyncio.ensure_future(self._probe(node))
        return await asyncio.shield(probe)

    async def _probe(self, node: str) -> bool:
        reached = False
        try:
            address = self.address_of(node)
            if address is not None:
                host, _, port = address.rpartition(":")
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(host.strip("[]"), int(port)), PROBE_TIMEOUT_S
                )
                writer.close()
                reached = True
        except (OSError, TimeoutError, ValueError):
            pass  # refused, prohibited by a route, unanswered, a bad address: not reached
        finally:
            self._probes.pop(node, None)
            self._known[node] = (asyncio.get_running_loop().time(), reached)
        return reached
