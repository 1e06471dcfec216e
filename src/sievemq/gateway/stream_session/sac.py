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
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING

from sievemq.streamproto import wire

if TYPE_CHECKING:
    from sievemq.gateway.stream_session.ports import ConnectionPort, GroupedSubscription

log = logging.getLogger(__name__)

INACTIVE = "inactive"
ACTIVATING = "activating"  # ConsumerUpdate(1) sent, answer awaited
ACTIVE = "active"
DEACTIVATING = "deactivating"  # ConsumerUpdate(0) sent to a former active, answer awaited

GroupKey = tuple[str, str, str]  # vhost, stream, consumer name


class SacMember:
    __slots__ = ("conn", "coordinator", "group", "pending", "state", "sub")

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

    def __init__(self) -> None:
        self.groups: dict[GroupKey, SacGroup] = {}
        self._corr = itertools.count(1)
        self._awaited: dict[int, SacMember] = {}

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
        if member.pending >= 0:
            self._awaited.pop(member.pending, None)
            member.pending = -1
        member.state = INACTIVE
        if not group.members:
            self.groups.pop(group.key, None)
            return
        self._choose(group)

    def on_reply(self, conn: ConnectionPort, reply: wire.ConsumerUpdateReply) -> None:
        """The client's answer (0x801a) to one of our ConsumerUpdate requests."""
        member = self._awaited.pop(reply.corr, None)
        if member is None or member.conn is not conn or member.pending != reply.corr:
            return  # unknown, or superseded by a later request
        member.pending = -1
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

    def _notify(self, member: SacMember, active: bool) -> None:
        if member.pending >= 0:
            self._awaited.pop(member.pending, None)
        corr = next(self._corr) & 0xFFFFFFFF
        member.pending = corr
        self._awaited[corr] = member
        member.conn.write(wire.consumer_update(corr, member.sub.subscription_id, active))

    def members_of(self, key: GroupKey) -> list[tuple[int, str]]:
        """(subscription id, state) in arrival order: for tests and the admin view."""
        group = self.groups.get(key)
        return [] if group is None else [(m.sub.subscription_id, m.state) for m in group.members]
