"""The rate sampler: every counter and length sampled on the loop, as RabbitMQ's
``collect_statistics_interval``, so that a first request already answers real rates."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from sievemq.gateway.admin.base import (
    HISTORY_RATES,
    LENGTHS,
    NODE_COUNTERS,
    classic_counts_keys,
    queue_key,
    split_counts,
)
from sievemq.gateway.admin.connections import ConnectionsAdmin
from sievemq.gateway.admin.views import HistoryPointView
from sievemq.gateway.rates import SAMPLE_INTERVAL_S, Key

log = logging.getLogger(__name__)


class SamplingAdmin(ConnectionsAdmin):
    """The rate sampler's task (it samples the connections' sockets too)."""

    def start_sampling(self, interval_s: float = SAMPLE_INTERVAL_S) -> asyncio.Task[None]:
        """Sample every counter and length every ``interval_s`` on the running loop (as
        RabbitMQ's ``collect_statistics_interval``), so that a first request already
        answers real rates. Cancel the task (or ``stop_sampling``) to end it."""
        if self.sampler is None or self.sampler.done():
            self.sampler = asyncio.get_running_loop().create_task(self._sample_forever(interval_s))
        return self.sampler

    async def stop_sampling(self) -> None:
        task, self.sampler = self.sampler, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sample_forever(self, interval_s: float) -> None:
        slice_s = 0.004  # at most this much sampling between two loop turns
        while True:
            started = time.perf_counter()
            last = started
            try:
                for _ in self.sample_steps():
                    if time.perf_counter() - last >= slice_s:
                        await asyncio.sleep(0)
                        last = time.perf_counter()
            except Exception:  # a bug here must not end the rates for good: log, go on
                log.exception("a round of the admin rate sampler failed")
            await asyncio.sleep(max(0.0, interval_s - (time.perf_counter() - started)))

    def sample_steps(self) -> Iterator[None]:
        """One round of samples: every stream that is open (one that is not cannot change),
        classic and quorum queue and connection; the queues' rates are summed for the
        overview and the vhosts. Yields after each queue, so the caller can give the loop a
        turn; the samples of objects gone since the last round are dropped at the end."""
        keys: set[Key] = {("o",)}
        summed: dict[str, float] = dict.fromkeys((*classic_counts_keys(), *LENGTHS), 0.0)
        per_vhost: dict[str, dict[str, float]] = {}
        lengths = [0, 0]  # messages, unacknowledged: the round's totals, for the history

        def add(vhost: str, rates: dict[str, float]) -> None:
            in_vhost = per_vhost.setdefault(vhost, dict.fromkeys(LENGTHS, 0.0))
            for name in LENGTHS:
                in_vhost[name] += rates[name]
            for name, rate in rates.items():
                if name in summed:
                    summed[name] += rate

        for q in list(self.broker.queues()):
            if q.opened_stream is not None and self._still_declared(q):
                messages = q.stats().messages
                unacked = sum(max(0, c.prefetch - c.credit) for c in q.consumers)
                rates = self._stream_rates(q, messages, unacked, time.time())
                rates["deliver"] = rates["deliver_get"]  # a stream's deliveries: consumers'
                add(q.vhost, rates)
                lengths[0] += messages
                lengths[1] += unacked
                keys.add(queue_key(q))
            yield
        for v in list(self.broker.vhosts.values()):
            for cq in list(v.classic.queues.values()):
                if self._still_declared(cq):
                    add(cq.vhost, self._classic_rates(cq, time.time()))
                    lengths[0] += cq.message_count + cq.outstanding
                    lengths[1] += cq.outstanding
                    keys.add(queue_key(cq))
                yield
        self._summed_rates = {k: round(r, 1) for k, r in summed.items()}
        self._vhost_rates = {
            v: {k: round(r, 1) for k, r in rates.items()} for v, rates in per_vhost.items()
        }
        node_counts = {k: getattr(self.broker.counters, a) for k, a in NODE_COUNTERS.items()}
        node_counts["publish"] += self.broker.counters.stream_received
        now = time.time()
        node_rates = self._rates.rates(("o",), *split_counts(node_counts), now, len(node_counts))
        rates = {**self._summed_rates, **node_rates}
        point = {k: rates.get(k, 0.0) for k in HISTORY_RATES}
        self.history.append(HistoryPointView(now, point, lengths[0], lengths[1]))
        yield
        keys.update(("x", conn.name) for conn in self.list_connections())
        self._rates.forget(keys)
