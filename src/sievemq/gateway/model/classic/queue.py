"""A classic (or single-node quorum) queue: RabbitMQ's queue semantics over a ``QueueLog``.

Messages wait in ``ready`` (FIFO per priority; a requeued message goes back to its place by
id, as RabbitMQ keeps order) until a consumer or basic.get takes them; taken messages are
outstanding until acked (gone: its ack is recorded in the log), requeued (redelivered flag
set; a quorum queue counts ``x-delivery-count`` and dead-letters past ``x-delivery-limit``)
or rejected (dead-lettered when the queue has a dead-letter exchange). Persistent messages of
a durable queue are written to the log before they are confirmed; everything else lives in
memory only. ``x-message-ttl`` / per-message ``expiration`` are applied at the head,
``x-max-length`` / ``-bytes`` on publish with ``x-overflow``.

Memory: only a window of ready messages is held with bodies (``message.MemoryWindow``: a
count per queue; the bytes are a node total, ``MemoryBudget``, shared by the durable
queues). Past it, persistent messages of a durable queue keep only a compact index in memory
(``_PagedRun``: id, record position and size, expiry; about 20-30 bytes a message) and their
bodies are read back from the log's segments when the head of the queue reaches them.
Transient messages (and every message of a transient queue) always stay in memory; so do
outstanding (delivered, unacked) and requeued messages.

No sockets and no asyncio: the session layer sets ``on_ready`` (schedule a dispatch) and the
vhost sets ``dead_letter`` and ``on_unused`` (auto-delete).
"""

from __future__ import annotations

import heapq
import logging
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sievemq.gateway.model.classic.arguments import QueueArguments
from sievemq.gateway.model.classic.message import (
    DEFAULT_WINDOW,
    MemoryBudget,
    MemoryWindow,
    PublishFacts,
    QueueMessage,
    now_ms,
    publish_facts,
)
from sievemq.storage import layout
from sievemq.storage.commit_mark import CommitMark

if TYPE_CHECKING:
    from sievemq.storage.queue_log import QueueLog

log = logging.getLogger(__name__)


_RUN_MAX = 16384  # entries per paged run: a finished run's arrays are freed whole


class _PagedRun:
    """Consecutive ready messages of one priority whose bodies are in the log only: parallel
    arrays of ids, record positions and sizes (and expiry times once one has any), read from
    ``start`` on."""

    __slots__ = (
        "body_sizes",
        "expires",
        "ids",
        "positions",
        "redelivered_through",
        "sizes",
        "start",
    )

    def __init__(self, redelivered_through: int) -> None:
        self.ids = array("Q")
        self.positions = array("Q")
        self.sizes = array("I")
        self.body_sizes = array("I")
        self.expires: array[int] | None = None  # ms, -1 for none
        self.start = 0
        self.redelivered_through = redelivered_through  # recovered: delivered before a crash

    def __len__(self) -> int:
        return len(self.ids) - self.start

    def add(
        self, msg_id: int, position: int, size: int, body_size: int, expires: int | None
    ) -> None:
        if expires is not None and self.expires is None:
            self.expires = array("q", [-1]) * len(self.ids)
        self.ids.append(msg_id)
        self.positions.append(position)
        self.sizes.append(size)
        self.body_sizes.append(body_size)
        if self.expires is not None:
            self.expires.append(-1 if expires is None else expires)

    def expires_at(self, i: int) -> int | None:
        if self.expires is None:
            return None
        got = self.expires[i]
        return None if got < 0 else got


class _Level:
    """Ready messages of one priority: in memory (``fresh``, in order), then what comes after
    them (``tail``: paged runs and, after a run, messages kept in memory), and requeued ones in
    a heap by id (a requeued message always precedes every fresh one: it was delivered
    before them)."""

    __slots__ = ("fresh", "requeued", "tail", "tail_count")

    def __init__(self) -> None:
        self.fresh: deque[QueueMessage] = deque()
        self.tail: deque[QueueMessage | _PagedRun] = deque()
        self.tail_count = 0
        self.requeued: list[QueueMessage] = []

    def __len__(self) -> int:
        return len(self.fresh) + self.tail_count + len(self.requeued)

    def peek(self) -> QueueMessage | None:
        """The head when it is in memory (the queue loads a paged head first)."""
        if self.requeued:
            return self.requeued[0]
        return self.fresh[0] if self.fresh else None

    def pop(self) -> QueueMessage:
        if self.requeued:
            return heapq.heappop(self.requeued)
        return self.fresh.popleft()

    def logged_ids(self) -> Iterator[int]:
        """Ids of every ready message that is in the log (purge)."""
        for msg in self.requeued:
            if msg.logged:
                yield msg.id
        for msg in self.fresh:
            if msg.logged:
                yield msg.id
        for entry in self.tail:
            if isinstance(entry, _PagedRun):
                yield from entry.ids[entry.start :]
            elif entry.logged:
                yield entry.id


DeleteListener = Callable[["ClassicQueue"], None]
DeadLetter = Callable[["ClassicQueue", list[QueueMessage], str], None]


class ClassicQueue:
    """A declared classic or quorum queue of a vhost."""

    def __init__(
        self,
        name: str,
        vhost: str,
        arguments: QueueArguments,
        *,
        durable: bool,
        auto_delete: bool = False,
        owner: object | None = None,
        log_store: QueueLog | None = None,
        window: MemoryWindow = DEFAULT_WINDOW,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.declared = arguments  # as declared; ``arguments`` has the policies applied
        self.arguments = arguments
        self.kind = arguments.kind
        self.policy: str | None = None  # the names of the policies that apply, if any
        self.operator_policy: str | None = None
        self.effective_policy: dict[str, Any] = {}
        self.durable = durable
        self.auto_delete = auto_delete
        self.owner = owner  # the exclusive owner connection, or None
        self.log = log_store
        self.consumers: ConsumerList = ConsumerList()
        self.deleted = False
        # a replicated quorum queue's leader that may have been replaced (``cluster.failover``):
        # its publishes are nacked, nothing is written
        self.fenced = False
        self.on_ready: Callable[[], None] = _nothing
        self.on_unused: Callable[[ClassicQueue], None] = _nothing_q
        self.dead_letter: DeadLetter = _no_dead_letter
        self.last_used_ms = now_ms()
        self.had_consumer = False
        levels = (arguments.max_priority or 0) + 1
        self._levels = [_Level() for _ in range(levels)]
        self._ready = 0
        self._ready_bytes = 0
        self._expiring = False  # a ready message may carry an expiry (per-message TTL)
        self.window = window
        # the node's budget when the queue can page (a log); else one of its own (its
        # messages never go to disk only, whatever it holds)
        if budget is None or log_store is None:
            budget = MemoryBudget(window.bytes)
        budget.queues += 1
        self.budget = budget
        self._sharing = True  # counted in budget.queues (until ``release_memory``)
        self.loaded = 0  # ready messages whose bodies are in memory
        self.loaded_bytes = 0
        self.paged = 0  # ready messages whose bodies are in the log only
        self.outstanding = 0
        self._next_id = log_store.last_id if log_store is not None else 0
        # a replicated quorum queue's leader (``gate``): the logged messages with ids below
        # it are held by a majority; None: not gated (every message is committed as written)
        self.commit_end: int | None = None
        self._mark: CommitMark | None = None  # ``commit_end`` kept beside the log
        self.on_commit: Callable[[int], None] = _nothing_end  # its appender's confirms
        self._delete_listeners: list[DeleteListener] = []
        # RabbitMQ's per-queue message_stats (the admin API shows them)
        self.published = 0  # messages enqueued
        self.delivered = 0  # messages taken (consumer deliveries and basic.get)
        self.got = 0  # of them by basic.get with acks (the session counts those)
        self.got_no_ack = 0  # by basic.get without acks
        self.delivered_no_ack = 0  # to consumers without acks
        self.redelivered = 0  # taken again after a requeue
        self.get_empty = 0  # basic.get answered get-empty
        self.acked = 0  # acknowledged by clients (not the no-ack settles)

    def __repr__(self) -> str:
        return f"ClassicQueue({self.name!r}, vhost={self.vhost!r}, kind={self.kind!r})"

    # ------------------------------------------------------------------ facts

    @property
    def message_count(self) -> int:
        """Ready messages (what queue.declare-ok and basic.get-ok report)."""
        self.expire()
        return self._ready

    @property
    def has_ready(self) -> bool:
        """Any ready message (expired ones included: ``take`` drops those)."""
        return self._ready > 0

    @property
    def ready_bytes(self) -> int:
        return self._ready_bytes

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @property
    def exclusive(self) -> bool:
        return self.owner is not None

    # ------------------------------------------------------------------ commit by majority

    def gate(self, floor: int | None = None) -> None:
        """From now on a logged message is delivered, and its publish confirmed, only once
        ``commit`` passes its id (a quorum queue with replicas: ``cluster/commit.py``); what
        the log holds already counts as committed, unless the queue was gated when it last
        ran (a restart: only what it had committed then, kept beside its log,
        ``storage/commit_mark.py``; the rest commits as the replicas acknowledge it), and
        only the ids below ``floor`` (a leader elected from its copy: what the election
        knows a majority holds)."""
        if self.commit_end is not None:
            return
        end = (self.log.last_id if self.log is not None else 0) + 1
        if floor is not None:
            end = min(end, floor)
        if self.log is not None:
            self._mark, end = CommitMark.resume(self.log.directory, end)
        self.commit_end = end

    def ungate(self) -> None:
        """No replica any more: everything written is committed (what was held goes now)."""
        if self.log is not None:
            CommitMark.drop(self._mark, self.log.directory)
        self._mark = None
        if self.commit_end is not None:
            self.commit_end = None
            self.on_commit(1 << 64)
            if self._ready:
                self.on_ready()

    def commit(self, end: int) -> None:
        """A majority holds every logged message with an id below ``end``."""
        if self.commit_end is not None and end > self.commit_end:
            self.commit_end = end
            if self._mark is not None:
                self._mark.write(end)
            self.on_commit(end)
            if self._ready:
                self.on_ready()

    def uncommitted(self) -> bool:
        """Whether a logged message is not committed yet (its confirm waits)."""
        return (
            self.commit_end is not None
            and self.log is not None
            and self.log.last_id >= self.commit_end
        )

    def _held_back(self, level: _Level) -> bool:
        """The head of ``level`` is a logged message no majority holds yet."""
        end = self.commit_end
        if end is None or level.requeued:  # (a requeued one was delivered: committed)
            return False
        if level.fresh:
            head = level.fresh[0]
            return head.logged and head.id >= end
        if not level.tail:
            return False
        entry = level.tail[0]
        if isinstance(entry, _PagedRun):
            return entry.ids[entry.start] >= end
        return entry.logged and entry.id >= end

    def _pop_committed(self) -> QueueMessage | None:
        """``_pop_any`` for a gated queue: the highest priority whose head is committed."""
        for priority in range(len(self._levels) - 1, -1, -1):
            level = self._levels[priority]
            if len(level) and not self._held_back(level):
                msg = self._take_from(priority)
                if msg is not None:
                    return msg
        return None

    # ------------------------------------------------------------------ enqueue

    def restore(self, messages: Iterable[Any], delivered_through: int) -> None:
        """Messages recovered from the log (``queue_log.Located``: message, position, size),
        in id order; past the memory window only their index is kept. A quorum queue's
        messages come back with their delivery counts (``QueueLog.returned_count``: what
        a consumer held then counts as returned); one past ``x-delivery-limit`` is
        dead-lettered when it reaches the head (``take``)."""
        ttl = self.arguments.message_ttl
        counted = self._returned_count()
        for found in messages:
            rec = found.message
            facts = publish_facts(rec.properties)
            msg = self._message(
                rec.id,
                rec.exchange,
                rec.routing_key,
                rec.properties,
                rec.body,
                rec.enqueued_ms,
                facts,
                ttl,
                logged=True,
            )
            msg.redelivered = rec.id <= delivered_through
            if counted is not None:
                msg.delivery_count = counted(rec.id)
            self._push(msg, found.position, found.size, delivered_through)
        self._next_id = max(self._next_id, self.log.last_id if self.log is not None else 0)

    def _returned_count(self) -> Callable[[int], int] | None:
        """How a recovered message's delivery count is found (quorum queues with a log)."""
        if self.kind != "quorum" or self.log is None:
            return None
        return self.log.returned_count

    def _message(
        self,
        msg_id: int,
        exchange: str,
        routing_key: str,
        props: bytes,
        body: bytes,
        ts: int,
        facts: PublishFacts,
        ttl: int | None,
        logged: bool,
    ) -> QueueMessage:
        expires = None
        per_msg = facts.expiration_ms
        if ttl is not None or per_msg is not None:
            lifetime = min(x for x in (ttl, per_msg) if x is not None)
            expires = ts + lifetime
        top = len(self._levels) - 1
        priority = min(facts.priority, top)
        return QueueMessage(
            msg_id, exchange, routing_key, props, body, ts, expires, priority, logged
        )

    def enqueue(self, batch: list[tuple[str, str, bytes, bytes]]) -> list[bool]:
        """Publish messages (exchange, routing key, properties, body); False: refused by
        ``x-overflow`` reject-publish. Persistent messages of a durable queue are written
        to the log (one write) before this returns."""
        ts = now_ms()
        ttl = self.arguments.message_ttl
        results: list[bool] = []
        log_store = self.log if self.durable else None
        staged = False
        for exchange, routing_key, props, body in batch:
            if self._overflowing(len(body)):
                results.append(False)
                if self.arguments.overflow == "reject-publish-dlx":
                    self.dead_letter(
                        self,
                        [
                            self._message(
                                0,
                                exchange,
                                routing_key,
                                props,
                                body,
                                ts,
                                publish_facts(props),
                                None,
                                False,
                            )
                        ],
                        "maxlen",
                    )
                continue
            facts = publish_facts(props)
            self._next_id += 1
            msg_id = self._next_id
            logged = log_store is not None and facts.persistent
            msg = self._message(msg_id, exchange, routing_key, props, body, ts, facts, ttl, logged)
            if msg.expires_ms is not None and msg.expires_ms <= ts and not self.consumers:
                # expired at once (ttl 0 and nobody to take it): dead-letter, never stored
                self.dead_letter(self, [msg], "expired")
                results.append(True)
                continue
            if logged and log_store is not None:
                log_store.last_id = max(log_store.last_id, msg_id)
                position, size = log_store.stage(msg_id, ts, exchange, routing_key, props, body)
                staged = True
                self._push(msg, position, size)
            else:
                self._push(msg)
            self.published += 1
            results.append(True)
            self._drop_head_overflow()
        if staged and log_store is not None:
            log_store.write_staged()
        if self._ready:
            self.on_ready()
        return results

    def _overflowing(self, size: int) -> bool:
        args = self.arguments
        if args.overflow == "drop-head":
            return False
        if args.max_length is not None and self._ready >= args.max_length:
            return True
        return (
            args.max_length_bytes is not None and self._ready_bytes + size > args.max_length_bytes
        )

    def _drop_head_overflow(self) -> None:
        args = self.arguments
        if args.overflow != "drop-head":
            return
        dropped: list[QueueMessage] = []
        while self._ready and (
            (args.max_length is not None and self._ready > args.max_length)
            or (args.max_length_bytes is not None and self._ready_bytes > args.max_length_bytes)
        ):
            msg = self._pop_any()
            if msg is None:
                break
            dropped.append(msg)
        if dropped:
            self._discard(dropped, "maxlen")

    def apply_arguments(self, arguments: QueueArguments) -> None:
        """New working arguments (a policy changed): a lower max-length drops the head now."""
        self.arguments = arguments
        self._drop_head_overflow()

    # ------------------------------------------------------------------ the memory window

    def _window_full(self) -> bool:
        budget = self.budget
        return (
            self.loaded >= self.window.messages
            or self.loaded_bytes >= budget.share
            or budget.used >= budget.total
        )

    def release_memory(self) -> None:
        """The queue is deleted: its bodies and its share go back to the node's budget."""
        if self._sharing:
            self._sharing = False
            self.budget.used -= self.loaded_bytes
            self.budget.queues -= 1

    def _push(
        self, msg: QueueMessage, position: int = -1, size: int = 0, redelivered_through: int = 0
    ) -> None:
        """A ready message at the end of its priority; a logged one (``position`` in its
        segment) past the memory window keeps only its index entry."""
        level = self._levels[msg.priority]
        body_len = len(msg.body)
        if msg.expires_ms is not None:
            self._expiring = True
        self._ready += 1
        self._ready_bytes += body_len
        tail = level.tail
        if position >= 0 and (tail or self._window_full()):
            run = tail[-1] if tail else None
            if not isinstance(run, _PagedRun) or len(run.ids) >= _RUN_MAX:
                run = _PagedRun(redelivered_through)
                tail.append(run)
            run.add(msg.id, position, size, body_len, msg.expires_ms)
            level.tail_count += 1
            self.paged += 1
            return
        self.loaded += 1
        self.loaded_bytes += body_len
        self.budget.used += body_len
        if tail:  # behind paged messages: keep the order
            tail.append(msg)
            level.tail_count += 1
        else:
            level.fresh.append(msg)

    def _load(self, priority: int) -> None:
        """Bring the start of a level's tail into memory: up to the window's free room (at
        least ``window.refill`` messages), adjacent records with one read."""
        level = self._levels[priority]
        window = self.window
        node = self.budget
        budget = max(window.refill, window.messages - self.loaded)
        # at least one message (the head must move), else the room left in this queue's
        # share and in the node's total
        budget_bytes = max(1, min(node.share - self.loaded_bytes, node.total - node.used))
        tail = level.tail
        while tail and budget > 0 and budget_bytes > 0:
            entry = tail[0]
            if not isinstance(entry, _PagedRun):
                tail.popleft()  # already in memory (and counted)
                level.tail_count -= 1
                level.fresh.append(entry)
                continue
            start = entry.start
            end = len(entry.ids)
            stop = min(end, start + budget)
            used = sum(entry.body_sizes[start:stop])
            if used >= budget_bytes and stop - start > 1:  # fewer: up to the byte budget
                stop = start
                used = 0
                while stop < end and (used < budget_bytes or stop == start):
                    used += entry.body_sizes[stop]
                    stop += 1
            wanted = list(
                zip(
                    entry.ids[start:stop],
                    entry.positions[start:stop],
                    entry.sizes[start:stop],
                    strict=True,
                )
            )
            got = self.log.read_parts(wanted) if self.log is not None else [None] * len(wanted)
            entry.start = stop
            level.tail_count -= stop - start
            self.paged -= stop - start
            lost: list[int] = []
            expires = entry.expires
            through = entry.redelivered_through
            counted = self._returned_count()
            fresh = level.fresh
            loaded_bytes = 0
            for i, rec in zip(range(start, stop), got, strict=True):
                if rec is None:
                    lost.append(entry.ids[i])
                    self._ready -= 1
                    self._ready_bytes -= entry.body_sizes[i]
                    continue
                rec_id, ts, exchange, routing_key, props, body = rec
                expiry = None if expires is None or expires[i] < 0 else expires[i]
                msg = QueueMessage(
                    rec_id, exchange, routing_key, props, body, ts, expiry, priority, True
                )
                if rec_id <= through:
                    msg.redelivered = True
                if counted is not None:
                    msg.delivery_count = counted(rec_id)
                fresh.append(msg)
                loaded_bytes += len(body)
            self.loaded += len(got) - len(lost)
            self.loaded_bytes += loaded_bytes
            node.used += loaded_bytes
            if entry.start >= end:
                tail.popleft()
            budget -= stop - start
            budget_bytes -= used
            if lost:
                log.error("%r: %d messages could not be read back from the log", self, len(lost))
                if self.log is not None:
                    self.log.ack(lost)

    def _take_from(self, priority: int) -> QueueMessage | None:
        level = self._levels[priority]
        while True:
            if level.requeued:
                msg = heapq.heappop(level.requeued)
            elif level.fresh:
                msg = level.fresh.popleft()
            elif level.tail_count and level.tail:
                self._load(priority)  # reads at least one entry (unreadable ones are dropped)
                continue
            else:
                return None
            size = len(msg.body)
            self._ready -= 1
            self._ready_bytes -= size
            self.loaded -= 1
            self.loaded_bytes -= size
            self.budget.used -= size
            if not self._ready:
                self._expiring = False
            return msg

    def _pop_any(self) -> QueueMessage | None:
        if len(self._levels) == 1:
            return self._take_from(0)
        for priority in range(len(self._levels) - 1, -1, -1):
            if len(self._levels[priority]):
                msg = self._take_from(priority)
                if msg is not None:
                    return msg
        return None

    @staticmethod
    def _head_expiry(level: _Level) -> int | None:
        """When the head of a level expires (None: never), without reading it back."""
        head = level.peek()
        if head is not None:
            return head.expires_ms
        if not level.tail:
            return None
        entry = level.tail[0]
        if isinstance(entry, _PagedRun):
            return entry.expires_at(entry.start)
        return entry.expires_ms

    # ------------------------------------------------------------------ take

    def expire(self, now: int | None = None) -> None:
        """Dead-letter (or drop) expired messages at the head of each priority level."""
        if self.arguments.message_ttl is None and not self._expiring:
            return
        t = now_ms() if now is None else now
        expired: list[QueueMessage] = []
        for priority, level in enumerate(self._levels):
            while True:
                expiry = self._head_expiry(level)
                if expiry is None or expiry > t:
                    break
                head = self._take_from(priority)
                if head is None:
                    break
                expired.append(head)
        if expired:
            self._discard(expired, "expired")

    def take(self, defer_mark: bool = False) -> QueueMessage | None:
        """The next ready message (highest priority first), now outstanding.

        The log's delivered mark is written before this returns; with ``defer_mark`` it is
        only noted, and the caller runs ``flush_delivered`` before sending the deliveries
        (one write for many)."""
        if not self._ready:
            return None
        if self._expiring or self.arguments.message_ttl is not None:
            self.expire()
            if not self._ready:
                return None
        msg = self._pop_any() if self.commit_end is None else self._pop_committed()
        while msg is not None and msg.delivery_count and self.kind == "quorum":
            limit = self.arguments.delivery_limit
            if limit is None or msg.delivery_count <= limit:
                if msg.logged and self.log is not None:
                    # handed out again: a crash from now on returns it once more
                    self.log.note_counts([(msg.id, msg.delivery_count, True)])
                break
            # recovered (or a limit lowered by a policy) past the limit: never delivered
            self._discard([msg], "delivery_limit")
            msg = self._pop_any() if self.commit_end is None else self._pop_committed()
        if msg is None:
            return None
        self.outstanding += 1
        self.delivered += 1
        if msg.redelivered:
            self.redelivered += 1
        if msg.logged and self.log is not None:
            if defer_mark:
                self.log.note_delivered(msg.id)
            else:
                self.log.mark_delivered(msg.id)
        return msg

    def flush_delivered(self) -> None:
        """Write the delivered mark noted by ``take(defer_mark=True)``."""
        if self.log is not None:
            self.log.flush_delivered()

    def next_expiry(self) -> int | None:
        """The earliest expiry among the heads (for the runtime's TTL timer)."""
        soonest = None
        for level in self._levels:
            expiry = self._head_expiry(level)
            if expiry is not None:
                soonest = expiry if soonest is None else min(soonest, expiry)
        return soonest

    # ------------------------------------------------------------------ settle

    def ack(self, messages: list[QueueMessage], client: bool = True) -> None:
        """Outstanding messages are done: forget them (the log records the ack).
        ``client``: a client's basic.ack (counted in ``acked``), not a no-ack settle."""
        if self.deleted:
            return
        self.outstanding -= len(messages)
        if client:
            self.acked += len(messages)
        ids = [m.id for m in messages if m.logged]
        if ids and self.log is not None:
            self.log.ack(ids)

    def requeue(self, messages: list[QueueMessage]) -> None:
        """Back to the queue at their places, redelivered; quorum queues count deliveries."""
        if self.deleted:
            return
        self.outstanding -= len(messages)
        limit = self.arguments.delivery_limit if self.kind == "quorum" else None
        over: list[QueueMessage] = []
        for msg in messages:
            msg.redelivered = True
            if self.kind == "quorum":
                msg.delivery_count += 1
                if limit is not None and msg.delivery_count > limit:
                    over.append(msg)
                    continue
            heapq.heappush(self._levels[msg.priority].requeued, msg)
            if msg.expires_ms is not None:
                self._expiring = True
            size = len(msg.body)
            self._ready += 1
            self._ready_bytes += size
            self.loaded += 1
            self.loaded_bytes += size
            self.budget.used += size
        if over:
            self._discard(over, "delivery_limit")
        if self.kind == "quorum" and self.log is not None:
            kept = [
                m for m in messages if m.logged and (limit is None or m.delivery_count <= limit)
            ]
            if kept:
                self.log.record_counts([(m.id, m.delivery_count, False) for m in kept])
        if self._ready:
            self.on_ready()

    def reject(self, messages: list[QueueMessage]) -> None:
        """Rejected without requeue: dead-lettered (reason ``rejected``) or dropped."""
        if self.deleted:
            return
        self.outstanding -= len(messages)
        self._discard(messages, "rejected")

    def _discard(self, messages: list[QueueMessage], reason: str) -> None:
        self.dead_letter(self, messages, reason)
        ids = [m.id for m in messages if m.logged]
        if ids and self.log is not None:
            self.log.ack(ids)

    def purge(self) -> int:
        """Drop every ready message; returns how many."""
        count = self._ready
        ids = [i for level in self._levels for i in level.logged_ids()]
        self._levels = [_Level() for _ in self._levels]
        self._expiring = False
        self._ready = 0
        self._ready_bytes = 0
        self.budget.used -= self.loaded_bytes
        self.loaded = 0
        self.loaded_bytes = 0
        self.paged = 0
        if ids and self.log is not None:
            if self.outstanding == 0:
                self.log.purge()
            else:
                self.log.ack(ids)
        return count

    # ------------------------------------------------------------------ lifecycle

    def consumer_added(self) -> None:
        self.had_consumer = True
        self.last_used_ms = now_ms()

    def consumer_removed(self) -> None:
        self.last_used_ms = now_ms()
        if self.auto_delete and self.had_consumer and not self.consumers and not self.deleted:
            self.on_unused(self)

    def add_delete_listener(self, listener: DeleteListener) -> None:
        self._delete_listeners.append(listener)

    def remove_delete_listener(self, listener: DeleteListener) -> None:
        if listener in self._delete_listeners:
            self._delete_listeners.remove(listener)

    def notify_deleted(self) -> None:
        self.deleted = True
        listeners, self._delete_listeners = self._delete_listeners, []
        for listener in listeners:
            try:
                listener(self)
            except Exception:  # a broken consumer must not keep the queue alive
                log.exception("delete listener of %r failed", self)

    def sync(self) -> None:
        if self.log is not None and self.log.dirty:
            self.log.sync()

    def sync_now(self) -> None:
        """fdatasync the log whether or not it is marked dirty (a worker thread may call it)."""
        if self.log is not None:
            self.log.sync()

    def close(self) -> None:
        if self._mark is not None:
            self._mark.close()
        if self.log is not None:
            self.log.close()

    def destroy(self, release: Callable[[Path], None] = layout.remove_later) -> None:
        """Delete the queue's files (queue.delete): its log's tombstone goes to
        ``release``."""
        if self._mark is not None:
            self._mark.close()
        if self.log is not None:
            self.log.delete(release)


class ConsumerList:
    """The consumers of a queue in attach order, with a round-robin cursor."""

    __slots__ = ("cursor", "items")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.cursor = 0

    def add(self, consumer: Any) -> None:
        self.items.append(consumer)

    def discard(self, consumer: Any) -> None:
        if consumer in self.items:
            self.items.remove(consumer)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self.items))

    def __bool__(self) -> bool:
        return bool(self.items)


# RabbitMQ's per-queue message_stats names, in the order the admin API lists them
MESSAGE_STATS_KEYS = (
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "deliver_get",
    "ack",
    "redeliver",
    "get_empty",
)


def message_stats(q: Any) -> dict[str, int]:
    """RabbitMQ's message_stats names from a classic queue's (or its view's) counters."""
    return {
        "publish": q.published,
        "deliver": q.delivered - q.got - q.got_no_ack - q.delivered_no_ack,
        "deliver_no_ack": q.delivered_no_ack,
        "get": q.got,
        "get_no_ack": q.got_no_ack,
        "deliver_get": q.delivered,
        "ack": q.acked,
        "redeliver": q.redelivered,
        "get_empty": q.get_empty,
    }


def _nothing() -> None:
    return None


def _nothing_end(end: int) -> None:
    return None


def _nothing_q(queue: ClassicQueue) -> None:
    return None


def _no_dead_letter(queue: ClassicQueue, messages: list[QueueMessage], reason: str) -> None:
    return None
