"""Failover of replicated queues: a new leader from a majority of the copies, by
compare-and-swap of the epoch in etcd; the old leader fenced, and brought back as a replica.

Said below for streams; quorum queues go the same way (``Failover.copies`` holds what
differs per queue type: how a copy's tail is read, how the winner opens it, how the old
leader gives the queue up; ``cluster.quorum_failover``).

**Election.** When a stream's leader stops being listed (its node record went with its
lease: killed, stopped, cut off from etcd for the TTL), or is lost to a replica (nothing
heard from it for ``silence_s`` while it could try it -- a stream's subscription asks for
heartbeats, a quorum queue's feed beats (``Following``) -- : cut from its replicas while its
lease holds; the time a copy could not try, held by an election or with its leader not
listed, does not count, so a leader listed again after its lease lapsed is tried anew, not
replaced at once: ``Follower.listen_anew``), each such
replica that runs stops following it, cuts its copy back to the history it shares with the
record (as before it follows anyone) and writes its tail to
``sievemq/tails/VHOST/NAME/NODE`` under its own lease: the record's epoch it saw, the epoch
that wrote its copy's last chunk and its copy's end offset; while that tail stands, the
copy acknowledges nothing of that epoch past it (``Follower.cap``), so a leader that still
runs commits nothing the election may not count. Once the tails of every live member but
the leader are in (or after ``TAIL_WAIT_S``), and only if they come from a majority of the
stream's members (leader included: the members are the record's ``leader`` and
``replicas``), the member with the highest (epoch, end), ties to the first name, writes the
record by compare-and-swap on its revision and every counted tail's, and (for a leader that
stopped) on its node key being absent: ``leader`` itself, ``epoch`` + 1, ``epochs`` (the history,
``cluster.epochs``) with the new epoch starting at its end, ``replicas`` the other members
with the old leader last. Without a majority nothing is chosen (no unclean election): the
stream takes no writes until its leader or enough replicas come back. An election that ends
without a new epoch (the leader heard again, listed again) deletes the tail and reads the
record again before it lifts the cap, and then acknowledges what the copy holds at once
(``_withdraw``, ``Follower.set_cap``): a chunk the copy took while capped is acknowledged
by nothing else when its publisher waits for the confirm, and the leader would hold it for
good. The winner starts with committed what the tails
show a majority holds (``Commits.promoted``), not its whole copy. The winner moves its
copy from ``DATA_DIR/replicas/...`` to its own streams and declares the stream there: it
takes publishes (AMQP publishes through any node are forwarded to it as the record says;
Stream-protocol clients' Metadata names it). The other replicas follow it
(``cluster.replication`` reconnects to whoever the record names, truncating first to the
history it shares).

**Fencing.** A leader stops confirming as soon as it may have been replaced: when the last
keep-alive etcd answered was sent a TTL ago or more (``Lease.renewed_at``, checked by a
timer every ``WATCHDOG_S``, which also runs before the publishes read in the same turn are
written after a SIGSTOP), every replicated stream it leads is fenced (``StreamQueue.fenced``:
the appender nacks every publish, AMQP 0-9-1 and Stream protocol alike, and confirms
nothing; nothing is written). A lease renewed after all (a slow etcd) lifts the fence: the
lease never lapsed, so no election could have succeeded (it needs the node key gone). A
lease lost: once registered again, the node reads each fenced stream's record: still its
own, the fence is lifted; another leader's, the stream is handed over. Handing over (also
at start, for a stream this node held when a failover moved it): the stream is detached here
(its consumers and publishers are told it is gone, as by a delete; its bindings stay), its
files become this node's replica, cut back to the shared history, and it follows the new
leader. A node shutting down fences its streams before it leaves the cluster. A leader
whose replicas elected another while its lease held (it was cut from them, not from etcd)
is not fenced: it cannot commit (their acknowledgements are capped), so its publishes are
held, and its watch brings the new record: it hands over, its held publishes nacked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from sievemq.cluster.commit import committed_offset
from sievemq.cluster.coordination import (
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    Event,
    Lease,
    key_missing,
    mod_revision_is,
    put_op,
)
from sievemq.cluster.epochs import History, history_of, last_epoch, read_history, write_history
from sievemq.cluster.membership import NODES, Membership
from sievemq.cluster.placement import CREATING, Placement, queue_key
from sievemq.cluster.reach import Reach
from sievemq.cluster.replication import HEARTBEAT_S, Replication, replica_directory
from sievemq.cluster.tails import TailReader, tail_prefix
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.definitions import decode_value
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.storage import layout
from sievemq.storage.durable import fsync_dir
from sievemq.storage.layout import stream_directory

log = logging.getLogger("sievemq.cluster")

WATCHDOG_S = 0.1  # how often a leader checks its lease is fresh
STALLED_S = 1.0  # a timer this late: this node was frozen (SIGSTOP, a stalled loop)
TAIL_WAIT_S = 2.0  # how long an election waits for the other live members' tails
TAIL_POLL_S = 0.1  # between an election's reads of the tails (one reader for all: ``tails``)
# etcd requests of this node's elections in flight at once (tails, withdrawals, swaps): a node
# that lost the leader of a hundred streams must not fill the connection pool its watches use
ELECTION_REQUESTS = 16
RETRY_S = 0.5  # between election rounds that chose nobody
STAND_POLL_S = 0.1  # how often a standing election looks for the leader heard again

Queue = tuple[str, str]


def committed_floor(ends: dict[str, int], me: str, members: int, heard: int) -> int:
    """What an election's winner (``me``) counts as committed from the start: what the
    candidates' tails (``ends``: node -> its copy's end) show a majority of ``members``
    holds (this copy and the next highest others), or what the old leader said it had
    committed (``heard``: the copy's committed offset), whichever is higher; never past
    this copy's end."""
    others = [end for node, end in ends.items() if node != me]
    held = committed_offset(others, members) or 0
    return min(ends[me], max(held, heard))


class Following(Protocol):
    """A copy that follows its leader, as an election sees it (a stream's
    ``replication.Follower``, a quorum queue's ``quorum_replication.Follower``): how long it
    heard nothing from its running leader, and the cap on what it acknowledges while its
    tail stands."""

    heard_at: float  # loop time of the last frame from the leader (or of ``listen_anew``)
    cap: tuple[int, int] | None  # (epoch, end): acknowledge no further in that epoch

    def silent_for(self) -> float:
        """Seconds since the leader was last heard, or since the copy could try it again."""
        ...

    def listen_anew(self) -> None:
        """The copy may try its leader again: count its silence from now, try it now."""
        ...

    def set_cap(self, cap: tuple[int, int] | None) -> None:
        """Set or lift the cap, telling the leader what the copy holds now."""
        ...

    @property
    def committed(self) -> int:
        """The end of what the leader said it committed, as this copy last heard it."""
        ...


class Copies(Protocol):
    """This node's copies of one queue type's queues, as an election sees them (streams:
    ``StreamCopies`` below; quorum queues: ``cluster.quorum_failover``)."""

    def holds_copy(self, queue: Queue) -> bool:
        """This node keeps a copy of the queue (it may run for its leader)."""
        ...

    def follower(self, queue: Queue) -> Following | None:
        """The copy's follower, while it follows (or tries to follow) the leader."""
        ...

    def followers(self) -> Iterator[tuple[Queue, Following]]:
        """Every copy's follower on this node."""
        ...

    def hold(self, queue: Queue, held: bool) -> None:
        """Stop following (its end stays put while the members compare), or follow again."""
        ...

    def tail(self, queue: Queue) -> tuple[int, int]:
        """(the epoch that wrote the copy's last entry, the copy's end), once the copy is
        cut back to the history it shares with the record."""
        ...

    async def promote(
        self, queue: Queue, record: dict[str, Any], history: History, floor: int | None
    ) -> None:
        """This node won: its copy becomes the queue it leads (the record is written), with
        committed at first what the election knows a majority holds (``floor``; None: all
        of the copy)."""
        ...

    def hand_over(self, queue: Queue, record: dict[str, Any]) -> bool:
        """Another node leads the queue this node holds: give it up here (True when it was
        held), its files becoming a replica's copy (or going)."""
        ...


class StreamCopies:
    """Streams' copies: ``cluster.replication``'s followers, ``DATA_DIR/replicas/...``."""

    def __init__(self, replication: Replication, placement: Placement, broker: Broker) -> None:
        self.replication = replication
        self.placement = placement
        self.broker = broker
        self.me = placement.me

    def holds_copy(self, queue: Queue) -> bool:
        return queue in self.replication.followers

    def follower(self, queue: Queue) -> Following | None:
        return self.replication.followers.get(queue)

    def followers(self) -> Iterator[tuple[Queue, Following]]:
        yield from self.replication.followers.items()

    def hold(self, queue: Queue, held: bool) -> None:
        follower = self.replication.followers.get(queue)
        if follower is not None:
            follower.hold = held
            if held:
                follower.retarget()
            else:  # the time held is no silence of the leader's
                follower.listen_anew()

    def tail(self, queue: Queue) -> tuple[int, int]:
        follower = self.replication.followers[queue]
        # the copy cut back to the history it shares with the record first: a copy that
        # never followed since an epoch passed it by must not offer chunks that epoch
        # replaced (it would win with them, and its history would not say so)
        follower.prepare()
        end = follower.stream.end_offset
        directory = replica_directory(self.broker.data_dir, *queue)
        return last_epoch(read_history(directory), end), end

    async def promote(
        self, queue: Queue, record: dict[str, Any], history: History, floor: int | None
    ) -> None:
        """This node's copy becomes the stream it leads."""
        vhost, name = queue
        await self.replication.release(queue)
        source = replica_directory(self.broker.data_dir, vhost, name)
        target = stream_directory(self.broker.data_dir, vhost, name)
        _move(source, target)
        write_history(target, history)
        local = self.broker.vhosts.get(vhost)
        if local is None:
            log.error("stream '%s': no vhost '%s' on this node to lead it in", name, vhost)
            return
        arguments = decode_value(record.get("arguments") or {})
        if floor is not None:  # committed at the gate: what the election knows a majority holds
            self.placement.promoted(queue, floor)
        # gated for commit by majority in the declare's own turn (``Commits.declared``, the
        # broker's hook: placement's record, written just before, says this node leads)
        local.declare_queue(name, durable=True, arguments=dict(arguments))

    def hand_over(self, queue: Queue, record: dict[str, Any]) -> bool:
        """Another node leads the stream this node holds: its copy becomes a replica."""
        vhost, name = queue
        local = self.broker.vhosts.get(vhost)
        if local is None or local.detach_queue(name) is None:
            return False
        directory = stream_directory(self.broker.data_dir, vhost, name)
        if self.me in record.get("replicas", ()):
            _move(directory, replica_directory(self.broker.data_dir, vhost, name))
        else:  # no longer one of its members: the copy goes
            tombstone = layout.bury(directory)
            if tombstone is not None:
                layout.remove_later(tombstone)
        return True


class Failover:
    """This node's part in its replicated queues' failovers: elections, fencing, handing
    over; what differs between queue types is in ``copies`` (by the record's ``type``)."""

    def __init__(
        self,
        client: EtcdClient,
        membership: Membership,
        placement: Placement,
        replication: Replication,
        broker: Broker,
    ) -> None:
        self.client = client
        self.membership = membership
        self.placement = placement
        self.replication = replication
        self.broker = broker
        self.me = placement.me
        self.copies: dict[str, Copies] = {"stream": StreamCopies(replication, placement, broker)}
        self.fenced: set[Queue] = set()
        self._fenced_under: Lease | None = None
        self._elections: dict[Queue, asyncio.Task[None]] = {}
        self._tails = TailReader(client)
        self._reach = Reach(membership.cluster_address)
        self._requests = asyncio.Semaphore(ELECTION_REQUESTS)
        self.discounted_s = 0.0  # all the time taken off copies' silence (``discount_stall``)
        self._timer: asyncio.TimerHandle | None = None
        self._ticked = 0.0  # when the timer last ran (loop time)
        self._tasks: set[asyncio.Future[None]] = set()
        self._stopped = False

    # ---------------------------------------------------------------- watched changes

    def apply_nodes(self, events: list[Event], reset: bool) -> None:
        """A node came or went (the membership folds the events in after its listeners): a
        leader listed again (its lease lapsed, it registered again) is tried anew by its
        copies, which could not follow it while it was not listed (``Follower.listen_anew``)."""
        back = {
            event.kv.key[len(NODES) :]
            for event in events
            if event.kind == "put"
            and event.kv.key.startswith(NODES)
            and (reset or event.kv.key[len(NODES) :] not in self.membership.records)
        }
        if back:
            for queue, follower in self._followers():
                if self.placement.records.get(queue, {}).get("leader") in back:
                    follower.listen_anew()
        asyncio.get_running_loop().call_soon(self._check)

    def apply_queues(self, events: list[Event], reset: bool) -> None:
        """After the placement, before the replication: hand over what another node leads
        now, so that the replication follows it from this node's copy."""
        for queue, record in list(self.placement.records.items()):
            if self._moved(record) and self._held(queue):
                self._hand_over(queue, record)
        asyncio.get_running_loop().call_soon(self._check)

    def _moved(self, record: dict[str, Any]) -> bool:
        """A failover gave the queue to another node (epoch 1 names the node that first
        recorded it: a local queue of that name is another declare's, left alone)."""
        return (
            record.get("type", "stream") in self.copies
            and record.get("leader") != self.me
            and int(record.get("epoch", 1)) > 1
            and not record.get("delete")
        )

    def _orphaned(self, queue: Queue, record: dict[str, Any]) -> bool:
        """A queue this node replicates whose leader is not running, or is lost to this
        stream copy (``_lost``)."""
        return self._replica_of_other(queue, record) and (
            record.get("leader") not in self.membership.records or self._lost(queue)
        )

    def silence_s(self) -> float:
        """How long a copy hears nothing from its running leader before it counts it lost:
        the lease's TTL (at least three of the heartbeats the follower asks for)."""
        return float(max(self.membership.ttl_s, 3 * HEARTBEAT_S))

    def _lost(self, queue: Queue) -> bool:
        """This node's copy heard nothing from its leader (no frame, no connection) for
        ``silence_s``: the leader runs (its lease holds) but this copy cannot follow it. An
        election needs a majority of the members to have lost it (each writes a tail only
        then), and then the leader cannot commit either: they hold its majority."""
        follower = self._follower(queue)
        return follower is not None and follower.silent_for() > self.silence_s()

    def _follower(self, queue: Queue) -> Following | None:
        record = self.placement.records.get(queue)
        copies = None if record is None else self._copies(record)
        return None if copies is None else copies.follower(queue)

    def _followers(self) -> Iterator[tuple[Queue, Following]]:
        """The followers of every copy this node keeps (streams' and quorum queues')."""
        for copies in list(self.copies.values()):
            yield from list(copies.followers())

    def _check(self) -> None:
        if self._stopped or not self.membership.registered.is_set():
            return
        for queue, record in list(self.placement.records.items()):
            if queue not in self._elections and self._orphaned(queue, record):
                self._start_election(queue)

    def _check_silent(self) -> None:
        """The copies whose running leader went silent (checked by the timer: nothing in
        etcd changes when a leader is cut from its replicas only)."""
        if self._stopped or not self.membership.registered.is_set():
            return
        silence = self.silence_s()
        for queue, follower in self._followers():
            if queue in self._elections or follower.silent_for() <= silence:
                continue
            record = self.placement.records.get(queue)
            if record is not None and self._orphaned(queue, record):
                self._start_election(queue)

    def _start_election(self, queue: Queue) -> None:
        task = asyncio.ensure_future(self._elect(queue))
        self._elections[queue] = task
        task.add_done_callback(functools.partial(self._elected, queue))

    def _elected(self, queue: Queue, task: asyncio.Future[None]) -> None:
        if self._elections.get(queue) is task:
            del self._elections[queue]
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "the election of a leader of '%s' in vhost '%s' ended in an error",
                queue[1],
                queue[0],
                exc_info=task.exception(),
            )

    def _held(self, queue: Queue) -> bool:
        return self._local(queue) is not None

    def _local(self, queue: Queue) -> StreamQueue | ClassicQueue | None:
        """The stream or quorum queue this node holds under that name."""
        local = self.broker.vhosts.get(queue[0])
        if local is None:
            return None
        stream = local.queues.get(queue[1])
        return stream if stream is not None else local.classic.queues.get(queue[1])

    def _copies(self, record: dict[str, Any]) -> Copies | None:
        return self.copies.get(str(record.get("type", "stream")))

    def holds(self, vhost: str, name: str) -> bool:
        """Whether this node has the queue open (``Membership.holds_queue``)."""
        return self._held((vhost, name))

    # ---------------------------------------------------------------- election

    async def _elect(self, queue: Queue) -> None:
        tail = tail_prefix(*queue) + quote(self.me, safe="")
        follower: Following | None = None  # (its acknowledgements are capped)
        warned: set[str] = set()  # what this election logged once already
        standing = False  # a round chose nobody and the copy still hears nothing
        try:
            while not self._stopped:
                record = self.placement.records.get(queue)
                copies = None if record is None else self._copies(record)
                if (
                    record is None
                    or copies is None
                    or not copies.holds_copy(queue)
                    or not (
                        self._orphaned(queue, record)
                        if not standing
                        else self._replica_of_other(queue, record)
                    )
                ):
                    return
                follower = copies.follower(queue)
                copies.hold(queue, True)  # its copy's end stays put while the members compare
                try:
                    if await self._round(queue, record, tail, copies, warned):
                        return
                except (EtcdUnavailable, EtcdError) as error:
                    log.info("electing a leader of '%s': %s", queue[1], error)
                finally:
                    copies.hold(queue, False)  # (its copy tries the leader anew)
                if record.get("leader") not in self.membership.records:
                    await asyncio.sleep(RETRY_S)
                    standing = False
                elif await self._stand(queue, record, copies.follower(queue)):
                    return
                else:
                    standing = True
        except Exception:
            log.exception("electing a leader of '%s' in vhost '%s' failed", queue[1], queue[0])
        finally:
            await self._withdraw(queue, tail, follower)

    async def _withdraw(self, queue: Queue, tail: str, follower: Following | None) -> None:
        """The election ended: remove this copy's tail, then lift its acknowledgement cap
        once no election can count that tail any more: after the delete, a read of the
        record (linearizable) that shows no new epoch means no compare-and-swap that read
        the tail can succeed (it compares the tail's revision); one that shows a new epoch
        makes the cap moot (it caps the old epoch only). Tried again after 0.5 s, then
        twice as long each time up to the TTL: a node whose etcd requests time out by the
        hundred must not keep its own queue of them full (a chaos run's node retried 243
        withdrawals every 0.5 s for minutes). Not when this node stops: its tails go with
        the lease it revokes next, and a hundred withdrawals in turn (16 at a time) from a
        node whose etcd does not answer would hold its stop for minutes."""
        if self._stopped:
            return
        pause = RETRY_S
        while True:
            try:
                capped = follower is not None and follower.cap is not None
                async with self._requests:
                    await self.client.delete(tail)
                    if capped:
                        await self.client.get(queue_key(*queue))
                if follower is not None and capped:
                    follower.set_cap(None)  # (acknowledging what it holds now)
                return
            except (EtcdUnavailable, EtcdError) as error:
                if self._stopped or follower is None or follower.cap is None:
                    return
                log.info("withdrawing from the election of '%s': %s", queue[1], error)
            await asyncio.sleep(pause)
            pause = min(2 * pause, self.membership.ttl_s)

    async def _round(
        self,
        queue: Queue,
        record: dict[str, Any],
        tail_key: str,
        copies: Copies,
        warned: set[str],
    ) -> bool:
        """One round: True when the record changed (this node won, or saw another win)."""
        lease = self.membership.lease
        if lease is None or lease.lost:
            return False
        epoch = int(record.get("epoch", 1))
        leader = str(record.get("leader"))
        running = leader in self.membership.records  # lost to this copy, not stopped
        members = [leader, *map(str, record.get("replicas", ()))]
        following = copies.follower(queue)
        if not await self._reaches_enough(queue, record, members, warned):
            return False
        if not self._current(queue, record) or copies.follower(queue) is not following:
            return True  # changed while this node probed (a chaos run: its copy was gone)
        last, end = copies.tail(queue)
        mine = {"node": self.me, "record_epoch": epoch, "epoch": last, "end": end}
        follower = copies.follower(queue)
        if follower is not None:
            # no acknowledgement of this epoch past the tail while it stands: the leader
            # (if it runs) cannot commit what the election may not count
            cap = follower.cap
            kept = cap[1] if cap is not None and cap[0] == epoch else end
            follower.cap = (epoch, min(kept, end))
        async with self._requests:
            await self.client.put(tail_key, json.dumps(mine), lease.id)
        if follower is not None:
            follower.cap = (epoch, end)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TAIL_WAIT_S
        while True:
            kvs = await self._tails.read(tail_prefix(*queue))
            tails: dict[str, tuple[int, int]] = {}
            revisions: dict[str, int] = {}  # tail key -> revision: the swap compares them
            for kv in kvs:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    got = json.loads(kv.value)
                    if got.get("record_epoch") == epoch and got.get("node") in members:
                        tails[str(got["node"])] = (int(got["epoch"]), int(got["end"]))
                        revisions[kv.key] = kv.mod_revision
            # the leader never offers a tail; the members still hearing it offer none
            live = {
                m for m in members if m != leader and (m in self.membership.records or m == self.me)
            }
            if live <= set(tails) or loop.time() > deadline:
                break
            await asyncio.sleep(TAIL_POLL_S)
        if not self._current(queue, record):
            return True
        majority = len(members) // 2 + 1
        if len(tails) < majority:
            (log.info if "majority" in warned else log.warning)(
                "%s '%s' in vhost '%s': its leader %s %s and only %d of its %d members "
                "answered (%s): no leader is chosen without a majority",
                _kind(record),
                queue[1],
                queue[0],
                leader,
                f"was not heard from for {self.silence_s():g} s" if running else "is not running",
                len(tails),
                len(members),
                ", ".join(sorted(tails)) or "none",
            )
            warned.add("majority")
            return False
        best = sorted(tails, key=lambda n: (-tails[n][0], -tails[n][1], n))[0]
        if best != self.me:
            return await self._await_change(queue, record)
        floor = None
        if follower is not None:
            ends = {n: e for n, (_, e) in tails.items()}
            floor = committed_floor(ends, self.me, len(members), follower.committed)
        return await self._take(queue, record, (end, floor), copies, revisions, running)

    async def _reaches_enough(
        self, queue: Queue, record: dict[str, Any], members: list[str], warned: set[str]
    ) -> bool:
        """This node reaches enough of the other running members (the leader apart: it is
        lost to this copy) to be followed, were it chosen: a majority with itself. One that
        does not offers no tail: chosen for the longest copy, it would lead what nobody can
        follow (``cluster.reach``). Too few members running is the round's to report."""
        leader = record.get("leader")
        others = [m for m in members if m not in (self.me, leader) and m in self.membership.records]
        needed = len(members) // 2  # the majority, less this node
        if len(others) < needed:
            return True  # too few running: the round finds no majority, and says so
        reached = [m for m in others if await self._reach.reaches(m)]
        if len(reached) >= needed:
            return True
        if "reach" not in warned:
            log.warning(
                "%s '%s' in vhost '%s': its leader %s is lost to this node, which reaches "
                "%d of the other %d members (%s): it offers no tail (nobody could follow it)",
                _kind(record),
                queue[1],
                queue[0],
                leader,
                len(reached),
                len(members) - 1,
                ", ".join(reached) or "none",
            )
            warned.add("reach")
        return False

    async def _stand(
        self, queue: Queue, record: dict[str, Any], follower: Following | None
    ) -> bool:
        """After a round that chose nobody while the leader runs: the copy tries its leader
        again, and its tail (and the cap) stays for ``silence_s`` more; True when the
        election is over (the record changed, or the leader was heard: a frame came), False
        for another round. Withdrawn at once instead, the tails of two members whose
        silences began a few seconds apart were never up together: each election saw only
        its own tail, and a leader cut from both replicas was never replaced (the 30-minute
        chaos runs: two replicas alternating elections of ``cs-1`` for 60 s)."""
        loop = asyncio.get_running_loop()
        stood_at = loop.time()
        discounted_before = self.discounted_s
        deadline = stood_at + self.silence_s()
        while not self._stopped and loop.time() < deadline:
            await asyncio.sleep(STAND_POLL_S)
            if not self._current(queue, record):
                return True
            stalls = self.discounted_s - discounted_before
            if follower is None or heard_since(follower.heard_at, stood_at, stalls):
                return True  # the leader was heard: nothing to elect
            if record.get("leader") not in self.membership.records:
                return False  # the leader stopped: elect at once
        return self._stopped

    def _replica_of_other(self, queue: Queue, record: dict[str, Any]) -> bool:
        """A queue this node replicates and does not lead (``_orphaned`` without the
        silence: a standing election goes on while nothing is heard)."""
        return (
            record.get("type", "stream") in self.copies
            and record.get("leader") != self.me
            and self.me in record.get("replicas", ())
            and not record.get("delete")
            and record.get("state") != CREATING
        )

    def _current(self, queue: Queue, record: dict[str, Any]) -> bool:
        now = self.placement.records.get(queue, {})
        return now.get("mod_revision") == record.get("mod_revision")

    async def _await_change(self, queue: Queue, record: dict[str, Any]) -> bool:
        """Another member is to win: give it the TTL to write the record."""
        deadline = asyncio.get_running_loop().time() + self.membership.ttl_s
        while asyncio.get_running_loop().time() < deadline:
            if not self._current(queue, record):
                return True
            await asyncio.sleep(0.05)
        return False

    async def _take(
        self,
        queue: Queue,
        record: dict[str, Any],
        ends: tuple[int, int | None],
        copies: Copies,
        tails: dict[str, int],
        running: bool,
    ) -> bool:
        """Write the record as this node's, compared with the revisions of the record and
        of every tail counted (a member that withdrew its tail, to acknowledge the old
        leader again, voids the swap); for a leader that stopped, also with its node key
        absent (it did not come back meanwhile). A leader that runs, cut from a majority of
        its members, is not asked: it commits nothing without them (their acknowledgements
        are capped) and hands over when it reads the record. ``ends``: this copy's end and
        what it may count as committed at once (``committed_floor``)."""
        end, floor = ends
        key = queue_key(*queue)
        old = str(record.get("leader"))
        epoch = int(record.get("epoch", 1)) + 1
        history = [*history_of(record.get("epochs")), (epoch, end)]
        won = {k: v for k, v in record.items() if k != "mod_revision"}
        won.update(
            leader=self.me,
            epoch=epoch,
            epochs=[list(pair) for pair in history],
            replicas=[*(str(r) for r in record.get("replicas", ()) if r != self.me), old],
        )
        compares = [mod_revision_is(key, int(record["mod_revision"]))]
        compares += [mod_revision_is(tail, revision) for tail, revision in tails.items()]
        if not running:
            compares.append(key_missing(NODES + old))
        async with self._requests:
            result = await self.client.txn(compares, [put_op(key, json.dumps(won))])
        if not result.succeeded:
            return False  # changed meanwhile, or the leader is back: the next round sees
        self.placement.records[queue] = {**won, "mod_revision": result.revision}
        await copies.promote(queue, won, history, floor)
        log.warning(
            "%s '%s' in vhost '%s': leader %s %s; this node leads it now (epoch %d, from %s %d)",
            _kind(record),
            queue[1],
            queue[0],
            old,
            "was lost to a majority of its members" if running else "stopped",
            epoch,
            "offset" if _kind(record) == "stream" else "log id",
            end,
        )
        return True

    # ---------------------------------------------------------------- handing over

    def _hand_over(self, queue: Queue, record: dict[str, Any]) -> None:
        """Another node leads the queue this node holds: its copy becomes a replica."""
        vhost, name = queue
        copies = self._copies(record)
        if copies is None or not copies.hand_over(queue, record):
            return
        self.fenced.discard(queue)
        member = self.me in record.get("replicas", ())
        log.warning(
            "%s '%s' in vhost '%s' is led by %s since epoch %s: this node's copy %s",
            _kind(record),
            name,
            vhost,
            record.get("leader"),
            record.get("epoch"),
            "becomes its replica" if member else "is removed (this node is no member)",
        )

    # ---------------------------------------------------------------- fencing

    def start(self) -> None:
        self.membership.on_registered_again.append(self._registered_again)
        self._tick()

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(WATCHDOG_S, self._tick)
        now = loop.time()
        late = now - self._ticked - WATCHDOG_S if self._ticked else 0.0
        if late > STALLED_S - WATCHDOG_S:
            # this node was frozen (or its loop stalled), not its leaders silent
            discount_stall((f for _, f in self._followers()), late, now)
            self.discounted_s += late
            log.info(
                "node %s ran %.1f s late (frozen or its loop stalled): that time is not "
                "counted as its leaders' silence",
                self.me,
                late,
            )
        self._ticked = now
        lease = self.membership.lease
        fresh = (
            lease is not None
            and not lease.lost
            and loop.time() - lease.renewed_at < self.membership.ttl_s
        )
        if not fresh:
            self._fence_all(lease)
        elif self.fenced and lease is self._fenced_under:
            self._lift(set(self.fenced), "its etcd lease was renewed after all")
        if fresh:
            self._check_silent()

    def _led_replicated(self) -> list[Queue]:
        return [
            queue
            for queue, record in self.placement.records.items()
            if record.get("leader") == self.me and record.get("replicas") and self._held(queue)
        ]

    def _fence_all(self, lease: Lease | None) -> None:
        new = [q for q in self._led_replicated() if q not in self.fenced]
        for queue in new:
            held = self._local(queue)
            if held is not None:
                held.fenced = True
            self.fenced.add(queue)
        if new:
            self._fenced_under = lease
            log.warning(
                "node %s cannot be sure it still leads %d replicated queue(s) (its etcd "
                "lease was last renewed over %d s ago): their publishes are nacked until "
                "it is",
                self.me,
                len(new),
                self.membership.ttl_s,
            )

    def _lift(self, queues: set[Queue], why: str) -> None:
        for vhost, name in queues:
            self.fenced.discard((vhost, name))
            queue = self._local((vhost, name))
            if queue is not None:
                queue.fenced = False
        if queues:
            log.warning("node %s takes publishes to its replicated queues again: %s", self.me, why)

    def _registered_again(self) -> None:
        task = asyncio.ensure_future(self._reaffirm())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reaffirm(self) -> None:
        """Registered again after a lost lease: no election can succeed from now on (this
        node's key is back), so the records read now say who leads each fenced stream;
        again until etcd answered for each (or the lease is lost again)."""
        lease = self.membership.lease
        while self.fenced and not self._stopped and lease is self.membership.lease:
            still: set[Queue] = set()
            for queue in list(self.fenced):
                try:
                    found = await self.client.get(queue_key(*queue))
                except (EtcdUnavailable, EtcdError) as error:
                    log.info("cannot read the record of '%s' yet: %s", queue[1], error)
                    continue
                record = {} if found is None else json.loads(found.value)
                if record.get("leader") == self.me:
                    still.add(queue)
                elif found is not None:
                    self.placement.records[queue] = {**record, "mod_revision": found.mod_revision}
                    self._hand_over(queue, record)
                    self.replication.apply([], False)
                elif not self._held(queue):
                    self.fenced.discard(queue)  # deleted here meanwhile
                # (no record, the stream still here: etcd lost its data, and this node
                # records its streams again, as their leader: ``Placement.place_again``)
            self._lift(still, "it registered again and still leads them")
            if self.fenced:
                await asyncio.sleep(RETRY_S)

    async def stop(self) -> None:
        """Leaving: fence every stream led here (the lease is revoked next, the others
        elect), end the elections."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        self._fence_all(self.membership.lease)
        for task in [*self._elections.values(), *self._tasks]:
            task.cancel()
        self._tails.close()
        for task in [*self._elections.values(), *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _kind(record: dict[str, Any]) -> str:
    return "quorum queue" if record.get("type") == "quorum" else "stream"


def _move(source: Path, target: Path) -> None:
    """Rename a stream's directory (a copy changing hands), replacing what was there."""
    if not source.is_dir():
        return
    tombstone = layout.bury(target)
    if tombstone is not None:
        layout.remove_later(tombstone)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(source, target)
    fsync_dir(target.parent)
    fsync_dir(source.parent)


def discount_stall(followers: Iterable[Following], late: float, now: float) -> None:
    """This node ran ``late`` seconds late: that time is taken off each copy's silence
    (its frames could not be read meanwhile), the silence before it still counts. Reset to
    now instead, a loop that stalls a second every few seconds (a loaded node leading a
    hundred queues) would never count a leader cut from it as silent (suspected when a
    30-minute chaos run saw a node's replicas wait over a minute to join elections)."""
    for follower in followers:
        follower.heard_at = min(now, follower.heard_at + late)


def heard_since(heard_at: float, stood_at: float, stalls_s: float) -> bool:
    """A copy heard its leader after ``stood_at``: its ``heard_at`` moved past that moment by
    more than the stalls since (``stalls_s``) moved it (``discount_stall`` moves every copy's
    ``heard_at`` forward by a stall; compared with ``stood_at`` alone, a standing election
    ended at the first stall of a loaded node, where it is needed most)."""
    return heard_at > stood_at + stalls_s
