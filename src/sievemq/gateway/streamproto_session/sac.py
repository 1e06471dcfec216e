"""Single active consumer on the stream protocol (ConsumerUpdate), RabbitMQ's rules.

Subscriptions with ``single-active-consumer=true`` and the same ``name`` on the same stream
of a vhost form a group; one of them at a time gets messages.

- **Which one.** Plain streams: the oldest member. A partition of a super stream
  (subscribe property ``super-stream``): member ``partition index mod group size``, in
  arrival order, so N consumers of an N-partition super stream get one partition each.
- **Activation.** The server sends ConsumerUpdate(active=1); the subscription starts only
  after the client's answer, at the offset specification the answer carries (type 0 keeps
  the one given at Subscribe). Until then, and while inactive, it delivers nothing and its
  credit waits.
- **Step-down** (a partitioned group whose choice moves to a newcomer): the active member
  stops at once and gets ConsumerUpdate(active=0); the next one is activated once that
  answer arrives (so the old consumer can store its offset first) or its connection goes.
- **Newcomers** that are not chosen get ConsumerUpdate(active=0), as RabbitMQ sends.
- Unsubscribe, a lost connection or a deleted stream removes a member; the group then
  picks again.
- **Unanswered requests.** A ConsumerUpdate that asks a member to become active or to step
  down is answered within ``timeout_s`` (``SIEVEMQ_STREAM_CONSUMER_UPDATE_TIMEOUT_S``,
  60 s by default, RabbitMQ's stream request timeout), else the server logs a warning and the
  group moves on: a member that never confirms its step-down is treated as inactive (it
  already stopped delivering) and the next one is asked; a member that never confirms its
  activation is passed over (it goes behind the others, still subscribed and held) and the
  next one is asked. RabbitMQ closes the whole connection of a client that does not answer;
  SieveMQ keeps the connection and its other subscriptions. A late answer is ignored.
  The "you wait" ConsumerUpdate sent to newcomers needs no answer and has no timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from sievemq.streamproto import wire

if TYPE_CHECKING:
    from sievemq.gateway.streamproto_session.ports import ConnectionPort, GroupedSubscription

log = logging.getLogger(__name__)

INACTIVE = "inactive"
ACTIVATING = "activating"  # ConsumerUpdate(1) sent, answer awaited
ACTIVE = "active"
DEACTIVATING = "deactivating"  # ConsumerUpdate(0) sent to a former active, answer awaited

GroupKey = tuple[str, str, str]  # vhost, stream, consumer name

DEFAULT_TIMEOUT_S = 60.0
Scheduler = Callable[[float, Callable[[], None]], asyncio.TimerHandle]


class SacMember:
    __slots__ = ("conn", "coordinator", "group", "pending", "state", "sub", "timer")

    def __init__(
        self,
        coordinator: SacCoordinator,
        conn: ConnectionPort,
        sub: GroupedSubscription,
        group: SacGroup,
    ) -> None:
        self.coordinator = coordinator
        self.conn = conn
        self.sub = sub
        self.group = group
        self.state = INACTIVE
        self.pending = -1  # correlation id of the ConsumerUpdate awaiting an answer
        self.timer: asyncio.TimerHandle | None = None  # that answer's deadline

    def leave(self) -> None:
        self.coordinator.unregister(self)


class SacGroup:
    __slots__ = ("key", "members", "partition_index")

    def __init__(self, key: GroupKey, partition_index: int) -> None:
        self.key = key
        self.partition_index = partition_index
        self.members: list[SacMember] = []

    def chosen(self) -> SacMember | None:
        if not self.members:
            return None
        if self.partition_index < 0:
            return self.members[0]
        return self.members[self.partition_index % len(self.members)]


class SacCoordinator:
    """Every single-active-consumer group of one server."""

    def __init__(
        self, timeout_s: float = DEFAULT_TIMEOUT_S, call_later: Scheduler | None = None
    ) -> None:
        self.groups: dict[GroupKey, SacGroup] = {}
        self._corr = itertools.count(1)
        self._awaited: dict[int, SacMember] = {}
        self.timeout_s = timeout_s
        # the running loop's call_later unless given (tests pass a recording one)
        self._call_later = call_later
        self.timeouts = 0  # requests that went unanswered (for the admin API and tests)

    def register(
        self,
        conn: ConnectionPort,
        sub: GroupedSubscription,
        key: GroupKey,
        partition_index: int,
    ) -> SacMember:
        """Add a new (held) subscription to its group and let the group choose."""
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = SacGroup(key, partition_index)
        member = SacMember(self, conn, sub, group)
        sub.sac = member
        group.members.append(member)
        sub.holding = True
        self._choose(group)
        if member.state == INACTIVE and group.chosen() is not member:
            self._notify(member, False)  # a newcomer that waits is told so
        return member

    def unregister(self, member: SacMember) -> None:
        group = member.group
        if member not in group.members:
            return
        group.members.remove(member)
        member.sub.holding = True
        member.sub.sac = None
        self._forget_request(member)
        member.state = INACTIVE
        if not group.members:
            self.groups.pop(group.key, None)
            return
        self._choose(group)

    def on_reply(self, conn: ConnectionPort, reply: wire.ConsumerUpdateReply) -> None:
        """The client's answer (0x801a) to one of our ConsumerUpdate requests."""
        member = self._awaited.get(reply.corr)
        log.debug("ConsumerUpdate answer %s for %s", reply, member and member.group.key)
        if member is None or member.conn is not conn or member.pending != reply.corr:
            return  # unknown, another connection's, or superseded by a later request
        self._forget_request(member)
        if member.state == ACTIVATING:
            member.state = ACTIVE
            member.sub.activate(reply.offset if reply.code == wire.OK else None)
        elif member.state == DEACTIVATING:
            member.state = INACTIVE
            self._choose(member.group)

    def _choose(self, group: SacGroup) -> None:
        want = group.chosen()
        stepping_down = False
        for member in group.members:
            if member is not want and member.state in (ACTIVATING, ACTIVE):
                member.sub.holding = True
                member.state = DEACTIVATING
                self._notify(member, False)
            if member.state == DEACTIVATING:
                stepping_down = True
        if want is not None and want.state == INACTIVE and not stepping_down:
            want.state = ACTIVATING
            self._notify(want, True)

    def _forget_request(self, member: SacMember) -> None:
        if member.pending >= 0:
            self._awaited.pop(member.pending, None)
            member.pending = -1
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None

    def _notify(self, member: SacMember, active: bool) -> None:
        self._forget_request(member)
        corr = next(self._corr) & 0xFFFFFFFF
        member.pending = corr
        self._awaited[corr] = member
        member.conn.write(wire.consumer_update(corr, member.sub.subscription_id, active))
        if member.state in (ACTIVATING, DEACTIVATING):  # an answer moves the group on
            call_later = self._call_later or asyncio.get_running_loop().call_later
            member.timer = call_later(self.timeout_s, lambda: self._expired(member, corr))
        log.debug(
            "ConsumerUpdate %s sid=%d active=%s corr=%d",
            member.group.key,
            member.sub.subscription_id,
            active,
            corr,
        )

    def _expired(self, member: SacMember, corr: int) -> None:
        """No answer to ConsumerUpdate ``corr`` in time: the group moves on without it."""
        member.timer = None
        if member.pending != corr or member not in member.group.members:
            return  # answered, superseded or gone meanwhile
        self._forget_request(member)
        self.timeouts += 1
        group = member.group
        vhost, stream, name = group.key
        if member.state == DEACTIVATING:
            log.warning(
                "single active consumer %r on stream %r in vhost %r: subscription %d did not "
                "answer its step-down within %g s; treated as inactive",
                name, stream, vhost, member.sub.subscription_id, self.timeout_s,
            )  # fmt: skip
        else:
            log.warning(
                "single active consumer %r on stream %r in vhost %r: subscription %d did not "
                "answer its activation within %g s; passed over for the next consumer",
                name, stream, vhost, member.sub.subscription_id, self.timeout_s,
            )  # fmt: skip
            group.members.remove(member)  # behind the others: the next one is chosen
            group.members.append(member)
        member.state = INACTIVE
        member.sub.holding = True
        self._choose(group)
