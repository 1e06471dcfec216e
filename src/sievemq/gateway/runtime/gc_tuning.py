"""Keep CPython's full (generation 2) garbage collections off the event loop's critical path.

A full collection walks every container object the interpreter tracks. With 1,000 streams
that is about 100,000 objects (the modules' functions and types, and each stream's segment
tables, paths, file handles and counters), so one full collection held the loop for
100-500 ms now and then, and every AMQP connection waited behind it.

Those objects live as long as the server (or as long as their queue, and a deleted queue
is freed by reference counting alone: its objects form no cycles). ``gc.freeze()`` moves
everything tracked so far into the permanent generation, which collections never walk, so
a full collection only walks what was made since. ``GcFreezer`` freezes:

- once at start, after recovery (a full collection first: nobody waits yet);
- after bulk declares: a check every ``CHECK_S`` seconds freezes again once the queue
  count grew by ``DECLARED_STEP`` since the last freeze (a young collection first, so
  fresh garbage is not frozen).

``gc.freeze()`` itself is O(1) (a list splice). The cost: an object frozen while alive
that later dies inside a reference cycle is never collected (reference counting still
frees everything acyclic, which queues are). Connections open at a freeze are such
objects; the loss is bounded by the connections open at the (rare) freezes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from sievemq.gateway.model.broker import Broker

log = logging.getLogger(__name__)

CHECK_S = 5.0
DECLARED_STEP = 100


class GcFreezer:
    """Freezes the long-lived objects at start and after bulk declares (see the module)."""

    def __init__(self, broker: Broker, enabled: bool = True) -> None:
        self.broker = broker
        self.enabled = enabled
        self.freezes = 0
        self._frozen_at = -1  # queue count at the last freeze

    def queue_count(self) -> int:
        return sum(len(v.queues) + len(v.classic.queues) for v in self.broker.vhosts.values())

    def freeze(self, full: bool = False) -> None:
        """Collect (fully, or the young generations only), then freeze the survivors."""
        if not self.enabled:
            return
        t0 = time.perf_counter()
        gc.collect() if full else gc.collect(1)
        gc.freeze()
        self.freezes += 1
        self._frozen_at = self.queue_count()
        log.debug(
            "gc: froze %d objects (%.1f ms)",
            gc.get_freeze_count(),
            1000 * (time.perf_counter() - t0),
        )

    def check(self) -> None:
        """Freeze again when the queues grew by ``DECLARED_STEP`` since the last freeze."""
        if self.enabled and self.queue_count() - self._frozen_at >= DECLARED_STEP:
            self.freeze()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The first freeze now, then the check every ``CHECK_S`` s on ``loop``."""
        self.freeze(full=True)

        def tick() -> None:
            self.check()
            loop.call_later(CHECK_S, tick)

        loop.call_later(CHECK_S, tick)
