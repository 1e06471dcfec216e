"""AMQP transactions (tx.select / tx.commit / tx.rollback) as RabbitMQ implements them.

In a transactional channel, published messages and acks / nacks / rejects are held back
until tx.commit, which routes and stores the messages and settles the acks in order;
tx.rollback drops what is held (deliveries stay unacked). Confirms and transactions exclude
each other on one channel, with RabbitMQ's 406 texts.
"""

from __future__ import annotations

from typing import Any

from sievemq.amqp import errors

# one held publish: (exchange, routing key, mandatory), raw properties, body
HeldPublish = tuple[tuple[str, str, bool], bytes, bytes]
# one held settle: (delivery tag, multiple, finished, method id)
HeldSettle = tuple[int, bool, bool, int]


class Transaction:
    """What a transactional channel holds until commit."""

    __slots__ = ("publishes", "settles")

    def __init__(self) -> None:
        self.publishes: list[HeldPublish] = []
        self.settles: list[HeldSettle] = []

    def clear(self) -> None:
        self.publishes = []
        self.settles = []


def select(tx: Transaction | None, confirming: bool) -> Transaction:
    if confirming:
        raise errors.PreconditionFailed("cannot switch from confirm to tx mode", 90, 10)
    return tx if tx is not None else Transaction()


def require(tx: Transaction | None, method_id: int) -> Transaction:
    if tx is None:
        raise errors.PreconditionFailed("channel is not transactional", 90, method_id)
    return tx


def refuse_confirms(tx: Any) -> None:
    if tx is not None:
        raise errors.PreconditionFailed("cannot switch from tx to confirm mode", 85, 10)
