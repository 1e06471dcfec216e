"""A client publishing through node b to a classic queue led by node a keeps its channel
while a is killed and restarted: nacked while a is away, confirmed again once it is back
(the chaos suite's kill-follower round found the publisher nacked for good)."""

from __future__ import annotations

import pika
import pytest

from sievemq.testing import ServerProcess

from .cluster_helpers import channel, running, until

NAMES = ("a", "b", "c")


def test_a_publisher_through_b_is_confirmed_again_after_the_leader_restarts(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    channel(a).queue_declare("cq-restart", durable=True)
    on_b = channel(b)
    on_b.confirm_delivery()
    until(lambda: _confirmed(on_b), "b forwards to a")
    a.kill()
    until(lambda: not running(b)["a"], "b lists a stopped")
    with pytest.raises(pika.exceptions.NackError):
        on_b.basic_publish("", "cq-restart", b"while a is away")
    a.restart()
    until(lambda: running(b)["a"], "b lists a running again")
    until(lambda: _confirmed(on_b), "b forwards to the restarted a on the same channel")


def _confirmed(on: object) -> bool:
    try:
        on.basic_publish("", "cq-restart", b"m")  # type: ignore[attr-defined]
    except pika.exceptions.NackError:
        return False
    return True
