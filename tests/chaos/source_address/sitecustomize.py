"""Loaded by every chaos node (``PYTHONPATH``): its outgoing loopback TCP connections leave
from its own address, ``SIEVEMQ_CHAOS_SOURCE``.

Why: a partition is a pair of policy-routing rules ``from A to B prohibit``, and the kernel
gives an unbound socket connecting to 127.0.0.12 the source 127.0.0.1, which no rule can tell
apart from another node's. A machine with one address per node has that for free; here each
node's connections (to etcd, to the other nodes' links and stream listeners, to their admin
APIs: all made by the event loop's ``create_connection``) are bound to its alias, as a
multi-homed host's would be. Nothing else changes: the node's own code runs as is, except
that the cluster's INFO lines are logged too (``sievemq.cluster``: what each replica, feed
and election did), so a run's artifacts can tell what happened.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from typing import Any

_SOURCE = os.environ.get("SIEVEMQ_CHAOS_SOURCE", "")


def _from_source(create_connection: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(create_connection)
    def bound(self: Any, protocol_factory: Any, host: Any = None, *args: Any, **kw: Any) -> Any:
        if (
            isinstance(host, str)
            and host.startswith("127.")
            and kw.get("sock") is None
            and kw.get("local_addr") is None
        ):
            kw["local_addr"] = (_SOURCE, 0)
        return create_connection(self, protocol_factory, host, *args, **kw)

    return bound


if _SOURCE:
    logging.getLogger("sievemq.cluster").setLevel(logging.INFO)
    asyncio.BaseEventLoop.create_connection = _from_source(  # type: ignore[method-assign]
        asyncio.BaseEventLoop.create_connection
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass
    else:
        uvloop.Loop.create_connection = _from_source(  # type: ignore[method-assign]
            uvloop.Loop.create_connection
        )
